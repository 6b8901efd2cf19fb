"""A container that references an aligned GPU+NIC claim of the policy is a target
(webhook/core/targets.py `find_targets`): the mutation turns its nvidia.com/gpu request into that
reference, so after mutation (the final-state check, a reinvocation) it is still the container
that gets RDMA, and what a later webhook takes from it is refused, as for a container that
requests its GPUs (IPC_LOCK here; the shipped roce-dranet-aligned's enforced NCCL_NET and /dev/shm
in tests/policy/test_admission_policy_cel.py). A pod that references the claim itself is
given the rest of the fabric by /mutate, so /validate never refuses what /mutate left as it was.

Pods as the API server sends them (tests/core/test_claims.py's PyTorchJob worker), through
`review.handle` and `review.handle_validate`, every patch applied to the pod as sent."""

from __future__ import annotations

import copy
from dataclasses import replace

import kube_objects as k
from core.test_claims import NAMESPACE, NS, pod_of, respond, worker
from core.test_claims_aligned import PS, store
from webhook.admission import review
from webhook.core.targets import find_checked, find_targets

POLICY = PS.by_name["aligned"]


def _validate(pod: dict) -> dict:
    _, doc, _, _ = review.handle_validate(
        k.body(k.admission_review(pod, namespace=NS)), PS, lambda ns: NAMESPACE, None, claims=store(4, 8)
    )
    return doc["response"]


def mutated() -> dict:
    pod = pod_of([worker(gpus=8, limits={"cpu": "32"})], generate_name="pytorch-worker-")
    resp, out, d = respond(pod, "aligned", policies=PS, claims=store(4, 8))
    assert resp["allowed"] and d.outcome == "mutated", d
    return out


def test_the_container_that_references_the_aligned_claim_is_the_target_of_the_gpus_it_brings():
    out = mutated()
    targets = find_targets(out, POLICY)
    assert [(t.name, t.gpus) for t in targets] == [("trainer", 8)]  # gpu-nic-8
    assert find_checked(out, targets) == []
    # another policy's pod with the same reference: not a target of a policy without an aligned claim
    plain = replace(POLICY, claim=None)
    assert find_targets(out, plain) == [] and len(find_checked(out, [])) == 1


def test_what_a_later_webhook_takes_from_the_aligned_container_is_refused():
    out = mutated()
    assert _validate(out)["allowed"]
    for what, rule, change in [
        ("IPC_LOCK", "ipc-lock-missing", lambda c: c["securityContext"]["capabilities"].pop("add")),
        (
            "IPC_LOCK dropped",
            "ipc-lock-dropped",
            lambda c: c["securityContext"]["capabilities"].update(drop=["IPC_LOCK"]),
        ),
    ]:
        pod = copy.deepcopy(out)
        change(pod["spec"]["containers"][0])
        resp = _validate(pod)
        assert not resp["allowed"] and f"[{rule}]" in resp["status"]["message"], (what, resp)


def test_a_pod_that_references_the_aligned_claim_itself_gets_the_rest_of_the_fabric():
    """A worker written with the claim already (the template of 4 GPUs): /mutate adds IPC_LOCK, the
    NCCL block and /dev/shm for 4 GPUs, a second pass changes nothing, /validate admits it."""
    claims = [{"name": "gpus", "resourceClaimTemplateName": "gpu-nic-4"}]
    pod = pod_of([worker(gpus=None, claims=["gpus"], limits={"cpu": "16"})], claims, generate_name="pytorch-worker-")
    resp, out, d = respond(pod, "aligned", policies=PS, claims=store(4, 8))
    assert resp["allowed"] and d.outcome == "mutated", (d.outcome, d.reason, d.denials)
    mine = out["spec"]["containers"][0]
    assert "IPC_LOCK" in mine["securityContext"]["capabilities"]["add"]
    assert (
        mine["resources"]["claims"] == [{"name": "gpus"}]
        and out["spec"]["resourceClaims"] == pod["spec"]["resourceClaims"]
    )
    shm = [v for v in out["spec"]["volumes"] if v.get("emptyDir", {}).get("medium") == "Memory"]
    assert shm and shm[0]["emptyDir"]["sizeLimit"] == "32Gi"  # 4 GPUs x 8Gi
    again, _, _ = respond(out, "aligned", policies=PS, claims=store(4, 8))
    assert again["allowed"] and "patch" not in again, again
    assert _validate(out)["allowed"]


def test_each_aligned_reference_brings_the_gpus_its_template_names():
    """The GPUs a container gets from a pod-level claim of the aligned policy (`Claim.gpus_in`):
    the count in the template's name, by template or claim name; 1 when the name does not say
    (an equivalent template, even one with digits where the count would be, or a count too long
    to be one); nothing from another template or from an entry that is not the policy's."""
    claim = replace(POLICY.claim, equivalent=("rack-a1-16",))  # as long as "gpu-nic-" before its "16"
    policy = replace(POLICY, claim=claim)
    refs = [
        ("four", {"resourceClaimTemplateName": "gpu-nic-4"}),
        ("made", {"resourceClaimName": "gpu-nic-2"}),
        ("shared", {"resourceClaimTemplateName": "rack-a1-16"}),
        ("huge", {"resourceClaimTemplateName": "gpu-nic-1234567"}),
        ("other", {"resourceClaimTemplateName": "rdma-nics-8"}),
    ]
    containers = [worker(f"c-{n}", gpus=None, claims=[n]) for n, _ in refs]
    pod = pod_of(containers, [{"name": n, **ref} for n, ref in refs], generate_name="pytorch-worker-")
    got = [(t.name, t.gpus) for t in find_targets(pod, policy)]
    assert got == [("c-four", 4), ("c-made", 2), ("c-shared", 1), ("c-huge", 1)]
    assert [claim.gpus_in(n) for n in ("gpu-nic-{gpus}", "gpu-nic-0", "gpu-nic-", "rdma-nics-8")] == [1, 0, None, None]
