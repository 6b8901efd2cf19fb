"""`rdma-webhook verify`: the verifier (webhook.verify), reading each mutated pod's NCCL log."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from webhook.cli.common import policies_dir


def register(commands: Any) -> None:
    """Add `verify` to the command line's subcommands."""
    from webhook.verify.session import CONCURRENCY, QUIET, WINDOW  # not the controller: it imports the metrics

    s = commands.add_parser(
        "verify",
        help="read each mutated pod's NCCL log and report the transport it really uses",
        description="Follow the pods the webhook mutated (label rdma-webhook.io/applied-policy); read each "
        "container start's log once, as NCCL initialises, and set the pod condition "
        "rdma-webhook.io/TransportVerified, Events on the pod and its job, and rdma_webhook_transport_verdicts_total.",
        epilog="exit status: 0 after SIGTERM, 2 on a bad flag, policies that do not load or no cluster to read",
    )
    s.add_argument("--policies", metavar="DIR", help="policies folder, reloaded on change (default: policies/)")
    s.add_argument("--namespace", help="only this namespace (default: every namespace)")
    s.add_argument("--kubeconfig", help="outside a cluster: this kubeconfig (default: $KUBECONFIG or ~/.kube/config)")
    s.add_argument("--metrics-port", type=int, default=9090, help="serve /metrics here; 0: none (default: %(default)s)")
    s.add_argument(
        "--quiet",
        type=float,
        default=QUIET,
        help="seconds of NCCL silence after which the ranks seen have spoken (default: %(default)s)",
    )
    s.add_argument(
        "--window",
        type=float,
        default=WINDOW,
        help="seconds a start's log is followed waiting for NCCL (default: %(default)s)",
    )
    s.add_argument("--concurrency", type=int, default=CONCURRENCY, help="logs read at once (default: %(default)s)")
    s.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default: %(default)s)")
    s.set_defaults(func=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    # One process, its metrics in memory: the image's PROMETHEUS_MULTIPROC_DIR is the webhook's
    # (gunicorn's workers), a folder the verifier's pod does not have. Dropped before the metrics
    # module is first imported, which reads it.
    os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
    from webhook.policy.store import PolicyStore
    from webhook.telemetry.logs import setup_logging
    from webhook.verify import service

    setup_logging(args.log_level)
    store = PolicyStore(policies_dir(args.policies))
    store.reload(force=True)
    if store.current is None:
        print(f"rdma-webhook verify: the policies do not load: {'; '.join(store.last_errors)}", file=sys.stderr)
        return 2
    store.start()
    if args.metrics_port:
        from prometheus_client import start_http_server

        start_http_server(args.metrics_port)
    try:
        asyncio.run(
            service.serve(
                store,
                args.namespace,
                args.kubeconfig,
                quiet=args.quiet,
                window=args.window,
                concurrency=args.concurrency,
            )
        )
    except service.NoCluster as exc:
        print(f"rdma-webhook verify: cannot reach the Kubernetes API: {exc}", file=sys.stderr)
        return 2
    return 0
