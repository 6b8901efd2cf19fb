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
before the fork. `prepare` is everything before the fork (`Served`); the servers measured
against this one in benchmarks/ serve what it builds.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from gunicorn import glogging
from gunicorn.app.base import BaseApplication

from webhook.telemetry.logs import JsonFormatter, setup_logging

log = logging.getLogger("rdma_webhook.serve")


def prepare_metrics_dir() -> None:
    """Multi-process metrics need a folder shared by the workers, empty at start; must be set
    before `prometheus_client` creates any metric, so this runs before importing the app. What
    is in the folder is removed, not the folder: it may be a mount point (an emptyDir) or a
    symbolic link, which cannot be removed, and an earlier master's files in it would be summed
    into this one's counters."""
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not path:
        path = os.path.join(tempfile.gettempdir(), f"rdma-webhook-metrics-{os.getpid()}")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    folder = Path(path)  # every call below is on this folder or its entries, none on a bare path
    folder.mkdir(parents=True, exist_ok=True)
    for entry in folder.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                entry.unlink()


class _Server(BaseApplication):
    def __init__(self, app, options: dict[str, Any]):
        self._app, self._options = app, options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._options.items():
            self.cfg.set(key, value)

    def load(self):
        return self._app


def run(
    *,
    policies_dir: str,
    tls_cert: str,
    tls_key: str,
    host: str,
    port: int,
    workers: int,
    cluster_state: str | None,
    client_ca: str | None,
    log_level: str = "INFO",
    check_admission_policy: bool = False,
) -> int:
    """`rdma-webhook serve`: what `prepare` builds, served by gunicorn's master and the uvicorn
    workers until SIGTERM (2: the Kubernetes API could not be reached)."""
    served = prepare(
        policies_dir=policies_dir,
        tls_cert=tls_cert,
        tls_key=tls_key,
        cluster_state=cluster_state,
        client_ca=client_ca,
        log_level=log_level,
        check_admission_policy=check_admission_policy,
    )
    if served is None:
        return 2
    options = gunicorn_options(host=host, port=port, workers=workers, tls=served.tls)
    options.update(post_worker_init=served.post_worker_init, worker_exit=served.worker_exit, child_exit=child_exit)
    _Server(served.app, options).run()
    return 0


class Served:
    """What the master builds before the fork (the WSGI app, its policies, cluster state and
    TLS) and what each worker starts and stops of it, as gunicorn's hooks."""

    def __init__(self, app: Any, tls: Any, store: Any, cluster: Any):
        self.app, self.tls, self.store, self.cluster = app, tls, store, cluster

    def before_fork(self) -> None:
        from webhook.telemetry import metrics

        prime = getattr(self.cluster, "prime", None)
        if prime:  # one list for the replica, before the fork (ApiClusterState.prime)
            prime()
        # The master serves nothing, but in multi-process mode it holds an entry of every gauge (it
        # imports them, at 0): the cache gauge is a livemin over the workers, so the master's entry
        # is the neutral 1 (else a ready replica reads 0 and the cache-not-ready alert fires).
        metrics.CACHE_READY.set(1)
        gc.freeze()  # what the master built is shared with the forks, never scanned by the GC again

    def post_worker_init(self, worker: Any) -> None:
        from webhook.telemetry import metrics

        store, cluster = self.store, self.cluster
        store.start()
        start = getattr(cluster, "start", None)
        if start:
            start()
        metrics.CACHE_READY.set(1 if cluster.ready() else 0)
        if store.current is not None:
            metrics.POLICIES.set(len(store.current))
            metrics.RELOAD_OK.set(1)
        self.tls.record_expiry()

    def worker_exit(self, server: Any, worker: Any) -> None:
        self.store.stop()
        stop = getattr(self.cluster, "stop", None)
        if stop:
            stop()


def child_exit(server: Any, worker: Any) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def prepare(
    *,
    policies_dir: str,
    tls_cert: str,
    tls_key: str,
    cluster_state: str | None,
    client_ca: str | None,
    log_level: str = "INFO",
    check_admission_policy: bool = False,
) -> Served | None:
    """Everything `serve` does before gunicorn forks its workers, ready to serve (None: the
    Kubernetes API cannot be reached, logged)."""
    setup_logging(log_level)
    prepare_metrics_dir()
    # Imported after the metrics folder is set, so the metrics are multi-process ones.
    from webhook.serving.app import create_app, wsgi
    from webhook.policy.store import PolicyStore
    from webhook.serving.tls import ServingTLS

    import webhook
    from webhook.admission import review  # noqa: F401  (the decision core, imported to report how it runs)

    compiled = webhook.compiled()
    log.info(
        "decision core: %s",
        f"compiled with mypyc ({', '.join(compiled)})"
        if compiled
        else "interpreted (built with RDMA_WEBHOOK_PURE_PYTHON=1 or from source without `make compile`)",
    )
    tls = ServingTLS(tls_cert, tls_key, client_ca)
    store = PolicyStore(policies_dir)
    store.reload(force=True)
    if store.current is None:
        log.error("no valid policies at start; serving but not ready until they are fixed")
    cluster = _cluster(store, cluster_state, check_admission_policy)
    if cluster is None:
        return None
    served = Served(wsgi(create_app(store, cluster)), tls, store, cluster)
    served.before_fork()
    return served


def _cluster(store: Any, cluster_state: str | None, check_admission_policy: bool) -> Any:
    """The cluster state `serve` reads: the file given, else the API server (None: unreachable, logged)."""
    if cluster_state:
        from webhook.cluster.state import FileClusterState

        return FileClusterState.from_file(cluster_state)
    from webhook.cluster.api import ApiClusterState

    try:
        return ApiClusterState.from_environment(
            uses_networks=lambda: _uses_networks(store),
            uses_dra=lambda: _uses_dra(store),
            admission_policies=(lambda: store.current) if check_admission_policy else None,
        )
    except Exception as exc:  # no in-cluster config and no kubeconfig
        log.error(
            "cannot reach the Kubernetes API (%s); run in a cluster, set KUBECONFIG, or pass --cluster-state FILE", exc
        )
        return None


def gunicorn_options(*, host: str, port: int, workers: int, tls) -> dict[str, Any]:
    """The gunicorn settings `serve` runs with (benchmarks/floor.py serves its floors with the
    same settings, its gthread reference floor with that worker's own on top)."""
    return {
        "bind": [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"],
        "workers": workers,
        "worker_class": "webhook.serving.worker.Worker",
        "preload_app": True,
        "certfile": tls.cert_file,
        "keyfile": tls.key_file,
        "ssl_context": lambda conf, default_factory: tls,
        # The API server keeps an idle webhook connection for 90 s (client-go's transport, Go's
        # default IdleConnTimeout) and never resends a POST: a server that closes first races
        # a request on the closing connection and fails that admission. Outlive it. (A request's
        # own bounds are the worker's: webhook.serving.worker.MAX_HEAD, webhook.serving.asgi.)
        "keepalive": 120,
        "timeout": 30,
        "graceful_timeout": 20,
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


def _uses_dra(store) -> bool:
    """Any policy loaded: whether a pod's claim is an RDMA NIC is read from its template under
    every policy (webhook.core.claims.is_nic), not only under those that name DRA classes."""
    return bool(store.current)


def _uses_networks(store) -> bool:
    policies = store.current
    return bool(policies) and any(p.networks for p in policies.by_name.values())
