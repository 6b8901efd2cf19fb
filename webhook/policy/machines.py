"""A policy's `machineTypes` compiled: one Policy per machine type, and the dict from each node
label value to the types that have it (`webhook.core.model.Machines`), all at load.

Each type is the policy's document with the type's sections laid over it (`fabric` and `nccl`
merged key by key, a null NCCL variable or sidecar removed, the lists replaced), compiled by the
same section compilers as any policy (`webhook.policy.sections`), so a type is checked as a whole
policy is; its problems are named under `machineTypes.types[i]`. What is checked here: type
names, a default that exists (and none with `Deny`), no two types with the same labels, and the
label keys and values being valid Kubernetes label text.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from webhook.core.model import Machines, MachineType, Policy
from webhook.grammar import k8s
from webhook.policy.errors import PolicyError
from webhook.policy.sections import compile_sections

DEFAULT, REQUIRE_AFFINITY, DENY = "Default", "RequireNodeAffinity", "Deny"
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")  # a label's name and value (Kubernetes)


def _label_ok(key: str, value: str) -> bool:
    """`key` a qualified name (an optional DNS-subdomain prefix and '/'), `value` a label value."""
    prefix, _, base = key.rpartition("/")
    return (
        bool(_NAME.match(base))
        and (not prefix or k8s.is_dns1123_subdomain(prefix))
        and (value == "" or bool(_NAME.match(value)))
    )


def compile_document(doc: dict[str, Any], file: str, name: str | None) -> tuple[Policy | None, list[PolicyError]]:
    """The Policy of a valid (v1alpha2) document, with its machine types when it has some."""
    spec = doc.get("machineTypes")
    if spec is None:
        return compile_sections(doc, file, name)
    base_doc = {k: v for k, v in doc.items() if k != "machineTypes"}
    base, errors = compile_sections(base_doc, file, name)
    seen = {(e.field, e.message) for e in errors}
    types: list[MachineType] = []
    for i, t in enumerate(spec["types"]):
        where = f"machineTypes.types[{i}]"
        _check_type(t, types, where, file, name, errors)
        policy, problems = compile_sections(_merged(base_doc, t), file, name)
        for e in problems:
            if (e.field, e.message) not in seen:  # the policy's own problems are named once
                errors.append(PolicyError(file, name, f"{where}.{e.field}", e.message))
        if policy is not None:
            labels = tuple((k, tuple(v) if isinstance(v, list) else (v,)) for k, v in t["nodeLabels"].items())
            types.append(MachineType(t["name"], labels, replace(policy, machine=t["name"])))
    mode = spec.get("whenUnselected", DEFAULT)
    default = spec.get("default")
    if mode == DENY and default is not None:
        errors.append(PolicyError(file, name, "machineTypes.default", "whenUnselected: Deny takes no default"))
    elif mode != DENY and default is None:
        errors.append(
            PolicyError(
                file,
                name,
                "machineTypes.default",
                f"required with whenUnselected: {mode} (the type a pod naming none gets); or set whenUnselected: Deny",
            )
        )
    elif default is not None and default not in {t["name"] for t in spec["types"]}:
        known = ", ".join(t["name"] for t in spec["types"])
        errors.append(
            PolicyError(file, name, "machineTypes.default", f"{default!r} is not a type (the types: {known})")
        )
    if errors or base is None:
        return None, errors
    return replace(base, machines=_machines(types, default, mode == REQUIRE_AFFINITY)), []


def _check_type(
    t: dict[str, Any], done: list[MachineType], where: str, file: str, name: str | None, errors: list[PolicyError]
) -> None:
    if not k8s.is_dns1123_label(t["name"]):
        errors.append(PolicyError(file, name, f"{where}.name", f"{t['name']!r} must be a DNS-1123 label"))
    if any(d.name == t["name"] for d in done):
        errors.append(PolicyError(file, name, f"{where}.name", f"{t['name']!r}: two types have this name"))
    for key, value in t["nodeLabels"].items():
        for v in value if isinstance(value, list) else [value]:
            if not _label_ok(key, v):
                errors.append(
                    PolicyError(file, name, f"{where}.nodeLabels.{key}", f"{key}={v} is not a valid node label")
                )
    labels = {(k, tuple(sorted(v if isinstance(v, list) else [v]))) for k, v in t["nodeLabels"].items()}
    for d in done:
        if labels == {(k, tuple(sorted(v))) for k, v in d.labels}:
            errors.append(
                PolicyError(
                    file, name, f"{where}.nodeLabels", f"the same labels as type {d.name!r}: no pod could choose"
                )
            )


def _merged(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """The document of one type: the policy's, with the type's sections laid over it."""
    doc = dict(base)
    for key, value in override.items():
        if key in ("name", "nodeLabels"):
            continue
        if key == "fabric":
            fabric = {**base["fabric"], **value}
            doc["fabric"] = {k: v for k, v in fabric.items() if v is not None}
        elif key == "nccl":
            block = {**base["nccl"], **value}
            doc["nccl"] = {k: v for k, v in block.items() if v is not None}
        elif value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    return doc


def _machines(types: list[MachineType], default: str | None, add_affinity: bool) -> Machines:
    by_label: dict[str, dict[str, frozenset[str]]] = {}
    for t in types:
        for key, values in t.labels:
            for value in values:
                found = by_label.setdefault(key, {})
                found[value] = found.get(value, frozenset()) | {t.name}
    by_name = {t.name: t for t in types}
    chosen = by_name.get(default) if default is not None else None
    unselected: Policy | None = None
    if chosen is not None:
        unselected = chosen.policy
        if add_affinity:  # the pod is pinned to the default's nodes by its first label
            key, values = chosen.labels[0]
            unselected = replace(chosen.policy, pin=(key, values), judged={}, resolved={})
    return Machines(tuple(types), by_name, by_label, chosen, add_affinity, unselected)
