"""Policies: the YAML files platform admins own, validated and compiled once at load.

A policy says, for one RDMA fabric, what a GPU training container needs so that NCCL uses RDMA:
the device resource and how many, the Multus network (if any), the /dev/shm size, IPC_LOCK and
the NCCL environment block, plus which namespaces may use it. Everything a decision needs is
computed here, at load time, so the admission path only looks things up.

Loading is all-or-nothing: a folder with any invalid file yields a `PolicyError` list naming the
file, the policy and the field, and no `PolicySet`, so a reload never half-applies.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Iterable

import jsonschema
import yaml

from webhook import k8s, nccl
from webhook.policy_model import EnvSetting, Policy, PolicySet

API_VERSION = "rdma-webhook.io/v1alpha1"

_QUANTITY = {"type": ["string", "integer"]}
_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["key", "operator"],
                "properties": {
                    "key": {"type": "string", "minLength": 1},
                    "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                    "values": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
    },
}

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "name", "description", "namespaceSelector", "fabric", "device", "shm", "nccl"],
    "properties": {
        "apiVersion": {"const": API_VERSION},
        "kind": {"const": "RdmaPolicy"},
        "name": {"type": "string", "minLength": 1, "maxLength": 63},
        "description": {"type": "string", "minLength": 1},
        "priority": {"type": "integer"},
        "namespaceSelector": _SELECTOR,
        "gpuResources": {"type": "array", "minItems": 1, "items": {"type": "string"}},
        "fabric": {
            "type": "object",
            "additionalProperties": False,
            "required": ["kind", "ncclNet", "hcaDevices"],
            "properties": {
                "kind": {"enum": ["erdma", "sriov", "infiniband", "roce"]},
                "ncclNet": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
                "hcaDevices": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
            },
        },
        "device": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "resource": {"type": "string"},
                "count": {"type": "integer", "minimum": 1, "maximum": 64},
                "perGpu": {"type": "boolean"},
            },
        },
        "network": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name"],
            "properties": {
                "name": {"type": "string"},
                "namespace": {"type": "string"},
                "interface": {"type": "string", "minLength": 1, "maxLength": 15},
            },
        },
        "shm": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"sizeLimit": _QUANTITY, "perGpu": _QUANTITY, "max": _QUANTITY},
        },
        "nccl": {
            "type": "object",
            "minProperties": 1,
            "additionalProperties": {
                "oneOf": [
                    {"type": "string"},
                    {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["value"],
                        "properties": {"value": {"type": "string"}, "enforce": {"type": "boolean"}},
                    },
                ]
            },
        },
        "workloadValidation": {"enum": ["Deny", "Warn"]},
    },
}
_VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)

# Fields a policy may never carry: the webhook only ever grants IPC_LOCK, never these.
_FORBIDDEN_KEYS = {"privileged", "hostNetwork", "hostPID", "hostIPC", "hostPath", "capabilities", "allowPrivilegeEscalation"}
_RANGE = re.compile(r"^(.*)\[(\d+)-(\d+)\]$")


class PolicyError(Exception):
    """One thing wrong with a policy file: where (file, policy, field) and what."""

    def __init__(self, file: str, policy: str | None, field: str | None, message: str):
        self.file, self.policy, self.field, self.message = file, policy, field, message
        super().__init__(str(self))

    def __str__(self) -> str:
        where = [self.file]
        if self.policy:
            where.append(f"policy {self.policy!r}")
        if self.field:
            where.append(f"field {self.field}")
        return f"{': '.join(where)}: {self.message}"


def _expand_devices(patterns: Iterable[str]) -> tuple[str, ...]:
    out: list[str] = []
    for pattern in patterns:
        m = _RANGE.match(pattern)
        if m:
            stem, lo, hi = m.group(1), int(m.group(2)), int(m.group(3))
            out.extend(f"{stem}{i}" for i in range(lo, hi + 1))
        else:
            out.append(pattern)
    return tuple(out)


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
            if key in _FORBIDDEN_KEYS:
                found.append(here)
            found.extend(_find_forbidden(value, here, seen))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found.extend(_find_forbidden(value, f"{path}[{i}]", seen))
    return found


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _strs(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _quantity_bytes(value: Any, file: str, name: str, fld: str, errors: list[PolicyError]) -> int | None:
    if value is None or not isinstance(value, (str, int, float)):
        return None
    try:
        q = k8s.parse_quantity(value)
    except ValueError:
        errors.append(PolicyError(file, name, fld, f"{value!r} is not a Kubernetes quantity (e.g. 64Gi)"))
        return None
    if q <= 0 or q != int(q):
        errors.append(PolicyError(file, name, fld, f"{value!r} must be a positive whole number of bytes"))
        return None
    return int(q)


def compile_policy(doc: Any, file: str) -> tuple[Policy | None, list[PolicyError]]:
    """Validate one policy document and compile it; (None, errors) when it is invalid."""
    name = doc.get("name") if isinstance(doc, dict) and isinstance(doc.get("name"), str) else None
    errors: list[PolicyError] = []
    for bad in _find_forbidden(doc):
        errors.append(PolicyError(file, name, bad, "policies may not ask for privileged mode, host namespaces, hostPath or capabilities (the webhook only ever adds IPC_LOCK)"))
    for err in sorted(_VALIDATOR.iter_errors(doc), key=lambda e: list(e.absolute_path)):
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            extra = sorted(k for k in set(err.instance) - set(err.schema.get("properties", {})) if k not in _FORBIDDEN_KEYS)
            if extra:  # forbidden keys were reported above, more clearly
                errors.append(PolicyError(file, name, _field_path(list(err.absolute_path) + extra[:1]), f"unknown field(s) {', '.join(map(repr, extra))}"))
        else:
            errors.append(PolicyError(file, name, _field_path(err.absolute_path), err.message))
    if not isinstance(doc, dict):
        return None, errors
    # The checks below run even after schema errors, on whatever has the right type, so that one
    # lint run reports every problem of a file (values of a wrong type were reported above).

    if isinstance(name, str) and not k8s.is_dns1123_label(name):
        errors.append(PolicyError(file, name, "name", "must be a DNS-1123 label (lowercase letters, digits and '-')"))
    gpu_resources = tuple(_strs(doc.get("gpuResources")) or ("nvidia.com/gpu",))
    for i, res in enumerate(gpu_resources):
        problem = k8s.is_extended_resource_name(res)
        if problem:
            errors.append(PolicyError(file, name, f"gpuResources[{i}]", f"{res!r} is not a valid extended resource name: {problem}"))

    device = _obj(doc.get("device"))
    resource = device.get("resource") if isinstance(device.get("resource"), str) else None
    if resource is not None:
        problem = k8s.is_extended_resource_name(resource)
        if problem:
            errors.append(PolicyError(file, name, "device.resource", f"{resource!r} is not a valid extended resource name: {problem}"))
    network = doc.get("network") if isinstance(doc.get("network"), dict) else None
    if network is not None:
        if isinstance(network.get("name"), str) and not k8s.is_dns1123_label(network["name"]):
            errors.append(PolicyError(file, name, "network.name", f"{network['name']!r} is not a valid NetworkAttachmentDefinition name"))
        if isinstance(network.get("namespace"), str) and not k8s.is_dns1123_label(network["namespace"]):
            errors.append(PolicyError(file, name, "network.namespace", f"{network['namespace']!r} is not a valid namespace name"))
    if resource is None and network is None and "device" in doc and "resource" not in device:
        errors.append(PolicyError(file, name, "device.resource", "required when the policy has no Multus network to take the resource from"))

    shm = _obj(doc.get("shm"))
    if "shm" in doc and ("sizeLimit" in shm) == ("perGpu" in shm):
        errors.append(PolicyError(file, name, "shm", "give exactly one of sizeLimit (fixed) or perGpu (with an optional max)"))
    if "max" in shm and "perGpu" not in shm:
        errors.append(PolicyError(file, name, "shm.max", "only meaningful with shm.perGpu"))
    shm_fixed = _quantity_bytes(shm.get("sizeLimit"), file, name, "shm.sizeLimit", errors)
    shm_per_gpu = _quantity_bytes(shm.get("perGpu"), file, name, "shm.perGpu", errors)
    shm_max = _quantity_bytes(shm.get("max"), file, name, "shm.max", errors)

    fabric = _obj(doc.get("fabric"))
    devices = _expand_devices(_strs(fabric.get("hcaDevices")))
    nets = tuple(_strs(fabric.get("ncclNet")))
    if any(n.casefold() == "socket" for n in nets):
        errors.append(PolicyError(file, name, "fabric.ncclNet", "'Socket' is NCCL's TCP transport, not an RDMA fabric"))

    env: list[EnvSetting] = []
    for var, spec in _obj(doc.get("nccl")).items():
        if not isinstance(spec, str) and not (isinstance(spec, dict) and isinstance(spec.get("value"), str)):
            continue  # reported by the schema
        value, enforce = (spec, False) if isinstance(spec, str) else (spec["value"], bool(spec.get("enforce", False)))
        if not isinstance(var, str) or not k8s.is_env_name(var):
            errors.append(PolicyError(file, name, f"nccl.{var}", "not a valid environment variable name"))
            continue
        env.append(EnvSetting(var, value, enforce))
        # The policy's own block must not be what sends NCCL to TCP.
        if var == "NCCL_IB_DISABLE" and nccl.ib_disabled(value):
            errors.append(PolicyError(file, name, f"nccl.{var}", f"{value!r} disables the IB/RoCE transport"))
        if var == "NCCL_NET" and value.strip().casefold() == "socket":
            errors.append(PolicyError(file, name, f"nccl.{var}", f"{value!r} is NCCL's TCP fallback (NET/Socket): every rank "
                                      f"would run on TCP sockets, without RDMA; set it to this fabric's transport "
                                      f"({', '.join(nets) or 'IB'}), enforced"))
        elif var == "NCCL_NET" and nets and not nccl.net_selected(value, nets):
            errors.append(PolicyError(file, name, f"nccl.{var}", f"{value!r} is not a transport of this fabric ({', '.join(nets)})"))
        if var == "NCCL_IB_HCA" and devices and not nccl.hca_selected_devices(value, devices):
            errors.append(PolicyError(file, name, f"nccl.{var}", f"{value!r} selects none of the fabric's devices ({', '.join(devices[:4])}...)"))
    if errors:
        return None, errors

    selector_spec = doc["namespaceSelector"]
    return Policy(
        name=name,
        description=doc["description"].strip(),
        source=file,
        priority=int(doc.get("priority", 0)),
        selector_spec=selector_spec,
        selector_size=k8s.selector_size(selector_spec),
        gpu_resources=gpu_resources,
        fabric_kind=fabric["kind"],
        nccl_nets=nets,
        hca_devices=devices,
        device_resource=resource,
        device_count=int(device.get("count", 1)),
        device_per_gpu=bool(device.get("perGpu", False)),
        network_name=network["name"] if network else None,
        network_namespace=network.get("namespace") if network else None,
        network_interface=network.get("interface") if network else None,
        shm_fixed=shm_fixed,
        shm_per_gpu=shm_per_gpu,
        shm_max=shm_max,
        env=tuple(env),
        workload_validation=doc.get("workloadValidation", "Deny"),
        allows_namespace=k8s.compile_selector(selector_spec),
    ), []


class _StrictLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key given twice in one mapping (SafeLoader keeps the last
    silently, so a second `nccl:` block would drop the first without a word)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            keys_seen: set[Any] = set()
            for key_node, _ in node.value:  # the keys as written: a `<<` merge may be overridden
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=deep)
                if isinstance(key, (str, int, float, bool)) and key in keys_seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark, f"found duplicate key {key!r}", key_node.start_mark)
                keys_seen.add(key)
        return super().construct_mapping(node, deep=deep)


def policy_files(directory: str | os.PathLike[str]) -> list[Path]:
    """The policy files of a folder: *.yaml and *.yml, not hidden (a mounted ConfigMap keeps its
    real files in hidden `..data` folders and exposes them through symlinks)."""
    root = Path(directory)
    return sorted(p for p in root.iterdir() if p.suffix in (".yaml", ".yml") and not p.name.startswith(".") and p.is_file())


def load_texts(texts: Iterable[tuple[str, str]]) -> tuple[PolicySet | None, list[PolicyError]]:
    """Compile (file name, YAML text) pairs into a PolicySet, or return every error found."""
    errors: list[PolicyError] = []
    policies: list[Policy] = []
    seen: dict[str, str] = {}
    for file, text in texts:
        try:
            docs = [d for d in yaml.load_all(text, Loader=_StrictLoader) if d is not None]
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
            errors.append(PolicyError(file, None, None, f"{where}not valid YAML: {getattr(exc, 'problem', None) or exc}"))
            continue
        for doc in docs:
            if not isinstance(doc, dict):
                errors.append(PolicyError(file, None, None, f"each YAML document must be a policy mapping, not {type(doc).__name__}"))
                continue
            policy, errs = compile_policy(doc, file)
            errors.extend(errs)
            if policy is None:
                continue
            if policy.name in seen:
                errors.append(PolicyError(file, policy.name, "name", f"duplicate policy name, also defined in {seen[policy.name]}"))
                continue
            seen[policy.name] = file
            policies.append(policy)
    if errors:
        return None, errors
    if not policies:
        return None, [PolicyError("(policies)", None, None, "no policies found")]
    return PolicySet(policies), []


def load_dir(directory: str | os.PathLike[str]) -> tuple[PolicySet | None, list[PolicyError]]:
    """Load every policy file of a folder, all or nothing."""
    try:
        files = policy_files(directory)
    except OSError as exc:
        return None, [PolicyError(str(directory), None, None, f"cannot read the policies folder: {exc.strerror or exc}")]
    texts = []
    errors = []
    for path in files:
        try:
            texts.append((str(path), path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as exc:
            errors.append(PolicyError(str(path), None, None, f"cannot read: {exc}"))
    if not files:
        return None, [PolicyError(str(directory), None, None, "no *.yaml policy files in the folder")]
    policies, more = load_texts(texts)
    errors.extend(more)
    return (None, errors) if errors else (policies, [])


def default_policies_dir() -> Path:
    """The repository's policies/ folder (beside the package), or the image's copy."""
    here = Path(__file__).resolve().parent.parent / "policies"
    return here if here.is_dir() else Path("/etc/rdma-webhook/policies")
