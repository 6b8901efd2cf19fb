"""The policy files' JSON Schemas (v1alpha2, and v1alpha1 which is migrated at load), with their
validators built once, and the fields no policy may ever carry."""

from __future__ import annotations

from typing import Any

import jsonschema

from webhook.fabrics import transports

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
# webhook/fabrics/transports.py), zero or more device-plugin resources (rails), zero or more Multus
# networks, or a DRA claim, and a host-network mode.
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "name", "description", "namespaceSelector", "fabric", "shm", "nccl"],
    "properties": {
        "apiVersion": {"const": API_VERSION},
        # what both versions share
        **{
            key: SCHEMA_V1ALPHA1["properties"][key]
            for key in ("kind", "name", "description", "priority", "namespaceSelector", "gpuResources")
        },
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
        # GKE multi-networking (webhook.fabrics.gke): GKE Network objects the pod is attached to
        # through the networking.gke.io/interfaces annotation, instead of Multus networks.
        "gkeNetworks": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name"],
                "properties": {"name": {"type": "string"}, "interface": _IFNAME},
            },
        },
        # A net plugin the nodes install on the host: checked in every GPU container (a warning
        # names the mount to add), never added.
        "pluginMounts": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["hostDir", "mountPath"],
                "properties": {
                    "hostDir": {"type": "string", "pattern": "^/"},
                    "mountPath": {"type": "string", "pattern": "^/"},
                },
            },
        },
        # A container the fabric needs in every pod with a GPU container, known by its image.
        "sidecar": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name", "image"],
            "properties": {"name": {"type": "string", "minLength": 1}, "image": {"type": "string", "minLength": 1}},
        },
        "claim": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name", "template"],
            "properties": {
                "name": {"type": "string"},
                "template": {"type": "string"},
                "equivalentTemplates": {"type": "array", "items": {"type": "string"}},
                # The template claims GPU and NIC pairs on one PCIe root (webhook.core.model.Claim).
                "aligned": {"type": "boolean"},
                # The attribute each GPU and its NIC share (webhook.policy.alignment).
                "alignment": {"enum": ["pcieRoot", "numaNode"]},
            },
        },
        # The DRA DeviceClasses of this fabric's NICs: a pod that claims one keeps its claim and gets
        # no second device; a claim of another policy's classes is a fabric mismatch.
        "dra": {
            "type": "object",
            "additionalProperties": False,
            "minProperties": 1,
            "properties": {
                "deviceClasses": {"type": "array", "items": {"type": "string", "minLength": 1}},
                "drivers": {"type": "array", "items": {"type": "string", "minLength": 1}},
                "selectors": {"type": "array", "items": {"type": "string", "minLength": 1}},
            },
        },
        "deviceFamilies": {"type": "array", "items": {"enum": list(transports.FAMILIES)}},
        "hostNetwork": {"enum": ["Forbidden", "Allowed", "Required"]},
        "shm": SCHEMA_V1ALPHA1["properties"]["shm"],
        "nccl": _NCCL_BLOCK,
        "workloadValidation": {"enum": ["Deny", "Warn"]},
        # What NCCL's own log must show for a job under this policy (webhook.proof, docs/proof.md):
        # each field overrides what is derived from the fabric.
        "proof": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "transport": {"enum": [*sorted(transports.TRANSPORTS), "tcpx"]},
                "devices": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
                "gdr": {"type": "boolean"},
                "rails": {"type": "integer", "minimum": 1, "maximum": 64},
                "onFallback": {"enum": ["report", "fail"]},
            },
        },
    },
}
# Machine types (webhook.core.machines): the fabric as it differs per kind of node. Each type names
# the node labels that are it and the sections it gives its own way: `fabric` and `nccl` are
# merged key by key into the policy's (a null NCCL variable or sidecar removes it), the lists are
# replaced whole.
_OVERRIDDEN = ("devices", "networks", "gkeNetworks", "pluginMounts", "claim", "dra", "equivalentResources")
_FABRIC = SCHEMA["properties"]["fabric"]
_FABRIC_OVERRIDE = {  # a null optional field is taken out (another transport does not read it)
    **_FABRIC,
    "required": [],
    "properties": {
        key: {"oneOf": [value, {"type": "null"}]}
        if key in ("transport", "hcaDevices", "providers", "netPlugins")
        else value
        for key, value in _FABRIC["properties"].items()
    },
}
_NCCL_OVERRIDE = {
    "type": "object",
    "additionalProperties": {"oneOf": [*_NCCL_BLOCK["additionalProperties"]["oneOf"], {"type": "null"}]},
}
SCHEMA["properties"]["machineTypes"] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["types"],
    "properties": {
        "default": {"type": "string", "minLength": 1},
        # a pod naming no type: the default's fabric (Default), the default's fabric and a required
        # node affinity on its first label (RequireNodeAffinity), or a denial (Deny, no default)
        "whenUnselected": {"enum": ["Default", "RequireNodeAffinity", "Deny"]},
        "types": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "nodeLabels"],
                "properties": {
                    "name": {"type": "string", "minLength": 1, "maxLength": 63},
                    "nodeLabels": {
                        "type": "object",
                        "minProperties": 1,
                        "additionalProperties": {
                            "oneOf": [
                                {"type": "string"},
                                {"type": "array", "minItems": 1, "items": {"type": "string"}},
                            ]
                        },
                    },
                    "fabric": _FABRIC_OVERRIDE,
                    "nccl": _NCCL_OVERRIDE,
                    "sidecar": {"oneOf": [SCHEMA["properties"]["sidecar"], {"type": "null"}]},
                    # a type whose nodes have no DRA NICs takes the policy's `dra` out
                    "dra": {"oneOf": [SCHEMA["properties"]["dra"], {"type": "null"}]},
                    **{key: SCHEMA["properties"][key] for key in _OVERRIDDEN if key != "dra"},
                },
            },
        },
    },
}
VALIDATORS = {
    API_VERSION: jsonschema.Draft202012Validator(SCHEMA),
    API_VERSION_V1ALPHA1: jsonschema.Draft202012Validator(SCHEMA_V1ALPHA1),
}

# Fields a policy may never carry: the webhook only ever grants IPC_LOCK, never these.
FORBIDDEN_KEYS = {
    "privileged",
    "hostNetwork",
    "hostPID",
    "hostIPC",
    "hostPath",
    "capabilities",
    "allowPrivilegeEscalation",
}
