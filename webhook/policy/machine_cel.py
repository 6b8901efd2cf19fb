"""The machine type of a pod, in CEL: what the generated ValidatingAdmissionPolicy of a policy with
`machineTypes` reads to check the rules of the pod's own type.

The type comes from the pod's own node selection, read as `webhook.core.machines` reads it (not
from a label or annotation a user or a later webhook could set):

- `spec.nodeSelector`: each key some type declares that the pod sets must be one of a type's
  values for that key (the entries are ANDed);
- the required node affinity's `nodeSelectorTerms`: ORed; in a term, the `In` expressions on
  declared keys are ANDed, each allowing the types with one of its values. A term that names no
  type (only other keys, other operators) leaves the pod free, and beside terms that name one it
  is a problem, as is a term whose expressions leave no type;
- exactly one type left: that type; none named: the policy's default (`whenUnselected: Default`
  or `RequireNodeAffinity`), or none (`Deny`); otherwise none.

`machine(machines)` is CEL that evaluates to the type's name, or '' when the webhook would deny
the pod with `machine-type`. It reads a few map entries per type for a pod with a nodeSelector,
and each term's expressions once per type for a pod with a required node affinity (a handful of
entries): tens of microseconds in the API server's CEL (benchmarks/celcost), evaluated once in
the match condition and once more, as a variable, only for a pod that is refused.
tests/policy/test_machine_cel.py checks it against `webhook.core.machines.choose` in the API
server's own CEL.
"""

from __future__ import annotations

from webhook.core.machines import AFFINITY_KEY
from webhook.core.model import Machines, MachineType
from webhook.policy.cel import cel_list, cel_str

_AFFINITY = "object.spec.affinity"
_NODE = f"{_AFFINITY}.nodeAffinity"
_REQUIRED = f"{_NODE}.{AFFINITY_KEY}"
_SELECTOR = "object.spec.nodeSelector"


def _terms() -> str:
    """The required node affinity's terms, [] when the pod has none."""
    path = [_AFFINITY, _NODE, _REQUIRED, f"{_REQUIRED}.nodeSelectorTerms"]
    return f"({' && '.join(f'has({p})' for p in path)} ? {_REQUIRED}.nodeSelectorTerms : [])"


def _declared(machines: Machines) -> list[str]:
    return sorted(machines.by_label)


def _names_type(machines: Machines) -> str:
    """An expression `e` of a term that names a type: `In` on a key some type declares."""
    return f"(e.operator == 'In' && has(e.values) && e.key in {cel_list(_declared(machines))})"


def _named(machines: Machines) -> str:
    """A term `t` that names a type."""
    return f"(has(t.matchExpressions) && t.matchExpressions.exists(e, {_names_type(machines)}))"


def _allows(mt: MachineType, machines: Machines) -> str:
    """A term `t` whose `In` expressions on declared keys each allow type `mt`."""
    values = dict(mt.labels)
    chain = ""
    for key in _declared(machines):
        allowed = f"e.values.exists(v, v in {cel_list(values[key])})" if key in values else "false"
        chain += f"e.key == {cel_str(key)} ? {allowed} : "
    return (
        f"(!has(t.matchExpressions) || t.matchExpressions.all(e, e.operator != 'In' || !has(e.values) || "
        f"({chain}true)))"
    )


def _selector_named(machines: Machines) -> str:
    keys = " || ".join(f"{cel_str(k)} in {_SELECTOR}" for k in _declared(machines))
    return f"(has({_SELECTOR}) && ({keys}))"


def _selector_allows(mt: MachineType, machines: Machines) -> str:
    """The pod's nodeSelector allows type `mt`: each declared key it sets has one of its values."""
    values = dict(mt.labels)
    parts = []
    for key in _declared(machines):
        k = cel_str(key)
        parts.append(
            f"(!({k} in {_SELECTOR}) || {_SELECTOR}[{k}] in {cel_list(values[key])})"
            if key in values
            else f"!({k} in {_SELECTOR})"
        )
    return f"(!has({_SELECTOR}) || ({' && '.join(parts)}))"


def machine(machines: Machines) -> str:
    """CEL: the name of the pod's machine type, '' when its selection names none the webhook
    accepts (`webhook.core.machines.choose`).

    Bound once each (`[x].map(name, ...)`, the API server's CEL has no `cel.bind`): `ts`, the
    terms; `per`, for each term the types it allows (a bool per type, in the policy's order; []
    for a term that names none), so that each term's expressions are read once; `an`, some term
    names a type; `b`, whether each type is allowed by the nodeSelector and the terms."""
    types = machines.types
    allows = ", ".join(_allows(mt, machines) for mt in types)
    per = f"ts.map(t, {_named(machines)} ? [{allows}] : [])"
    problem = f"an && per.exists(l, size(l) == 0 || !({' || '.join(f'l[{i}]' for i in range(len(types)))}))"
    default = cel_str(machines.default.name) if machines.default is not None else "''"
    allowed = ", ".join(
        f"{_selector_allows(mt, machines)} && (!an || per.exists(l, l[{i}]))" for i, mt in enumerate(types)
    )
    count = " + ".join(f"(b[{i}] ? 1 : 0)" for i in range(len(types)))
    pick = "".join(f"b[{i}] ? {cel_str(mt.name)} : " for i, mt in enumerate(types))
    one = f"[[{allowed}]].map(b, {count} == 1 ? ({pick}'') : '')[0]"
    body = f"({problem}) ? '' : !(an || {_selector_named(machines)}) ? {default} : {one}"
    return f"[{_terms()}].map(ts, [{per}].map(per, [per.exists(l, size(l) > 0)].map(an, {body})[0])[0])[0]"
