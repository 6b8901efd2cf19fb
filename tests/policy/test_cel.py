"""The CEL vocabulary of the generated admission policies (webhook/policy/cel.py), read where the
API server reads it: k8s.io/apiserver's own CEL, through the harness and the mutated pods of
test_admission_policy_cel.py. What a CEL fragment decides is checked on pods that tell its
choices apart; whether the whole policy refuses what the webhook refuses: that module."""

from __future__ import annotations

import copy

from policy.test_admission_policy_cel import _caps, _objects, evaluate, mutated, webhook_findings


def _failed(row) -> set[str]:
    return {v["message"].rsplit("[", 1)[1].rstrip("]") for v in row["validations"] if not v["passed"]}


def test_a_container_referencing_an_aligned_resource_claim_by_its_claim_name_is_a_target(tmp_path):
    """roce-dranet-aligned: the mutation turned the trainer's GPU request into a reference to the
    pod's gpu-nic-aligned-8 claim. A pod that names that claim as a ResourceClaim
    (`resourceClaimName`, a claim made from the aligned template) instead of a template: the
    container is still a target (`is_target` reads both names, as `find_targets` does), so the
    policy holds it to IPC_LOCK like the webhook. Its device-missing rule reads the template name
    only (CEL cannot read the ResourceClaim's requests), so it refuses such a pod either way."""
    ns, good = mutated("roce-dranet-aligned")
    (entry,) = [e for e in good["spec"]["resourceClaims"] if e.get("resourceClaimTemplateName") == "gpu-nic-aligned-8"]
    by_claim = copy.deepcopy(good)
    for e in by_claim["spec"]["resourceClaims"]:
        if e["name"] == entry["name"]:
            e["resourceClaimName"] = e.pop("resourceClaimTemplateName")
    no_ipc_lock = copy.deepcopy(by_claim)
    _caps(no_ipc_lock).pop("add")
    rows = evaluate(_objects("roce-dranet-aligned"), [good, by_claim, no_ipc_lock], tmp_path)
    assert not rows[0]["denied"] and _failed(rows[0]) == set()
    assert rows[1]["denied"] and _failed(rows[1]) == {"device-missing"}
    assert rows[2]["denied"] and _failed(rows[2]) == {"device-missing", "ipc-lock-missing"}
    assert set(webhook_findings(no_ipc_lock, ns)) == {"ipc-lock-missing"}  # the webhook: a target, its device there
