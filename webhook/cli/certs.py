"""`rdma-webhook certs`: a CA and a serving certificate for the webhook Service."""

from __future__ import annotations

import argparse
import sys

def cmd_certs(args: argparse.Namespace) -> int:
    from webhook.serving.certs import CertsError, write_certs

    try:
        bundle = write_certs(args.out, args.service, args.namespace, args.dns, args.ip, args.days, args.reuse_ca,
                             force=args.force)
    except CertsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        print(f"error: {args.out}: {getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
        return 1
    written = "tls.crt, tls.key" if args.reuse_ca else "ca.crt, ca.key, tls.crt, tls.key"
    print(f"wrote {written} to {args.out}; stdout: the base64 CA bundle, for the webhook configurations' caBundle",
          file=sys.stderr)
    print(bundle)
    return 0
