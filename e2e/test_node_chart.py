"""The webhook installed on the node as users install it: the chart (charts/rdma-webhook), its
Deployment's pods started by the kubelet from the image `make image` builds (e2e/test_image.py's
build, imported into containerd, no registry), ready (their /readyz needs the cluster state
synced through the API server, which they reach at the `kubernetes` Service's address), and called
by the API server through the chart's Service (endpoint routing) with the chart's caBundle.

Then operations on that Deployment, each leaving it as it found it (the chart's replicas, Ready):
a rollout restart while labelled pods are created at 20/s (none may fail), one replica's pod
force-deleted under the same stream (the other serves every one), and both replicas down (scaled
to 0: labelled pods in opted-in namespaces refused by the failurePolicy, everything else
created). The streamed pods name a scheduler nobody runs: they are admitted and stored, and stay
Pending without holding any of the node's devices.

Runs after e2e/test_node.py and e2e/test_node_mpi.py (LAST in conftest.py); if the node cannot
start, it fails."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from e2e import cluster as c
from e2e.conftest import INJECT, OPT_IN, create, gpu_pod, make_namespace, pod_path, stored, unique
from e2e.node import SHELL_IMAGE, TOLERATION

CHART = c.ROOT / "charts" / "rdma-webhook"
RELEASE = NAMESPACE = "chart-node"
FULLNAME = f"{RELEASE}-rdma-webhook"
SELECTOR = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=webhook"


@pytest.fixture(scope="module")
def webhook_image(node, workdir) -> str:
    from e2e.test_image import build_image, image_cache, podman

    name = build_image()
    archive = image_cache() / f"rdma-webhook-{name.rsplit('e2e-', 1)[1]}.oci.tar"
    if not archive.exists():  # the podman image was reused: write its archive here
        archive = Path(workdir) / "rdma-webhook.oci.tar"
        podman("save", "--format", "oci-archive", "-o", str(archive), name, timeout=600)
    started = time.monotonic()
    node.import_image(archive)
    assert name in node.ctr("images", "ls", "-q").stdout.split()
    print(f"image {name} imported into containerd in {time.monotonic() - started:.1f}s")
    return name


@pytest.fixture(scope="module")
def chart(cp, node, workdir, webhook_image):
    node.start_service_routing()
    proc = subprocess.run(
        ["bash", str(c.ROOT / "scripts" / "build-helm.sh")], capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    binary = proc.stdout.strip().splitlines()[-1]
    home = Path(workdir) / "helm-node-home"
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
        "KUBECONFIG": str(cp.admin_kubeconfig),
    }

    def helm(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([binary, *args], capture_output=True, text=True, timeout=400, env=env)

    repository, tag = webhook_image.rsplit(":", 1)
    started = time.monotonic()
    proc = helm(
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        "--set",
        f"image.repository={repository}",
        "--set",
        f"image.tag={tag}",
        "--set",
        "image.pullPolicy=Never",
        "--set",
        "policies.enabled={erdma}",
        *[a for k, v in TOLERATION.items() for a in ("--set", f"tolerations[0].{k}={v}")],
        *[a for k, v in TOLERATION.items() for a in ("--set", f"verifier.tolerations[0].{k}={v}")],
        "--wait",
        "--timeout",
        "240s",
    )
    if proc.returncode != 0:
        pods = cp.kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide").stdout
        events = cp.kubectl("get", "events", "-n", NAMESPACE).stdout
        logs = cp.kubectl("logs", "-n", NAMESPACE, "-l", SELECTOR, "--tail", "30", "--prefix").stdout
        pytest.fail(
            f"helm install:\n{proc.stdout}\n{proc.stderr}\n{pods}\n{events[-4000:]}\n{logs[-4000:]}", pytrace=False
        )
    print(f"chart installed, its Deployment available, in {time.monotonic() - started:.1f}s")
    try:
        yield helm
    finally:
        helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", "120s")


def chart_admissions(cp, namespace: str) -> list[dict]:
    """The admission log lines the chart's pods wrote for `namespace`, as dicts (plus `from`, the
    pod that wrote it)."""
    logs = cp.kubectl("logs", "-n", NAMESPACE, "-l", SELECTOR, "--tail", "-1", "--prefix").stdout
    found = []
    for line in logs.splitlines():
        prefix, brace, rest = line.partition("{")
        try:
            doc = json.loads(brace + rest)
        except ValueError:
            continue
        if doc.get("msg") == "admission" and doc.get("namespace") == namespace:
            found.append({**doc, "from": prefix.strip()})
    return found


def test_the_chart_s_verifier_runs_from_the_image_with_its_own_identity(cp, node, chart, webhook_image):
    """The default install's verifier (verifier.enabled): one pod of the image, on the node, as its
    own ServiceAccount, following the mutated pods (its start line in its log)."""
    selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=verifier"
    pods = stored(cp, f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={selector.replace(',', '%2C')}")["items"]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    [pod] = pods
    assert (
        pod["spec"]["nodeName"] == node.name and pod["spec"]["serviceAccountName"] == f"{RELEASE}-rdma-webhook-verifier"
    )
    assert pod["spec"]["containers"][0]["image"] == webhook_image and pod["status"]["phase"] == "Running"
    name = pod["metadata"]["name"]
    try:
        logs = c.wait_for(
            "the verifier's start line",
            lambda: (lambda out: out if "verifying the NCCL transport" in out else None)(
                cp.kubectl("logs", "-n", NAMESPACE, name).stdout
            ),
            60,
        )
    except TimeoutError:
        now = stored(cp, f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")
        previous = cp.kubectl("logs", "-n", NAMESPACE, name, "--previous").stdout
        current = cp.kubectl("logs", "-n", NAMESPACE, name).stdout
        pytest.fail(
            f"status: {json.dumps(now['status'])[:3000]}\nlogs: {current[-3000:]}\nprevious: {previous[-3000:]}"
        )
    assert "Traceback" not in logs, logs


def test_chart_pods_run_from_the_image_and_are_ready(cp, node, chart, webhook_image):
    pods = stored(cp, f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={SELECTOR.replace(',', '%2C')}")["items"]
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]  # the chart's replicaCount
    for pod in pods:
        assert pod["spec"]["nodeName"] == node.name
        status = pod["status"]
        assert status["phase"] == "Running", status
        assert {x["type"]: x["status"] for x in status["conditions"]}["Ready"] == "True", status["conditions"]
        ctr = status["containerStatuses"][0]
        assert ctr["image"].endswith(webhook_image.split("/", 1)[1]), ctr["image"]
        assert ctr["restartCount"] == 0, ctr


def test_the_api_server_calls_the_chart_through_its_service(cp, node, chart):
    """A labelled pod in an opted-in namespace: the chart's webhook configuration names the
    Service and the chart's caBundle; the chart's pods log its admission, and it starts."""
    config = stored(cp, f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{FULLNAME}")
    client = config["webhooks"][0]["clientConfig"]
    assert client["service"]["namespace"] == NAMESPACE and "url" not in client, client
    assert client["caBundle"]
    ns = make_namespace(cp, unique("chart"), OPT_IN)
    name = unique("trainer")
    pod = gpu_pod(
        name,
        ns,
        labels=INJECT,
        gpus=1,
        image=SHELL_IMAGE,
        imagePullPolicy="Never",
        command=["sh", "-c", "exec sleep 3600"],
    )
    pod["spec"].update(terminationGracePeriodSeconds=1, tolerations=[TOLERATION])
    proc = create(cp, pod)
    assert proc.returncode == 0, proc.stderr
    got = stored(cp, pod_path(ns, name))
    assert got["metadata"]["annotations"]["rdma-webhook.io/status"] == "injected"
    lines = c.wait_for(
        "the chart's pods logging the admission",
        lambda: [x for x in chart_admissions(cp, ns) if x.get("pod") == name and x.get("endpoint") == "mutate"],
        30,
    )
    assert lines[0]["outcome"] == "mutated" and lines[0]["policy"] == "erdma", lines
    node.wait_pod(ns, name)


# --- operations on the chart's Deployment ------------------------------------------------------------

RATE = 20.0  # labelled pods per second while a replica goes away
PARKED = "e2e-parked"  # a scheduler nobody runs: the pods stay Pending and hold no device


def parked(pod: dict) -> dict:
    """`pod` for a scheduler that does not exist: admitted (or not), stored, never run."""
    pod["spec"].update(schedulerName=PARKED, terminationGracePeriodSeconds=0)
    return pod


class PodStream:
    """Labelled 1-GPU pods created at RATE per second in an opted-in namespace, each POSTed to the
    API server by a pool of threads and recorded with its answer; a pod not created, or created
    without the webhook's mutation, is a failed admission."""

    def __init__(self, cp, namespace: str, rate: float = RATE, prefix: str = "burst"):
        self.cp, self.namespace, self.rate, self.prefix = cp, namespace, rate, prefix
        self.results: list[tuple[float, str, int, str]] = []  # (sent at, pod, HTTP status, outcome)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=24, thread_name_prefix="pod-stream")
        self._thread = threading.Thread(target=self._run, daemon=True, name="pod-stream")
        self.started = 0.0
        self.sent = 0

    def now(self) -> float:
        return time.monotonic() - self.started

    def _one(self, name: str, sent: float) -> None:
        pod = parked(gpu_pod(name, self.namespace, gpus=1))
        try:
            status, data = self.cp.request("POST", f"/api/v1/namespaces/{self.namespace}/pods", pod, timeout=60)
        except Exception as exc:  # the connection itself failed: counted, never raised in a thread
            status, data = 0, str(exc).encode()
        if status == 201:
            annotations = json.loads(data)["metadata"].get("annotations") or {}
            outcome = annotations.get("rdma-webhook.io/status", "not mutated")
        else:
            outcome = data.decode(errors="replace")[:400]
        with self._lock:
            self.results.append((sent, name, status, outcome))

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            due = i / self.rate
            if due > self.now() and self._stop.wait(due - self.now()):
                break
            self._pool.submit(self._one, f"{self.prefix}-{i}", self.now())
            i += 1
        self.sent = i

    def __enter__(self) -> "PodStream":
        self.started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)
        self.duration = self.now()
        self._pool.shutdown(wait=True)

    def failures(self) -> list[tuple[float, str, int, str]]:
        return sorted(r for r in self.results if r[2] != 201 or r[3] != "injected")

    def summary(self) -> str:
        return (
            f"{len(self.results)} labelled pods sent in {self.duration:.1f}s ({len(self.results) / self.duration:.1f}/s), "
            f"{len(self.failures())} not admitted and mutated"
        )


def chart_pods(cp) -> list[dict]:
    return stored(cp, f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={SELECTOR.replace(',', '%2C')}")["items"]


def desired(cp) -> int:
    return stored(cp, f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{FULLNAME}")["spec"]["replicas"]


def settled(cp, timeout: float = 240) -> list[str]:
    """Wait for exactly the Deployment's count of chart pods, all Ready, none terminating; their
    names."""
    replicas = desired(cp)

    def check():
        pods = chart_pods(cp)
        if len(pods) != replicas or any(p["metadata"].get("deletionTimestamp") for p in pods):
            return None
        if not all(
            {x["type"]: x["status"] for x in p["status"].get("conditions", [])}.get("Ready") == "True" for p in pods
        ):
            return None
        return sorted(p["metadata"]["name"] for p in pods)

    return c.wait_for(f"{replicas} chart pods Ready and no other", check, timeout, interval=0.5)


def drop_namespace(cp, ns: str) -> None:
    cp.kubectl("delete", "namespace", ns, "--wait=false")


def test_rollout_restart_while_labelled_pods_are_created(cp, node, chart):
    """`kubectl rollout restart` of the chart's Deployment while labelled pods are created at 20/s:
    every one is admitted and mutated (the chart's maxUnavailable 0, readiness, preStop and
    drain), and afterwards two new replicas serve."""
    before = settled(cp)
    ns = make_namespace(cp, unique("rollout"), OPT_IN)
    try:
        with PodStream(cp, ns) as stream:
            time.sleep(2)
            proc = cp.kubectl("rollout", "restart", f"deployment/{FULLNAME}", "-n", NAMESPACE)
            assert proc.returncode == 0, proc.stderr
            proc = cp.kubectl(
                "rollout", "status", f"deployment/{FULLNAME}", "-n", NAMESPACE, "--timeout=240s", timeout=260
            )
            assert proc.returncode == 0, proc.stderr
            after = settled(cp)  # the old replicas gone too (preStop, drain)
            rolled = stream.now()
            time.sleep(2)
        print(f"rollout restart: {stream.summary()}; replicas replaced after {rolled:.1f}s")
        assert not set(before) & set(after), (before, after)
        assert len(stream.results) >= RATE * stream.duration * 0.9, stream.summary()  # the pace held
        assert stream.failures() == [], f"{stream.summary()}: {stream.failures()[:5]}"
        served = {x["from"] for x in chart_admissions(cp, ns)}
        assert any(name in s for s in served for name in after), (served, after)  # the new replicas took over
    finally:
        drop_namespace(cp, ns)


def test_one_replica_killed_the_other_serves(cp, node, chart):
    """One replica's pod force-deleted (its container killed at once) while labelled pods are
    created at 20/s: every one is admitted and mutated, by the replica left; then the Deployment
    is back to two."""
    names = settled(cp)
    victim, survivor = names[0], names[1:]
    pod = stored(cp, f"/api/v1/namespaces/{NAMESPACE}/pods/{victim}")
    container = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    ns = make_namespace(cp, unique("kill"), OPT_IN)
    try:
        with PodStream(cp, ns) as stream:
            time.sleep(2)
            killed = stream.now()
            proc = cp.kubectl("delete", "pod", victim, "-n", NAMESPACE, "--grace-period=0", "--force")
            assert proc.returncode == 0, proc.stderr
            c.wait_for(
                f"the container of {victim} stopped", lambda: container not in node.running_tasks(), 60, interval=0.3
            )
            stopped = stream.now()
            time.sleep(5)
        print(f"one replica killed: {stream.summary()}; its container stopped {stopped - killed:.1f}s after the delete")
        after = [r for r in stream.results if r[0] >= killed]
        assert len(after) >= RATE * 5, stream.summary()
        assert stream.failures() == [], f"{stream.summary()}: {stream.failures()[:5]}"
        later = {r[1] for r in stream.results if r[0] >= stopped}
        by = {x["from"] for x in chart_admissions(cp, ns) if x.get("pod") in later}
        assert any(name in s for s in by for name in survivor), (survivor, by)  # the replica left served them
    finally:
        drop_namespace(cp, ns)
        settled(cp)  # the Deployment's replacement Ready: two replicas for the next test


def test_both_replicas_down(cp, node, chart):
    """The Deployment scaled to 0: a labelled pod in an opted-in namespace is refused (the
    mutating webhook's failurePolicy Fail); an unlabelled pod there, a labelled pod in a namespace
    not opted in, a labelled pod in kube-system (opted in for the test: excluded by name) and a
    Job (the workload check fails open) are created. Scaled back, labelled pods are admitted."""
    settled(cp)
    replicas = desired(cp)
    opted, other = make_namespace(cp, unique("down"), OPT_IN), make_namespace(cp, unique("down-other"))
    system_pod = unique("down-system")
    proc = cp.kubectl("scale", f"deployment/{FULLNAME}", "-n", NAMESPACE, "--replicas=0")
    assert proc.returncode == 0, proc.stderr
    try:
        c.wait_for("no chart pod left", lambda: not chart_pods(cp), 120, interval=0.5)
        refused = create(cp, parked(gpu_pod("refused", opted, gpus=1)))
        assert refused.returncode != 0, refused.stdout
        assert 'failed calling webhook "pods.mutate.rdma-webhook.io"' in refused.stderr, refused.stderr
        assert FULLNAME in refused.stderr, refused.stderr  # the chart's Service has no endpoint
        print(f"both replicas down, a labelled pod in an opted-in namespace: {refused.stderr.strip()}")
        assert cp.get(pod_path(opted, "refused")) is None

        admitted = {
            "unlabelled pod, opted-in namespace": parked(gpu_pod("unlabelled", opted, labels={"app": "x"}, gpus=1)),
            "labelled pod, namespace not opted in": parked(gpu_pod("elsewhere", other, gpus=1)),
            "labelled pod, kube-system opted in": parked(gpu_pod(system_pod, "kube-system", gpus=1)),
        }
        cp.kubectl(
            "label", "namespace", "kube-system", *[f"{k}={v}" for k, v in OPT_IN.items()], "--overwrite", check=True
        )
        for what, pod in admitted.items():
            proc = create(cp, pod)
            assert proc.returncode == 0, f"{what}: {proc.stderr}"
            got = json.loads(proc.stdout)
            assert "rdma-webhook.io/status" not in (got["metadata"].get("annotations") or {}), (what, got["metadata"])
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "during-outage", "namespace": opted},
            "spec": {
                "suspend": True,
                "template": {
                    "metadata": {"labels": INJECT},
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": SHELL_IMAGE}]},
                },
            },
        }
        proc = cp.kubectl("create", "-f", "-", input=json.dumps(job))
        assert proc.returncode == 0, f"the workload check must fail open: {proc.stderr}"
    finally:
        cp.kubectl("label", "namespace", "kube-system", *[f"{k}-" for k in OPT_IN])
        cp.kubectl("delete", "pod", system_pod, "-n", "kube-system", "--ignore-not-found", "--wait=false")
        cp.kubectl("scale", f"deployment/{FULLNAME}", "-n", NAMESPACE, f"--replicas={replicas}", check=True)
        settled(cp)
    try:
        back = create(cp, parked(gpu_pod("after", opted, gpus=1)))
        assert back.returncode == 0, back.stderr
        assert json.loads(back.stdout)["metadata"]["annotations"]["rdma-webhook.io/status"] == "injected"
        c.wait_for(
            "the chart's pods logging the admission",
            lambda: [x for x in chart_admissions(cp, opted) if x.get("pod") == "after"],
            30,
        )
    finally:
        drop_namespace(cp, opted)
        drop_namespace(cp, other)
