"""The command line: `rdma-webhook serve | review | policy lint | certs`.

`review` runs the very decision `serve` runs, offline, on Pod manifests or AdmissionReview files,
so a platform team can fail a CI build on a training manifest that would fall back to TCP.
Exit status: 0 all allowed, 1 any denied, 2 bad input.
"""

from __future__ import annotations

import argparse
import base64
import difflib
import json
import os
import sys
from typing import Any, Iterable, TextIO

import yaml


EXIT_OK, EXIT_DENIED, EXIT_BAD_INPUT = 0, 1, 2


def _policies_dir(arg: str | None) -> str:
    from webhook.policy import default_policies_dir

    return arg or str(default_policies_dir())


# -- review ------------------------------------------------------------------------------------

class InputError(Exception):
    pass


def _documents(path: str) -> list[Any]:
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]  # JSON is YAML too
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not valid YAML or JSON: {exc}") from None
    out: list[Any] = []
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind") == "List":
            out.extend(doc.get("items") or [])
        else:
            out.append(doc)
    return out


def _as_request(doc: Any, where: str, namespace: str | None) -> dict[str, Any]:
    """An AdmissionReview request for a document: its own request, or one made for a Pod or a
    workload kind that carries pod templates (see webhook/workloads.py)."""
    from webhook import workloads

    if not isinstance(doc, dict):
        raise InputError(f"{where}: expected a Pod, a workload or an AdmissionReview, found a {type(doc).__name__}")
    if doc.get("kind") == "AdmissionReview":
        req = doc.get("request")
        if not isinstance(req, dict) or not req.get("uid"):
            raise InputError(f"{where}: AdmissionReview without request.uid")
        return req
    kind = doc.get("kind")
    api_version = doc.get("apiVersion") if isinstance(doc.get("apiVersion"), str) else ""
    group = workloads.group_of(api_version)
    if kind != "Pod" and not workloads.is_workload(group, kind):
        known = ", ".join(sorted({k for _, k in workloads.TEMPLATES}))
        raise InputError(f"{where}: kind {kind!r} ({api_version}) is not supported (give Pods, AdmissionReviews or {known})")
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    ns = namespace or meta.get("namespace") or "default"
    version = api_version.rpartition("/")[2] or "v1"
    return {
        "uid": f"review-{where}",
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": "pods" if kind == "Pod" else kind.lower() + "s"},
        "namespace": ns,
        "operation": "CREATE",
        "object": doc,
    }


def _color(enabled: bool, code: str, text: str) -> str:
    return f"\033[{code}m{text}\033[0m" if enabled else text


def _diff(before: Any, after: Any, color: bool) -> list[str]:
    a = yaml.safe_dump(before, sort_keys=False, width=1000).splitlines()
    b = yaml.safe_dump(after, sort_keys=False, width=1000).splitlines()
    lines = []
    for line in difflib.unified_diff(a, b, "before", "after", lineterm="", n=2):
        if line.startswith("+") and not line.startswith("+++"):
            line = _color(color, "32", line)
        elif line.startswith("-") and not line.startswith("---"):
            line = _color(color, "31", line)
        elif line.startswith("@@"):
            line = _color(color, "36", line)
        lines.append(line)
    return lines


def _explain_decision(out: TextIO, indent: str, before: Any, decision, color: bool) -> None:
    if decision.reason:
        out.write(f"{indent}why: {decision.reason}\n")
    for f in decision.denials:
        out.write(f"{indent}{_color(color, '31', 'deny')} {f.text()}\n")
    for note in decision.notes:
        out.write(f"{indent}{_color(color, '32', 'add ')} {note}\n")
    if decision.outcome == "mutated":
        for line in _diff(before, decision.pod, color):
            out.write(f"{indent}  {line}\n")


def _verdict(color: bool, outcome: str, allowed: bool) -> str:
    return _color(color, "31;1" if not allowed else ("32;1" if outcome == "MUTATED" else "1"), outcome)


def _explain(out: TextIO, where: str, req: dict[str, Any], resp: dict[str, Any], decision, color: bool) -> None:
    from webhook.decision import pod_name

    obj = req.get("object")
    kind = (req.get("kind") or {}).get("kind") or "Pod"
    name = pod_name(obj) if isinstance(obj, dict) else "(no object)"
    r = resp["response"]
    outcome = "ALLOWED (not a pod)" if decision is None and r["allowed"] else ("DENIED (bad request)" if decision is None else decision.outcome.upper())
    policy = f" by policy {decision.policy}" if decision is not None and decision.policy else ""
    out.write(f"{_color(color, '1', where)}: {kind} {req.get('namespace')}/{name}: {_verdict(color, outcome, r['allowed'])}{policy}\n")
    if decision is None:
        if not r["allowed"]:
            out.write(f"  {_color(color, '31', 'deny')} {r['status']['message']}\n")
    elif kind == "Pod":
        _explain_decision(out, "  ", obj, decision, color)
    else:
        if decision.reason:
            out.write(f"  why: {decision.reason}\n")
        for t in decision.templates:
            d = t.decision
            effect = " (denies the workload)" if t.deny else (" (a warning: workloadValidation Warn)" if d.outcome == "denied" else "")
            by = f" by policy {d.policy}" if d.policy else ""
            out.write(f"  {_color(color, '1', t.path)}: its pods would be "
                      f"{_verdict(color, d.outcome.upper(), d.outcome != 'denied')}{by}{effect}\n")
            _explain_decision(out, "    ", t.pod, d, color)
    for w in r.get("warnings", []):
        out.write(f"  {_color(color, '33', 'warn')} {w}\n")
    if kind == "Pod" and r.get("patch"):
        out.write(f"  {len(json.loads(base64.b64decode(r['patch'])))} patch operations\n")
    out.write("\n")


def cmd_review(args: argparse.Namespace) -> int:
    from webhook import review
    from webhook.cluster import AssumedClusterState, ClusterStateError, FileClusterState
    from webhook.policy import load_dir

    policies, errors = load_dir(_policies_dir(args.policies))
    if policies is None:
        for err in errors:
            print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.cluster_state:
        try:
            state = FileClusterState.from_file(args.cluster_state)
        except ClusterStateError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    else:
        state = AssumedClusterState()
    color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty() and not os.environ.get("NO_COLOR"))
    status = EXIT_OK
    for path in args.files:
        try:
            docs = _documents(path)
        except InputError as exc:
            print(f"error: {exc}", file=sys.stderr)
            status = EXIT_BAD_INPUT
            continue
        for i, doc in enumerate(docs, 1):
            where = f"{path}#{i}" if len(docs) > 1 else path
            try:
                req = _as_request(doc, where, args.namespace)
            except InputError as exc:
                print(f"error: {exc}", file=sys.stderr)
                status = EXIT_BAD_INPUT
                continue
            body = json.dumps({"apiVersion": review.API_VERSION, "kind": "AdmissionReview", "request": req}).encode()
            is_pod = (req.get("kind") or {}).get("kind", "Pod") == "Pod"
            handler = review.handle if is_pod else review.handle_validate
            code, resp, decision, _ = handler(body, policies, state.namespace, state.attachments())
            if code != 200:
                print(f"error: {where}: {resp.get('error')}", file=sys.stderr)
                status = EXIT_BAD_INPUT
                continue
            if args.explain:
                _explain(sys.stdout, where, req, resp, decision, color)
            else:
                sys.stdout.write(json.dumps(resp, indent=2) + "\n")
            if not resp["response"]["allowed"] and status == EXIT_OK:
                status = EXIT_DENIED
    return status


# -- policy lint -------------------------------------------------------------------------------

def cmd_lint(args: argparse.Namespace) -> int:
    from webhook.policy import load_dir

    policies, errors = load_dir(args.dir)
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
    from webhook.policy import API_VERSION_V1ALPHA1, PolicyError, compile_policy, migrate_v1alpha1, read_documents

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


# -- certs -------------------------------------------------------------------------------------

def cmd_certs(args: argparse.Namespace) -> int:
    from webhook.certs import write_certs

    try:
        bundle = write_certs(args.out, args.service, args.namespace, args.dns, args.ip, args.days, args.reuse_ca)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    written = "tls.crt, tls.key" if args.reuse_ca else "ca.crt, ca.key, tls.crt, tls.key"
    print(f"wrote {written} to {args.out}", file=sys.stderr)
    print(bundle)
    return 0


# -- serve -------------------------------------------------------------------------------------

def cmd_serve(args: argparse.Namespace) -> int:
    from webhook import serve

    server = os.environ.get("RDMA_WEBHOOK_SERVER") or serve.SERVERS[0]
    if server not in serve.SERVERS:
        print(f"error: RDMA_WEBHOOK_SERVER={server!r}: expected one of {', '.join(serve.SERVERS)} "
              f"({serve.SERVERS[0]} is the default)", file=sys.stderr)
        return 2

    for label, path in (("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key), ("--client-ca", args.client_ca),
                        ("--cluster-state", args.cluster_state)):
        if path and not os.path.isfile(path):
            print(f"error: {label} {path}: no such file", file=sys.stderr)
            return 2
    return serve.run(policies_dir=_policies_dir(args.policies), tls_cert=args.tls_cert, tls_key=args.tls_key,
                     host=args.host, port=args.port, workers=args.workers,
                     cluster_state=args.cluster_state, client_ca=args.client_ca, log_level=args.log_level)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rdma-webhook", description="RDMA injection webhook for GPU training pods.")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="serve the admission webhook over HTTPS")
    s.add_argument("--policies", help="policies folder (default: the repository's policies/)")
    s.add_argument("--tls-cert", required=True)
    s.add_argument("--tls-key", required=True)
    s.add_argument("--client-ca", help="require client certificates signed by this CA (API server authentication)")
    s.add_argument("--host", default="0.0.0.0")
    s.add_argument("--port", type=int, default=8443)
    s.add_argument("--workers", type=int, default=2, help="worker processes (each serves many connections)")
    s.add_argument("--cluster-state", help="read namespaces and NetworkAttachmentDefinitions from this YAML file instead of the API server")
    s.add_argument("--log-level", default="INFO")
    s.set_defaults(func=cmd_serve)

    r = sub.add_parser("review", help="run the admission decision offline on manifests")
    r.add_argument("files", nargs="+", help="Pod manifests or AdmissionReviews (YAML or JSON; - for stdin)")
    r.add_argument("--policies", help="policies folder (default: the repository's policies/)")
    r.add_argument("--cluster-state", help="namespaces and NetworkAttachmentDefinitions (kubectl get ns,net-attach-def -A -o yaml)")
    r.add_argument("--namespace", help="namespace for Pod manifests that name none (default: their own, else 'default')")
    r.add_argument("--explain", action="store_true", help="print the decision, reasons and a diff for people")
    r.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    r.set_defaults(func=cmd_review)

    pol = sub.add_parser("policy", help="policy tools")
    polsub = pol.add_subparsers(dest="policy_command", required=True)
    lint = polsub.add_parser("lint", help="validate the policy files of a folder")
    lint.add_argument("dir")
    lint.set_defaults(func=cmd_lint)
    mig = polsub.add_parser("migrate", help="print v1alpha1 policy files as v1alpha2 (comments are not kept)")
    mig.add_argument("files", nargs="+", metavar="FILE")
    mig.set_defaults(func=cmd_migrate)

    c = sub.add_parser("certs", help="write a CA and a serving certificate for the webhook Service")
    c.add_argument("--service", required=True)
    c.add_argument("--namespace", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--dns", action="append", default=[], help="extra DNS name (repeatable)")
    c.add_argument("--ip", action="append", default=[], help="extra IP address (repeatable)")
    c.add_argument("--days", type=int, default=365)
    c.add_argument("--reuse-ca", action="store_true",
                   help="renew only the serving certificate, signed by the ca.crt/ca.key already in --out")
    c.set_defaults(func=cmd_certs)
    return p


def main(argv: Iterable[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
