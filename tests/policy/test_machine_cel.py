"""The pod's machine type as the generated ValidatingAdmissionPolicy computes it
(webhook/policy/machine_cel.py), evaluated by k8s.io/apiserver 1.37's own CEL (the harness of
tests/policy/test_admission_policy_cel.py), against the webhook's own choice
(`webhook.core.machines.choose`) on the same pods: the CEL names the type the webhook chooses,
and '' exactly where the webhook denies the pod's selection (`machine-type`).

The pods: every shipped policy with machine types, and a test policy in each `whenUnselected`
mode; node selections drawn (seeded, a few hundred per policy) from every label any type
declares, values no type has, labels of the pod's own, by nodeSelector and by required node
affinity (one term or several, `In` with one value or several, `NotIn`, `Exists`, `matchFields`,
a term with no expressions), the shapes GKE's own examples use (GoogleCloudPlatform/cluster-toolkit
examples/gke-a4x/nccl-jobset-example.yaml: nodeSelector cloud.google.com/gke-accelerator)."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

import kube_objects as k
from conftest import POLICIES
from core.test_machines import policy_text
from policy.test_admission_policy_cel import evaluate
from webhook.core import keys, machines
from webhook.core.model import Policy, PolicySet
from webhook.policy import admission_policy as ap
from webhook.policy.load import load_dir, load_texts
from webhook.policy.machine_cel import machine

SHIPPED, _ = load_dir(POLICIES)
assert SHIPPED is not None
OWN = [("topology.kubernetes.io/zone", "us-central1-a"), ("kubernetes.io/arch", "amd64")]
UNKNOWN = ["nvidia-l4", "n2-standard-8"]


def _probe(policy: Policy) -> dict[str, Any]:
    """A ValidatingAdmissionPolicy whose one validation fails with the CEL's machine type."""
    assert policy.machines is not None
    spec = copy.deepcopy(ap.policy_spec(policy))
    spec.pop("matchConditions")
    spec["variables"] = [{"name": "machine", "expression": machine(policy.machines)}]
    spec["validations"] = [{"expression": "false", "messageExpression": "'type=' + variables.machine"}]
    name = ap.object_name(policy.name)
    return {"apiVersion": ap.API_VERSION, "kind": ap.POLICY_KIND, "metadata": {"name": name}, "spec": spec}


def _binding(policy: Policy) -> dict[str, Any]:
    name = ap.object_name(policy.name)
    return {
        "apiVersion": ap.API_VERSION,
        "kind": ap.BINDING_KIND,
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }


def _expr(rng: random.Random, labels: list[tuple[str, str]]) -> dict[str, Any]:
    key, value = rng.choice(labels)
    op = rng.choice(["In", "In", "In", "In", "NotIn", "Exists"])
    if op == "Exists":
        return {"key": key, "operator": op}
    values = [value] + [v for lk, v in rng.sample(labels, 2) if lk == key and v != value and rng.random() < 0.5]
    return {"key": key, "operator": op, "values": values}


def selections(policy: Policy, count: int, seed: int) -> list[dict[str, Any]]:
    """`count` pod specs' node selections under `policy`'s declared labels (and others)."""
    assert policy.machines is not None
    rng = random.Random(seed)
    declared = [(key, v) for t in policy.machines.types for key, values in t.labels for v in values]
    labels = declared * 3 + [(key, u) for key, _ in declared[:2] for u in UNKNOWN] + OWN
    out: list[dict[str, Any]] = [{}]
    while len(out) < count:
        spec: dict[str, Any] = {}
        if rng.random() < 0.6:
            spec["nodeSelector"] = dict(rng.sample(labels, rng.randint(1, 2)))
        if rng.random() < 0.6:
            terms = []
            for _ in range(rng.randint(1, 3)):
                term: dict[str, Any] = {}
                if rng.random() < 0.9:
                    term["matchExpressions"] = [_expr(rng, labels) for _ in range(rng.randint(1, 3))]
                if rng.random() < 0.1:
                    term["matchFields"] = [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]
                terms.append(term or {"matchExpressions": [_expr(rng, OWN)]})
            required = {"nodeSelectorTerms": terms}
            spec["affinity"] = {"nodeAffinity": {machines.AFFINITY_KEY: required}}
        out.append(spec)
    return out


def _pods(policy: Policy, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for spec in specs:
        pod = k.pod([k.container("trainer", gpus=4)], namespace="ml", generate_name="w-", **spec)
        pod["metadata"].setdefault("labels", {})[keys.APPLIED_POLICY_LABEL] = policy.name
        out.append(pod)
    return out


def _webhook(pod: dict[str, Any], policy: Policy, policies: PolicySet) -> str:
    typed = machines.choose(pod, policy, policies)[0]
    return typed.machine if typed is not None else ""


# A label key only one type declares (the four-GPU type without an instance type): a term or a
# nodeSelector naming that key's value selects the type that has it, never the other.
_ONE_KEY = policy_text().replace(", node.kubernetes.io/instance-type: a4x-highgpu-4g}", "}")
assert _ONE_KEY != policy_text()
# (what, the policy's text: None for a shipped policy). Each test loads its policy itself, so that
# the machine types it evaluates are compiled by the code under test (webhook.policy.machines).
CASES = [(n, None) for n in sorted(SHIPPED.by_name) if SHIPPED.by_name[n].machines] + [
    (f"two-types ({when})", policy_text(when, None if when == "Deny" else "eight"))
    for when in ("Default", "RequireNodeAffinity", "Deny")
]
CASES.append(("two-types (a key of one type)", _ONE_KEY))


def _load(what: str, text: str | None) -> tuple[PolicySet, Policy]:
    if text is None:
        policies, errors = load_dir(POLICIES)
        assert policies is not None, errors
        return policies, policies.by_name[what]
    policies, errors = load_texts([("two-types.yaml", text)])
    assert policies is not None, errors
    return policies, policies.by_name["two-types"]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_the_cel_reads_the_machine_type_the_webhook_chooses(case, tmp_path):
    what, text = case
    policies, policy = _load(what, text)
    pods = _pods(policy, selections(policy, 400, seed=42))
    rows = evaluate([_probe(policy), _binding(policy)], pods, tmp_path)
    assert len(rows) == len(pods)
    got = {}
    for pod, row in zip(pods, rows):
        assert row["selected"] and row["match_error"] == "" and row["validations"][0]["error"] == "", row
        message = row["validations"][0]["message"]
        assert message.startswith("type="), message
        want = _webhook(pod, policy, policies)
        assert message == "type=" + want, f"{what}: {pod['spec'].get('nodeSelector')} {pod['spec'].get('affinity')}"
        got[want] = got.get(want, 0) + 1
    # the draw reaches every type and the denial; the first pod names none (the default, or '' under Deny)
    names = {t.name for t in policy.machines.types}
    assert names <= set(got) and got.get("", 0) >= 20, got
    assert rows[0]["validations"][0]["message"] == "type=" + (
        policy.machines.default.name if policy.machines.default else ""
    )
