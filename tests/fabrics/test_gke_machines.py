"""GKE's machine types (issue 42, "a policy written for one machine type"): the A3 High TCPX pod,
the A4X gIB workers (a JobSet selecting the GB200 accelerator, a LeaderWorkerSet choosing it by
node affinity) and the A3 Mega, A3 Ultra and A4 pods, each under the policies that know its type:
the fabric of its own node and nothing of another (no vpc5..vpc8 or FasTrak on A3 High, no
rdma-4..rdma-7 on A4X), through /mutate (every patch applied to the pod as sent, a second pass
empty) and through `rdma-webhook review` as CI runs it.

The manifests (tests/manifests-gke/) name the public examples they are modelled on.
"""

from __future__ import annotations

import base64
import copy
import json
import subprocess
import sys

import pytest
import yaml

from core.test_decision import mutate_twice, respond
from fabrics.test_gke import MANIFESTS, ROOT, _as_sent, env_of, gke_entries, gpu_container, ns, pods_of
from webhook.core import keys, machines
from webhook.core.decision import check_final, decide

VPC = [f"vpc{i}" for i in range(1, 9)]
RDMA = [f"rdma-{i}" for i in range(8)]
ACCEL = "cloud.google.com/gke-accelerator"


# A pod that lists no GKE network and sets no NCCL variable: nothing but its node affinity says it
# is GKE's, so it is judged under the GKE policies only (not beside tests/manifests-gke/'s, which
# every policy of the catalogue judges).
LWS = MANIFESTS.parent / "manifests-gke-machines"


def lws_pods(file: str) -> list[dict]:
    """A LeaderWorkerSet's worker pods as the API server sends them (StatefulSet pods: named)."""
    out = []
    for doc in yaml.safe_load_all((LWS / file).read_text()):
        lws = doc["metadata"]["name"]
        for i in range(1, doc["spec"]["leaderWorkerTemplate"]["size"]):
            out.append(
                _as_sent(
                    doc["spec"]["leaderWorkerTemplate"]["workerTemplate"],
                    name=f"{lws}-0-{i}",
                    labels={
                        "leaderworkerset.sigs.k8s.io/name": lws,
                        "leaderworkerset.sigs.k8s.io/group-index": "0",
                        "leaderworkerset.sigs.k8s.io/worker-index": str(i),
                    },
                )
            )
    return out


def networks(pod: dict) -> list[str]:
    return [e["network"] for e in gke_entries(pod)]


# -- A3 High: GPUDirect-TCPX, four GPU NICs ------------------------------------------------------


def test_a3_high_gets_tcpx_on_its_four_nics_under_the_gke_policy(policies):
    for pod in pods_of("a3high-tcpx-pods.yaml"):
        _, out, d = mutate_twice(pod, ns("gke"), policies)
        assert d.outcome == "mutated" and d.warnings == [], d.warnings
        assert networks(out) == ["default", "vpc1", "vpc2", "vpc3", "vpc4"]  # the pod's own, nothing added
        env = env_of(gpu_container(out))
        assert env["NCCL_NET"] == "GPUDirectTCPX_v7"
        assert env["NCCL_GPUDIRECTTCPX_SOCKET_IFNAME"] == "eth1,eth2,eth3,eth4"
        assert env["NCCL_GPUDIRECTTCPX_CTRL_DEV"] == env["NCCL_SOCKET_IFNAME"] == "eth0"
        assert not any(name.startswith("NCCL_FASTRAK") for name in env)
        assert out["spec"].get("affinity") is None  # the pod chose its type
        assert check_final(out, ns("gke"), policies).allowed


def test_a3_high_is_refused_by_the_a3_mega_policy_naming_the_one_that_fits(policies):
    """The issue's symptom: gke-tcpxo gave this pod vpc5..vpc8 and NCCL_NET=FasTrak."""
    for pod in pods_of("a3high-tcpx-pods.yaml"):
        resp, out, d = respond(pod, ns("gke-tcpxo"), policies)
        assert not resp["allowed"] and out == pod
        assert [f.rule for f in d.denials] == ["machine-type"]
        message = d.denials[0].message
        assert f"its nodeSelector {ACCEL}=nvidia-h100-80gb is a node of none of its machine types" in message
        assert f"a3-mega ({ACCEL}=nvidia-h100-mega-80gb" in message
        assert f"{keys.POD_POLICY}: gke" in message


def test_tcpx_fallbacks_of_the_a3_high_type(policies):
    pod = pods_of("a3high-tcpx-pods.yaml")[0]
    for line, rule in [("NCCL_NET=FasTrak", "command-fallback"), ("NCCL_NET_PLUGIN=none", "command-fallback")]:
        bad = copy.deepcopy(pod)
        bad["spec"]["containers"][1]["command"] = ["/bin/sh", "-c", f"export {line}; /scripts/run-allgather.sh"]
        d = decide(bad, ns("gke"), policies)
        assert rule in [f.rule for f in d.denials], (line, d.denials)
    warned = copy.deepcopy(pod)
    warned["spec"]["containers"][1]["env"].append({"name": "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME", "value": "eth0"})
    d = decide(warned, ns("gke"), policies)
    assert d.allowed and any(
        "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME='eth0' names only the pod network" in w for w in d.warnings
    )


def test_a3_high_without_its_sidecar_is_refused(policies):
    pod = pods_of("a3high-tcpx-pods.yaml")[0]
    pod["spec"]["containers"] = pod["spec"]["containers"][1:]
    d = decide(pod, ns("gke"), policies)
    assert "sidecar-missing" in [f.rule for f in d.denials]
    assert any("tcpx-daemon" in f.message for f in d.denials)


# -- A4X: gIB, four RDMA NICs ---------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["gke", "gke-gib"])
def test_a4x_workers_get_four_rdma_networks(policy, policies):
    for pod in pods_of("a4x-gib-jobset.yaml") + lws_pods("a4x-decode-lws.yaml"):
        _, out, d = mutate_twice(pod, ns(policy), policies)
        assert d.outcome == "mutated", d
        assert networks(out) == ["default", "rdma-0", "rdma-1", "rdma-2", "rdma-3"]
        assert [e["interfaceName"] for e in gke_entries(out)] == ["eth0", "eth2", "eth3", "eth4", "eth5"]
        assert env_of(gpu_container(out))["NCCL_NET"] == "gIB"
        assert out["spec"].get("affinity") == pod["spec"].get("affinity")
        assert check_final(out, ns(policy), policies).allowed


def test_a4x_is_refused_by_the_a3_mega_policy(policies):
    pod = lws_pods("a4x-decode-lws.yaml")[0]
    d = decide(pod, ns("gke-tcpxo"), policies)
    assert [f.rule for f in d.denials] == ["machine-type"]
    assert f"asks for {ACCEL} in nvidia-gb200, a node of none of its machine types" in d.denials[0].message
    assert f"{keys.POD_POLICY}: gke or {keys.POD_POLICY}: gke-gib" in d.denials[0].message


# -- the existing manifests under the combined policy ------------------------------------------


@pytest.mark.parametrize(
    "file, want, net",
    [
        ("a3mega-tcpxo-job.yaml", VPC, "FasTrak"),
        ("a3ultra-gib-pods.yaml", ["gvnic-1", *RDMA], "gIB"),
        ("a4-gib-jobset.yaml", RDMA, "gIB"),
    ],
)
def test_every_gke_machine_type_under_the_combined_policy(file, want, net, policies):
    for pod in pods_of(file):
        _, out, d = mutate_twice(pod, ns("gke"), policies)
        assert d.outcome == "mutated" and d.policy == "gke"
        assert networks(out) == ["default", *want]
        assert env_of(gpu_container(out))["NCCL_NET"] == net


# -- a pod that names no machine type ------------------------------------------------------------


def test_unselected_pods_get_each_policys_documented_behaviour(policies):
    pod = pods_of("a4-gib-jobset.yaml")[0]
    del pod["spec"]["nodeSelector"]
    # gke and gke-gib: A3 Ultra and A4's eight NICs, and a required node affinity to their nodes
    for policy in ("gke", "gke-gib"):
        _, out, d = mutate_twice(pod, ns(policy), policies)
        assert networks(out) == ["default", *RDMA]
        terms = out["spec"]["affinity"]["nodeAffinity"][machines.AFFINITY_KEY]["nodeSelectorTerms"]
        want = {"key": ACCEL, "operator": "In", "values": ["nvidia-h200-141gb", "nvidia-b200"]}
        assert terms == [{"matchExpressions": [want]}]
        assert check_final(out, ns(policy), policies).allowed
    # gke-tcpxo: A3 Mega's, pinned to A3 Mega nodes
    mega = pods_of("a3mega-tcpxo-job.yaml")[0]
    del mega["spec"]["nodeSelector"]
    _, out, d = mutate_twice(mega, ns("gke-tcpxo"), policies)
    terms = out["spec"]["affinity"]["nodeAffinity"][machines.AFFINITY_KEY]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": ACCEL, "operator": "In", "values": ["nvidia-h100-mega-80gb"]}]}]


# -- rdma-webhook review, as CI runs it -----------------------------------------------------------


def review(file: str, policy: str, output: str = "json") -> subprocess.CompletedProcess:
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "ml-training", "labels": dict(ns(policy).labels)},
    }
    path = MANIFESTS / file if (MANIFESTS / file).exists() else LWS / file
    text = yaml.safe_dump(namespace) + "---\n" + path.read_text()
    return subprocess.run(
        [sys.executable, "-m", "webhook", "review", "--policies", str(ROOT / "policies"), "--output", output, "-"],
        input=text,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def records(proc: subprocess.CompletedProcess) -> list[dict]:
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


@pytest.mark.parametrize(
    "file, fits, refuses",
    [
        ("a3high-tcpx-pods.yaml", ["gke"], ["gke-tcpxo", "gke-gib"]),
        ("a4x-gib-jobset.yaml", ["gke", "gke-gib"], ["gke-tcpxo"]),
        ("a4x-decode-lws.yaml", ["gke", "gke-gib"], ["gke-tcpxo"]),
    ],
)
def test_review_cli(file, fits, refuses):
    for policy in fits:
        ok = review(file, policy)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        judged = [r for r in records(ok) if r["kind"] not in ("Namespace",)]
        assert judged and all(r["outcome"] == "mutated" for r in judged), judged
    for policy in refuses:
        bad = review(file, policy)
        assert bad.returncode == 1, bad.stdout + bad.stderr
        denied = [r for r in records(bad) if r["outcome"] == "denied"]
        assert denied and all("machine-type" in r["rules"] for r in denied), denied
        assert all(f"{keys.POD_POLICY}: {fits[0]}" in " ".join(r["messages"]) for r in denied), denied


def test_review_answers_the_a3_high_pods_with_the_tcpx_patch():
    """`--output review`: the AdmissionReview answer /mutate gives, its patch applied to the pod."""
    proc = review("a3high-tcpx-pods.yaml", "gke", output="review")
    assert proc.returncode == 0, proc.stderr
    answers, text, decoder = [], proc.stdout.strip(), json.JSONDecoder()
    while text:
        answer, end = decoder.raw_decode(text)
        answers.append(answer)
        text = text[end:].strip()
    sent = pods_of("a3high-tcpx-pods.yaml")
    assert len(answers) == len(sent)
    for answer in answers:
        ops = json.loads(base64.b64decode(answer["response"]["patch"]))
        assert answer["response"]["allowed"]
        patch = json.dumps(ops)
        assert "vpc5" not in patch and "rdma-0" not in patch and "FASTRAK" not in patch
        assert '"GPUDirectTCPX_v7"' in patch and "eth1,eth2,eth3,eth4" in patch
