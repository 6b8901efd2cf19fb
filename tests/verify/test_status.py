"""webhook/verify/status.py: the verdicts per job, from stored pods (the webhook's own mutated pods
with a kubelet's status, tests/verify/test_starts.py) carrying the conditions the verifier writes
(webhook.verify.report on real NCCL log excerpts)."""

from __future__ import annotations

import copy
from pathlib import Path

from webhook.proof import nccl_log
from webhook.proof.expectation import expectation
from webhook.proof.verdict import judge
from webhook.verify import report, status
from webhook.verify.starts import starts

from tests.verify.test_starts import IB, PS, admitted, running, trainer

LOGS = Path(__file__).parents[1] / "proof" / "nccl-logs"


def verified_pod(name: str, owner: str | None, log: str | None) -> dict:
    pod = running(admitted(trainer()), "trainer")
    pod["metadata"]["name"], pod["metadata"]["uid"] = name, "uid-" + name
    if owner:
        pod["metadata"]["ownerReferences"] = [
            {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": owner, "uid": "j", "controller": True}
        ]
    if log:
        with open(LOGS / log, "rb") as f:
            verdict = judge(nccl_log.read_stream(f), expectation(PS.by_name["ib-shared"]))
        patch = report.condition_patch(starts(pod)[0], verdict, "2026-12-07T16:00:00.000000Z")
        pod["status"].setdefault("conditions", []).extend(patch["status"]["conditions"])
    return pod


def test_a_job_is_as_bad_as_its_worst_pod_and_says_why():
    pods = [
        verified_pod("llama-0", "llama", "nccl-302-ib-2.5.6.log"),
        verified_pod("llama-1", "llama", "nccl-1410-k8s-verbs-missing.log"),
        verified_pod("llama-2", "llama", None),
        verified_pod("bert-0", "bert", "nccl-302-ib-2.5.6.log"),
        verified_pod("solo", None, "nccl-1652-tcpx-warn-only.log"),
    ]
    found = {(j.kind, j.name): j for j in status.jobs(pods, {IB})}
    llama = found[("PyTorchJob", "llama")]
    assert llama.verdict == "False" and llama.counts == {"True": 1, "False": 1, "Unknown": 0, "pending": 1}
    assert llama.reasons == ["NetSocket"] and llama.policies == ["ib-shared"]
    assert found[("PyTorchJob", "bert")].verdict == "True"
    assert found[("Pod", "solo")].verdict == "Unknown" and found[("Pod", "solo")].reasons == ["Unverifiable"]
    text = status.table(status.jobs(pods, {IB}))
    lines = text.splitlines()
    assert lines[0].split() == [
        "NAMESPACE",
        "KIND",
        "NAME",
        "POLICY",
        "VERDICT",
        "TRUE",
        "FALSE",
        "UNKNOWN",
        "PENDING",
        "REASONS",
    ]
    assert any(line.split()[:5] == [IB, "PyTorchJob", "llama", "ib-shared", "False"] for line in lines)


def test_only_opted_in_namespaces_and_mutated_pods_count():
    pod = verified_pod("p", "llama", "nccl-302-ib-2.5.6.log")
    assert status.jobs([pod], {"other"}) == []
    unmutated = copy.deepcopy(pod)
    del unmutated["metadata"]["labels"]["rdma-webhook.io/applied-policy"]
    assert status.jobs([unmutated, None, {"metadata": 1}, "x"], {IB}) == []
    assert [j.to_json()["verdict"] for j in status.jobs([pod], None)] == ["True"]
