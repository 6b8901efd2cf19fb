"""What `policy lint` says beyond the loader's errors: what is valid but probably not meant,
addressed to the policy's author."""

from __future__ import annotations

import yaml

from webhook.policy.claim_template import MIN_KUBERNETES
from webhook.policy.claim_template import ALIGNMENT_ATTRIBUTES
from webhook.policy.load import policy_files


def _documents(directory: str):
    """(path, document) of every policy file of the folder that reads as YAML (what does not is
    the load's error to report)."""
    try:
        files = policy_files(directory)
    except OSError:
        return
    for path in files:
        try:
            docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        for doc in docs:
            if isinstance(doc, dict):
                yield path, doc


def lint_warnings(directory: str) -> list[str]:
    """What is valid but probably not meant: keys of a policy's NCCL block that are not NCCL
    variables (the block only ever sets NCCL_* variables' meaning; UCX_*, GLOO_* and the like
    are injected as given, but belong in the pod spec)."""
    out = []
    for path, doc in _documents(directory):
        block, name, fabric = doc.get("nccl"), doc.get("name"), doc.get("fabric")
        transport = fabric.get("transport") if isinstance(fabric, dict) else None
        # libfabric reads FI_* variables: a libfabric policy pins its provider with them
        read = ("NCCL_", "FI_") if transport == "libfabric" else ("NCCL_",)
        for key in block if isinstance(block, dict) else ():
            if isinstance(key, str) and not key.startswith(read):
                out.append(
                    f"{path}: policy {name!r}: field nccl.{key}: not a variable of the fabric's transport "
                    f"(NCCL reads NCCL_*, libfabric FI_*); set it in the pod spec, or check the spelling"
                )
    return out


def lint_notes(directory: str) -> list[str]:
    """What a valid policy needs of the cluster that no file can show: an aligned claim needs
    Kubernetes 1.34 and GPUs from a DRA driver, and its templates in each namespace."""
    out = []
    for path, doc in _documents(directory):
        claim, name = doc.get("claim"), doc.get("name")
        if isinstance(claim, dict) and claim.get("aligned") is True:
            attribute = ALIGNMENT_ATTRIBUTES.get(str(claim.get("alignment", "pcieRoot")), "its alignment")
            out.append(
                f"{path}: policy {name!r}: claim.aligned needs Kubernetes >= {MIN_KUBERNETES} "
                f"(resource.k8s.io/v1, the {attribute} attribute) and GPUs from a DRA driver (NVIDIA's "
                f"GPU DRA driver, DeviceClass gpu.nvidia.com), not the device plugin: a pod's nvidia.com/gpu "
                f"request is taken out and its GPUs claimed with their NICs; create the templates with "
                f"`rdma-webhook policy claim-template {name} --gpus N` in each namespace"
            )
    return out
