"""`rdma-webhook serve`: the flags checked, then the production server (`webhook.serving.server`)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from webhook.cli.common import policies_dir


def register(commands: Any) -> None:
    """Add `serve` to the command line's subcommands."""
    from webhook.kinds import trainer

    raw = argparse.RawDescriptionHelpFormatter
    s = commands.add_parser(
        "serve",
        help="serve the admission webhook over HTTPS",
        formatter_class=raw,
        description="Serve POST /mutate and /validate (AdmissionReview v1), /healthz, /readyz and /metrics over TLS.",
        epilog="exit status: 0 after a clean shutdown (SIGTERM), 2 on a bad flag or a missing file, "
        "1 when the server fails to start",
    )
    s.add_argument(
        "--policies", metavar="DIR", help="policies folder, reloaded on change (default: the repository's policies/)"
    )
    s.add_argument(
        "--tls-cert",
        required=True,
        metavar="FILE",
        help="serving certificate, PEM (required; reloaded when it changes)",
    )
    s.add_argument("--tls-key", required=True, metavar="FILE", help="its private key, PEM (required)")
    s.add_argument(
        "--client-ca",
        metavar="FILE",
        help="require client certificates signed by this CA (API server authentication; default: none required)",
    )
    s.add_argument("--host", default="0.0.0.0", help="address to listen on (default: %(default)s)")
    s.add_argument("--port", type=int, default=8443, help="port to listen on (default: %(default)s)")
    s.add_argument(
        "--workers", type=int, default=2, help="worker processes, each serving many connections (default: %(default)s)"
    )
    s.add_argument(
        "--cluster-state",
        metavar="FILE",
        help="read namespaces, NetworkAttachmentDefinitions and Trainer runtimes from this YAML file instead "
        "of watching the API server (default: the API server, in-cluster or kubeconfig)",
    )
    s.add_argument(
        "--check-admission-policy",
        action="store_true",
        help="the policy mode: watch (read-only) the ValidatingAdmissionPolicies that `policy admission-policy` "
        "generated and report on /metrics (rdma_webhook_admission_policy_in_sync) and /readyz whether they "
        "match the policies in force (default: off; needs get/list/watch on them, see README)",
    )
    s.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default: %(default)s)")
    s.add_argument(
        "--trainer-release",
        choices=trainer.TRAINER_RELEASES,
        default=trainer.trainer_release(),
        help="the Kubeflow Trainer release whose rules make a TrainJob's pods from its runtime "
        f"(default: ${trainer.TRAINER_RELEASE_ENV}, else %(default)s)",
    )
    s.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    from webhook.serving import server as serve
    from webhook.kinds import trainer

    os.environ[trainer.TRAINER_RELEASE_ENV] = args.trainer_release  # the workers inherit it

    if args.check_admission_policy and args.cluster_state:
        print(
            "error: --check-admission-policy reads the cluster's ValidatingAdmissionPolicies from the API server; "
            "it cannot be combined with --cluster-state",
            file=sys.stderr,
        )
        return 2
    for label, path in (
        ("--tls-cert", args.tls_cert),
        ("--tls-key", args.tls_key),
        ("--client-ca", args.client_ca),
        ("--cluster-state", args.cluster_state),
    ):
        if path and not os.path.isfile(path):
            print(f"error: {label} {path}: no such file", file=sys.stderr)
            return 2
    return serve.run(
        policies_dir=policies_dir(args.policies),
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        host=args.host,
        port=args.port,
        workers=args.workers,
        cluster_state=args.cluster_state,
        client_ca=args.client_ca,
        log_level=args.log_level,
        check_admission_policy=args.check_admission_policy,
    )
