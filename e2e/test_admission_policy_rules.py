"""Every rule of every shipped policy's generated ValidatingAdmissionPolicy, judged by the real
kube-apiserver 1.37's CEL (issue 29): a pod that keeps everything its policy's mutation gives it
is admitted, and the same pod with one piece undone is denied with that piece's rule.

Why here and not only through the late webhook of test_admission_policy.py: each generated policy
has a match condition (`webhook.policy.admission_policy.broken`) that is false for a pod whose
final state is fine, so that the API server skips the validations and their messages for nearly
every pod. A rule the match condition left out would let its change through without a word. The
late webhook undoes erdma's pieces; this file undoes each piece of each shipped policy (devices,
DRA claims, IPC_LOCK, enforced and fallback variables, /dev/shm, hostNetwork, Multus and GKE
networks, sidecars).

The pods are sent as server-side dry runs to a namespace that is not opted in, so /mutate and
/validate leave them alone and only the generated policies, which select by the applied-policy
label alone, judge them. The complete pod is built from the policy's own settings (what it
adds), not from the generator's CEL (e2e/admission_policy_pods.py).
"""

from __future__ import annotations

import copy
import json
from typing import Callable

import pytest

from e2e import cluster as c
from e2e.admission_policy_pods import complete_pod
from e2e.conftest import make_namespace, unique
from e2e.test_admission_policy import generate
from webhook.core import keys
from webhook.core.model import Policy
from webhook.fabrics import gke
from webhook.policy.admission_policy import NAME_PREFIX
from webhook.policy.load import load_dir

POLICIES, _ERRORS = load_dir(str(c.ROOT / "policies"))


def _trainer(pod: dict) -> dict:
    return pod["spec"]["containers"][0]


def _set_env(name: str, value: str) -> Callable[[dict], None]:
    def change(pod: dict) -> None:
        env = _trainer(pod).setdefault("env", [])
        env[:] = [e for e in env if e["name"] != name] + [{"name": name, "value": value}]

    return change


def undoings(policy: Policy) -> list[tuple[str, set[str], Callable[[dict], None]]]:
    """(what is undone, the rules that may name it, the change) for each piece of `policy`."""
    out: list[tuple[str, set[str], Callable[[dict], None]]] = []

    def no_device(pod: dict) -> None:
        resources = _trainer(pod)["resources"]
        for d in policy.devices:
            resources["limits"].pop(d.resource)
        resources.pop("claims", None)

    if policy.devices or policy.claim is not None:
        out.append(("device", {"device-missing"}, no_device))
    out.append(
        ("ipc-lock added", {"ipc-lock-missing"}, lambda pod: _trainer(pod)["securityContext"].pop("capabilities"))
    )
    out.append(
        (
            "ipc-lock dropped",
            {"ipc-lock-dropped"},
            lambda pod: _trainer(pod)["securityContext"]["capabilities"].update(drop=["IPC_LOCK"]),
        )
    )
    for s in policy.env:
        if s.enforce:
            out.append(
                (
                    f"{s.name} changed",
                    {"enforced-env", "env-fallback"},
                    _set_env(s.name, "" if s.templated else "changed"),
                )
            )
    for name in policy.watched:
        if name in policy.warned:
            continue
        bad = {"NCCL_IB_DISABLE": "1", "NCCL_NET": "Socket", "NCCL_NET_PLUGIN": "none"}.get(name)
        if bad is not None and (name != "NCCL_NET_PLUGIN" or policy.fabric.net_plugins):
            out.append((f"{name}={bad}", {"env-fallback", "enforced-env"}, _set_env(name, bad)))
    out.append(("/dev/shm on disk", {"shm"}, lambda pod: pod["spec"]["volumes"][0].update(emptyDir={})))
    if policy.host_network == "Required":
        out.append(("hostNetwork", {"host-network"}, lambda pod: pod["spec"].pop("hostNetwork")))
    elif policy.host_network == "Forbidden":
        out.append(("hostNetwork", {"host-network"}, lambda pod: pod["spec"].update(hostNetwork=True)))
    if policy.networks:
        out.append(
            (
                "Multus networks",
                {"multus-networks"},
                lambda pod: pod["metadata"]["annotations"].pop(keys.MULTUS_NETWORKS),
            )
        )
    if policy.gke_networks:
        out.append(("GKE networks", {"gke-networks"}, lambda pod: pod["metadata"]["annotations"].pop(gke.INTERFACES)))
    if policy.sidecar is not None:
        out.append(("sidecar", {"sidecar-missing"}, lambda pod: pod["spec"]["containers"].pop()))
    return out


@pytest.fixture(scope="module")
def policies_in_force(cp, hook):
    """The generated objects of every shipped policy (Deny), until the module ends; a namespace
    that is not opted in, once the API server enforces them."""
    docs = generate(c.ROOT / "policies")
    cp.apply(docs)
    ns = make_namespace(cp, unique("e2e-vap-rules"))

    def enforced() -> bool:  # the API server compiles each policy on its own, some later than others
        for policy in POLICIES.by_name.values():
            pod = complete_pod(policy, unique("probe"), ns)
            _trainer(pod)["securityContext"].pop("capabilities")
            if dry_run(cp, pod)[0] != 403:
                return False
        return True

    c.wait_for("every generated policy in effect", enforced, 90, interval=0.5)
    try:
        yield ns
    finally:
        cp.kubectl(
            "delete",
            "validatingadmissionpolicybindings,validatingadmissionpolicies",
            "-l",
            "app.kubernetes.io/part-of=rdma-webhook",
            "--ignore-not-found",
        )


def dry_run(cp, pod: dict) -> tuple[int, str]:
    """(HTTP status, the Status message or '') of a server-side dry run of creating `pod`."""
    status, data = cp.request("POST", f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods?dryRun=All", pod)
    body = json.loads(data or b"{}")
    return status, str(body.get("message", "")) if body.get("kind") == "Status" else ""


def test_the_shipped_policies_load():
    assert not _ERRORS and len(POLICIES.by_name) >= 12


# Each shipped policy by name (a policy with machine types: a pod that selects none, judged by its
# default type's rules), and each machine type as "NAME/TYPE": its own fabric's pod, selecting the
# type by nodeSelector (webhook/policy/machine_cel.py reads the type from the pod's node selection).
NAMES = sorted(POLICIES.by_name) + [
    f"{p.name}/{t.name}" for p in POLICIES.ranked() if p.machines is not None for t in p.machines.types
]


def on_type(case: str) -> tuple[Policy, dict | None]:
    """(the policy as it is on the case's machine type, the nodeSelector that selects it)."""
    name, _, machine = case.partition("/")
    policy = POLICIES.by_name[name]
    if policy.machines is None or not machine:
        return policy, None
    t = policy.machines.by_name[machine]
    key, values = t.labels[0]
    return t.policy, {key: values[0]}


def complete(case: str, namespace: str) -> dict:
    policy, selector = on_type(case)
    pod = complete_pod(policy, unique("vap"), namespace)
    if selector is not None:
        pod["spec"]["nodeSelector"] = selector
    return pod


@pytest.mark.parametrize("name", NAMES)
def test_each_piece_a_policy_adds_is_checked_by_its_generated_policy(cp, policies_in_force, name):
    policy = on_type(name)[0]
    good = complete(name, policies_in_force)
    status, message = dry_run(cp, good)
    assert status == 201, f"{name}: the complete pod was refused: {message}"
    undone = undoings(policy)
    assert len(undone) >= 4
    for what, rules, change in undone:
        pod = copy.deepcopy(good)
        change(pod)
        status, message = dry_run(cp, pod)
        assert status == 403, f"{name}: admitted with {what} undone ({status} {message[:300]})"
        assert f"ValidatingAdmissionPolicy '{NAME_PREFIX}{policy.name}'" in message, message
        named = {rule for rule in rules if f"[{rule}]" in message}
        assert named, f"{name}: {what} undone was denied, but not by {sorted(rules)}: {message[:400]}"


def _env_of(container: dict) -> list:
    return container.setdefault("env", [])


def _variants(policy: Policy) -> list[tuple[str, bool, Callable[[dict], None]]]:
    """(what, admitted?, the change) for forms of a pod's final state that the CEL reads the way
    the kubelet and the webhook do: the last env entry of a name counts, capabilities in any
    case and with CAP_, /dev/shm/ with its slash, containers without a GPU left alone unless
    they see GPUs otherwise (NVIDIA_VISIBLE_DEVICES)."""
    out: list[tuple[str, bool, Callable[[dict], None]]] = []
    # a variable the transport's fallback check reads: NCCL_IB_DISABLE where it is watched, else
    # NCCL_NET (watched on every transport); its bad value and a good one
    if "NCCL_IB_DISABLE" in policy.watched and "NCCL_IB_DISABLE" not in policy.warned:
        var, bad, fine, worse = "NCCL_IB_DISABLE", "1", "0", "0x1"
    else:
        pinned = {s.name: s.value for s in policy.env if s.enforce}
        var, bad, fine, worse = "NCCL_NET", "Socket", pinned.get("NCCL_NET", policy.nccl_nets[0]), "Socket"

    def earlier_bad_last_fine(pod: dict) -> None:
        env = _env_of(_trainer(pod))
        env[:] = [{"name": var, "value": bad}] + [e for e in env if e["name"] != var] + [{"name": var, "value": fine}]

    out.append((f"{var}={bad}, then ={fine} last", True, earlier_bad_last_fine))

    def earlier_fine_last_bad(pod: dict) -> None:
        env = _env_of(_trainer(pod))
        env[:] = [{"name": var, "value": fine}] + [e for e in env if e["name"] != var] + [{"name": var, "value": worse}]

    out.append((f"{var}={fine}, then ={worse} last", False, earlier_fine_last_bad))
    enforced = [s for s in policy.env if s.enforce and not s.templated]
    if enforced:
        s = enforced[0]

        def changed_then_restored(pod: dict, s=s) -> None:
            env = _env_of(_trainer(pod))
            env[:0] = [{"name": s.name, "value": "changed"}]

        out.append((f"{s.name} changed earlier, its value last", True, changed_then_restored))
    out.append(
        (
            "ipc_lock in lower case",
            True,
            lambda pod: _trainer(pod)["securityContext"]["capabilities"].update(add=["ipc_lock"]),
        )
    )
    out.append(
        (
            "CAP_IPC_LOCK beside another",
            True,
            lambda pod: _trainer(pod)["securityContext"]["capabilities"].update(add=["NET_RAW", "CAP_IPC_LOCK"]),
        )
    )
    out.append(
        (
            "cap_ipc_lock dropped",
            False,
            lambda pod: _trainer(pod)["securityContext"]["capabilities"].update(drop=["ALL", "cap_ipc_lock"]),
        )
    )
    out.append(
        ("/dev/shm/ with its slash", True, lambda pod: _trainer(pod)["volumeMounts"][0].update(mountPath="/dev/shm/"))
    )

    def more_volumes(pod: dict) -> None:
        pod["spec"]["volumes"][:0] = [
            {"name": "data", "emptyDir": {}},
            {"name": "rdma-webhook-dshm-other", "emptyDir": {}},
        ]
        _trainer(pod)["volumeMounts"].insert(0, {"name": "data", "mountPath": "/data"})

    out.append(("other volumes beside ours, one on disk under our prefix but not at /dev/shm", True, more_volumes))

    def cpu_sidecar(pod: dict) -> None:
        pod["spec"]["containers"].append(
            {"name": "logger", "image": "registry.example/logger:1", "env": [{"name": var, "value": bad}]}
        )

    out.append((f"a container without a GPU that sets {var}={bad}", True, cpu_sidecar))

    def sees_gpus(pod: dict) -> None:
        pod["spec"]["containers"].append(
            {
                "name": "helper",
                "image": "registry.example/helper:1",
                "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}, {"name": var, "value": bad}],
            }
        )

    out.append(
        (f"a container that sees the GPUs through NVIDIA_VISIBLE_DEVICES and sets {var}={bad}", False, sees_gpus)
    )
    return out


@pytest.mark.parametrize("name", NAMES)
def test_the_final_state_is_read_as_the_kubelet_reads_it(cp, policies_in_force, name):
    """The match condition's reading of env, capabilities and /dev/shm, judged by the API
    server: what the webhook admits is admitted, what it refuses is refused."""
    policy = on_type(name)[0]
    good = complete(name, policies_in_force)
    for what, admitted, change in _variants(policy):
        pod = copy.deepcopy(good)
        change(pod)
        status, message = dry_run(cp, pod)
        assert status == (201 if admitted else 403), f"{name}: {what}: {status} {message[:400]}"


def test_a_pod_moved_to_another_machine_types_nodes_is_refused_for_what_that_type_needs(cp, policies_in_force):
    """gke's A3 High pod (TCPX: vpc1..vpc4, GPUDirectTCPX_v7, the tcpx-daemon sidecar) whose
    nodeSelector a later webhook changed to A3 Mega's accelerator: the API server reads the type
    from the selection and refuses the pod for A3 Mega's rules; a value of no type: machine-type."""
    good = complete("gke/a3-high", policies_in_force)
    mega = POLICIES.by_name["gke"].machines.by_name["a3-mega"]
    key, values = mega.labels[0]
    moved = copy.deepcopy(good)
    moved["spec"]["nodeSelector"] = {key: values[0]}
    status, message = dry_run(cp, moved)
    assert status == 403 and "[enforced-env]" in message and "FasTrak" in message, message[:400]
    unknown = copy.deepcopy(good)
    unknown["spec"]["nodeSelector"] = {key: "nvidia-l4"}
    status, message = dry_run(cp, unknown)
    assert status == 403 and "[machine-type]" in message, message[:400]
