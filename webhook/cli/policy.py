"""`rdma-webhook policy lint | migrate`: the policy author's tools."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import yaml

from webhook.cli.common import EXIT_DENIED, EXIT_OK

def cmd_lint(args: argparse.Namespace) -> int:
    from webhook.policy.lint import lint_warnings
    from webhook.policy.load import load_dir

    policies, errors = load_dir(args.dir)
    warnings = lint_warnings(args.dir)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if policies is None:
        for err in errors:
            print(f"error: {err}", file=sys.stderr)
        print(f"{len(errors)} problem(s) found; no policy was loaded", file=sys.stderr)
        return 1
    for p in sorted(policies.by_name.values(), key=lambda p: p.name):
        print(f"ok  {p.name}  ({p.summary()})  {p.source}")
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    """Print each v1alpha1 policy of the files as the v1alpha2 document that means the same
    (v1alpha2 documents are printed unchanged); exit 1 when a file has an invalid policy."""
    from webhook.policy.schema import API_VERSION_V1ALPHA1
    from webhook.policy.compiler import compile_policy
    from webhook.policy.migrate import migrate_v1alpha1
    from webhook.policy.load import read_documents

    out: list[Any] = []
    status = EXIT_OK
    for path in args.files:
        docs, errors = read_documents(path)
        for doc in docs:
            policy, errs = compile_policy(doc, path)
            errors.extend(errs)
            if policy is not None:
                out.append(migrate_v1alpha1(doc) if doc.get("apiVersion") == API_VERSION_V1ALPHA1 else doc)
        for err in errors:
            print(f"error: {err}", file=sys.stderr)
            status = EXIT_DENIED
    if out:
        sys.stdout.write(yaml.safe_dump_all(out, sort_keys=False, width=100))
    return status
