"""One policy document compiled into a `Policy`, validated once at load.

A policy says, for one RDMA fabric, what a GPU training container needs so that NCCL uses RDMA:
the device resource and how many, the Multus network (if any), the /dev/shm size, IPC_LOCK and
the NCCL environment block, plus which namespaces may use it. Everything a decision needs is
computed here, at load time, so the admission path only looks things up: this module checks a
document against its schema (and migrates v1alpha1); `webhook.policy.sections` compiles its sections.

What is wrong is a `PolicyError` naming the file, the policy and the field; `webhook.policy.load`
loads a folder all or nothing from these.
"""

from __future__ import annotations

import copy
import difflib
from typing import Any, Iterable

from webhook.core.model import Policy
from webhook.policy.errors import PolicyError
from webhook.policy.migrate import migrate_v1alpha1, v1alpha1_field
from webhook.policy.schema import API_VERSION, API_VERSION_V1ALPHA1, FORBIDDEN_KEYS, VALIDATORS
from webhook.policy.machines import compile_document

__all__ = ["PolicyError", "compile_policy"]


def _field_path(path: Iterable[Any]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _find_forbidden(node: Any, path: str = "", seen: set[int] | None = None) -> list[str]:
    # `seen`: YAML aliases make one object appear at many paths; walking each once keeps an
    # alias bomb ("billion laughs") linear instead of exponential.
    seen = set() if seen is None else seen
    if isinstance(node, (dict, list)):
        if id(node) in seen:
            return []
        seen.add(id(node))
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{path}.{key}" if path else str(key)
            if here == "hostNetwork" and isinstance(value, str):
                continue  # v1alpha2's mode (Forbidden/Allowed/Required): what pods must do, never added
            if key in FORBIDDEN_KEYS:
                found.append(here)
            found.extend(_find_forbidden(value, here, seen))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found.extend(_find_forbidden(value, f"{path}[{i}]", seen))
    return found


def _schema_errors(doc: Any, file: str, name: str | None) -> list[PolicyError]:
    errors: list[PolicyError] = []
    version = doc.get("apiVersion") if isinstance(doc, dict) else None
    validator = VALIDATORS.get(version) if isinstance(version, str) else None
    if validator is None:
        return [
            PolicyError(
                file,
                name,
                "apiVersion",
                f"{version!r} is not a policy version this webhook reads ({API_VERSION} or {API_VERSION_V1ALPHA1})",
            )
        ]
    for err in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            known = sorted(err.schema.get("properties", {}))
            extra = sorted(k for k in set(err.instance) - set(known) if k not in FORBIDDEN_KEYS)
            for key in extra:  # forbidden keys were reported above, more clearly
                guess = _did_you_mean(key, known, err.instance)
                hint = f"did you mean {guess!r}?" if guess else f"the fields here are {', '.join(known)}"
                errors.append(
                    PolicyError(
                        file, name, _field_path(list(err.absolute_path) + [key]), f"unknown field {key!r}: {hint}"
                    )
                )
        elif err.validator == "required" and isinstance(err.validator_value, list) and isinstance(err.instance, dict):
            for key in err.validator_value:
                if key not in err.instance and not any(_did_you_mean(k, [key], {}) for k in err.instance):
                    errors.append(
                        PolicyError(
                            file,
                            name,
                            _field_path(list(err.absolute_path) + [key]),
                            "missing: this field is required; add it",
                        )
                    )
        else:
            errors.append(PolicyError(file, name, _field_path(err.absolute_path), err.message))
    unique: dict[str, PolicyError] = {}
    for e in errors:
        unique.setdefault(str(e), e)
    return list(unique.values())


def _did_you_mean(key: Any, known: list[str], present: Any) -> str | None:
    """The known field an unknown one is probably a typo of (not one already given)."""
    if not isinstance(key, str):
        return None
    taken = set(present) if isinstance(present, dict) else set()
    found = difflib.get_close_matches(key, [k for k in known if k not in taken], n=1, cutoff=0.75)
    if not found:  # case and separators: NCCL-style `HCA_devices`, `hcadevices`
        folded = {k.lower().replace("_", "").replace("-", ""): k for k in known if k not in taken}
        return folded.get(key.lower().replace("_", "").replace("-", ""))
    return found[0]


def _without_invalid(doc: Any) -> dict[str, Any] | None:
    """`doc` without the fields its schema refuses (unknown keys, wrong types or values; a list
    item goes with its list), or None when that leaves no valid document (a required field
    missing or refused)."""
    if not isinstance(doc, dict) or _find_forbidden(doc):
        return None
    validator = VALIDATORS.get(doc.get("apiVersion")) if isinstance(doc.get("apiVersion"), str) else None
    if validator is None:
        return None
    rest = copy.deepcopy(doc)
    for err in validator.iter_errors(doc):
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            node = _node(rest, list(err.absolute_path))
            if isinstance(node, dict):
                known = sorted(err.schema.get("properties", {}))
                for key in set(err.instance) - set(known):
                    value = node.pop(key, None)
                    # a typo of a field stands for that field, so that one typo is one problem
                    # (not also "required" and what follows from a missing value)
                    guess = _did_you_mean(key, known, node)
                    if guess is not None and value is not None:
                        node[guess] = value
    # What is still refused once each typo stands for its field: checked on `rest`, so that a typo
    # of a required field (`ncclNets`) does not take its whole object out as "required" would.
    for err in list(validator.iter_errors(rest)):
        if err.validator == "additionalProperties":
            continue
        path = list(err.absolute_path)
        while path and isinstance(path[-1], int):
            path.pop()
        if len(path) < 1:
            return None
        parent = _node(rest, path[:-1])
        if isinstance(parent, dict):
            parent.pop(path[-1], None)
    return rest if validator.is_valid(rest) else None


def _node(doc: Any, path: list[Any]) -> Any:
    for part in path:
        if isinstance(doc, dict):
            doc = doc.get(part)
        elif isinstance(doc, list) and isinstance(part, int) and part < len(doc):
            doc = doc[part]
        else:
            return None
    return doc


def compile_policy(doc: Any, file: str) -> tuple[Policy | None, list[PolicyError]]:
    """Validate one policy document (v1alpha2, or v1alpha1 migrated) and compile it; (None,
    errors) when it is invalid."""
    name = doc.get("name") if isinstance(doc, dict) and isinstance(doc.get("name"), str) else None
    errors: list[PolicyError] = []
    for bad in _find_forbidden(doc):
        errors.append(
            PolicyError(
                file,
                name,
                bad,
                "policies may not ask for privileged mode, host namespaces, hostPath or capabilities (the webhook only ever adds IPC_LOCK)",
            )
        )
    errors.extend(_schema_errors(doc, file, name))
    if errors:
        # One lint run reports every problem of a file: the checks below also run on what is
        # left once the fields the schema refused are taken out (when that leaves a valid
        # document), and their findings are added.
        rest = _without_invalid(doc)
        if rest is not None:
            seen = {str(e) for e in errors}
            errors.extend(e for e in compile_policy(rest, file)[1] if str(e) not in seen)
        return None, errors
    if doc["apiVersion"] == API_VERSION_V1ALPHA1:
        v1_device = doc["device"]
        if v1_device.get("resource") is None and doc.get("network") is None:
            return None, [
                PolicyError(
                    file,
                    name,
                    "device.resource",
                    "required when the policy has no Multus network to take the resource from",
                )
            ]
        policy, errors = compile_policy(migrate_v1alpha1(doc), file)
        for err in errors:  # name the fields as the v1alpha1 file has them
            err.field = v1alpha1_field(err.field)
            err.args = (str(err),)
        return policy, errors
    return compile_document(doc, file, name)
