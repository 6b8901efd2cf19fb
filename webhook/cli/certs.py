"""`rdma-webhook certs`: a CA and a serving certificate for the webhook Service."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(commands: Any) -> None:
    """Add `certs` to the command line's subcommands."""
    raw = argparse.RawDescriptionHelpFormatter
    c = commands.add_parser(
        "certs",
        help="write a CA and a serving certificate for the webhook Service",
        formatter_class=raw,
        description="Write ca.crt, ca.key, tls.crt and tls.key (keys 0600) into --out. stdout carries "
        "only the base64 CA bundle, for the webhook configurations' caBundle; messages "
        "go to stderr.",
        epilog="exit status: 0 written, 1 refused or failed (an existing CA without --force, "
        "--reuse-ca without a CA, an unwritable folder), 2 on a bad flag",
    )
    c.add_argument("--service", required=True, help="the webhook Service's name (required)")
    c.add_argument("--namespace", required=True, help="the Service's namespace (required)")
    c.add_argument("--out", required=True, metavar="DIR", help="folder to write into, created if missing (required)")
    c.add_argument(
        "--dns", action="append", default=[], metavar="NAME", help="extra DNS name (repeatable; default: none)"
    )
    c.add_argument(
        "--ip", action="append", default=[], metavar="IP", help="extra IP address (repeatable; default: none)"
    )
    c.add_argument("--days", type=int, default=365, help="serving certificate validity in days (default: %(default)s)")
    c.add_argument(
        "--reuse-ca",
        action="store_true",
        help="renew only the serving certificate, signed by the ca.crt/ca.key already in --out, so "
        "deployed caBundles stay valid (default: off)",
    )
    c.add_argument(
        "--force",
        action="store_true",
        help="replace a CA already in --out; every caBundle deployed with the old one stops working "
        "(default: off: refused)",
    )
    c.set_defaults(func=cmd_certs)


def cmd_certs(args: argparse.Namespace) -> int:
    from webhook.serving.certs import CertsError, write_certs

    try:
        bundle = write_certs(
            args.out, args.service, args.namespace, args.dns, args.ip, args.days, args.reuse_ca, force=args.force
        )
    except CertsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        print(f"error: {args.out}: {getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
        return 1
    written = "tls.crt, tls.key" if args.reuse_ca else "ca.crt, ca.key, tls.crt, tls.key"
    print(
        f"wrote {written} to {args.out}; stdout: the base64 CA bundle, for the webhook configurations' caBundle",
        file=sys.stderr,
    )
    print(bundle)
    return 0
