"""webhook/serving/server.py in-process: what `serve` builds before gunicorn forks (`prepare`), the
settings gunicorn's master runs with, what each worker starts and stops (the hooks), and the
multi-process metrics folder. gunicorn's own `run` (the fork, the signals) is the one thing not
run here: tests/serving/test_server.py serves the same over TLS as a process of its own."""

from __future__ import annotations

import gc
import json
import logging
import os
import shutil
import ssl
import tempfile

import pytest
from gunicorn.config import Config
from kubernetes.config import kube_config
from werkzeug.test import Client

from conftest import CLUSTER_STATE, POLICIES
from webhook.telemetry import metrics  # before any test here sets PROMETHEUS_MULTIPROC_DIR
from webhook.telemetry import logs
import webhook
from webhook.cluster.api import ApiClusterState
from webhook.cluster.state import FileClusterState
from webhook.policy.store import PolicyStore
from webhook.serving import server
from webhook.serving.certs import write_certs
from webhook.serving.tls import ServingTLS, certificate_expiry

API_UNREACHABLE = "; run in a cluster, set KUBECONFIG, or pass --cluster-state FILE"


@pytest.fixture
def start(tmp_path, monkeypatch):
    """Certificates, a policies folder with one Multus policy and one without, a metrics folder;
    the process's logging, GC and metrics environment put back afterwards (`prepare` sets the
    root logger up for JSON on stdout and freezes the GC, as the master does)."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "metrics"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    # KUBECONFIG is read when kubernetes.config is imported: its default location is patched instead
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "no-kubeconfig"))
    write_certs(tmp_path / "certs", "rdma-webhook", "rdma-webhook", dns=["localhost"])
    policies = tmp_path / "policies"
    policies.mkdir()
    for name in ("sriov-roce.yaml", "efa.yaml"):
        shutil.copy(POLICIES / name, policies / name)
    root = logging.getLogger()
    handlers, level, writer = root.handlers[:], root.level, logs._writer
    try:
        yield {
            "policies_dir": str(policies),
            "tls_cert": str(tmp_path / "certs" / "tls.crt"),
            "tls_key": str(tmp_path / "certs" / "tls.key"),
        }
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        logs._writer = writer
        gc.unfreeze()


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def ran_servers(monkeypatch) -> list:
    """The gunicorn applications `run` would start, kept instead of forking workers."""
    ran: list = []
    monkeypatch.setattr(server._Server, "run", lambda self: ran.append(self))
    return ran


def test_run_serves_what_prepare_built_with_the_worker_hooks(start, monkeypatch, capsys):
    ran = ran_servers(monkeypatch)
    metrics.CACHE_READY.set(0)
    status = server.run(
        **start,
        host="127.0.0.1",
        port=9443,
        workers=3,
        cluster_state=str(CLUSTER_STATE),
        client_ca=None,
    )
    assert status == 0
    [app] = ran
    cfg = app.cfg
    assert (cfg.bind, cfg.workers, cfg.certfile, cfg.keyfile) == (
        ["127.0.0.1:9443"],
        3,
        start["tls_cert"],
        start["tls_key"],
    )
    served = cfg.post_worker_init.__self__
    assert isinstance(served, server.Served) and cfg.post_worker_init.__func__ is server.Served.post_worker_init
    assert cfg.worker_exit.__self__ is served and cfg.worker_exit.__func__ is server.Served.worker_exit
    assert cfg.child_exit is server.child_exit
    assert cfg.ssl_context(cfg, None) is served.tls and served.tls.cert_file == start["tls_cert"]
    assert isinstance(served.cluster, FileClusterState) and served.cluster.namespace("ml-training") is not None
    assert sorted(served.store.current.by_name) == ["efa", "sriov-roce"]
    assert app.load() is served.app
    answer = Client(app.load()).get("/readyz")  # the app reads the store and the cluster state built
    assert (answer.status_code, answer.get_json()) == (200, {"status": "ready", "policies": ["efa", "sriov-roce"]})
    assert metrics.CACHE_READY._value.get() == 1  # the master's neutral entry (before_fork)
    assert gc.get_freeze_count() > 0  # what the master built is left out of the forks' GC
    lines = json_lines(capsys.readouterr().out)
    compiled = webhook.compiled()
    core = (
        f"compiled with mypyc ({', '.join(compiled)})"
        if compiled
        else "interpreted (built with RDMA_WEBHOOK_PURE_PYTHON=1 or from source without `make compile`)"
    )
    assert {"level": "info", "logger": "rdma_webhook.serve", "msg": f"decision core: {core}"}.items() <= lines[
        0
    ].items()
    assert [line["msg"] for line in lines if line["level"] == "error"] == []


def test_without_valid_policies_it_starts_and_says_it_is_not_ready(start, monkeypatch, capsys, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "a.yaml").write_text("name: [not, a, policy\n")
    ran = ran_servers(monkeypatch)
    client_ca = str(tmp_path / "certs" / "ca.crt")  # the API server's CA, as --client-ca names it
    status = server.run(
        **{**start, "policies_dir": str(broken)},
        host="::",
        port=8443,
        workers=1,
        cluster_state=str(CLUSTER_STATE),
        client_ca=client_ca,
        log_level="error",
    )
    assert status == 0 and ran[0].cfg.bind == ["[::]:8443"]
    served = ran[0].cfg.post_worker_init.__self__
    assert served.store.current is None
    assert served.tls.client_ca == client_ca and served.tls.context.verify_mode == ssl.CERT_REQUIRED
    errors = [line["msg"] for line in json_lines(capsys.readouterr().out) if line["level"] == "error"]
    assert errors[-1] == "no valid policies at start; serving but not ready until they are fixed"
    assert all(line.startswith("policy reload rejected") for line in errors[:-1]) and len(errors) > 1


def test_without_a_cluster_state_or_the_api_it_exits_2_and_says_what_to_do(start, monkeypatch, capsys):
    ran = ran_servers(monkeypatch)
    status = server.run(
        **start, host="127.0.0.1", port=8443, workers=1, cluster_state=None, client_ca=None, log_level="WARNING"
    )
    assert (status, ran) == (2, [])
    [line] = json_lines(capsys.readouterr().out)
    assert line["level"] == "error" and line["logger"] == "rdma_webhook.serve"
    assert line["msg"].startswith("cannot reach the Kubernetes API (") and line["msg"].endswith(API_UNREACHABLE)
    assert "kube-config" in line["msg"]  # the reason the client gave
    # prepare's own defaults: INFO lines, and no admission policy check
    assert server.prepare(**start, cluster_state=None, client_ca=None) is None
    lines = json_lines(capsys.readouterr().out)
    assert [line["level"] for line in lines][:1] == ["info"] and lines[-1]["msg"].endswith(API_UNREACHABLE)


def test_the_startup_line_names_the_compiled_modules(start, monkeypatch, capsys):
    monkeypatch.setattr(webhook, "compiled", lambda: ["core.decision", "grammar.nccl"])  # as a compiled build says
    server.prepare(**start, cluster_state=str(CLUSTER_STATE), client_ca=None)
    first = json_lines(capsys.readouterr().out)[0]
    assert first["msg"] == "decision core: compiled with mypyc (core.decision, grammar.nccl)"


KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: t}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
"""


def test_the_api_cluster_state_follows_the_policies_in_force(start, monkeypatch, tmp_path):
    """What the API watch reads from the store each time: NADs only while a policy names Multus
    networks, the DRA kinds while any policy is loaded; the policy mode's check reads the store."""
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "kubeconfig"))
    store = PolicyStore(start["policies_dir"])
    assert not server._uses_networks(store) and not server._uses_dra(store)  # nothing loaded yet
    cluster = server._cluster(store, None, False)
    assert isinstance(cluster, ApiClusterState) and cluster.admission_policy_check is None
    store.reload(force=True)
    assert cluster.uses_networks() is True and cluster.uses_dra() is True
    os.remove(os.path.join(start["policies_dir"], "sriov-roce.yaml"))
    store.reload()
    assert cluster.uses_networks() is False and cluster.uses_dra() is True
    os.remove(os.path.join(start["policies_dir"], "efa.yaml"))
    store.reload()
    assert len(store.current) == 0
    assert cluster.uses_networks() is False and cluster.uses_dra() is False
    checked = server._cluster(store, None, True)
    assert checked.admission_policy_check.policies() is store.current
    assert isinstance(server._cluster(store, str(CLUSTER_STATE), True), FileClusterState)


@pytest.mark.parametrize("check", [False, True])
def test_without_a_cluster_state_it_watches_the_api_server_for_the_policies_in_force(
    start, monkeypatch, tmp_path, capsys, check
):
    """The kubeconfig's API server is unreachable (the master's first list fails fast and says
    so, each worker lists again); the server starts with the API state, which asks the store
    whether to follow NADs, and checks the admission policies only when asked to."""
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "kubeconfig"))
    ran = ran_servers(monkeypatch)
    args = dict(start, host="127.0.0.1", port=8443, workers=1, cluster_state=None, client_ca=None)
    status = server.run(**args, check_admission_policy=True) if check else server.run(**args)
    assert status == 0
    served = ran[0].cfg.post_worker_init.__self__
    assert isinstance(served.cluster, ApiClusterState) and served.cluster.uses_networks() is True
    assert (served.cluster.admission_policy_check is not None) is check
    if not check:  # prepare's own default too
        assert server.prepare(**start, cluster_state=None, client_ca=None).cluster.admission_policy_check is None
    assert any(line["msg"].startswith("listing before the fork failed") for line in json_lines(capsys.readouterr().out))


class Lifecycle:
    """A cluster state with the API state's lifecycle (prime in the master, start and stop in each
    worker), recording what was called."""

    def __init__(self, ready: bool):
        self.calls: list[str] = []
        self._ready = ready

    def prime(self) -> None:
        self.calls.append("prime")

    def start(self) -> None:
        self.calls.append("start")

    def stop(self) -> None:
        self.calls.append("stop")

    def ready(self) -> bool:
        return self._ready


def test_a_worker_starts_and_stops_what_the_master_built(start):
    tls = ServingTLS(start["tls_cert"], start["tls_key"])
    store = PolicyStore(start["policies_dir"], interval=60)
    store.reload(force=True)
    for gauge in (metrics.CACHE_READY, metrics.POLICIES, metrics.RELOAD_OK, metrics.CERT_EXPIRY):
        gauge.set(-1)
    served = server.Served("app", tls, store, FileClusterState.from_file(str(CLUSTER_STATE)))
    served.before_fork()  # no prime: a file is read at once
    served.post_worker_init(worker=None)
    try:
        assert store._thread is not None and store._thread.is_alive()
        assert metrics.CACHE_READY._value.get() == 1
        assert (metrics.POLICIES._value.get(), metrics.RELOAD_OK._value.get()) == (2, 1)
        assert metrics.CERT_EXPIRY._value.get() == certificate_expiry(start["tls_cert"])
    finally:
        served.worker_exit(server=None, worker=None)
    store._thread.join(5)
    assert not store._thread.is_alive()

    cluster = Lifecycle(ready=False)
    idle = PolicyStore(start["policies_dir"], interval=60)  # never loaded: no policies in force
    for gauge in (metrics.CACHE_READY, metrics.POLICIES, metrics.RELOAD_OK):
        gauge.set(-1)
    served = server.Served("app", tls, idle, cluster)
    served.before_fork()
    assert cluster.calls == ["prime"] and metrics.CACHE_READY._value.get() == 1
    served.post_worker_init(worker=None)
    served.worker_exit(server=None, worker=None)
    assert cluster.calls == ["prime", "start", "stop"]
    assert metrics.CACHE_READY._value.get() == 0  # the worker's own cache is not ready yet
    assert (metrics.POLICIES._value.get(), metrics.RELOAD_OK._value.get()) == (-1, -1)  # left as they were


def test_a_dead_workers_gauges_are_dropped(tmp_path, monkeypatch):
    """Its livemin/livesum gauge files go (a dead worker's 0 must not pull the replica's down);
    its counters and the other workers' files stay."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    names = ["gauge_livemin_4242.db", "gauge_livesum_4242.db", "gauge_livemin_77.db", "counter_4242.db"]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    server.child_exit(None, type("Worker", (), {"pid": 4242})())
    assert sorted(os.listdir(tmp_path)) == ["counter_4242.db", "gauge_livemin_77.db"]


def test_the_metrics_folder_is_made_empty_at_start(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for unset in (None, ""):
        if unset is None:
            monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
        else:
            monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", unset)
        default = tmp_path / f"rdma-webhook-metrics-{os.getpid()}"
        default.mkdir(exist_ok=True)
        (default / "counter_1.db").write_bytes(b"stale")  # left by an earlier master of this pid
        server.prepare_metrics_dir()
        assert os.environ["PROMETHEUS_MULTIPROC_DIR"] == str(default)
        assert os.listdir(default) == []
    given = tmp_path / "given" / "metrics"
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(given))
    server.prepare_metrics_dir()  # created with its parents
    assert os.listdir(given) == [] and os.environ["PROMETHEUS_MULTIPROC_DIR"] == str(given)
    (given / "gauge_livemin_9.db").write_bytes(b"")
    server.prepare_metrics_dir()
    assert os.listdir(given) == []


def test_a_metrics_folder_that_cannot_be_removed_is_used_as_it_is(tmp_path, monkeypatch):
    """A folder the master may empty but not remove (a mount point; here a symbolic link to a
    folder, which rmtree refuses alike) is no reason not to start, and it is emptied all the
    same: an earlier master's metric files in it would be summed into this one's counters."""
    (tmp_path / "volume" / "old").mkdir(parents=True)
    (tmp_path / "volume" / "counter_123.db").write_bytes(b"an earlier master's counts")
    (tmp_path / "volume" / "old" / "gauge_9.db").write_bytes(b"")
    (tmp_path / "metrics").symlink_to(tmp_path / "volume")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "metrics"))
    server.prepare_metrics_dir()
    assert os.path.isdir(tmp_path / "metrics") and os.path.islink(tmp_path / "metrics")
    assert os.listdir(tmp_path / "volume") == []


@pytest.mark.parametrize(
    "host, port, bind, address",
    [
        ("0.0.0.0", 8443, "0.0.0.0:8443", ("0.0.0.0", 8443)),
        ("::", 8443, "[::]:8443", ("::", 8443)),
        ("fd00::5", 9443, "[fd00::5]:9443", ("fd00::5", 9443)),
    ],
)
def test_gunicorn_binds_the_host_and_port_of_either_family(start, host, port, bind, address):
    tls = ServingTLS(start["tls_cert"], start["tls_key"])
    cfg = Config()
    for name, value in server.gunicorn_options(host=host, port=port, workers=1, tls=tls).items():
        cfg.set(name, value)
    assert (cfg.bind, cfg.address) == ([bind], [address])


def test_gunicorn_runs_with_the_webhooks_settings(start):
    tls = ServingTLS(start["tls_cert"], start["tls_key"])
    options = server.gunicorn_options(host="0.0.0.0", port=8443, workers=4, tls=tls)
    app = server._Server("the app", options)
    cfg = app.cfg
    assert app.load() == "the app"
    assert (cfg.workers, cfg.worker_class_str, cfg.preload_app) == (4, "webhook.serving.worker.Worker", True)
    assert (cfg.certfile, cfg.keyfile, cfg.ssl_context(cfg, None)) == (tls.cert_file, tls.key_file, tls)
    # Longer than the API server keeps an idle connection (90 s): the webhook never closes first.
    assert (cfg.keepalive, cfg.timeout, cfg.graceful_timeout) == (120, 30, 20)
    assert (cfg.accesslog, cfg.errorlog, cfg.loglevel) == (None, "-", "warning")
    assert cfg.logger_class is server.JsonGunicornLogger and cfg.proc_name == "rdma-webhook"
    assert set(options) == {
        "bind",
        "workers",
        "worker_class",
        "preload_app",
        "certfile",
        "keyfile",
        "ssl_context",
        "keepalive",
        "timeout",
        "graceful_timeout",
        "accesslog",
        "errorlog",
        "loglevel",
        "logger_class",
        "proc_name",
    }
