"""The manifests of tests/manifests-nics/ (issue 42: every NIC a pod already has) as the webhook
and `rdma-webhook review` meet them: each workload's pods made as its controller makes them
(generateName, defaulted, the service-account token volume; an MPI launcher with the operator's
label), /mutate through the served handler with the patch applied to the pod as sent, /validate
through the served handler, and the cluster state with the namespace's policy label set.
"""

from __future__ import annotations

import base64
import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

import kube_objects as k
from webhook.admission import review as admission
from webhook.cluster.state import ClaimStore, FileClusterState, RuntimeStore
from webhook.core import keys
from webhook.core.model import PolicySet
from webhook.kinds.workloads import expand
from webhook.policy.load import load_dir

ROOT = Path(__file__).resolve().parent.parent
NICS = ROOT / "tests" / "manifests-nics"
STATE = NICS / "cluster-state.yaml"
NS = "ml-training"
_LAUNCHER = re.compile(r"\.Launcher\.template$|replicatedJobs\[launcher\]")
_POD_FIELDS = ("containers", "initContainers", "volumes")
GKE_INTERFACES = "networking.gke.io/interfaces"


def shipped() -> PolicySet:
    ps, errors = load_dir(str(ROOT / "policies"))
    assert ps is not None, errors
    return ps


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


def state_text(policy: str | None, namespace: str = NS) -> str:
    """The cluster state of tests/manifests-nics/, the namespace labelled with `policy`."""
    doc = yaml.safe_load(STATE.read_text())
    for item in doc["items"]:
        if item["kind"] == "Namespace" and item["metadata"]["name"] == namespace and policy:
            item["metadata"]["labels"][keys.NS_POLICY] = policy
    return yaml.safe_dump(doc, sort_keys=False)


def cluster(policy: str | None, extra: list[dict[str, Any]] = ()) -> tuple[FileClusterState, ClaimStore]:
    """The state, and its DRA objects with those of the input (`extra`), as the webhook's caches
    hold them once the input is applied."""
    state = FileClusterState.from_text(state_text(policy))
    claims = ClaimStore()
    claims.update(state.claims())
    for obj in extra:
        if obj.get("apiVersion", "").startswith("resource.k8s.io/"):
            claims.add(obj, NS)
    return state, claims


def group_of(obj: dict[str, Any]) -> str:
    api = str(obj.get("apiVersion") or "")
    return api.split("/")[0] if "/" in api else ""


def controller_pods(obj: dict[str, Any], ns: str = NS, runtimes: Any = None) -> list[tuple[str, dict[str, Any]]]:
    """(template path, pod) for each pod template of a workload, the pod as the API server hands
    it to the webhook when the workload's controller creates it."""
    name = obj["metadata"].get("name") or obj["metadata"].get("generateName", "x-").rstrip("-")
    out = []
    store = runtimes if runtimes is not None else RuntimeStore()
    for path, template in expand(obj, group_of(obj), obj["kind"], store, ns).templates:
        if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
            continue
        meta = template.get("metadata") or {}
        spec = copy.deepcopy(template.get("spec") or {})
        labels = dict(meta.get("labels") or {})
        if _LAUNCHER.search(path):
            labels[keys.MPI_JOB_ROLE] = keys.MPI_LAUNCHER
        inject = labels.pop(keys.POD_INJECT, None) == keys.POD_INJECT_TRUE
        extra = {key: v for key, v in spec.items() if key not in _POD_FIELDS}
        if not isinstance(spec.get("containers"), list):
            continue
        pod = k.pod(
            spec["containers"],
            namespace=ns,
            generate_name=f"{name}-",
            labels=labels,
            annotations=meta.get("annotations"),
            inject=inject,
            init_containers=spec.get("initContainers"),
            volumes=spec.get("volumes"),
            **extra,
        )
        out.append((path, pod))
    return out


def mutate(pod: dict[str, Any], policies: PolicySet, state: FileClusterState, claims: Any, config_maps: Any = None):
    """/mutate: (response, the pod with the patch applied, decision)."""
    body = k.body(k.admission_review(pod, namespace=pod["metadata"]["namespace"]))
    status, doc, decision, _ = admission.handle(
        body, policies, state.namespace, state.attachments(), config_maps, claims=claims
    )
    assert status == 200
    resp = doc["response"]
    out = copy.deepcopy(pod)
    if "patch" in resp:
        out = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(resp["patch"])))
    return resp, out, decision


def validate(obj: dict[str, Any], policies: PolicySet, state: FileClusterState, claims: Any, config_maps: Any = None):
    """/validate of a workload: (response, decision)."""
    group = group_of(obj)
    version = str(obj["apiVersion"]).split("/")[-1]
    ns = obj["metadata"].get("namespace") or NS
    rv = k.admission_review(obj, namespace=ns, kind=obj["kind"], resource=obj["kind"].lower() + "s")
    for key in ("kind", "requestKind"):
        rv["request"][key].update(group=group, version=version)
    status, doc, decision, _ = admission.handle_validate(
        k.body(rv), policies, state.namespace, state.attachments(), state.runtimes(), config_maps, claims=claims
    )
    assert status == 200
    return doc["response"], decision


NIC_PREFIXES = ("rdma/", "vpc.amazonaws.com/efa", "aliyun/erdma", "openshift.io/", "intel.com/", "nvidia.com/hostdev")


def nics(pod: dict[str, Any]) -> list[Any]:
    """Every NIC a pod has: NIC resources per container, its Multus and GKE networks, its claims."""
    out: list[Any] = []
    for c in pod["spec"]["containers"]:
        for section in ("limits", "requests"):
            values = (c.get("resources") or {}).get(section) or {}
            out.extend((c["name"], section, r, v) for r, v in values.items() if r.startswith(NIC_PREFIXES))
    annotations = pod["metadata"].get("annotations") or {}
    out.append(("networks", annotations.get(keys.MULTUS_NETWORKS), annotations.get(GKE_INTERFACES)))
    out.append(("claims", json.dumps(pod["spec"].get("resourceClaims"), sort_keys=True)))
    return out


def env_of(pod: dict[str, Any], index: int = 0) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][index].get("env") or ()}
