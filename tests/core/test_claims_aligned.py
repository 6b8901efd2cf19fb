"""Aligned GPU and NIC claims (issue 27 item 2): a policy whose claim is `aligned` claims each
of a pod's GPUs together with a NIC on the same PCIe root (`resource.kubernetes.io/pcieRoot`),
from the template `rdma-webhook policy claim-template` writes. Users keep writing
`nvidia.com/gpu: N`; the webhook takes that device-plugin request out and references the claim
of the template for N GPUs, so that the DRA scheduler, not the device plugin, allocates them.

Pods go through `review.handle` (the served path); the patch is applied to the pod as sent, a
second pass over the result changes nothing, and the final-state check admits it."""

from __future__ import annotations

import subprocess

import pytest
import yaml

import kube_objects as k
from conftest import CLI
from core.test_claims import BASE, NS, NAMESPACE, respond, template, request, worker, pod_of
from webhook.admission import review
from webhook.cluster.state import ClaimStore
from webhook.core import claims as dra
from webhook.policy.claim_template import PCIE_ROOT, aligned_template
from webhook.policy.lint import lint_notes, lint_warnings
from webhook.policy.load import load_texts

ALIGNED = (
    BASE.replace("name: p\n", "name: aligned\n")
    + "claim: {name: gpus-and-nics, template: 'gpu-nic-{gpus}', aligned: true}\n"
    "dra: {deviceClasses: [rdma-nic]}\n"
)
PS, _errors = load_texts([("aligned.yaml", ALIGNED)])
assert PS is not None, _errors
POLICY = PS.by_name["aligned"]


def store(*gpu_counts: int) -> ClaimStore:
    return ClaimStore([aligned_template(f"gpu-nic-{n}", n, "gpu.nvidia.com", "rdma-nic", NS) for n in gpu_counts])


def test_the_gpus_are_claimed_with_their_nics_instead_of_by_the_device_plugin():
    pod = pod_of([worker(gpus=8, limits={"cpu": "32"})], generate_name="pytorch-worker-")
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "32", "nvidia.com/gpu": "8"}
    resp, out, d = respond(pod, "aligned", policies=PS, claims=store(4, 8))
    assert resp["allowed"] and d.outcome == "mutated", d
    assert out["spec"]["resourceClaims"] == [{"name": "gpus-and-nics", "resourceClaimTemplateName": "gpu-nic-8"}]
    c = out["spec"]["containers"][0]
    assert c["resources"]["claims"] == [{"name": "gpus-and-nics"}]
    for section in ("limits", "requests"):
        assert "nvidia.com/gpu" not in (c["resources"].get(section) or {}), c["resources"]
    assert c["resources"]["limits"] == {"cpu": "32"}  # the rest stays
    assert {"name": "NCCL_DEBUG", "value": "WARN"} in c["env"] and "IPC_LOCK" in c["securityContext"]["capabilities"][
        "add"
    ]
    shm = [v for v in out["spec"]["volumes"] if v.get("emptyDir", {}).get("medium") == "Memory"]
    assert shm and shm[0]["emptyDir"]["sizeLimit"] == "64Gi"  # 8 GPUs x 8Gi: sized before the request was taken out
    # A second pass (reinvocation) and the final-state check take the result as it is.
    again, _, d2 = respond(out, "aligned", policies=PS, claims=store(4, 8))
    assert again["allowed"] and "patch" not in again, again
    final = review.handle_validate(
        k.body(k.admission_review(out, namespace=NS)), PS, lambda ns: NAMESPACE, None, claims=store(4, 8)
    )
    assert final[1]["response"]["allowed"], final[1]["response"]


def test_the_template_follows_the_gpu_count_and_a_missing_one_is_named():
    pod = pod_of([worker(gpus=4)], generate_name="pytorch-worker-")
    resp, out, _ = respond(pod, "aligned", policies=PS, claims=store(4))
    assert resp["allowed"] and out["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == "gpu-nic-4"
    resp, _, d = respond(pod_of([worker(gpus=2)], generate_name="w-"), "aligned", policies=PS, claims=store(4, 8))
    assert not resp["allowed"] and [f.rule for f in d.denials] == ["claim-template"]
    assert f"ResourceClaimTemplate {NS}/gpu-nic-2, which does not exist" in d.denials[0].message
    assert "rdma-webhook policy claim-template aligned --gpus 2" in d.denials[0].message


def test_two_gpu_containers_cannot_share_one_aligned_claim():
    pod = pod_of([worker("a", gpus=4), worker("b", gpus=4)], generate_name="w-")
    resp, _, d = respond(pod, "aligned", policies=PS, claims=store(4, 8))
    assert not resp["allowed"] and [f.rule for f in d.denials] == ["claim-aligned"], d.denials
    assert "2 GPU containers (a, b)" in d.denials[0].message


def test_a_pod_with_its_own_nic_claim_and_device_plugin_gpus_is_told_they_are_not_aligned():
    """Its claim of the fabric's NICs stands (no second NIC), its GPUs too; a warning says why
    they are not aligned and how to get the policy's claim."""
    pod = pod_of(
        [worker(gpus=8, claims=["rdma"])],
        [{"name": "rdma", "resourceClaimTemplateName": "rdma-nics"}],
        generate_name="w-",
    )
    resp, out, d = respond(
        pod, "aligned", policies=PS, claims=ClaimStore([template("rdma-nics", request("nic", "rdma-nic"))])
    )
    assert resp["allowed"] and out["spec"]["resourceClaims"] == pod["spec"]["resourceClaims"], (resp, d)
    assert out["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert any("brings its own NIC claim 'rdma'" in w and "not aligned" in w for w in resp["warnings"]), resp.get(
        "warnings"
    )


def test_a_pod_that_brings_the_aligned_claim_keeps_it():
    """A pod already referencing an aligned template of the policy (any GPU count) brings it: no
    second claim, and its own device-plugin request is not the webhook's to take out."""
    pod = pod_of(
        [worker(gpus=None, claims=["mine"])],
        [{"name": "mine", "resourceClaimTemplateName": "gpu-nic-8"}],
        generate_name="w-",
    )
    resp, out, d = respond(pod, "aligned", policies=PS, claims=store(8))
    assert resp["allowed"] and out["spec"]["resourceClaims"] == pod["spec"]["resourceClaims"], (resp, d)


@pytest.mark.parametrize(
    "template_name,made",
    [
        ("gpu-nic-8", True),
        ("gpu-nic-16", True),
        ("gpu-nic-", False),
        ("gpu-nic-x", False),
        ("gpu-nic-8a", False),
        ("gpu-nics-8", False),
    ],
)
def test_which_templates_are_the_policys(template_name, made):
    assert POLICY.claim.made_from(template_name) is made


def test_the_generated_template_pairs_each_gpu_with_a_nic_on_its_pcie_root():
    doc = aligned_template("gpu-nic-8", 8, "gpu.nvidia.com", "rdma-nic")
    devices = doc["spec"]["spec"]["devices"]
    assert [r["name"] for r in devices["requests"]] == [f"{kind}-{i}" for i in range(8) for kind in ("gpu", "nic")]
    assert all(r["exactly"]["count"] == 1 for r in devices["requests"])
    assert devices["constraints"] == [
        {"requests": [f"gpu-{i}", f"nic-{i}"], "matchAttribute": PCIE_ROOT} for i in range(8)
    ]
    # read back as the decision reads templates: 8 GPU requests and 8 NICs of the policy's class
    reqs = dra.template_value(doc)
    assert [r.device_class for r in reqs].count("rdma-nic") == 8 and [r.device_class for r in reqs].count(
        "gpu.nvidia.com"
    ) == 8


def test_the_cli_writes_the_template_and_lint_says_what_it_needs(tmp_path):
    (tmp_path / "aligned.yaml").write_text(ALIGNED)
    out = subprocess.run(
        [*CLI, "policy", "claim-template", "aligned", "--policies", str(tmp_path), "--gpus", "4"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert yaml.safe_load(out.stdout) == aligned_template("gpu-nic-4", 4, "gpu.nvidia.com", "rdma-nic")
    bad = subprocess.run(
        [*CLI, "policy", "claim-template", "nope", "--policies", str(tmp_path), "--gpus", "4"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 1 and "no policy 'nope'" in bad.stderr and not bad.stdout
    notes = lint_notes(str(tmp_path))
    assert len(notes) == 1 and "needs Kubernetes >= 1.34" in notes[0] and "claim-template aligned --gpus N" in notes[0]
    assert lint_warnings(str(tmp_path)) == []
    lint = subprocess.run([*CLI, "policy", "lint", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert (
        lint.returncode == 0
        and "ok  aligned  (roce over ib-verbs; aligned GPU+NIC DRA claim gpu-nic-{gpus}" in lint.stdout
    )
    assert "note: " in lint.stderr and "warning:" not in lint.stderr


@pytest.mark.parametrize(
    "claim,message",
    [
        ("{name: c, template: 'gpu-nic-{gpus}'}", "is for the template of an aligned claim"),
        (
            "{name: c, template: t, equivalentTemplates: ['x-{gpus}'], aligned: true}",
            "is for the template of an aligned claim",
        ),
        ("{name: c, template: 'Bad_{gpus}', aligned: true}", "is not a valid ResourceClaimTemplate name"),
    ],
)
def test_bad_aligned_claims_are_named(claim, message):
    ps, errors = load_texts([("a.yaml", BASE + f"claim: {claim}\n")])
    assert ps is None and any(message in str(e) for e in errors), errors
