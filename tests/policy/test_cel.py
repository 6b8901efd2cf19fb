"""The CEL vocabulary of the generated admission policies (webhook/policy/cel.py), read where the
API server reads it: k8s.io/apiserver's own CEL, through the harness and the mutated pods of
test_admission_policy_cel.py. What a CEL fragment decides is checked on pods that tell its
choices apart; whether the whole policy refuses what the webhook refuses: that module."""

from __future__ import annotations

import copy

from conftest import POLICIES
from policy.test_admission_policy_cel import _caps, _last, _objects, evaluate, failed_rules, mutated, webhook_findings
from webhook.policy import admission_policy as ap
from webhook.policy.load import load_texts


def test_a_container_referencing_an_aligned_resource_claim_by_its_claim_name_is_a_target(tmp_path):
    """roce-dranet-aligned: the mutation turned the trainer's GPU request into a reference to the
    pod's gpu-nic-aligned-8 claim. A pod that names that claim as a ResourceClaim
    (`resourceClaimName`, a claim made from the aligned template) instead of a template: the
    container is still a target (`is_target` reads both names, as `find_targets` does), so the
    policy holds it to IPC_LOCK like the webhook; and its device is there, as the webhook reads it
    (`families._check_claims` takes either name): the policy refuses no pod the webhook admits."""
    ns, good = mutated("roce-dranet-aligned")
    (entry,) = [e for e in good["spec"]["resourceClaims"] if e.get("resourceClaimTemplateName") == "gpu-nic-aligned-8"]
    by_claim = copy.deepcopy(good)
    for e in by_claim["spec"]["resourceClaims"]:
        if e["name"] == entry["name"]:
            e["resourceClaimName"] = e.pop("resourceClaimTemplateName")
    no_ipc_lock = copy.deepcopy(by_claim)
    _caps(no_ipc_lock).pop("add")
    no_reference = copy.deepcopy(by_claim)
    (trainer,) = [c for c in no_reference["spec"]["containers"] if c.get("resources", {}).get("claims")]
    trainer["resources"].pop("claims")
    rows = evaluate(_objects("roce-dranet-aligned"), [good, by_claim, no_ipc_lock, no_reference], tmp_path)
    assert not rows[0]["denied"] and failed_rules(rows[0]) == set()
    assert not rows[1]["denied"] and failed_rules(rows[1]) == set()
    assert set(webhook_findings(by_claim, ns)) == set()
    assert rows[2]["denied"] and failed_rules(rows[2]) == {"ipc-lock-missing"}
    assert set(webhook_findings(no_ipc_lock, ns)) == {"ipc-lock-missing"}  # the webhook: a target, its device there
    # a container that references no claim brings no GPU of it: neither a target for the policy nor for the webhook
    assert not rows[3]["denied"] and set(webhook_findings(no_reference, ns)) == set()


def test_an_aligned_template_name_matches_for_any_gpu_count_and_nothing_else(tmp_path):
    """An aligned claim's template with `.` around its GPU count (a DNS subdomain may have them):
    a container referencing a pod claim made from it for any GPU count is a target, and a name
    that only differs where a `.` is, or has no count, is not (`made_from` escapes the dots of
    the pattern; the webhook's `Claim.made_from` decides). Each pod lacks IPC_LOCK: the policy
    refuses it exactly when its container is a target."""
    text = (POLICIES / "roce-dranet-aligned.yaml").read_text()
    assert '"gpu-nic-aligned-{gpus}"' in text
    policies, errors = load_texts(
        [("roce-dranet-aligned.yaml", text.replace('"gpu-nic-aligned-{gpus}"', '"gpu.nic-{gpus}.aligned"'))]
    )
    assert policies is not None, errors
    claim = policies.by_name["roce-dranet-aligned"].claim
    _, good = mutated("roce-dranet-aligned")
    names = [
        "gpu.nic-8.aligned",
        "gpu.nic-12.aligned",
        "gpuXnic-8.aligned",
        "gpu.nic-8Xaligned",
        "gpu.nic-.aligned",
        "gpu-nic-aligned-8",
    ]
    pods = []
    for name in names:
        pod = copy.deepcopy(good)
        for e in pod["spec"]["resourceClaims"]:
            if e.get("resourceClaimTemplateName") == "gpu-nic-aligned-8":
                e["resourceClaimTemplateName"] = name
        _caps(pod).pop("add")
        pods.append(pod)
    objects = [d for d in ap.objects(policies) if d["metadata"]["labels"][ap.POLICY_LABEL] == "roce-dranet-aligned"]
    rows = evaluate(objects, pods, tmp_path)
    targets = [name for name, row in zip(names, rows) if "ipc-lock-missing" in failed_rules(row)]
    assert targets == [n for n in names if claim.made_from(n)] == ["gpu.nic-8.aligned", "gpu.nic-12.aligned"]


def test_an_aligned_template_without_a_gpu_count_matches_only_itself(tmp_path):
    """An aligned claim whose template names no GPU count (one template for every pod): only a
    pod claim of that very template (or an equivalent) makes its container a target; the name
    with a count after it is another template (`Claim.made_from`)."""
    text = (POLICIES / "roce-dranet-aligned.yaml").read_text()
    policies, errors = load_texts(
        [("roce-dranet-aligned.yaml", text.replace('"gpu-nic-aligned-{gpus}"', '"gpu-nic-aligned"'))]
    )
    assert policies is not None, errors
    claim = policies.by_name["roce-dranet-aligned"].claim
    _, good = mutated("roce-dranet-aligned")
    names = ["gpu-nic-aligned", "gpu-nic-aligned8", "gpu-nic-aligned-8"]
    pods = []
    for name in names:
        pod = copy.deepcopy(good)
        for e in pod["spec"]["resourceClaims"]:
            if e.get("resourceClaimTemplateName") == "gpu-nic-aligned-8":
                e["resourceClaimTemplateName"] = name
        _caps(pod).pop("add")
        pods.append(pod)
    objects = [d for d in ap.objects(policies) if d["metadata"]["labels"][ap.POLICY_LABEL] == "roce-dranet-aligned"]
    rows = evaluate(objects, pods, tmp_path)
    targets = [name for name, row in zip(names, rows) if "ipc-lock-missing" in failed_rules(row)]
    assert targets == [n for n in names if claim.made_from(n)] == ["gpu-nic-aligned"]


def test_a_plugin_path_matches_the_library_name_dot_for_dot(tmp_path):
    """gke-tcpxo's NCCL_NET_PLUGIN must load libnccl-net.so, by name or by a path to it: a
    path whose file name differs from it only where the `.` is loads another library, and is
    refused (the pattern escapes the name's dots, `re_escape`), as the webhook refuses it."""
    ns, good = mutated("gke-tcpxo")
    values = [
        "/usr/local/nvidia/lib64/libnccl-net.so",
        "libnccl-net.so",
        "/usr/local/nvidia/lib64/libnccl-netXso",
        "/usr/local/nvidia/lib64/libnccl-net.so.1",
    ]
    pods = []
    for value in values:
        pod = copy.deepcopy(good)
        _last("NCCL_NET_PLUGIN", value)(pod)
        pods.append(pod)
    rows = evaluate(_objects("gke-tcpxo"), pods, tmp_path)
    refused = [v for v, row in zip(values, rows) if "env-fallback" in failed_rules(row)]
    webhook = [v for v, pod in zip(values, pods) if "env-fallback" in webhook_findings(pod, ns)]
    assert refused == webhook == values[2:]
