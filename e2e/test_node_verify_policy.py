"""What the policy says of a job's NCCL log, on the real node (after e2e/test_node_verify.py):

- rails: under the shipped sriov-roce-8rail (eight SR-IOV rails through Multus, one VF each: the
  namespace has the eight NetworkAttachmentDefinitions it names, the node's fake device plugin
  advertises every rail's resource), a pod whose real log shows NCCL on one RoCE NIC
  (NVIDIA/nccl#1052, `NET/IB : Using [0]mlx5_4:1/RoCE`) gets False with reason FewerRails, its
  Warning Event and the metric; a pod whose real log lists eight HCAs (Azure/aks-rdma-infiniband#30)
  gets True beside it;
- `proof.onFallback: fail`: a verifier given the shipped policies with this one section added to
  ib-shared (the test's folder: the admission is the shipped policy's, the proof section is read by
  the verifier alone) evicts, through the Eviction API and with exactly deploy/verifier/rbac.yaml,
  the pod whose real log falls back to NET/Socket, and neither the pod whose log proves IB with
  GPUDirect RDMA nor the one whose log shows GDR off (degraded is never a reason to kill).

The logs are tests/proof/nccl-logs/ excerpts (sources in SOURCES.yaml), mounted and `cat` by the
container; the expected condition of each is also what the library says of the file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from e2e import cluster as c
from e2e.conftest import OPT_IN, create, make_namespace, stored, unique
from e2e.test_node_verify import (
    CONDITION,
    ROOT,
    WINDOW,
    _pod,
    condition_of,
    events_of,
    library_condition,
    logs_config_map,
    metrics_of,
    running_verifier,
)

RESOURCE = "k8s.v1.cni.cncf.io/resourceName"
RAILS = "sriov-roce-8rail"
ONE_NIC = "nccl-1052-roce-2.18.log"
EIGHT_HCAS = "aks-rdma-infiniband-30-mpijob-8rail-2.25.log"


def rail_nad(namespace: str, rail: int) -> dict:
    """The rail's NAD as the SR-IOV network operator makes it from a SriovNetwork (its resource
    in the resourceName annotation, the sriov CNI): the policy's networks[rail]."""
    name = f"rdma-rail-{rail}"
    return {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": name, "namespace": namespace, "annotations": {RESOURCE: f"nvidia.com/rdma_rail_{rail}"}},
        "spec": {"config": json.dumps({"cniVersion": "0.3.1", "type": "sriov", "name": name})},
    }


def wait_conditions(cp, namespace: str, names: list[str]) -> dict[str, dict]:
    def found():
        got = {name: condition_of(cp, namespace, name) for name in names}
        return got if all(got.values()) else None

    return c.wait_for(f"the TransportVerified condition of {names}", found, WINDOW + 120)


def test_fewer_rails_than_the_policy_promised_is_false_fewer_rails(cp, hook, node, workdir):
    namespace = make_namespace(cp, unique("verify-rails"), {**OPT_IN, "rdma-webhook.io/policy": RAILS})
    for rail in range(8):
        assert create(cp, rail_nad(namespace, rail)).returncode == 0
    assert create(cp, logs_config_map(namespace, {ONE_NIC, EIGHT_HCAS})).returncode == 0
    probe = _pod(unique("probe"), namespace, ONE_NIC, {})
    c.wait_for(
        "the webhook sees the eight rails' NADs",
        lambda: create(cp, probe, "--dry-run=server").returncode == 0,
        60,
        interval=0.5,
    )
    with running_verifier(cp, workdir, namespace, name="verifier-rails") as (proc, port):
        for name, log in (("one-nic", ONE_NIC), ("eight-hcas", EIGHT_HCAS)):
            made = create(cp, _pod(name, namespace, log, {}))
            assert made.returncode == 0, made.stderr
            pod = json.loads(made.stdout)
            limits = pod["spec"]["containers"][0]["resources"]["limits"]
            assert {f"nvidia.com/rdma_rail_{i}" for i in range(8)} <= set(limits), limits  # admitted with 8 rails
            assert pod["metadata"]["labels"]["rdma-webhook.io/applied-policy"] == RAILS
        found = wait_conditions(cp, namespace, ["one-nic", "eight-hcas"])
        got = (found["one-nic"]["status"], found["one-nic"]["reason"])
        assert got == ("False", "FewerRails") == library_condition(ONE_NIC, RAILS), found["one-nic"]
        assert "degraded (FewerRails)" in found["one-nic"]["message"], found["one-nic"]
        assert "1 NIC(s), expected 8" in found["one-nic"]["message"], found["one-nic"]
        assert (found["eight-hcas"]["status"], found["eight-hcas"]["reason"]) == ("True", "Verified"), found
        assert library_condition(EIGHT_HCAS, RAILS) == ("True", "Verified")

        events = c.wait_for("both Events", lambda: (lambda e: e if len(e) >= 2 else None)(events_of(cp, namespace)), 60)
        by_pod = {e["regarding"]["name"]: e for e in events}
        assert by_pod["one-nic"]["type"] == "Warning" and by_pod["one-nic"]["reason"] == "TransportFewerRails"
        assert "expected 8" in by_pod["one-nic"]["note"], by_pod["one-nic"]
        samples = metrics_of(port)
        labels = (("policy", RAILS), ("reason", "FewerRails"), ("verdict", "degraded"))
        assert samples[("rdma_webhook_transport_verdicts_total", labels)] == 1
        # report, the default: the pod runs on
        assert stored(cp, f"/api/v1/namespaces/{namespace}/pods/one-nic")["status"]["phase"] == "Running"
        assert proc.alive(), proc.tail()
    cp.kubectl("delete", "namespace", namespace, "--wait=false")


def _fail_policies(workdir: Path) -> Path:
    """The shipped policies, ib-shared with `proof: {onFallback: fail}` added (nothing else)."""
    folder = workdir / "verify-fail-policies"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(ROOT / "policies", folder)
    path = folder / "ib-shared.yaml"
    path.write_text(path.read_text() + "proof:\n  onFallback: fail\n")
    return folder


def test_on_fallback_fail_evicts_the_pod_on_tcp_and_no_other(cp, hook, node, workdir):
    folder = _fail_policies(workdir)
    namespace = make_namespace(cp, unique("verify-fail"), {**OPT_IN, "rdma-webhook.io/policy": "ib-shared"})
    cases = {
        "socket": ("pytorch-72835-lo-socket-2.10.3.log", ("False", "NetSocket")),
        "ib-gdr": ("nccl-707-gdrdma-channels.log", ("True", "Verified")),
        "gdr-off": ("nccl-392-gdr-off-2.5.7.log", ("False", "GdrDisabled")),
    }
    for _, (log, named) in cases.items():
        assert library_condition(log, "ib-shared", folder) == named
    assert create(cp, logs_config_map(namespace, {log for log, _ in cases.values()})).returncode == 0
    with running_verifier(cp, workdir, namespace, policies=folder, name="verifier-fail") as (proc, port):
        for name, (log, _) in cases.items():
            made = create(cp, _pod(name, namespace, log, {}))
            assert made.returncode == 0, made.stderr

        # the socket pod: its Warning says it is being evicted, then it is gone
        def evicted_event():
            return next((e for e in events_of(cp, namespace) if e["regarding"]["name"] == "socket"), None)

        event = c.wait_for("the socket pod's Event", evicted_event, WINDOW + 120)
        assert event["type"] == "Warning" and event["reason"] == "TransportNetSocket" and event["action"] == "Evict"
        assert event["note"].startswith("evicting the pod (policy ib-shared: proof.onFallback fail)"), event
        c.wait_for(
            "the socket pod evicted",
            lambda: cp.request("GET", f"/api/v1/namespaces/{namespace}/pods/socket")[0] == 404,
            60,
            interval=0.5,
        )
        found = wait_conditions(cp, namespace, ["ib-gdr", "gdr-off"])
        for name in ("ib-gdr", "gdr-off"):
            assert (found[name]["status"], found[name]["reason"]) == cases[name][1], found[name]
        samples = metrics_of(port)
        assert samples[("rdma_webhook_log_reads_total", (("result", "evicted"),))] == 1
        assert samples[("rdma_webhook_log_reads_total", (("result", "read"),))] == len(cases)
        # through the Eviction API, by the verifier's own ServiceAccount, once; no delete
        cost = c.audit_requests(cp.audit_log, c.AUDITED[0], namespace)
        assert cost[("create", "pods", "eviction")] == 1, cost
        assert cost[("delete", "pods", "")] == 0, cost
        for name in ("ib-gdr", "gdr-off"):
            pod = stored(cp, f"/api/v1/namespaces/{namespace}/pods/{name}")
            assert pod["status"]["phase"] == "Running" and "deletionTimestamp" not in pod["metadata"], pod["status"]
            assert any(x["type"] == CONDITION for x in pod["status"]["conditions"])
        assert proc.alive(), proc.tail()
    cp.kubectl("delete", "namespace", namespace, "--wait=false")


def test_on_fallback_fail_leaves_a_pod_its_disruption_budget_protects(cp, hook, node, workdir):
    """The eviction goes through the Eviction API so that a PodDisruptionBudget holds: a pod on
    Socket that a budget (minAvailable 1) protects is refused (429) and keeps running, with its
    condition False/NetSocket; a second Warning Event (EvictionRefused) says it was not evicted and
    why, and the metric counts it apart from the evictions."""
    folder = _fail_policies(workdir)
    namespace = make_namespace(cp, unique("verify-pdb"), {**OPT_IN, "rdma-webhook.io/policy": "ib-shared"})
    log = "pytorch-72835-lo-socket-2.10.3.log"
    assert create(cp, logs_config_map(namespace, {log})).returncode == 0
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "guarded", "namespace": namespace},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
    }
    assert create(cp, budget).returncode == 0
    with running_verifier(cp, workdir, namespace, policies=folder, name="verifier-pdb") as (proc, port):
        pod = _pod("guarded", namespace, log, {})
        pod["metadata"]["labels"]["app"] = "guarded"
        made = create(cp, pod)
        assert made.returncode == 0, made.stderr

        def refused():
            return next((e for e in events_of(cp, namespace) if e["reason"] == "EvictionRefused"), None)

        event = c.wait_for("the EvictionRefused Event", refused, WINDOW + 120)
        assert event["type"] == "Warning" and event["regarding"]["name"] == "guarded", event
        assert event["note"].startswith("not evicted (policy ib-shared: proof.onFallback fail)"), event
        assert "disruption budget" in event["note"], event
        cost = c.audit_requests(cp.audit_log, c.AUDITED[0], namespace, "guarded")
        assert cost[("create", "pods", "eviction")] == 1 and cost[("delete", "pods", "")] == 0, cost
        got = stored(cp, f"/api/v1/namespaces/{namespace}/pods/guarded")
        assert got["status"]["phase"] == "Running" and "deletionTimestamp" not in got["metadata"], got["status"]
        condition = next(x for x in got["status"]["conditions"] if x["type"] == CONDITION)
        assert (condition["status"], condition["reason"]) == ("False", "NetSocket"), condition
        samples = metrics_of(port)
        assert samples[("rdma_webhook_log_reads_total", (("result", "eviction-refused"),))] == 1
        assert samples.get(("rdma_webhook_log_reads_total", (("result", "evicted"),)), 0) == 0
        assert proc.alive(), proc.tail()
    cp.kubectl("delete", "namespace", namespace, "--wait=false")
