"""Machine types: which of a policy's fabrics a pod gets, from the pod's own node selection.

A cloud has several kinds of GPU node, and the fabric differs between them (GKE: four TCPX NICs
on A3 High, eight TCPXO NICs on A3 Mega, eight RDMA NICs on A3 Ultra and A4, four on A4X). A
policy with `machineTypes` (docs/policies.md "Machine types") compiles, at load, one Policy per
type (`webhook.core.model.MachineType`) and a dict from each node label value a type declares to
the types that have it (`Machines.by_label`). Here a pod's selection is read against that dict:

- `spec.nodeSelector`: every declared key the pod sets narrows the candidates to the types with
  that value (the selector's entries are ANDed);
- `spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`: the terms are
  ORed, the `In` expressions of one term ANDed; a term that names no type leaves the pod free.
  (`NotIn`, `Exists`, `DoesNotExist` and `matchFields` do not narrow: they name no type.)

One type left: its policy. None named: the policy's documented choice (`Machines.unselected`):
its default type, with or without a required node affinity the webhook adds (`pin`, added here
by `pin_affinity` to every nodeSelectorTerm so that the pod lands where that fabric exists), or a
denial when the policy has no default. A value no type declares, or selections that leave no
type or more than one, are a denial naming the types. A policy without machine types costs one
attribute test.
"""

from __future__ import annotations

from typing import Any, Final

from webhook.core import keys
from webhook.core.model import Machines, Policy, PolicySet

AFFINITY_KEY: Final = "requiredDuringSchedulingIgnoredDuringExecution"


def choose(pod: dict[str, Any], policy: Policy, policies: PolicySet | None = None) -> tuple[Policy | None, str]:
    """(the policy as it is on the pod's machine type, "") or (None, why no type fits, naming the
    other loaded policies that have the type the pod selects)."""
    machines = policy.machines
    if machines is None:
        return policy, ""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        spec = {}
    problems: list[str] = []
    chosen = _select(spec, machines, problems)
    if problems:
        return None, _denial(policy, machines, problems[0]) + _elsewhere(spec, policy, policies)
    if chosen is None:
        if machines.unselected is None:
            return None, _denial(
                policy, machines, "it names no machine type (no nodeSelector or required node affinity on their labels)"
            )
        return machines.unselected, ""
    if len(chosen) > 1:
        return None, _denial(
            policy, machines, f"it may land on machine types {', '.join(sorted(chosen))}, whose fabrics differ"
        )
    return machines.by_name[next(iter(chosen))].policy, ""


def _select(spec: dict[str, Any], machines: Machines, problems: list[str]) -> frozenset[str] | None:
    """The types the pod's node selection allows (None: it names none), or a problem."""
    chosen = _from_node_selector(spec.get("nodeSelector"), machines, problems)
    terms = _from_affinity(spec.get("affinity"), machines, problems)
    if not problems and terms is not None:
        chosen = terms if chosen is None else chosen & terms
        if not chosen:
            problems.append("its nodeSelector and its required node affinity select different machine types")
    return chosen


def _elsewhere(spec: dict[str, Any], policy: Policy, policies: PolicySet | None) -> str:
    """The other policies with a machine type the pod selects (a denial's path only)."""
    names: list[str] = []
    for other in policies.ranked() if policies is not None else ():
        if other is not policy and other.machines is not None:
            problems: list[str] = []
            chosen = _select(spec, other.machines, problems)
            if not problems and chosen is not None and len(chosen) == 1:
                names.append(other.name)
    if not names:
        return ""
    return f"; the machine type it selects is in policy {', '.join(names)}: select it with the annotation " + (
        " or ".join(f"{keys.POD_POLICY}: {n}" for n in names)
    )


def _denial(policy: Policy, machines: Machines, why: str) -> str:
    return (
        f"policy {policy.name} gives a different fabric to each machine type, and {why}; select one "
        f"of its types with spec.nodeSelector or a required node affinity: {machines.names()}"
    )


def _types_of(key: str, values: list[str], machines: Machines) -> frozenset[str] | None:
    """The types with one of `values` on label `key`; None when no type declares `key`."""
    by_value = machines.by_label.get(key)
    if by_value is None:
        return None
    found: set[str] = set()
    for value in values:
        types = by_value.get(value)
        if types is not None:
            found.update(types)
    return frozenset(found)


def _from_node_selector(selector: Any, machines: Machines, problems: list[str]) -> frozenset[str] | None:
    if not isinstance(selector, dict):
        return None
    chosen: frozenset[str] | None = None
    for key, value in selector.items():
        types = _types_of(str(key), [str(value)], machines)
        if types is None:
            continue
        if not types:
            problems.append(f"its nodeSelector {key}={value} is a node of none of its machine types")
            return None
        chosen = types if chosen is None else chosen & types
    if chosen is not None and not chosen:
        problems.append("its nodeSelector names labels of different machine types")
    return chosen


def _from_affinity(affinity: Any, machines: Machines, problems: list[str]) -> frozenset[str] | None:
    """The types the required node affinity allows: the union over its terms, None when a term
    (or the whole affinity) names no type."""
    terms = _terms(affinity)
    if not terms:
        return None
    union: set[str] = set()
    free = named = 0
    for i, term in enumerate(terms):
        allowed = _term_types(term, i, machines, problems)
        if problems:
            return None
        if allowed is None:
            free += 1
        else:
            named += 1
            union.update(allowed)
    if free and named:
        problems.append(
            "some of its required nodeSelectorTerms name a machine type and others none, so it may land on either"
        )
        return None
    return frozenset(union) if named else None


def _terms(affinity: Any) -> list[Any]:
    node = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    required = node.get(AFFINITY_KEY) if isinstance(node, dict) else None
    terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
    return terms if isinstance(terms, list) else []


def _term_types(term: Any, index: int, machines: Machines, problems: list[str]) -> frozenset[str] | None:
    exprs = term.get("matchExpressions") if isinstance(term, dict) else None
    chosen: frozenset[str] | None = None
    for expr in exprs if isinstance(exprs, list) else ():
        if not isinstance(expr, dict) or expr.get("operator") != "In" or not isinstance(expr.get("values"), list):
            continue
        values = [str(v) for v in expr["values"]]
        types = _types_of(str(expr.get("key")), values, machines)
        if types is None:
            continue
        if not types:
            problems.append(
                f"its required node affinity (term {index}) asks for {expr.get('key')} in {', '.join(values)}, "
                f"a node of none of its machine types"
            )
            return None
        chosen = types if chosen is None else chosen & types
        if not chosen:
            problems.append(f"its required node affinity (term {index}) names labels of different machine types")
            return None
    return chosen


def pin_affinity(pod: dict[str, Any], pin: tuple[str, tuple[str, ...]]) -> str | None:
    """Add the required node affinity `pin` (label key In values) to every nodeSelectorTerm of
    `pod` (a private copy: the affinity is copied before it is edited), or a first term when it
    has none. A note of what was added, None when every term has it already."""
    key, values = pin
    spec: dict[str, Any] = pod["spec"]
    expr: dict[str, Any] = {"key": key, "operator": "In", "values": list(values)}
    affinity = _copied(spec, "affinity")
    node = _copied(affinity, "nodeAffinity")
    required = _copied(node, AFFINITY_KEY)
    found = required.get("nodeSelectorTerms")
    terms: list[Any] = [dict(t) if isinstance(t, dict) else {} for t in found] if isinstance(found, list) else []
    if not terms:
        terms.append({})
    changed = False
    for term in terms:
        exprs = term.get("matchExpressions")
        exprs = list(exprs) if isinstance(exprs, list) else []
        if expr not in exprs:
            exprs.append(expr)
            changed = True
        term["matchExpressions"] = exprs
    if not changed:
        return None
    required["nodeSelectorTerms"] = terms
    return f"required node affinity {key} in {', '.join(values)}"


def _copied(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """parent[key] as a new dict (a copy of the one there), so the pod as sent is never edited."""
    value = parent.get(key)
    copy: dict[str, Any] = dict(value) if isinstance(value, dict) else {}
    parent[key] = copy
    return copy
