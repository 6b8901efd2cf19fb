"""webhook-granian: the webhook as `rdma-webhook serve` builds it (`webhook.serving.server.prepare`:
the same flags, policies, cluster state, app, metrics and TLS files), served by granian's WSGI
interface (Rust HTTP and rustls TLS, Python only for the app) instead of gunicorn's master and
uvicorn workers. A candidate measured against `serve` and never shipped: benchmarks/README.md
("Serving stack") says what it cannot do that `serve` promises. granian is in the bench extra.

    .venv/bin/python -m benchmarks.granian_serve --tls-cert F --tls-key F --port P [every flag of `serve`]

`benchmarks.floor` serves its floor under granian with `run_granian` too.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

# Python threads per worker: with 1 the worker idles while granian hands over the next request,
# with 4 the threads contend for the GIL (benchmarks/README.md).
GRANIAN_THREADS = 2


def run_granian(
    target,
    *,
    host: str,
    port: int,
    workers: int,
    tls_cert: str,
    tls_key: str,
    client_ca: str | None = None,
    target_loader=None,
) -> None:
    """granian's WSGI interface, in GRANIAN_THREADS threads per worker, with the closest settings
    it has to `serve`'s."""
    from granian import Granian
    from granian.constants import HTTPModes, Interfaces
    from granian.http import HTTP1Settings

    kw: dict[str, Any] = {}
    if client_ca:
        kw.update(ssl_ca=Path(client_ca), ssl_client_verify=True)
    server = Granian(
        target,
        address=host,
        port=port,
        workers=workers,
        http=HTTPModes.http1,
        interface=Interfaces.WSGI,
        blocking_threads=GRANIAN_THREADS,
        http1_settings=HTTP1Settings(header_read_timeout=10_000, keep_alive=True),
        ssl_cert=Path(tls_cert),
        ssl_key=Path(tls_key),
        ssl_protocol_min="tls1.2",
        workers_kill_timeout=20,
        log_level="warning",
        **kw,
    )
    if target_loader is not None:
        server.serve(target_loader=target_loader)
    else:
        server.serve()


def main(argv: list[str] | None = None) -> int:
    from webhook.cli.common import policies_dir
    from webhook.cli.main import build_parser
    from webhook.kinds import trainer

    args = build_parser().parse_args(["serve", *(sys.argv[1:] if argv is None else argv)])
    try:
        import granian  # noqa: F401
    except ImportError as exc:
        print(
            f"error: granian is a benchmark candidate and needs the bench extra (pip install '.[bench]'): {exc}",
            file=sys.stderr,
        )
        return 2
    from webhook.serving import server as serve

    os.environ[trainer.TRAINER_RELEASE_ENV] = args.trainer_release  # as `serve` does: the workers inherit it
    served = serve.prepare(
        policies_dir=policies_dir(args.policies),
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        cluster_state=args.cluster_state,
        client_ca=args.client_ca,
        log_level=args.log_level,
        check_admission_policy=args.check_admission_policy,
    )
    if served is None:
        return 2

    def loader(_target=None):
        served.post_worker_init(None)
        return served.app

    run_granian(
        served.app,
        host=args.host,
        port=args.port,
        workers=args.workers,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        client_ca=args.client_ca,
        target_loader=loader,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
