"""The verifier (`rdma-webhook verify`, webhook/verify/) on the real node: labelled pods admitted by
the session's webhook under the ib-shared policy (their namespace's label) and started by the
kubelet print real NCCL log excerpts (tests/proof/nccl-logs/, copied from public threads, sources
in SOURCES.yaml; mounted from a ConfigMap and `cat` by the container), and the verifier, running
as its own ServiceAccount with exactly deploy/verifier/rbac.yaml, reads each container start's log
through the API server and the kubelet, then sets the pod condition, the Events and the metric.

Each case's expected condition is what the library says of the file (`nccl-log`'s reading), and
the issue's named cases are asserted by name: IB with GPUDirect RDMA (True), Socket after "No
device found" (False, NetSocket), GDR disabled (False, GdrDisabled), a user's NCCL_DEBUG=WARN
(Unknown, Unverifiable), no NCCL line at all (Unknown, never False), an MPI launcher's interleaved
ranks; a Job's pod puts its Event on the Job too. Runs after e2e/test_node.py (LAST)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
import yaml

from e2e import cluster as c
from e2e.conftest import INJECT, OPT_IN, create, gpu_pod, make_namespace, stored, unique
from e2e.node import SHELL_IMAGE, TOLERATION

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "tests" / "proof" / "nccl-logs"
CONDITION = "rdma-webhook.io/TransportVerified"
POLICY = "ib-shared"
# pod name -> (log file or None for no NCCL line, extra env, the condition's (status, reason) by name)
CASES = {
    "ib-gdr": ("nccl-707-gdrdma-channels.log", {}, ("True", "Verified")),
    "no-device-socket": ("pytorch-72835-lo-socket-2.10.3.log", {}, ("False", "NetSocket")),
    "gdr-off": ("nccl-392-gdr-off-2.5.7.log", {}, ("False", "GdrDisabled")),
    "user-warn": ("nccl-1652-tcpx-warn-only.log", {"NCCL_DEBUG": "WARN"}, ("Unknown", "Unverifiable")),
    "silent": (None, {}, ("Unknown", "Unverifiable")),
    "launcher-interleaved": ("aks-rdma-infiniband-30-mpijob-interleaved-2.25.log", {}, None),
}
WINDOW = 20  # seconds the verifier follows a start without NCCL lines (the silent case)


def library_condition(name: str, policy: str = POLICY, folder: Path = ROOT / "policies") -> tuple[str, str]:
    """The (status, reason) the log reader gives the file under the policy, in this process."""
    from webhook.policy.load import load_dir
    from webhook.proof import nccl_log
    from webhook.proof.expectation import expectation
    from webhook.proof.verdict import judge

    policies, _ = load_dir(folder)
    with open(LOGS / name, "rb") as f:
        status, reason, _ = judge(nccl_log.read_stream(f), expectation(policies.by_name[policy])).condition()
    return status, reason


def library_condition_of(paths: list[Path], policy: str) -> tuple[str, str]:
    """The (status, reason) of several files read as one log (a launcher's, its ranks' lines)."""
    import io

    from webhook.policy.load import load_dir
    from webhook.proof import nccl_log
    from webhook.proof.expectation import expectation
    from webhook.proof.verdict import judge

    policies, _ = load_dir(ROOT / "policies")
    data = io.BytesIO(b"".join(p.read_bytes() for p in paths))
    status, reason, _ = judge(nccl_log.read_stream(data), expectation(policies.by_name[policy])).condition()
    return status, reason


def logs_config_map(namespace: str, files: set[str]) -> dict:
    """The ConfigMap `nccl-logs` the pods mount: the excerpts as the files hold them."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "nccl-logs", "namespace": namespace},
        "data": {name: (LOGS / name).read_text() for name in sorted(files)},
    }


def apiserver_requests(cp) -> Counter:
    """kube-apiserver's own `apiserver_request_total` (every client's), by (verb, resource, subresource)."""
    from prometheus_client.parser import text_string_to_metric_families

    status, data = cp.request("GET", "/metrics")
    assert status == 200, data[:300]
    out: Counter = Counter()
    for family in text_string_to_metric_families(data.decode()):
        for sample in family.samples:
            if sample.name == "apiserver_request_total":
                labels = sample.labels
                out[(labels["verb"].lower(), labels["resource"], labels.get("subresource", ""))] += int(sample.value)
    return out


@pytest.fixture(scope="module")
def verify_namespace(cp, hook):
    """The test's opted-in namespace, naming ib-shared: the verifier follows this one alone, so
    that pods the suite's other files left running (labelled, mutated) are not read here."""
    return make_namespace(cp, unique("verify"), {**OPT_IN, "rdma-webhook.io/policy": POLICY})


@contextlib.contextmanager
def running_verifier(
    cp, workdir: Path, namespace: str, policies: Path = ROOT / "policies", name: str = "verifier", quiet: float = 2
):
    """`rdma-webhook verify --namespace` with a token of deploy/verifier/rbac.yaml's ServiceAccount
    (a token of its own: the API server's audit log tells the processes apart by namespace).
    `quiet`: the seconds without a new NCCL line after which a verdict that is not a failure is due."""
    docs = [d for d in yaml.safe_load_all((ROOT / "deploy" / "verifier" / "rbac.yaml").read_text()) if d]
    proc = cp.apply(docs)
    assert proc.returncode == 0, proc.stderr
    kc = c.service_account_kubeconfig(cp, "rdma-webhook", "rdma-webhook-verifier", workdir / f"{name}.kubeconfig")
    port = c.free_port()
    exe = Path(sys.executable).with_name("rdma-webhook")
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "webhook"]
    argv += ["verify", "--kubeconfig", str(kc), "--policies", str(policies), "--metrics-port", str(port)]
    argv += ["--quiet", str(quiet), "--window", str(WINDOW), "--namespace", namespace]
    proc = c.Process(name, argv, workdir / f"{name}.log", cwd=ROOT)
    try:
        yield proc, port
    finally:
        assert proc.stop() == 0, proc.tail()


@pytest.fixture(scope="module")
def verifier(cp, hook, workdir, verify_namespace):
    with running_verifier(cp, workdir, verify_namespace) as got:
        yield got


def _pod(name: str, namespace: str, log: str | None, env: dict[str, str]) -> dict:
    script = (f"cat /logs/{log}; " if log else "echo loading the dataset; ") + "exec sleep 3600"
    pod = gpu_pod(
        name,
        namespace,
        labels=INJECT,
        env=env or None,
        gpus=1,
        image=SHELL_IMAGE,
        imagePullPolicy="Never",
        command=["sh", "-c", script],
        volumeMounts=[{"name": "logs", "mountPath": "/logs"}],
    )
    pod["spec"].update(
        terminationGracePeriodSeconds=1,
        tolerations=[TOLERATION],
        volumes=[{"name": "logs", "configMap": {"name": "nccl-logs"}}],
    )
    return pod


def condition_of(cp, namespace: str, name: str) -> dict | None:
    got = stored(cp, f"/api/v1/namespaces/{namespace}/pods/{name}")
    return next((x for x in got["status"].get("conditions") or [] if x["type"] == CONDITION), None)


def events_of(cp, namespace: str) -> list[dict]:
    """The verifier's Events in the namespace (the kubelet's and the scheduler's are there too)."""
    items = stored(cp, f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
    return [e for e in items if e.get("reportingController") == "rdma-webhook.io/verifier"]


def metrics_of(port: int) -> dict[tuple[str, tuple], float]:
    """The verifier's /metrics, read by prometheus_client's own parser: (name, sorted labels) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_each_pods_transport_is_read_from_its_own_log_and_shown_where_people_look(
    cp, hook, node, verifier, verify_namespace, workdir
):
    proc, port = verifier
    namespace = verify_namespace
    files = {log for log, _, _ in CASES.values() if log}
    assert create(cp, logs_config_map(namespace, files)).returncode == 0
    before = apiserver_requests(cp)
    started = time.monotonic()
    for name, (log, env, _) in CASES.items():
        made = create(cp, _pod(name, namespace, log, env))
        assert made.returncode == 0, made.stderr
    # a Job's pod: the controller-made pod (generateName) and the Event on the Job as well
    job_pod = _pod("x", namespace, "pytorch-72835-lo-socket-2.10.3.log", {})
    del job_pod["metadata"]["name"]
    job_pod["spec"]["restartPolicy"] = "Never"
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "trainer", "namespace": namespace},
        "spec": {"backoffLimit": 0, "template": {"metadata": job_pod["metadata"], "spec": job_pod["spec"]}},
    }
    assert create(cp, job).returncode == 0

    def all_conditions():
        found = {name: condition_of(cp, namespace, name) for name in CASES}
        return found if all(found.values()) else None

    found = c.wait_for("every pod's TransportVerified condition", all_conditions, WINDOW + 120)
    took = time.monotonic() - started
    for name, (log, _, named) in CASES.items():
        got = (found[name]["status"], found[name]["reason"])
        if named is not None:
            assert got == named, (name, found[name])
        if log is not None:
            assert got == library_condition(log), (name, found[name])
        assert f"pod {name} (policy {POLICY})" in found[name]["message"], found[name]
    # the kubelet's own conditions are still there beside ours
    pod = stored(cp, f"/api/v1/namespaces/{namespace}/pods/ib-gdr")
    assert {"Ready", "PodScheduled", CONDITION} <= {x["type"] for x in pod["status"]["conditions"]}

    events = c.wait_for(
        "the Job's Event",
        lambda: (lambda e: e if any(x["regarding"]["kind"] == "Job" for x in e) else None)(events_of(cp, namespace)),
        60,
    )
    by_pod = {e["regarding"]["name"]: e for e in events if e["regarding"]["kind"] == "Pod"}
    assert set(CASES) <= set(by_pod) and len(by_pod) == len(CASES) + 1, sorted(by_pod)  # one per start
    assert by_pod["ib-gdr"]["type"] == "Normal" and by_pod["ib-gdr"]["reason"] == "TransportVerified"
    assert (
        by_pod["no-device-socket"]["type"] == "Warning" and by_pod["no-device-socket"]["reason"] == "TransportNetSocket"
    )
    [job_event] = [e for e in events if e["regarding"]["kind"] == "Job"]
    assert job_event["regarding"]["name"] == "trainer" and job_event["related"]["name"].startswith("trainer-")
    assert job_event["reportingController"] == "rdma-webhook.io/verifier"

    samples = metrics_of(port)
    assert (
        samples[
            (
                "rdma_webhook_transport_verdicts_total",
                (("policy", POLICY), ("reason", "Verified"), ("verdict", "verified")),
            )
        ]
        == 1
    )
    assert samples[("rdma_webhook_log_reads_total", (("result", "read"),))] == len(CASES) + 1  # one read per start
    assert (
        sum(v for (name, _), v in samples.items() if name == "rdma_webhook_transport_verdicts_total") == len(CASES) + 1
    )
    api_cost(cp, namespace, before, starts=len(CASES) + 1, owned=1, workdir=workdir)
    # `rdma-webhook status`, from the live cluster: the Job and each bare pod, with its verdict
    exe = Path(sys.executable).with_name("rdma-webhook")
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "webhook"]
    listed = subprocess.run(
        [*argv, "status", "--kubeconfig", str(cp.admin_kubeconfig), "--namespace", namespace, "--output", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 1, listed.stderr  # a job is False
    by_name = {(j["kind"], j["name"]): j for j in json.loads(listed.stdout)}
    assert by_name[("Job", "trainer")]["verdict"] == "False" and by_name[("Job", "trainer")]["reasons"] == ["NetSocket"]
    assert by_name[("Pod", "ib-gdr")]["verdict"] == "True" and by_name[("Pod", "silent")]["verdict"] == "Unknown"
    assert all(j["policies"] == [POLICY] for j in by_name.values()) and len(by_name) == len(CASES) + 1
    print(f"verifier: {len(CASES) + 1} pods verified within {took:.1f}s of their creation")
    assert proc.alive(), proc.tail()
    cp.kubectl("delete", "namespace", namespace, "--wait=false")  # frees the node's devices


def api_cost(cp, namespace: str, before: Counter, starts: int, owned: int, workdir: Path) -> None:
    """What the verifier asked of the API server for `starts` container starts (`owned` of them in
    a pod with a controller): its own requests from the audit log (its ServiceAccount, in the
    namespace it follows), exact per start; and the API server's `apiserver_request_total` over
    the same time, every client's (the kubelet patches pods/status too), stored beside them.
    benchmarks/verifier_api_cost.py keeps the figures with their provenance."""
    cost = c.audit_requests(cp.audit_log, c.AUDITED[0], namespace)
    assert cost[("get", "pods", "log")] == starts, cost  # one log read per container start
    assert cost[("patch", "pods", "status")] == starts, cost  # one condition per start
    assert cost[("create", "events", "")] == starts + owned, cost  # on the pod, and on its job
    # the pods it follows: one list, one watch (again only after WATCH_TIMEOUT), none per start
    assert cost[("list", "pods", "")] == 1 and 1 <= cost[("watch", "pods", "")] <= 2, cost
    assert set(cost) <= KNOWN_REQUESTS, cost  # nothing else
    after = apiserver_requests(cp)
    delta = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0) and k[0] != "watch"}
    figures = {
        "container_starts": starts,
        "starts_in_pods_with_a_controller": owned,
        "verifier_requests_audited": {"/".join(filter(None, k[1:])) + f" {k[0]}": n for k, n in sorted(cost.items())},
        "verifier_requests_per_start": {
            "pods/log get": cost[("get", "pods", "log")] / starts,
            "pods/status patch": cost[("patch", "pods", "status")] / starts,
            "events create": cost[("create", "events", "")] / starts,
        },
        "apiserver_request_total_delta_all_clients": {
            "/".join(filter(None, k[1:])) + f" {k[0]}": n
            for k, n in sorted(delta.items())
            if k[1] in ("pods", "events")
        },
    }
    (workdir / "verifier-api-cost.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(f"verifier API cost: {json.dumps(figures)}")


KNOWN_REQUESTS = {
    ("get", "pods", "log"),
    ("patch", "pods", "status"),
    ("create", "events", ""),
    ("list", "pods", ""),
    ("watch", "pods", ""),
}
