"""HCA name families (issue 42): CoreWeave's ibpN HCAs (its documented NCCL_IB_HCA=ibp) and the
ConnectX-8 rocep..._dma devices of GB200/GB300 trays, which the policies name as `ibp*` and
`rocep*` (webhook/grammar/nccl.py: a family is kept by a member or by a prefix that covers it).
CoreWeave's job is no longer a false TCP-fallback denial under the policy that takes its rdma/ib
as its own, and is served as is by coreweave-ib; the GB200 pod with its own DRANET claim is served
by gb200-roce and still denied under the mlx5-only roce-dranet. Through /mutate (every patch
applied to the pod as sent) and `rdma-webhook review` on the manifests of tests/manifests-hca/."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import kube_objects as k
from core.test_decision import mutate_twice, respond
from webhook.cluster.state import ClaimStore
from webhook.core import keys
from webhook.core.decision import Namespace

ROOT = Path(__file__).resolve().parent.parent.parent
MANIFESTS = ROOT / "tests" / "manifests-hca"


def ns(policy: str) -> Namespace:
    return Namespace(
        "ml-training",
        {"kubernetes.io/metadata.name": "ml-training", keys.NS_INJECTION: "enabled", keys.NS_POLICY: policy},
    )


def env_of(c: dict) -> dict:
    return {e["name"]: e.get("value") for e in c.get("env") or ()}


def docs(file: str) -> list[dict]:
    return list(yaml.safe_load_all((MANIFESTS / file).read_text()))


def coreweave_pods() -> tuple[dict, dict]:
    """The MPIJob's launcher and a worker as mpi-operator creates them (launcher by generateName,
    workers named), defaulted as the API server sends them."""
    (job,) = docs("coreweave-ib-mpijob.yaml")
    name = job["metadata"]["name"]
    out = []
    for role in ("Launcher", "Worker"):
        tmpl = job["spec"]["mpiReplicaSpecs"][role]["template"]
        labels = {
            "training.kubeflow.org/job-name": name,
            "training.kubeflow.org/job-role": role.lower(),
            "training.kubeflow.org/operator-name": "mpi-operator",
        }
        spec = dict(tmpl["spec"])
        containers, volumes = spec.pop("containers"), spec.pop("volumes", None)
        if role == "Launcher":
            out.append(
                k.pod(containers, namespace="ml-training", generate_name=f"{name}-launcher-", labels=labels, **spec)
            )
        else:
            out.append(
                k.pod(
                    containers,
                    namespace="ml-training",
                    name=f"{name}-worker-0",
                    generate_name=None,
                    labels={**labels, "training.kubeflow.org/replica-index": "0"},
                    volumes=volumes,
                    **spec,
                )
            )
    return out[0], out[1]


@pytest.mark.parametrize("policy", ["coreweave-ib", "ib-shared"])
def test_coreweaves_ibp_hcas_are_not_a_fallback(policy, policies):
    launcher, worker = coreweave_pods()
    _, out, d = mutate_twice(launcher, ns(policy), policies)
    assert d.allowed and not any("NCCL_IB_HCA" in f.message for f in d.denials), d.denials
    _, out, d = mutate_twice(worker, ns(policy), policies)
    assert d.outcome == "mutated" and d.policy == policy
    c = out["spec"]["containers"][0]
    # its own rdma/ib is the fabric's device: no second device
    assert str(c["resources"]["limits"]["rdma/ib"]) == "1" and set(c["resources"]["limits"]) == {
        "memory",
        "nvidia.com/gpu",
        "rdma/ib",
    }
    env = env_of(c)
    assert env["NCCL_NET"] == "IB"
    if policy == "coreweave-ib":
        assert env["NCCL_IB_HCA"] == "ibp" and env["NCCL_SOCKET_IFNAME"] == "eth0"


def test_a_user_hca_outside_the_family_is_still_denied(policies):
    worker = coreweave_pods()[1]
    worker["spec"]["containers"][0]["env"] = [{"name": "NCCL_IB_HCA", "value": "mlx5"}]
    _, _, d = respond(worker, ns("coreweave-ib"), policies)
    assert [f.rule for f in d.denials] == ["env-fallback"]
    assert (
        "NCCL_IB_HCA='mlx5' selects none of the coreweave-ib policy's infiniband fabric's devices (ibp*"
        in d.denials[0].message
    )


def gb200_pod_and_claims() -> tuple[dict, ClaimStore]:
    items = docs("gb200-roce-dranet.yaml")
    store = ClaimStore([d for d in items if d["kind"] != "Pod"], default_namespace="ml-training")
    (pod,) = [d for d in items if d["kind"] == "Pod"]
    spec = dict(pod["spec"])
    containers = spec.pop("containers")
    return k.pod(containers, namespace="ml-training", name=pod["metadata"]["name"], generate_name=None, **spec), store


def test_gb200_pod_with_its_dranet_claim_is_served_by_the_gb200_profile(policies):
    pod, store = gb200_pod_and_claims()
    from webhook.core.decision import decide

    d = decide(pod, ns("gb200-roce"), policies, claims=store)
    assert d.outcome == "mutated" and d.denials == [], d.denials
    c = d.pod["spec"]["containers"][0]
    assert env_of(c)["NCCL_NET"] == "IB" and env_of(c)["NCCL_IB_HCA"] == "rocep"  # the pod's own, kept
    assert d.pod["spec"]["resourceClaims"] == pod["spec"]["resourceClaims"]  # its claim, no second NIC
    assert {r: str(v) for r, v in c["resources"]["limits"].items()} == {"nvidia.com/gpu": "4"}
    # under the mlx5-only DRANET policy the same names send NCCL to TCP
    d = decide(pod, ns("roce-dranet"), policies, claims=store)
    assert [f.rule for f in d.denials] == ["env-fallback"]
    assert "NCCL_IB_HCA='rocep' selects none of the roce-dranet policy's roce fabric's devices" in d.denials[0].message


def review(file: str, policy: str) -> list[dict]:
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "ml-training", "labels": dict(ns(policy).labels)},
    }
    proc = subprocess.run(
        [sys.executable, "-m", "webhook", "review", "--policies", str(ROOT / "policies"), "--output", "json", "-"],
        input=yaml.safe_dump(namespace) + "---\n" + (MANIFESTS / file).read_text(),
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode in (0, 1), proc.stderr
    return [
        r
        for r in (json.loads(line) for line in proc.stdout.splitlines() if line.strip())
        if r["kind"] in ("MPIJob", "Pod")
    ]


@pytest.mark.parametrize(
    "file, policy, outcome",
    [
        ("coreweave-ib-mpijob.yaml", "coreweave-ib", "mutated"),
        ("coreweave-ib-mpijob.yaml", "ib-shared", "mutated"),
        ("gb200-roce-dranet.yaml", "gb200-roce", "mutated"),
        ("gb200-roce-dranet.yaml", "roce-dranet", "denied"),
    ],
)
def test_review_cli(file, policy, outcome):
    (record,) = review(file, policy)
    assert record["outcome"] == outcome, record
    if outcome == "denied":
        assert record["rules"] == ["env-fallback"] and "NCCL_IB_HCA='rocep'" in record["messages"][0]
