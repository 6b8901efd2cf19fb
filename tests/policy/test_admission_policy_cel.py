"""The generated ValidatingAdmissionPolicies (webhook/policy/admission_policy.py) evaluated as the
API server evaluates them, in `make test`: k8s.io/apiserver 1.37's own matching, match
conditions, validations and messageExpressions, in process (tests/policy/celcheck, a Go harness
built once by scripts/build-celcheck.sh; `make test` names it in RDMA_WEBHOOK_CELCHECK).

For every shipped policy: a realistic GPU pod, shaped as the API server sends it (defaulted, the
service-account token volume), goes through the webhook's own /mutate (webhook.admission.review)
and its patch is applied; that pod, as the API server holds it when it runs the policies, is
admitted. Then each way a later webhook or the user can break the final state (the device gone,
IPC_LOCK not added or dropped, CAP_-prefixed and lower-case capabilities, NCCL_IB_DISABLE /
NCCL_NET / NCCL_NET_PLUGIN turning the transport off, repeated env names where the last one wins,
/dev/shm moved off RAM, the networks annotation, hostNetwork, the sidecar) is judged by the
generated policy AND by the webhook's own final-state check (`judge(..., final=True)`, what
`/validate` answers and what the policies are generated from): both admit or both refuse, and the
policy's message is the webhook's finding (same rule, same container, same words). The three rules
`/validate` does not make (shm, multus-networks, gke-networks) are checked against /mutate
instead: the webhook, sent the broken pod, puts the piece back, and the repaired pod is admitted.

The expectations come from the webhook's decision on each pod, never from the generated CEL
text: a generator bug (a rule left out of the match condition, `CAP_IPC_LOCK` not read as
IPC_LOCK, the first env entry read instead of the last) makes the two disagree here.
"""

from __future__ import annotations

import base64
import copy
import functools
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Callable

import jsonpatch
import pytest
import yaml

import kube_objects as k
import strategies as S
from conftest import POLICIES, ROOT
from webhook.admission import review
from webhook.admission.judge import judge
from webhook.cluster.state import FileClusterState
from webhook.core import keys, machines
from webhook.core.model import MachineType, Policy
from webhook.fabrics import gke
from webhook.policy import admission_policy as ap
from webhook.policy.claim_template import aligned_template
from webhook.policy.load import load_dir

# A policy made for this test beside the shipped ones, modelled on policies/roce-dranet-aligned.yaml:
# machine types whose GPUs differ (each aligned GPU+NIC claim makes its own containers targets,
# `cel.is_target`), so that the generated variables must pick the pod's type to find its
# targets; two of the types share their claim and differ in an enforced variable
# (NCCL_IB_GID_INDEX=3, the RoCE v2 GID of NVIDIA's NCCL docs); a pod that selects no type is
# denied (whenUnselected: Deny). The shipped policies' types all have the same GPUs.
TYPED_TEST_POLICY = """\
apiVersion: rdma-webhook.io/v1alpha2
kind: RdmaPolicy
name: roce-typed-claims
description: Test policy (tests/policy/test_admission_policy_cel.py), after roce-dranet-aligned.
priority: 0
namespaceSelector: {}
gpuResources: [nvidia.com/gpu]
fabric: {kind: roce, transport: ib-verbs, ncclNet: [IB], hcaDevices: ["mlx5_[0-63]"]}
claim: {name: gpus-and-nics, template: "gpu-nic-set-{gpus}", aligned: true}
dra: {drivers: [dra.net], selectors: [rdma]}
hostNetwork: Forbidden
shm: {perGpu: 8Gi, max: 256Gi}
nccl:
  NCCL_NET: {value: IB, enforce: true}
  NCCL_IB_HCA: mlx5
  NCCL_DEBUG: INFO
  NCCL_DEBUG_SUBSYS: INIT,NET
machineTypes:
  whenUnselected: Deny
  types:
    - name: h100
      nodeLabels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
    - name: h200
      nodeLabels: {nvidia.com/gpu.product: NVIDIA-H200}
      nccl: {NCCL_IB_GID_INDEX: {value: "3", enforce: true}}
    - name: b200
      nodeLabels: {nvidia.com/gpu.product: NVIDIA-B200}
      claim: {name: gpus-and-nics, template: "gpu-nic-pair-{gpus}", aligned: true}
"""


def _load_with_test_policy() -> tuple[Any, list[Any]]:
    folder = Path(tempfile.mkdtemp(prefix="rdma-webhook-policies-"))
    for path in POLICIES.glob("*.yaml"):
        (folder / path.name).write_text(path.read_text())
    (folder / "roce-typed-claims.yaml").write_text(TYPED_TEST_POLICY)
    return load_dir(folder)


PS, _ERRORS = _load_with_test_policy()
assert PS is not None, _ERRORS
NAMES = sorted(PS.by_name)
STATE = S.cluster_state()
HOST_RDMA = "host-infiniband"
# Rules the generated policy makes and /validate does not (docs/admission-policy.md).
POLICY_ONLY = {"shm", "multus-networks", "gke-networks"}


@functools.lru_cache(maxsize=1)
def celcheck() -> str:
    """The harness binary: RDMA_WEBHOOK_CELCHECK (what `make test` sets from
    scripts/build-celcheck.sh); outside `make test`, built here by the same script. Under `make
    test` (which sets RDMA_WEBHOOK_EXPECT in the same command) an unset or empty variable (the
    script failed) is a failure, never a skip."""
    given = os.environ.get("RDMA_WEBHOOK_CELCHECK")
    if given:
        assert os.access(given, os.X_OK), f"RDMA_WEBHOOK_CELCHECK={given} is not an executable"
        return given
    if os.environ.get("RDMA_WEBHOOK_EXPECT"):
        pytest.fail(
            "run by `make test` (RDMA_WEBHOOK_EXPECT is set) without RDMA_WEBHOOK_CELCHECK: the Makefile's test target sets it from "
            "scripts/build-celcheck.sh",
            pytrace=False,
        )
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build-celcheck.sh")], capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0, f"scripts/build-celcheck.sh failed:\n{proc.stderr[-3000:]}"
    return proc.stdout.strip().splitlines()[-1]


def failed_rules(row: dict[str, Any]) -> set[str]:
    """The rules (the `[rule]` that ends each message) whose validations a harness row failed."""
    return {v["message"].rsplit("[", 1)[1].rstrip("]") for v in row["validations"] if not v["passed"]}


def evaluate(objects: list[dict[str, Any]], pods: list[dict[str, Any]], tmp: Path) -> list[dict[str, Any]]:
    """The harness's verdicts on each pod (one row per policy and pod, in pod order)."""
    path = tmp / "objects.yaml"
    path.write_text(ap.to_yaml(objects))
    proc = subprocess.run(
        [celcheck(), "-policies", str(path), "-pods", "-"],
        input=json.dumps(pods),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


# -- the pods: realistic, through the webhook's own /mutate ---------------------------------------


def _nic_objects(policy: Policy) -> list[dict[str, Any]]:
    """A DRA policy's NICs as its cluster holds them: a DeviceClass (its first named class) and,
    in every namespace, a ResourceClaimTemplate of it (and the aligned GPU+NIC templates)."""
    dra = policy.dra
    assert dra is not None
    driver = sorted(dra.drivers)[0] if dra.drivers else "nic.example.com"
    cel = f'device.driver == "{driver}"' + "".join(
        f' && device.attributes["{driver}"].note == "{t}"' for t in dra.selectors[:1]
    )
    cls = sorted(dra.classes)[0] if dra.classes else f"{policy.name}-nic"
    out: list[dict[str, Any]] = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": cls},
            "spec": {"selectors": [{"cel": {"expression": cel}}]},
        }
    ]
    for ns in sorted(STATE._namespaces):
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": f"{policy.name}-nic", "namespace": ns},
                "spec": {"spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": cls}}]}}},
            }
        )
        if policy.claim is not None and policy.claim.aligned:
            out.extend(
                aligned_template(policy.claim.template_for(n), n, "gpu.nvidia.com", cls, ns) for n in range(1, 9)
            )
    return out


def _dra_objects() -> list[dict[str, Any]]:
    """The NIC objects of every policy and of each of its machine types (their claims differ), once each."""
    out: dict[str, dict[str, Any]] = {}
    for p in PS.by_name.values():
        for q in (p, *(t.policy for t in p.machines.types)) if p.machines is not None else (p,):
            for o in _nic_objects(q) if q.dra else []:
                out[json.dumps([o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]])] = o
    return list(out.values())


CLAIMS = FileClusterState([], [], [], _dra_objects()).claims()


def _sent(
    policy: Policy, namespace: str, name: str, selector: dict[str, str] | None = None, claim: bool = False
) -> dict[str, Any]:
    """A labelled 8-GPU training pod asking for policy `name` (its annotation), as the API server
    sends it to /mutate, with what the policy (`policy`: as it is on the pod's machine type) leaves
    to the job: a DRA policy's NIC claim, a host fabric's hostNetwork and /dev/infiniband
    (hostPath, as oracle-quickstart/oci-hpc-oke manifests/nccl-tests/host-network/ mounts it), a
    fabric's sidecar; and a CPU log shipper. `selector`: its nodeSelector (a machine type's node,
    as GoogleCloudPlatform/cluster-toolkit examples/gke-a4x/nccl-jobset-example.yaml selects
    cloud.google.com/gke-accelerator)."""
    mounts: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    spec: dict[str, Any] = {}
    if selector:
        spec["nodeSelector"] = selector
    if policy.host_network == "Required":
        spec["hostNetwork"] = True
        volumes.append({"name": HOST_RDMA, "hostPath": {"path": "/dev/infiniband", "type": ""}})
        mounts.append({"name": HOST_RDMA, "mountPath": "/dev/infiniband"})
    trainer = k.container(
        "trainer",
        command=["torchrun", "--nproc-per-node=8", "train.py"],
        env=[{"name": "NCCL_DEBUG", "value": "INFO"}],
        **({"volumeMounts": mounts} if mounts else {}),
    )
    containers = [trainer, k.container("log-shipper", "fluent/fluent-bit:3.2", gpus=None)]
    if policy.sidecar is not None:
        containers.append(k.container(policy.sidecar.name, f"{policy.sidecar.image}:1", gpus=None))
    # (a policy whose NICs are networks, Multus or GKE, and that also takes a DRA NIC claim, gke-gib,
    # is given its networks, unless `claim`: the claim is the other way to the same NICs)
    if policy.dra is not None and (
        claim or not (policy.devices or policy.networks or policy.gke_networks or policy.claim is not None)
    ):
        spec["resourceClaims"] = [{"name": "nic", "resourceClaimTemplateName": f"{policy.name}-nic"}]
        trainer["resources"]["claims"] = [{"name": "nic"}]
    return k.pod(
        containers,
        namespace=namespace,
        annotations={keys.POD_POLICY: name},
        volumes=volumes,
        **spec,
    )


def _mutate(pod: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """(the /mutate decision, the pod with its patch applied) for a CREATE of `pod`."""
    code, doc, decision, _ = review.handle(
        k.body(k.admission_review(pod)), PS, STATE.namespace, STATE.attachments(), claims=CLAIMS
    )
    assert code == 200, doc
    patch = doc["response"].get("patch")
    return decision, jsonpatch.apply_patch(pod, json.loads(base64.b64decode(patch))) if patch else pod


# The cases: each shipped policy by name (a policy with machine types: a pod that selects none),
# and each machine type of a policy as "NAME/TYPE" (a pod that selects the type by nodeSelector).
TYPED_CASES = [f"{p.name}/{t.name}" for p in PS.ranked() if p.machines is not None for t in p.machines.types]
# (a policy whose pods must name a type has no case of its bare name: the webhook denies such a pod)
BARE = [n for n in NAMES if PS.by_name[n].machines is None or PS.by_name[n].machines.unselected is not None]
# "CASE+claim": the pod claims its NICs through DRA (GKE managed DRANET) under a policy whose NICs
# are networks and that takes such a claim instead (gke-gib, gke's gIB types): it gets no network.
CLAIM = "+claim"
CLAIM_CASES = [
    case + CLAIM
    for case in sorted(BARE + TYPED_CASES)
    if (lambda p: p.dra is not None and bool(p.gke_networks))(
        PS.by_name[case.partition("/")[0]].machines.by_name[case.partition("/")[2]].policy
        if "/" in case
        else (PS.by_name[case].machines.unselected if PS.by_name[case].machines else PS.by_name[case])
    )
]
CASES = sorted(BARE + TYPED_CASES + CLAIM_CASES)


def _selector(t: MachineType) -> dict[str, str]:
    key, values = t.labels[0]
    return {key: values[0]}


def shape(case: str) -> tuple[str, Policy, dict[str, str] | None]:
    """(the policy's name, the policy as it is on the case's machine type, its nodeSelector)."""
    name, _, machine = case.removesuffix(CLAIM).partition("/")
    policy = PS.by_name[name]
    if policy.machines is None:
        return name, policy, None
    if not machine:
        assert policy.machines.unselected is not None, f"{name}: a pod naming no type is denied"
        return name, policy.machines.unselected, None
    t = policy.machines.by_name[machine]
    return name, t.policy, _selector(t)


def on_type(name: str, pod: dict[str, Any]) -> Policy | None:
    """Policy `name` as it is on the machine type `pod` selects (the webhook's choice), None when
    the webhook denies its selection."""
    return machines.choose(pod, PS.by_name[name], PS)[0]


@functools.lru_cache(maxsize=None)
def mutated(case: str) -> tuple[str, dict[str, Any]]:
    """(namespace, the pod as the API server holds it after /mutate) for `case`: sent into the
    first namespace of the example cluster where the webhook mutates it under its policy."""
    name, policy, selector = shape(case)
    why = []
    for ns in sorted(STATE._namespaces):
        decision, out = _mutate(_sent(policy, ns, name, selector, claim=case.endswith(CLAIM)))
        if decision is not None and decision.outcome == "mutated" and decision.policy == name:
            assert out["metadata"]["labels"][keys.APPLIED_POLICY_LABEL] == name
            return ns, out
        why.append(f"{ns}: {decision.outcome if decision else None}")
    raise AssertionError(f"no namespace of the example cluster mutates a pod under {case}: {why}")


def webhook_findings(pod: dict[str, Any], namespace: str) -> dict[str, list[str]]:
    """The webhook's final-state check (what /validate answers): rule -> the findings' texts."""
    decision, _ = judge(pod, "", "Pod", STATE.namespace(namespace), PS, STATE.attachments(), claims=CLAIMS, final=True)
    out: dict[str, list[str]] = {}
    for f in decision.denials:
        out.setdefault(f.rule, []).append(f.text())
    assert (decision.outcome == "denied") == bool(out), decision
    return out


# -- the ways to break a mutated pod --------------------------------------------------------------


def _trainer(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["spec"]["containers"][0]


def _caps(pod: dict[str, Any]) -> dict[str, Any]:
    return _trainer(pod).setdefault("securityContext", {}).setdefault("capabilities", {})


def _env(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return _trainer(pod).setdefault("env", [])


def _last(name: str, value: str) -> Callable[[dict[str, Any]], None]:
    """`name=value` appended as the last entry of that name (the one the kubelet uses)."""

    def change(pod: dict[str, Any]) -> None:
        _env(pod).append({"name": name, "value": value})

    return change


def _first(name: str, value: str) -> Callable[[dict[str, Any]], None]:
    """`name=value` inserted as the first entry: a later entry of the name still wins."""

    def change(pod: dict[str, Any]) -> None:
        _env(pod).insert(0, {"name": name, "value": value})

    return change


def _shm_mount(pod: dict[str, Any]) -> dict[str, Any]:
    return next(m for m in _trainer(pod)["volumeMounts"] if m["mountPath"].rstrip("/") == "/dev/shm")


def _shm_volume(pod: dict[str, Any]) -> dict[str, Any]:
    name = _shm_mount(pod)["name"]
    return next(v for v in pod["spec"]["volumes"] if v["name"] == name)


def _drop_shm_mount(pod: dict[str, Any]) -> None:
    _trainer(pod)["volumeMounts"].remove(_shm_mount(pod))


def _no_device(policy: Policy) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        res = _trainer(pod)["resources"]
        for d in policy.devices:
            for section in ("limits", "requests"):
                res.get(section, {}).pop(d.resource, None)
        res.pop("claims", None)

    return change


def _gpu_request_back(policy: Policy) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        res = _trainer(pod)["resources"]
        res.pop("claims", None)
        res.setdefault("limits", {})[policy.gpu_resources[0]] = "8"

    return change


def _visible_gpus(name: str, value: str) -> Callable[[dict[str, Any]], None]:
    """A container that requests no GPU but sees them (NVIDIA_VISIBLE_DEVICES=all) and sets name=value."""

    def change(pod: dict[str, Any]) -> None:
        pod["spec"]["containers"].append(
            k._default_container(
                k.container(
                    "profiler",
                    "nvcr.io/nvidia/cuda:12.8.0-base-ubuntu24.04",
                    gpus=None,
                    env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}, {"name": name, "value": value}],
                ),
                None,
            )
        )

    return change


def _cpu_container(name: str, value: str) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        pod["spec"]["containers"][1].setdefault("env", []).append({"name": name, "value": value})

    return change


Change = Callable[[dict[str, Any]], None]


def variants(policy: Policy) -> list[tuple[str, Change]]:
    """(what, the change) for each way of breaking, or keeping, the mutated pod of `policy`: what
    the webhook and the generated policy must then agree on (`test_...agree`)."""
    out: list[tuple[str, Change]] = []
    if (
        policy.devices
        or policy.claim is not None
        or (policy.dra is not None and not (policy.networks or policy.gke_networks))
    ):
        out.append(("device removed", _no_device(policy)))
    if policy.claim is not None and policy.claim.aligned:  # a later webhook undoes the GPU request's conversion
        out.append(("the aligned claim's reference back to a GPU request", _gpu_request_back(policy)))
    out += [
        ("IPC_LOCK not added", lambda pod: _caps(pod).pop("add")),
        ("IPC_LOCK replaced by another capability", lambda pod: _caps(pod).update(add=["NET_RAW"])),
        ("CAP_IPC_LOCK added instead of IPC_LOCK", lambda pod: _caps(pod).update(add=["CAP_IPC_LOCK"])),
        ("cap_ipc_lock beside another, in lower case", lambda pod: _caps(pod).update(add=["NET_RAW", "cap_ipc_lock"])),
        ("ipc_lock in lower case", lambda pod: _caps(pod).update(add=["ipc_lock"])),
        ("IPC_LOCK dropped", lambda pod: _caps(pod).update(drop=["IPC_LOCK"])),
        ("CAP_IPC_LOCK dropped", lambda pod: _caps(pod).update(drop=["CAP_IPC_LOCK"])),
        ("ALL and cap_ipc_lock dropped", lambda pod: _caps(pod).update(drop=["ALL", "cap_ipc_lock"])),
        ("another capability dropped", lambda pod: _caps(pod).update(drop=["NET_RAW"])),
        ("/dev/shm not mounted", _drop_shm_mount),
        ("/dev/shm on disk", lambda pod: _shm_volume(pod).update(emptyDir={})),
        ("/dev/shm/ with its slash", lambda pod: _shm_mount(pod).update(mountPath="/dev/shm/")),
    ]
    for s in policy.env:
        if s.enforce:
            value = "" if s.templated else "changed"
            out.append((f"{s.name}={value!r} last", _last(s.name, value)))
            if not s.templated:
                out.append((f"{s.name}='changed' first, its value last", _first(s.name, "changed")))
    for name in policy.watched:
        if name in policy.warned:
            continue
        bad = {"NCCL_IB_DISABLE": "1", "NCCL_NET": "Socket", "NCCL_NET_PLUGIN": "none"}.get(name)
        if bad is None or (name == "NCCL_NET_PLUGIN" and not policy.fabric.net_plugins):
            continue
        out.append((f"{name}={bad} last", _last(name, bad)))
        out.append((f"{name}={bad} first (the pod's own entry, if any, last)", _first(name, bad)))
        out.append((f"{name}={bad} in a container that sees the GPUs", _visible_gpus(name, bad)))
        out.append((f"{name}={bad} in a CPU container", _cpu_container(name, bad)))
    if "NCCL_IB_DISABLE" in policy.watched and "NCCL_IB_DISABLE" not in policy.warned:
        for value in ("0x1", " +07", "0", "00", "0x0"):
            out.append((f"NCCL_IB_DISABLE={value!r} last", _last("NCCL_IB_DISABLE", value)))
        out.append(
            (
                "NCCL_IB_DISABLE=1, then =0 last",
                lambda pod: (_first("NCCL_IB_DISABLE", "1")(pod), _last("NCCL_IB_DISABLE", "0")(pod)),
            )
        )
    if policy.nccl_nets:
        out.append(
            (f"NCCL_NET={policy.nccl_nets[0].lower()} (another case)", _last("NCCL_NET", policy.nccl_nets[0].lower()))
        )
    if policy.host_network == "Required":
        out.append(("hostNetwork removed", lambda pod: pod["spec"].pop("hostNetwork")))
    elif policy.host_network == "Forbidden":
        out.append(("hostNetwork set", lambda pod: pod["spec"].update(hostNetwork=True)))
    if policy.networks:
        out.append(
            (
                "networks annotation removed",
                lambda pod: pod["metadata"].get("annotations", {}).pop(keys.MULTUS_NETWORKS, None),
            )
        )
    if policy.gke_networks:
        out.append(
            (
                "GKE interfaces annotation removed",
                lambda pod: pod["metadata"].get("annotations", {}).pop(gke.INTERFACES, None),
            )
        )
    if policy.sidecar is not None:
        out.append(("sidecar removed", lambda pod: pod["spec"]["containers"].pop()))
    return out


# -- the verdicts -----------------------------------------------------------------------------------


def _objects(name: str) -> list[dict[str, Any]]:
    """The generated policy and binding of `name`, made now from the shipped policies."""
    return [d for d in ap.objects(PS) if d["metadata"]["labels"][ap.POLICY_LABEL] == name]


def _rule(message: str) -> str:
    assert message.startswith("rdma-webhook: ") and message.endswith("]"), message
    return message[message.rindex("[") + 1 : -1]


def _named(text: str) -> set[str]:
    """The containers a message names: "container 'a': ..." or "one of the containers 'a', 'b': ..."."""
    text = text.removeprefix("rdma-webhook: ")
    if not text.startswith(("container '", "one of the containers '")):
        return set()
    return set(text.split(": ", 1)[0].split("'")[1::2])


def _body(text: str) -> str:
    """A message without its container part (and the policy's `rdma-webhook: `) and rule id."""
    text = text.removeprefix("rdma-webhook: ")
    text = text.split(": ", 1)[1] if text.startswith(("container ", "one of the containers ")) else text
    return text[: text.rindex(" [")]


def _subject(text: str) -> str:
    """What a message is about: its first name of a resource, field or variable
    (`vpc.amazonaws.com/efa`, `securityContext.capabilities.add`, `NCCL_NET`, `/dev/shm`)."""
    found = re.search(r"[\w./-]*[A-Z_./][\w./-]*|\w+-[\w-]+", text)
    assert found, text
    return found.group(0).rstrip(".")


def _quantity_above_zero(value: Any) -> bool:
    return str(value).strip() not in ("", "0")


def _targets(policy: Policy, pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The containers that request one of the policy's GPUs, or reference an aligned GPU+NIC
    claim of the policy (what the decision calls targets)."""
    aligned = set()
    if policy.claim is not None and policy.claim.aligned:
        for e in pod["spec"].get("resourceClaims", []):
            if policy.claim.made_from(e.get("resourceClaimTemplateName") or e.get("resourceClaimName", "")):
                aligned.add(e["name"])
    out = []
    for c in pod["spec"]["containers"]:
        res = c.get("resources") or {}
        if any(
            _quantity_above_zero((res.get(s) or {}).get(g, "0"))
            for s in ("limits", "requests")
            for g in policy.gpu_resources
        ) or any(r["name"] in aligned for r in res.get("claims", [])):
            out.append(c)
    return out


def policy_only(policy: Policy, pod: dict[str, Any]) -> set[str]:
    """The rules of POLICY_ONLY a pod breaks, read from the pod here (the webhook's final-state
    check does not make them): a target whose /dev/shm is gone, or is the webhook's volume off
    RAM; a Multus network or GKE network of the policy no longer in its annotation."""
    out: set[str] = set()
    volumes = {v["name"]: v for v in pod["spec"].get("volumes", [])}
    for c in _targets(policy, pod):
        at = [m for m in c.get("volumeMounts", []) if m["mountPath"].rstrip("/") == "/dev/shm"]
        if not at:
            out.add("shm")
        elif at[0]["name"].startswith("rdma-webhook-dshm"):
            if (volumes.get(at[0]["name"], {}).get("emptyDir") or {}).get("medium") != "Memory":
                out.add("shm")
    annotations = pod["metadata"].get("annotations") or {}
    listed = annotations.get(keys.MULTUS_NETWORKS, "")
    names = (
        {item.strip().split("@")[0].split("/")[-1] for item in listed.split(",")}
        if not listed.startswith("[")
        else {n["name"] for n in json.loads(listed)}
    )
    if any(n.name not in names for n in policy.networks):
        out.add("multus-networks")
    interfaces = {i.get("network") for i in json.loads(annotations.get(gke.INTERFACES, "[]"))}
    # a pod with a claim under a policy that takes a DRA claim of its NICs instead of its networks:
    # the webhook added none (its claim is its NICs; CEL cannot tell a NIC claim from another)
    by_claim = policy.dra is not None and bool(pod["spec"].get("resourceClaims"))
    if not by_claim and any(g.name not in interfaces for g in policy.gke_networks):
        out.add("gke-networks")
    return out


def _term(key: str, values: tuple[str, ...] | list[str]) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}


def _add_term(term: dict[str, Any]) -> Change:
    """A required nodeSelectorTerm added to the pod's (ORed with its others)."""

    def change(pod: dict[str, Any]) -> None:
        node = pod["spec"].setdefault("affinity", {}).setdefault("nodeAffinity", {})
        node.setdefault(machines.AFFINITY_KEY, {}).setdefault("nodeSelectorTerms", []).append(term)

    return change


def _select(selector: dict[str, str] | None) -> Change:
    """The pod's nodeSelector replaced by `selector` (None: removed), its required affinity removed."""

    def change(pod: dict[str, Any]) -> None:
        pod["spec"].pop("affinity", None)
        pod["spec"].pop("nodeSelector", None)
        if selector is not None:
            pod["spec"]["nodeSelector"] = dict(selector)

    return change


def machine_variants(case: str) -> list[tuple[str, Change]]:
    """The ways a later webhook can change the node selection of a pod of a policy with machine
    types (none for one without): onto another type's nodes (whose rules the pod then breaks), a
    label value of no type, several types, a term that names no type beside one that does, or no
    selection at all (the policy's default type); and selections that keep the type."""
    name, policy, selector = shape(case)
    typed = PS.by_name[name].machines
    if typed is None:
        return []
    mine = typed.by_name[case.removesuffix(CLAIM).partition("/")[2]] if selector is not None else typed.default
    assert mine is not None
    key = typed.types[0].labels[0][0]
    own_zone = {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z-a"]}]}
    out: list[tuple[str, Change]] = [
        (f"nodeSelector {key}=nvidia-l4 (no type's)", _select({key: "nvidia-l4"})),
        ("no node selection (the default type)", _select(None)),
        (f"another term naming {mine.name} by its {mine.labels[-1][0]}", _add_term(_term(*mine.labels[-1]))),
        ("a term of the pod's own (zone) beside", _add_term(own_zone)),
    ]
    for t in typed.types:
        if t is not mine:
            out.append((f"nodeSelector of {t.name}", _select(_selector(t))))
            out.append((f"a term naming {t.name} beside", _add_term(_term(*t.labels[0]))))
    return out


def _no_claims(pod: dict[str, Any]) -> None:
    """A later webhook takes the pod's DRA claims away (and the containers' references)."""
    pod["spec"].pop("resourceClaims", None)
    for c in pod["spec"]["containers"]:
        c.get("resources", {}).pop("claims", None)


def cases(case: str) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    ns, good = mutated(case)
    out = [("the pod as /mutate left it", good)]
    claim = [("its NIC claim removed", _no_claims)] if case.endswith(CLAIM) else []
    for what, change in variants(shape(case)[1]) + machine_variants(case) + claim:
        pod = copy.deepcopy(good)
        change(pod)
        out.append((what, pod))
    return ns, out


def verdicts(case: str) -> tuple[str, list[tuple[str, dict[str, Any]]], list[dict[str, Any]]]:
    """(namespace, the cases of `case`, the harness's row for each), evaluated once for the
    objects the generator makes now (a mutant's worker, forked after mutmut's clean run, evaluates
    its own objects, not the clean run's remembered verdicts)."""
    objects = _objects(shape(case)[0])
    return _verdicts(case, json.dumps(objects, sort_keys=True))


@functools.lru_cache(maxsize=None)
def _verdicts(case: str, objects: str) -> tuple[str, list[tuple[str, dict[str, Any]]], list[dict[str, Any]]]:
    ns, pods = cases(case)
    rows = evaluate(json.loads(objects), [p for _, p in pods], Path(tempfile.mkdtemp(prefix="rdma-webhook-celcheck-")))
    assert [r["pod"] for r in rows] == list(range(len(pods)))
    return ns, pods, rows


@pytest.mark.parametrize("case", CASES)
def test_the_generated_policy_refuses_what_the_webhook_refuses(case, tmp_path):
    """Each final state of the mutated pod, judged by the generated policy in the API server's
    code and by the webhook's final-state check: the same verdict, the same rules, the webhook's
    words; for a pod whose final state is fine, the match condition is false (the validations
    never run); for one that is not, it is true. A policy with machine types: a pod of each type
    and one that names none, each also moved by its node selection (`machine_variants`), judged
    by the rules of the type the webhook reads from that selection."""
    name = shape(case)[0]
    ns, pods, rows = verdicts(case)
    repairs: list[tuple[str, dict[str, Any]]] = []
    refused = 0
    for (what, pod), row in zip(pods, rows):
        where = f"{case}, {what}"
        findings = webhook_findings(pod, ns)
        assert row["selected"], f"{where}: the policy does not select the pod (its applied-policy label)"
        assert row["match_error"] == "" and all(v["error"] == "" for v in row["validations"]), (where, row)
        failed = [v["message"] for v in row["validations"] if not v["passed"]]
        assert row["matched"] == bool(failed), (
            f"{where}: the match condition says {row['matched']}, the validations {failed}"
        )
        assert row["denied"] == bool(failed), (where, row)
        rules = {_rule(m) for m in failed}
        # the webhook refuses: so does the policy, with one of its rules (the webhook may find
        # more: it reads what CEL cannot, docs/admission-policy.md); the policy refuses with a
        # rule /validate makes: the webhook refuses with that rule
        assert not findings or rules & set(findings), (
            f"{where}: the webhook refuses with {findings}, the policy with {failed}"
        )
        assert rules - POLICY_ONLY <= set(findings), (
            f"{where}: the policy refuses with {failed}, the webhook with {findings}"
        )
        for message in failed:
            rule = _rule(message)
            if rule in POLICY_ONLY:
                continue
            # the webhook's finding of that rule, about a container the message names, and about
            # the same resource, field or variable (the two word the rest differently)
            same = [f for f in findings[rule] if _named(f) <= _named(message) and _subject(_body(message)) in _body(f)]
            assert same, f"{where}: the policy says {message!r}, the webhook {findings[rule]}"
        if failed:
            refused += 1
            assert row["status"].startswith(
                f"ValidatingAdmissionPolicy '{ap.object_name(name)}' with binding '{ap.object_name(name)}' denied request: "
            ) and row["status"].endswith(failed[0]), row["status"]
        typed = on_type(name, pod)  # the webhook's machine type of the pod (None: it denies the selection)
        want = policy_only(typed, pod) if typed is not None else set()
        assert rules & POLICY_ONLY == want, f"{where}: the policy refuses with {failed}"
        if rules & POLICY_ONLY and not findings:
            decision, repaired = _mutate(pod)  # what /mutate does with the same pod
            if decision is not None and decision.outcome == "mutated":  # it puts the piece back
                repairs.append((what, repaired))
    assert refused >= 8, f"{case}: only {refused} of the {len(pods)} final states refused"
    for (what, _), row in zip(repairs, evaluate(_objects(name), [p for _, p in repairs], tmp_path)):
        assert not row["matched"] and not row["denied"], f"{case}, {what}, after /mutate again: {row}"


# roce-dranet-aligned's mutation turns the pod's nvidia.com/gpu request into a reference to the
# aligned GPU+NIC claim: the container that references it is a target (webhook.core.targets,
# `cel.is_target`), so IPC_LOCK, /dev/shm, the enforced NCCL_NET and hostNetwork are checked on it
# after mutation, as on a container that requests its GPUs.
@pytest.mark.parametrize("name", NAMES)
def test_every_rule_of_the_generated_policy_refuses_some_final_state(name):
    """Each kind of rule the generated policy holds (device, IPC_LOCK, env, /dev/shm, hostNetwork,
    networks, sidecar) refuses at least one of the broken final states of its mutated pod: none
    is a rule that checks nothing. A policy with machine types: over the pods of all its types,
    each of its validations (each type's own rules, and `machine-type`) refuses one."""
    rows = [row for case in CASES if shape(case)[0] == name for row in verdicts(case)[2]]
    seen = {_rule(v["message"]) for row in rows for v in row["validations"] if not v["passed"]}
    validations = _objects(name)[0]["spec"]["validations"]
    kinds = {re.search(r"\[([a-z-]+)\]'?$", v.get("messageExpression") or v["message"]).group(1) for v in validations}
    assert kinds == seen, f"{name}: rules never seen refusing: {sorted(kinds - seen)}"
    if PS.by_name[name].machines is not None:
        never = [i for i in range(len(validations)) if all(row["validations"][i]["passed"] for row in rows)]
        assert not never, f"{name}: validations never refusing: {[validations[i]['expression'][:200] for i in never]}"


def test_the_harness_reads_the_binding_and_the_selector(tmp_path):
    """The harness applies the policy's objectSelector and its binding's validationActions as
    the API server does: a pod without the applied-policy label is not looked at; under a dry-run
    binding (Warn, Audit) a failing pod is admitted with its failures listed."""
    name = "sriov-roce"
    _, good = mutated(name)
    unlabelled = copy.deepcopy(good)
    del unlabelled["metadata"]["labels"][keys.APPLIED_POLICY_LABEL]
    broken = copy.deepcopy(good)
    _caps(broken).pop("add")
    rows = evaluate(_objects(name), [unlabelled, broken], tmp_path)
    assert not rows[0]["selected"] and not rows[0]["denied"]
    assert rows[1]["selected"] and rows[1]["denied"]
    dry = [d for d in ap.objects(PS, ap.DRY_RUN) if d["metadata"]["labels"][ap.POLICY_LABEL] == name]
    (row,) = evaluate(dry, [broken], tmp_path)
    assert row["matched"] and not row["denied"] and any(not v["passed"] for v in row["validations"])


def test_a_policy_that_does_not_compile_is_an_error_not_an_admission(tmp_path):
    objects = _objects("erdma")
    objects[0] = copy.deepcopy(objects[0])
    objects[0]["spec"]["validations"][0]["expression"] = "object.spec.containers.all(c, c.nosuchfield"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    proc = subprocess.run(
        [celcheck(), "-policies", str(path), "-pods", "-"], input="[]", capture_output=True, text=True
    )
    assert proc.returncode == 2 and "does not compile" in proc.stderr, proc.stderr


def test_a_typed_policy_names_first_the_rule_an_untyped_one_names(tmp_path):
    """A pod broken in two ways is refused with the first rule in the same order whether its
    policy has machine types or not (the kinds' order, `final_state_rules.KINDS`): IPC_LOCK taken
    away and NCCL_NET set to Socket, on roce-dranet-aligned and on each type of the typed test
    policy modelled on it."""
    cases = [
        "roce-dranet-aligned",
        *(f"roce-typed-claims/{t.name}" for t in PS.by_name["roce-typed-claims"].machines.types),
    ]
    pods = []
    for case in cases:
        pod = copy.deepcopy(mutated(case)[1])
        _caps(pod).pop("add")
        _last("NCCL_NET", "Socket")(pod)
        pods.append(pod)
    objects = [
        d
        for d in ap.objects(PS)
        if d["metadata"]["labels"][ap.POLICY_LABEL] in ("roce-dranet-aligned", "roce-typed-claims")
    ]
    rows = [row for row in evaluate(objects, pods, tmp_path) if row["selected"]]
    assert [row["pod"] for row in rows] == list(range(len(cases))) and all(row["denied"] for row in rows), rows
    first = [_rule(row["status"].partition(" denied request: ")[2]) for row in rows]
    assert first == ["ipc-lock-missing"] * len(cases), list(zip(cases, first))


def test_the_machine_type_refusal_says_which_selection_is_wrong(tmp_path):
    """`machine-type`: a pod moved off its type's nodes is refused with what is wrong with its
    selection: under a policy whose pods must name a type (whenUnselected: Deny), naming none is
    one of the wrongs; under one with a default type (gke), a pod naming none gets the default, so
    only a selection of several types (or of labels no type has) is refused, and the message says
    so."""
    for case, says, not_says in (
        ("roce-typed-claims/h100", "select none of them, or several", None),
        ("gke/a3-high", "select several of them", "none of them"),
    ):
        _, good = mutated(case)
        pod = copy.deepcopy(good)
        _select(None)(pod)  # no node selection
        several = copy.deepcopy(good)
        other = next(t for t in PS.by_name[shape(case)[0]].machines.types if t.name != case.partition("/")[2])
        _add_term(_term(*other.labels[0]))(several)
        rows = evaluate(_objects(shape(case)[0]), [pod, several], tmp_path)
        messages = [v["message"] for v in rows[1]["validations"] if not v["passed"]]
        assert [_rule(m) for m in messages] == ["machine-type"] and says in messages[0], messages
        assert not_says is None or not_says not in messages[0], messages
        if not_says is None:  # the pod naming no type is refused too
            assert rows[0]["denied"] and says in rows[0]["status"], rows[0]
