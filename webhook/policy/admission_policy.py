"""The pods' final-state check as Kubernetes objects: one ValidatingAdmissionPolicy (CEL, run by
the API server itself) and its binding per RDMA policy, generated from the policy so that the
two can never disagree.

Why: `/validate` on pods is a second webhook round trip for every labelled pod, made only to
look at the pod once every mutating webhook has run. What it checks there is mostly whether the
pieces our mutation added are still in place, and that is plain data the API server can check
in-process: the mutating webhook writes the policy it applied on the pod (the label
`rdma-webhook.io/applied-policy`), and each generated policy selects the pods that carry its
name (an objectSelector, no CEL) and checks, in CEL:

- device-missing: every GPU container still has the policy's device resources (non-zero
  limits), an equivalent resource, or a reference to the policy's DRA claim;
- ipc-lock-missing / ipc-lock-dropped: IPC_LOCK is still added (or the container privileged)
  and not dropped;
- enforced-env: each enforced NCCL variable still has its value (the last entry of that name,
  as the kubelet reads `env`; NCCL_NET without case);
- env-fallback: no later `env` entry turns the transport off (NCCL_IB_DISABLE, NCCL_NET,
  NCCL_NET_PLUGIN: the judgements `webhook.fabrics.transports` makes that a regular
  expression can make too);
- shm: the /dev/shm our mutation mounted is still a memory-backed emptyDir;
- host-network: hostNetwork as the policy wants it;
- multus-networks: the policy's Multus networks are still in the pod's networks annotation.
- gke-networks: the policy's GKE networks are still in the pod's networking.gke.io/interfaces
  annotation; sidecar-missing: a pod with a GPU container still runs the fabric's sidecar.

A policy with machine types: the rules of the pod's own type, the type read in CEL from the
pod's node selection as the webhook reads it (`webhook.policy.machine_cel`), `machine-type` for a
selection the webhook denies, and `fabric-mismatch` for a GKE network only other types have.

What CEL cannot check (commands read as the shell reads them, NCCL_IB_HCA's filter grammar,
`$(VAR)` expansion, a network's device named by its NetworkAttachmentDefinition) is listed in
the README with what covers it. Nothing here runs on the admission path: the objects are made
by `rdma-webhook policy admission-policy` at install time, and compared with what the cluster
holds by `webhook.cluster.admission_policies` (read-only).

The rules themselves are `webhook.policy.final_state_rules`, written in the CEL of
`webhook.policy.cel`; this module makes them the objects and compares the installed ones.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable, Sequence

from webhook.core import keys
from webhook.core.model import Policy, PolicySet
from webhook.policy.cel import cel_list, cel_str, is_target, sees_gpus_otherwise, with_names
from webhook.policy.final_state_rules import CHECKED, KINDS, POD, TARGETS, Rule, by_type, rules
from webhook.policy.machine_cel import machine

API_VERSION = "admissionregistration.k8s.io/v1"
POLICY_KIND = "ValidatingAdmissionPolicy"
BINDING_KIND = "ValidatingAdmissionPolicyBinding"
NAME_PREFIX = "rdma-webhook-final-state-"
# The label every generated object carries, and the one naming its RDMA policy: the run-time
# check lists the objects by the first and pairs them with the policies by the second.
PART_OF = {"app.kubernetes.io/name": "rdma-webhook", "app.kubernetes.io/part-of": "rdma-webhook"}
POLICY_LABEL = keys.PREFIX + "rdma-policy"
# A digest of the generated spec, written on both objects, so a mismatch is one string compare
# and a person can see which policy text an object was made from.
DIGEST_ANNOTATION = keys.PREFIX + "final-state-digest"
ACTIONS = ("Deny", "Warn", "Audit")
DRY_RUN = ("Warn", "Audit")
# The variable of a policy with machine types: the pod's type (webhook.policy.machine_cel).
MACHINE = "machine"


def object_name(policy_name: str) -> str:
    return NAME_PREFIX + policy_name


def _names(over: str) -> str:
    """Who the message is about: the container when `over` holds one (most training pods), else
    the containers among which the rule failed. The API server evaluates every messageExpression
    of a matched policy whether its rule held or not, so this one must cost little: naming only
    the failing containers would repeat the rule's whole check for every admitted pod
    (benchmarks/README.md, "The final-state check in the API server")."""
    return (
        f"(size({over}) == 1 ? \"container '\" + {over}[0].name + \"'\" : "
        f"'one of the containers ' + {over}.map(c, \"'\" + c.name + \"'\").join(', '))"
    )


def _groups(policy: Policy) -> dict[str, str]:
    """CEL over a container `c` for each container group: the policy's variables filter the
    containers by it (the match condition, which cannot use variables, tests the same `is_target`
    and `sees_gpus_otherwise` in its one pass)."""
    target = is_target(policy)
    return {TARGETS: target, CHECKED: f"{target} || {sees_gpus_otherwise()}"}


def _validation(rule: Rule) -> dict[str, Any]:
    """One rule as a validation. Over containers: the condition must hold for each of them; the
    message names the container (`_names`), then says why and what to do, as the webhook's
    denial does. Over the pod: it must hold when the pod has a target."""
    if rule.over == POD:
        return {
            "expression": f"size(variables.targets) == 0 || ({rule.condition})",
            "message": f"rdma-webhook: {rule.message} [{rule.name}]",
            "reason": "Forbidden",
        }
    group = f"variables.{rule.over}"
    return {
        "expression": f"{group}.all(c, {with_names(rule.condition) if rule.names else rule.condition})",
        "messageExpression": f"'rdma-webhook: ' + {_names(group)} + {cel_str(': ' + rule.message + f' [{rule.name}]')}",
        "reason": "Forbidden",
    }


def validations(policy: Policy) -> list[dict[str, Any]]:
    """The CEL rules of one policy as the ValidatingAdmissionPolicy's validations."""
    return list(policy_spec(policy)["validations"])


def broken(policy: Policy, found: list[Rule] | None = None) -> str:
    """CEL that is true when some rule of the policy (`found`: its `rules`) fails: the policy's
    match condition.

    Why: the API server evaluates every validation and every messageExpression of a policy
    whose match conditions hold, for every pod, whether a rule failed or not (k8s.io/apiserver
    policy/validating/validator.go): the validations and the second activation the messages
    need were most of the check's cost (benchmarks/README.md). This one expression holds the
    same conditions in one pass over the containers; for a pod that keeps
    everything the mutation gave it (nearly every pod) it is false, and the API server skips
    the validations. For a pod it holds for, the validations run as before and name the rule
    and the container. It cannot use `variables` (match conditions are evaluated before them),
    so the groups' filters are written out. A policy with machine types: `_typed`."""
    if policy.machines is not None and found is None:
        return _typed(policy)[0]
    return "!(" + _holds(policy, rules(policy) if found is None else found) + ")"


def _holds(policy: Policy, found: list[Rule]) -> str:
    """CEL that is true when every rule of `found` holds (`broken` negates it)."""
    by_over: dict[str, list[str]] = {TARGETS: [], CHECKED: [], POD: []}
    names = False
    for rule in found:
        by_over[rule.over].append(f"({rule.condition})")
        names = names or (rule.over != POD and rule.names)
    target, checked = " && ".join(by_over[TARGETS]) or "true", " && ".join(by_over[CHECKED])
    # One pass over the containers: a target's rules and the checked rules for a target, the
    # checked rules alone for another container that sees GPUs, nothing for the rest.
    if checked:
        each = f"({is_target(policy)}) ? ({target} && {checked}) : (!({sees_gpus_otherwise()}) || ({checked}))"
    else:
        each = f"!({is_target(policy)}) || ({target})"
    holds = [f"object.spec.containers.all(c, {with_names(each) if names else each})"]
    if by_over[POD]:  # the pod's rules first: they hold for nearly every pod, and then the scan for a target is skipped
        holds.append(f"(({' && '.join(by_over[POD])}) || !object.spec.containers.exists(c, {is_target(policy)}))")
    return " && ".join(holds)


def _is(variable: str, names: Sequence[str]) -> str:
    return f"{variable} == {cel_str(names[0])}" if len(names) == 1 else f"{variable} in {cel_list(names)}"


def _typed(policy: Policy) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """(match condition, variables, validations) of a policy with machine types: each type's own
    rules, for the pods its node selection puts on that type (`webhook.policy.machine_cel`).

    The match condition computes the type once (bound as `m`) and holds the rules of that type;
    the validations read it from the variable `machine`, the first one refusing a pod whose
    selection the webhook would deny (`machine-type`), each rule then guarded by the types that
    have it (a rule every type has alike is one validation)."""
    assert policy.machines is not None
    typed = by_type(policy)
    which = machine(policy.machines)
    chain = "".join(f"{_is('m', names)} ? ({_holds(p, found)}) : " for names, p, found in typed)
    variables: list[dict[str, Any]] = [{"name": MACHINE, "expression": which}]
    for over in (TARGETS, CHECKED):
        each = [(names, f"object.spec.containers.filter(c, {_groups(p)[over]})") for names, p, _ in typed]
        expression = each[-1][1]
        if len({e for _, e in each}) > 1:  # the types' GPUs differ
            expression = "".join(f"{_is('variables.' + MACHINE, n)} ? {e} : " for n, e in each[:-1]) + expression
        variables.append({"name": over, "expression": expression})
    every = [t.name for t in policy.machines.types]
    unselected = "several of them" if policy.machines.default is not None else "none of them, or several"
    checks: list[dict[str, Any]] = [
        {
            "expression": f"variables.{MACHINE} != ''",
            "message": f"rdma-webhook: policy {policy.name} gives a different fabric to each machine type, and the "
            f"pod's spec.nodeSelector and required node affinity select {unselected}, or labels no type has (a "
            f"webhook that ran after rdma-webhook may have changed them); select one of its types: "
            f"{policy.machines.names()} [machine-type]",
            "reason": "Forbidden",
        }
    ]
    have: dict[Rule, list[str]] = {}
    for names, _, found in typed:
        for rule in found:
            have.setdefault(rule, []).extend(names)
    for rule in sorted(have, key=lambda r: KINDS.index(r.name)):
        check = _validation(rule)
        guard = f"variables.{MACHINE} == ''" if have[rule] == every else f"!({_is('variables.' + MACHINE, have[rule])})"
        checks.append({**check, "expression": f"{guard} || {check['expression']}"})
    return f"!([{which}].all(m, {chain}false))", variables, checks


def policy_spec(policy: Policy) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy's spec for one RDMA policy."""
    if policy.machines is not None:
        condition, variables, checks = _typed(policy)
    else:
        found, groups = rules(policy), _groups(policy)
        condition = broken(policy, found)
        variables = [
            {"name": over, "expression": f"object.spec.containers.filter(c, {groups[over]})"}
            for over in (TARGETS, CHECKED)
        ]
        checks = [_validation(rule) for rule in found]
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
            ],
            # The pods this policy was applied to, by the label the mutation writes, and nothing
            # else: `/mutate` writes it only on labelled pods of opted-in namespaces outside
            # kube-system and rdma-webhook, so a namespace selector would repeat what the label
            # already says. Both selectors are parsed again for every policy and every pod
            # (LabelSelectorAsSelector validates each requirement), before any CEL runs: one
            # requirement per policy is the cheapest test the API server offers.
            "namespaceSelector": {},
            "objectSelector": {"matchLabels": {keys.APPLIED_POLICY_LABEL: policy.name}},
        },
        "matchConditions": [{"name": "final-state-broken", "expression": condition}],
        "variables": variables,
        "validations": checks,
    }


def digest(spec: Any) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def objects(policies: PolicySet, actions: Sequence[str] = ("Deny",)) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and binding of every policy, by policy name. `actions` are
    the binding's validationActions: Deny (the default), or Warn and Audit (a dry run: the API
    server warns the client and writes the audit annotation, the pod is admitted)."""
    bad = [a for a in actions if a not in ACTIONS]
    if bad or not actions or len(set(actions)) != len(actions) or ("Deny" in actions and "Warn" in actions):
        raise ValueError(f"validationActions {list(actions)}: give Deny, or Warn and/or Audit (each once)")
    out: list[dict[str, Any]] = []
    for policy in sorted(policies.by_name.values(), key=lambda p: p.name):
        spec = policy_spec(policy)
        for kind, body in (
            (POLICY_KIND, spec),
            (BINDING_KIND, {"policyName": object_name(policy.name), "validationActions": list(actions)}),
        ):
            meta = {
                "name": object_name(policy.name),
                "labels": {**PART_OF, POLICY_LABEL: policy.name},
                "annotations": {DIGEST_ANNOTATION: digest(spec)},
            }  # each object its own dicts
            out.append({"apiVersion": API_VERSION, "kind": kind, "metadata": meta, "spec": body})
    return out


def mismatches(
    policies: PolicySet, installed: Iterable[dict[str, Any]], bindings: Iterable[dict[str, Any]]
) -> list[str]:
    """How the generated objects the cluster holds (`installed`: ValidatingAdmissionPolicies,
    `bindings`: their bindings, both as the API returns them, our label on each) differ from
    those the policies in force make: one line per difference, [] when they agree. The
    binding's validationActions are the installer's choice (Deny or a dry run), not compared."""
    by_name = {str((o.get("metadata") or {}).get("name")): o for o in installed}
    bound = {str((o.get("spec") or {}).get("policyName")): o for o in bindings}
    out: list[str] = []
    wanted = sorted(policies.by_name.values(), key=lambda p: p.name)
    for policy in wanted:
        name = object_name(policy.name)
        spec = policy_spec(policy)
        found = by_name.get(name)
        if found is None:
            out.append(f"{POLICY_KIND} {name} for policy {policy.name} is not installed")
        else:
            have = ((found.get("metadata") or {}).get("annotations") or {}).get(DIGEST_ANNOTATION)
            if have != digest(spec):
                out.append(
                    f"{POLICY_KIND} {name} was generated from another version of policy {policy.name} "
                    f"(digest {have}, the policy in force makes {digest(spec)}); regenerate and apply it"
                )
            elif not _same_rules(found.get("spec") or {}, spec):
                out.append(f"{POLICY_KIND} {name}: its rules were edited after generation; regenerate and apply it")
        if name not in bound:
            out.append(f"{POLICY_KIND} {name} has no {BINDING_KIND}, so it checks nothing")
    known = {object_name(p.name) for p in wanted}
    for name in sorted(set(by_name) - known):
        out.append(f"{POLICY_KIND} {name} checks pods of a policy that is not in force; delete it")
    return out


def _same_rules(have: dict[str, Any], want: dict[str, Any]) -> bool:
    """The fields we generate, compared as generated (the API server adds defaults to others)."""
    if (have.get("matchConstraints") or {}).get("objectSelector") != want["matchConstraints"]["objectSelector"]:
        return False
    for field in ("matchConditions", "variables", "validations"):
        if [_strip(x) for x in have.get(field) or []] != [_strip(x) for x in want.get(field) or []]:
            return False
    return True


def _strip(item: Any) -> Any:
    return {k: v for k, v in item.items() if v not in (None, "")} if isinstance(item, dict) else item


def to_yaml(docs: list[dict[str, Any]], header: str = "") -> str:
    import yaml

    return header + yaml.safe_dump_all(docs, sort_keys=False, width=1000)
