"""webhook/verify/report.py: what a verdict writes, from real NCCL log excerpts
(tests/proof/nccl-logs/, sources in SOURCES.yaml) read against the shipped policies. That the
API server merges the condition by type and keeps the kubelet's: e2e, on the real node."""

from __future__ import annotations

from pathlib import Path

from webhook.policy.load import load_dir
from webhook.proof import nccl_log
from webhook.proof.expectation import expectation
from webhook.proof.verdict import SEVERITY, judge
from webhook.verify import report
from webhook.verify.starts import Start

from conftest import POLICIES

LOGS = Path(__file__).parents[1] / "proof" / "nccl-logs"
PS, _ = load_dir(POLICIES)
OWNER = ("kubeflow.org/v1", "PyTorchJob", "llama")
START = Start("ml", "llama-worker-0", "uid-1", "pytorch", "containerd://abc", "ib-shared", "node-1", OWNER)


def verdict_of(name: str, policy: str = "ib-shared"):
    with open(LOGS / name, "rb") as f:
        return judge(nccl_log.read_stream(f), expectation(PS.by_name[policy]))


def test_the_condition_says_what_nccl_uses_and_what_was_promised():
    patch = report.condition_patch(START, verdict_of("nccl-1410-k8s-verbs-missing.log"), "2026-12-07T16:00:00.000000Z")
    [c] = patch["status"]["conditions"]
    assert (c["type"], c["status"], c["reason"]) == ("rdma-webhook.io/TransportVerified", "False", "NetSocket")
    assert c["message"].startswith("container pytorch of pod llama-worker-0 (policy ib-shared): NCCL uses socket")
    assert "fallback (NetSocket" in c["message"] and "expected ib-verbs" in c["message"]
    ok = report.condition_patch(START, verdict_of("nccl-302-ib-2.5.6.log"), "t")["status"]["conditions"][0]
    assert (ok["status"], ok["reason"]) == ("True", "Verified") and "verified against ib-verbs" in ok["message"]
    assert "mlx5_0" in ok["message"]


def test_events_go_to_the_pod_and_its_controller_and_fit_the_api_limit():
    verdict = verdict_of("nccl-367-ring-via-socket.log")
    pod_event, job_event = report.events(START, verdict, "2026-12-07T16:00:00.000000Z")
    assert pod_event["regarding"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "llama-worker-0",
        "namespace": "ml",
        "uid": "uid-1",
    }
    assert job_event["regarding"]["kind"] == "PyTorchJob" and job_event["related"] == pod_event["regarding"]
    for event in (pod_event, job_event):
        assert event["type"] == "Warning" and event["reason"] == "TransportNetSocket"
        assert event["reportingController"] == "rdma-webhook.io/verifier" and len(event["note"]) <= 1024
        assert (
            event["metadata"]["namespace"] == "ml"
            and event["metadata"]["generateName"] == event["regarding"]["name"] + "-"
        )
    no_owner = Start("ml", "p", "u", "c", "id", "ib-shared", "n", None)
    assert len(report.events(no_owner, verdict, "t")) == 1


def test_the_metric_labels_are_bounded_names():
    for name in ("nccl-302-ib-2.5.6.log", "nccl-1652-tcpx-warn-only.log", "nccl-1737-completion-err5.log"):
        policy, verdict, reason = report.metric_labels(START, verdict_of(name))
        assert policy == "ib-shared" and verdict in SEVERITY and reason.isalnum()


def test_a_refused_eviction_is_a_warning_on_the_pod_within_the_api_limit():
    error = "HTTP 429: " + '{"message":"Cannot evict pod as it would violate the pod\'s disruption budget."}' * 40
    event = report.eviction_refused(START, error, "2026-12-07T16:00:00.000000Z")
    assert (event["type"], event["reason"], event["action"]) == ("Warning", "EvictionRefused", "Evict")
    assert event["regarding"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "llama-worker-0",
        "namespace": "ml",
        "uid": "uid-1",
    }
    assert event["metadata"] == {"generateName": "llama-worker-0-", "namespace": "ml"}
    assert event["note"].startswith("not evicted (policy ib-shared: proof.onFallback fail): the API server refused")
    assert "disruption budget" in event["note"] and len(event["note"]) == report.MAX_NOTE
