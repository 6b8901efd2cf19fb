"""The production server: gunicorn's master over N worker processes, each running uvicorn on
uvloop (`webhook.serving.worker`) with the Flask app behind `webhook.serving.asgi.Front`, over TLS.

Why gunicorn as the master: pre-fork with the app built once (`preload_app`, so a bad start
fails before any fork), worker supervision, graceful shutdown on SIGTERM (stop accepting, finish
in-flight requests within `graceful_timeout`, exit). Why uvicorn
workers: one event loop thread per worker with uvloop's TLS and httptools' parser in C, so idle
or slow clients hold a protocol object each, not a thread (benchmarks/README.md, "Serving
stack"). Its `ssl_context` setting hands the
worker `webhook.serving.tls.ServingTLS`, one live context per worker, reloaded in place when the
certificate files change.

The per-worker background threads (policy reload, cluster watch) start after the fork, in
gunicorn's `post_worker_init`; the cluster state's first list is made once, in the master,
before the fork.
"""

from __future__ import annotations

import gc
import logging
import os
import shutil
import sys
import tempfile
from typing import Any

from gunicorn import glogging
from gunicorn.app.base import BaseApplication

from webhook.telemetry.logs import JsonFormatter, setup_logging

log = logging.getLogger("rdma_webhook.serve")


# RDMA_WEBHOOK_SERVER: the first is what `serve` runs; granian (Rust HTTP and TLS) is measured in
# benchmarks/ as a candidate and lacks in-place certificate reload (benchmarks/README.md).
SERVERS = ("uvicorn", "granian")


def prepare_metrics_dir() -> None:
    """Multi-process metrics need a folder shared by the workers, empty at start; must be set
    before `prometheus_client` creates any metric, so this runs before importing the app."""
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not path:
        path = os.path.join(tempfile.gettempdir(), f"rdma-webhook-metrics-{os.getpid()}")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path, exist_ok=True)


class _Server(BaseApplication):
    def __init__(self, app, options: dict[str, Any]):
        self._app, self._options = app, options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._options.items():
            self.cfg.set(key, value)

    def load(self):
        return self._app


def run(*, policies_dir: str, tls_cert: str, tls_key: str, host: str, port: int, workers: int,
        cluster_state: str | None, client_ca: str | None, log_level: str = "INFO",
        check_admission_policy: bool = False) -> int:
    server = os.environ.get("RDMA_WEBHOOK_SERVER") or SERVERS[0]  # `rdma-webhook serve` checked the name
    if server == "granian":
        try:
            import granian  # noqa: F401
        except ImportError as exc:  # the candidate is in the bench extra only, like the message of cli.py
            print(f"error: RDMA_WEBHOOK_SERVER='granian' is a benchmark candidate and needs the bench extra "
                  f"(pip install '.[bench]'): {exc}; leave it unset to run {SERVERS[0]}", file=sys.stderr)
            return 2
    setup_logging(log_level)
    prepare_metrics_dir()
    # Imported after the metrics folder is set, so the metrics are multi-process ones.
    from webhook.telemetry import metrics
    from webhook.serving.app import create_app, wsgi
    from webhook.cluster.state import FileClusterState
    from webhook.policy.store import PolicyStore
    from webhook.serving.tls import ServingTLS

    import webhook
    from webhook.admission import review  # noqa: F401  (the decision core, imported to report how it runs)

    compiled = webhook.compiled()
    log.info("decision core: %s", f"compiled with mypyc ({', '.join(compiled)})" if compiled else
             "interpreted (built with RDMA_WEBHOOK_PURE_PYTHON=1 or from source without `make compile`)")
    tls = ServingTLS(tls_cert, tls_key, client_ca)
    store = PolicyStore(policies_dir)
    store.reload(force=True)
    if store.current is None:
        log.error("no valid policies at start; serving but not ready until they are fixed")
    if cluster_state:
        cluster = FileClusterState.from_file(cluster_state)
    else:
        from webhook.cluster.api import ApiClusterState

        try:
            cluster = ApiClusterState.from_environment(
                uses_networks=lambda: _uses_networks(store), uses_dra=lambda: _uses_dra(store),
                admission_policies=(lambda: store.current) if check_admission_policy else None)
        except Exception as exc:  # no in-cluster config and no kubeconfig
            log.error("cannot reach the Kubernetes API (%s); run in a cluster, set KUBECONFIG, or pass --cluster-state FILE", exc)
            return 2
    app = wsgi(create_app(store, cluster))

    def post_worker_init(worker) -> None:
        store.start()
        start = getattr(cluster, "start", None)
        if start:
            start()
        metrics.CACHE_READY.set(1 if cluster.ready() else 0)
        if store.current is not None:
            metrics.POLICIES.set(len(store.current))
            metrics.RELOAD_OK.set(1)
        tls.record_expiry()

    def worker_exit(server, worker) -> None:
        store.stop()
        stop = getattr(cluster, "stop", None)
        if stop:
            stop()

    def child_exit(server, worker) -> None:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)

    prime = getattr(cluster, "prime", None)
    if prime:  # one list for the replica, before the fork (ApiClusterState.prime)
        prime()
    # The master serves nothing, but in multi-process mode it holds an entry of every gauge (it
    # imports them, at 0): the cache gauge is a livemin over the workers, so the master's entry
    # is the neutral 1 (else a ready replica reads 0 and the cache-not-ready alert fires).
    metrics.CACHE_READY.set(1)
    gc.freeze()  # what the master built is shared with the forks, never scanned by the GC again
    if server == "granian":  # a measured candidate
        def loader(_target=None):
            post_worker_init(None)
            return app

        run_granian(app, host=host, port=port, workers=workers, tls_cert=tls_cert, tls_key=tls_key,
                    client_ca=client_ca, target_loader=loader)
        return 0
    options = gunicorn_options(host=host, port=port, workers=workers, tls=tls)
    options.update(post_worker_init=post_worker_init, worker_exit=worker_exit, child_exit=child_exit)
    _Server(app, options).run()
    return 0


def gunicorn_options(*, host: str, port: int, workers: int, tls, worker_class: str = "webhook.serving.worker.Worker",
                     threads: int = 1) -> dict[str, Any]:
    """The gunicorn settings `serve` runs with (benchmarks/floor.py serves its floors with the
    same settings, and the issue's reference floor with worker_class "gthread")."""
    return {
        "bind": [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"],
        "workers": workers,
        "worker_class": worker_class,
        "threads": threads,  # gthread only
        "preload_app": True,
        "certfile": tls.cert_file,
        "keyfile": tls.key_file,
        "ssl_context": lambda conf, default_factory: tls,
        # The API server keeps an idle webhook connection for 90 s (client-go's transport, Go's
        # default IdleConnTimeout) and never resends a POST: a server that closes first races
        # a request on the closing connection and fails that admission. Outlive it.
        "keepalive": 120,
        "timeout": 30,
        "graceful_timeout": 20,
        # gunicorn's own parser only (the gthread reference floor); uvicorn's requests are bounded
        # by webhook.serving.worker.MAX_HEAD
        "limit_request_line": 4096,
        "limit_request_fields": 64,
        "limit_request_field_size": 8190,
        "accesslog": None,
        "errorlog": "-",
        "loglevel": "warning",
        "logger_class": "webhook.serving.server.JsonGunicornLogger",
        "proc_name": "rdma-webhook",
    }


class JsonGunicornLogger(glogging.Logger):
    """gunicorn's own lines (a worker started, exited, was sent a signal) as JSON lines on the
    same streams, like every other line the webhook writes: a plain `[WARNING] Worker (pid:590)
    was sent SIGINT!` in a JSON log is a line the cluster's log pipeline cannot parse."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        formatter = JsonFormatter()
        for logger in (self.error_log, self.access_log):
            for handler in logger.handlers:
                handler.setFormatter(formatter)


# Python threads per worker of the granian candidate: with 1 the worker idles while granian hands
# over the next request, with 4 the threads contend for the GIL (benchmarks/README.md).
GRANIAN_THREADS = 2


def run_granian(target, *, host: str, port: int, workers: int, tls_cert: str, tls_key: str,
                client_ca: str | None = None, target_loader=None) -> None:
    """granian's WSGI interface (Rust HTTP and rustls TLS, Python only for the app, in
    GRANIAN_THREADS threads per worker) with the closest settings it has; measured in benchmarks/
    as a candidate, see benchmarks/README.md for what it cannot do that `serve` promises."""
    from pathlib import Path

    from granian import Granian
    from granian.constants import HTTPModes, Interfaces
    from granian.http import HTTP1Settings

    kw: dict[str, Any] = {}
    if client_ca:
        kw.update(ssl_ca=Path(client_ca), ssl_client_verify=True)
    server = Granian(target, address=host, port=port, workers=workers, http=HTTPModes.http1,
                     interface=Interfaces.WSGI, blocking_threads=GRANIAN_THREADS,
                     http1_settings=HTTP1Settings(header_read_timeout=10_000, keep_alive=True),
                     ssl_cert=Path(tls_cert), ssl_key=Path(tls_key), ssl_protocol_min="tls1.2",
                     workers_kill_timeout=20, log_level="warning", **kw)
    if target_loader is not None:
        server.serve(target_loader=target_loader)
    else:
        server.serve()


def _uses_dra(store) -> bool:
    policies = store.current
    return bool(policies) and any(p.dra is not None or p.claim is not None for p in policies.by_name.values())


def _uses_networks(store) -> bool:
    policies = store.current
    return bool(policies) and any(p.networks for p in policies.by_name.values())
