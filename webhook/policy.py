"""Policies: the YAML files platform admins own, validated and compiled once at load.

A policy says, for one RDMA fabric, what a GPU training container needs so that NCCL uses RDMA:
the device resource and how many, the Multus network (if any), the /dev/shm size, IPC_LOCK and
the NCCL environment block, plus which namespaces may use it. Everything a decision needs is
computed here, at load time, so the admission path only looks things up.

Loading is all-or-nothing: a folder with any invalid file yields a `PolicyError` list naming the
file, the policy and the field, and no `PolicySet`, so a reload never half-applies.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any, Iterable

import jsonschema
import yaml

from webhook import k8s, transports
from webhook.policy_model import Claim, Device, EnvSetting, Network, Policy, PolicySet

API_VERSION = "rdma-webhook.io/v1alpha2"  # what policies are written in; v1alpha1 is migrated at load
API_VERSION_V1ALPHA1 = "rdma-webhook.io/v1alpha1"

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

SCHEMA_V1ALPHA1: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "name", "description", "namespaceSelector", "fabric", "device", "shm", "nccl"],
    "properties": {
        "apiVersion": {"const": API_VERSION_V1ALPHA1},
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
_NCCL_BLOCK = SCHEMA_V1ALPHA1["properties"]["nccl"]
_COUNT = {"type": "integer", "minimum": 1, "maximum": 64}
_IFNAME = {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,15}$"}

# v1alpha2: the fabric as data. A fabric is a transport (whose fallback signatures live in
# webhook/transports.py), zero or more device-plugin resources (rails), zero or more Multus
# networks, or a DRA claim, and a host-network mode.
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "name", "description", "namespaceSelector", "fabric", "shm", "nccl"],
    "properties": {
        "apiVersion": {"const": API_VERSION},
        # what both versions share
        **{key: SCHEMA_V1ALPHA1["properties"][key] for key in ("kind", "name", "description", "priority",
                                                                "namespaceSelector", "gpuResources")},
        "fabric": {
            "type": "object",
            "additionalProperties": False,
            "required": ["kind", "ncclNet"],
            "properties": {
                "kind": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63},
                "transport": {"enum": sorted(transports.TRANSPORTS)},
                "ncclNet": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
                "hcaDevices": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
                "providers": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
                "netPlugins": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
            },
        },
        "devices": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["resource"],
                "properties": {"resource": {"type": "string"}, "count": _COUNT, "perGpu": {"type": "boolean"}},
            },
        },
        "equivalentResources": {"type": "array", "items": {"type": "string"}},
        "networks": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name"],
                "properties": {
                    "name": {"type": "string"},
                    "namespace": {"type": "string"},
                    "interface": _IFNAME,
                    "resource": {"type": "string"},
                    "count": _COUNT,
                    "perGpu": {"type": "boolean"},
                },
            },
        },
        "claim": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name", "template"],
            "properties": {
                "name": {"type": "string"},
                "template": {"type": "string"},
                "equivalentTemplates": {"type": "array", "items": {"type": "string"}},
            },
        },
        "hostNetwork": {"enum": ["Forbidden", "Allowed", "Required"]},
        "shm": SCHEMA_V1ALPHA1["properties"]["shm"],
        "nccl": _NCCL_BLOCK,
        "workloadValidation": {"enum": ["Deny", "Warn"]},
    },
}
_VALIDATORS = {API_VERSION: jsonschema.Draft202012Validator(SCHEMA),
               API_VERSION_V1ALPHA1: jsonschema.Draft202012Validator(SCHEMA_V1ALPHA1)}

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
            if here == "hostNetwork" and isinstance(value, str):
                continue  # v1alpha2's mode (Forbidden/Allowed/Required): what pods must do, never added
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


def migrate_v1alpha1(doc: dict[str, Any]) -> dict[str, Any]:
    """A valid v1alpha1 policy as the v1alpha2 document that means the same (`policy migrate`
    prints it; the loader compiles v1alpha1 files through it). The one device and the one
    network become a list of one; a network keeps the device as its fallback resource (as
    v1alpha1 did when the NetworkAttachmentDefinition names none); an NCCL_SOCKET_IFNAME equal to
    the network's interface becomes `{interface}`, the name the pod will really have."""
    out: dict[str, Any] = {}
    for key, value in doc.items():
        if key in ("device", "network", "fabric", "nccl"):
            continue
        out[key] = value
    out["apiVersion"] = API_VERSION
    fabric = doc["fabric"]
    out["fabric"] = {"kind": fabric["kind"], "transport": "ib-verbs", "ncclNet": list(fabric["ncclNet"]),
                     "hcaDevices": list(fabric["hcaDevices"])}
    device = doc.get("device") or {}
    network = doc.get("network")
    amount = {k: device[k] for k in ("count", "perGpu") if k in device}
    if network is not None:
        net = dict(network)
        if device.get("resource"):
            net["resource"] = device["resource"]
        net.update(amount)
        out["networks"] = [net]
        out["hostNetwork"] = "Forbidden"
    elif device.get("resource"):
        out["devices"] = [{"resource": device["resource"], **amount}]
    nccl_block = dict(doc["nccl"])
    iface = (network or {}).get("interface")
    if iface and nccl_block.get("NCCL_SOCKET_IFNAME") == iface:
        nccl_block["NCCL_SOCKET_IFNAME"] = "{interface}"
    out["nccl"] = nccl_block
    return out


def _v1alpha1_field(field: str | None) -> str | None:
    """A v1alpha2 field path of a migrated v1alpha1 policy, as the v1alpha1 file names it."""
    if field is None:
        return None
    for v2, v1 in (("devices[0].", "device."), ("networks[0].resource", "device.resource"),
                   ("networks[0].count", "device.count"), ("networks[0].perGpu", "device.perGpu"), ("networks[0].", "network.")):
        if field.startswith(v2):
            return v1 + field[len(v2):]
    return field


def _schema_errors(doc: Any, file: str, name: str | None) -> list[PolicyError]:
    errors: list[PolicyError] = []
    version = doc.get("apiVersion") if isinstance(doc, dict) else None
    validator = _VALIDATORS.get(version) if isinstance(version, str) else None
    if validator is None:
        return [PolicyError(file, name, "apiVersion", f"{version!r} is not a policy version this webhook reads "
                                                      f"({API_VERSION} or {API_VERSION_V1ALPHA1})")]
    for err in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            extra = sorted(k for k in set(err.instance) - set(err.schema.get("properties", {})) if k not in _FORBIDDEN_KEYS)
            if extra:  # forbidden keys were reported above, more clearly
                errors.append(PolicyError(file, name, _field_path(list(err.absolute_path) + extra[:1]), f"unknown field(s) {', '.join(map(repr, extra))}"))
        else:
            errors.append(PolicyError(file, name, _field_path(err.absolute_path), err.message))
    return errors


def _without_invalid(doc: Any) -> dict[str, Any] | None:
    """`doc` without the fields its schema refuses (unknown keys, wrong types or values; a list
    item goes with its list), or None when that leaves no valid document (a required field
    missing or refused)."""
    if not isinstance(doc, dict) or _find_forbidden(doc):
        return None
    validator = _VALIDATORS.get(doc.get("apiVersion")) if isinstance(doc.get("apiVersion"), str) else None
    if validator is None:
        return None
    rest = copy.deepcopy(doc)
    for err in validator.iter_errors(doc):
        path = list(err.absolute_path)
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            node = _node(rest, path)
            if isinstance(node, dict):
                for key in set(err.instance) - set(err.schema.get("properties", {})):
                    node.pop(key, None)
            continue
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


def _check_resource(res: str, fld: str, file: str, name: str | None, errors: list[PolicyError]) -> None:
    problem = k8s.is_extended_resource_name(res)
    if problem:
        errors.append(PolicyError(file, name, fld, f"{res!r} is not a valid extended resource name: {problem}"))


def compile_policy(doc: Any, file: str) -> tuple[Policy | None, list[PolicyError]]:
    """Validate one policy document (v1alpha2, or v1alpha1 migrated) and compile it; (None,
    errors) when it is invalid."""
    name = doc.get("name") if isinstance(doc, dict) and isinstance(doc.get("name"), str) else None
    errors: list[PolicyError] = []
    for bad in _find_forbidden(doc):
        errors.append(PolicyError(file, name, bad, "policies may not ask for privileged mode, host namespaces, hostPath or capabilities (the webhook only ever adds IPC_LOCK)"))
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
            return None, [PolicyError(file, name, "device.resource", "required when the policy has no Multus network to take the resource from")]
        policy, errors = compile_policy(migrate_v1alpha1(doc), file)
        for err in errors:  # name the fields as the v1alpha1 file has them
            err.field = _v1alpha1_field(err.field)
            err.args = (str(err),)
        return policy, errors

    if isinstance(name, str) and not k8s.is_dns1123_label(name):
        errors.append(PolicyError(file, name, "name", "must be a DNS-1123 label (lowercase letters, digits and '-')"))
    gpu_resources = tuple(_strs(doc.get("gpuResources")) or ("nvidia.com/gpu",))
    for i, res in enumerate(gpu_resources):
        _check_resource(res, f"gpuResources[{i}]", file, name, errors)

    devices = []
    for i, d in enumerate(doc.get("devices") or ()):
        _check_resource(d["resource"], f"devices[{i}].resource", file, name, errors)
        devices.append(Device(d["resource"], int(d.get("count", 1)), bool(d.get("perGpu", False))))
    if len({d.resource for d in devices}) != len(devices):
        errors.append(PolicyError(file, name, "devices", "a resource is listed twice; give each rail its own resource"))
    equivalent = tuple(doc.get("equivalentResources") or ())
    for i, res in enumerate(equivalent):
        _check_resource(res, f"equivalentResources[{i}]", file, name, errors)

    networks = []
    interfaces: set[str] = set()
    for i, n in enumerate(doc.get("networks") or ()):
        if not k8s.is_dns1123_label(n["name"]):
            errors.append(PolicyError(file, name, f"networks[{i}].name", f"{n['name']!r} is not a valid NetworkAttachmentDefinition name"))
        if "namespace" in n and not k8s.is_dns1123_label(n["namespace"]):
            errors.append(PolicyError(file, name, f"networks[{i}].namespace", f"{n['namespace']!r} is not a valid namespace name"))
        if n.get("resource") is not None:
            _check_resource(n["resource"], f"networks[{i}].resource", file, name, errors)
        iface = n.get("interface")
        if iface is not None:
            if iface in interfaces or iface in ("eth0", "lo"):
                errors.append(PolicyError(file, name, f"networks[{i}].interface", f"{iface!r} is taken (by another network, or eth0/lo of the pod network)"))
            interfaces.add(iface)
        networks.append(Network(n["name"], n.get("namespace"), iface, n.get("resource"), int(n.get("count", 1)), bool(n.get("perGpu", False))))
    if len({(n.namespace, n.name) for n in networks}) != len(networks):
        errors.append(PolicyError(file, name, "networks", "a network is listed twice"))

    claim = None
    if doc.get("claim") is not None:
        c = doc["claim"]
        if not k8s.is_dns1123_label(c["name"]):
            errors.append(PolicyError(file, name, "claim.name", f"{c['name']!r} must be a DNS-1123 label (the pod's resourceClaims entry)"))
        for fld, template in [("claim.template", c["template"]), *((f"claim.equivalentTemplates[{i}]", t) for i, t in enumerate(c.get("equivalentTemplates") or ()))]:
            if not k8s.is_dns1123_subdomain(template):
                errors.append(PolicyError(file, name, fld, f"{template!r} is not a valid ResourceClaimTemplate name"))
        claim = Claim(c["name"], c["template"], tuple(c.get("equivalentTemplates") or ()))

    host_network = doc.get("hostNetwork") or ("Forbidden" if networks else "Allowed")
    if host_network == "Required" and networks:
        errors.append(PolicyError(file, name, "hostNetwork", "Required with Multus networks: Multus attaches no networks to host-network pods"))
    if not devices and not networks and claim is None and host_network != "Required":
        errors.append(PolicyError(file, name, "devices", "the policy gives no device resource, Multus network or DRA claim: "
                                                         "give one, or set hostNetwork: Required for a fabric reached through the host's interfaces"))

    shm = _obj(doc.get("shm"))
    if "shm" in doc and ("sizeLimit" in shm) == ("perGpu" in shm):
        errors.append(PolicyError(file, name, "shm", "give exactly one of sizeLimit (fixed) or perGpu (with an optional max)"))
    if "max" in shm and "perGpu" not in shm:
        errors.append(PolicyError(file, name, "shm.max", "only meaningful with shm.perGpu"))
    shm_fixed = _quantity_bytes(shm.get("sizeLimit"), file, name, "shm.sizeLimit", errors)
    shm_per_gpu = _quantity_bytes(shm.get("perGpu"), file, name, "shm.perGpu", errors)
    shm_max = _quantity_bytes(shm.get("max"), file, name, "shm.max", errors)

    fab = doc["fabric"]
    transport = fab.get("transport", "ib-verbs")
    nets = tuple(fab["ncclNet"])
    if any(n.casefold() == "socket" for n in nets):
        errors.append(PolicyError(file, name, "fabric.ncclNet", "'Socket' is NCCL's TCP transport, not an RDMA fabric"))
    if transport == "ib-verbs" and not fab.get("hcaDevices"):
        errors.append(PolicyError(file, name, "fabric.hcaDevices", "required for the ib-verbs transport (the device names NCCL_IB_HCA must keep)"))
    if transport == "libfabric" and not fab.get("providers"):
        errors.append(PolicyError(file, name, "fabric.providers", "required for the libfabric transport (the FI_PROVIDER values that are RDMA, e.g. efa)"))
    for fld in ("hcaDevices", "providers"):
        if fld in fab and transport != ("ib-verbs" if fld == "hcaDevices" else "libfabric"):
            errors.append(PolicyError(file, name, f"fabric.{fld}", f"not read by the {transport} transport"))
    fabric = transports.Fabric(str(name), fab["kind"], transport, nets, _expand_devices(fab.get("hcaDevices") or ()),
                               tuple(fab.get("providers") or ()), tuple(fab.get("netPlugins") or ()))
    table = transports.signatures(transport)

    env: list[EnvSetting] = []
    for var, spec in _obj(doc.get("nccl")).items():
        if not isinstance(spec, str) and not (isinstance(spec, dict) and isinstance(spec.get("value"), str)):
            continue  # reported by the schema
        value, enforce = (spec, False) if isinstance(spec, str) else (spec["value"], bool(spec.get("enforce", False)))
        if not isinstance(var, str) or not k8s.is_env_name(var):
            errors.append(PolicyError(file, name, f"nccl.{var}", "not a valid environment variable name"))
            continue
        templated = "{interface" in value
        if templated and not networks:
            errors.append(PolicyError(file, name, f"nccl.{var}", "{interface}/{interfaces} name the policy's Multus interfaces, and it has no networks"))
        env.append(EnvSetting(var, value, enforce, templated))
        # The policy's own block must not be what sends NCCL to TCP.
        for sig in table:
            if sig.variable == var and sig.severity == transports.DENY and not templated:
                why = sig.judge(value, fabric)
                if why:
                    errors.append(PolicyError(file, name, f"nccl.{var}", why))
    if errors:
        return None, errors

    selector_spec = doc["namespaceSelector"]
    own = tuple([d.resource for d in devices] + [n.resource for n in networks if n.resource])
    return Policy(
        name=name,
        description=doc["description"].strip(),
        source=file,
        priority=int(doc.get("priority", 0)),
        selector_spec=selector_spec,
        selector_size=k8s.selector_size(selector_spec),
        gpu_resources=gpu_resources,
        fabric=fabric,
        signatures=table,
        watched=tuple(sig.variable for sig in table),
        warned=tuple(sig.variable for sig in table if sig.severity == transports.WARN),
        scanned=frozenset([sig.variable for sig in table] + ["NCCL_DEBUG"]),
        devices=tuple(devices),
        networks=tuple(networks),
        claim=claim,
        equivalent_resources=equivalent,
        host_network=host_network,
        own_resources=own,
        expected_resources=frozenset((*own, *gpu_resources)),
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


def read_documents(path: str) -> tuple[list[Any], list[PolicyError]]:
    """The YAML documents of one policy file (not null), or why it cannot be read."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [], [PolicyError(path, None, None, f"cannot read: {exc}")]
    try:
        return [d for d in yaml.load_all(text, Loader=_StrictLoader) if d is not None], []
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else None
        return [], [PolicyError(path, None, where, f"not valid YAML: {getattr(exc, 'problem', None) or exc}")]


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
