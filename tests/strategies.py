"""Hypothesis strategies for pods as the API server sends them to a mutating webhook, plus the
checks that a generated (or mutated) pod is one the API server would accept.

The pods are built with `kube_objects.pod`/`container`, so they carry the API server's defaults
(terminationMessagePath, imagePullPolicy, requests copied from limits, the projected
service-account token volume unless automountServiceAccountToken is false, tolerations,
generateName for controller-made pods). What varies: containers and init containers (GPU and
not), env with value/valueFrom (NCCL settings that fall back to TCP and ones that do not, `$(VAR)`
references, unicode and control characters), envFrom with and without prefix, volumes of every
common type and their mounts (including every kind of existing /dev/shm), security contexts,
resources (requests and/or limits, string and integer quantities, preset device counts),
commands (shell exports, `env`, `mpirun -x`, torchrun, os.environ), the Multus annotation in
comma and JSON form, the policy annotation (valid, unknown, absent), the opt-in label, the
namespace (opted in or not, Pod Security labels, a default policy, unknown to the webhook).

Profiles (see tests/admission/test_review_properties.py): `rdma-ci` (default, derandomized, no example
database, sized for CI) and `long` (HYPOTHESIS_PROFILE=long: random, with the local database,
many more examples).
"""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import kube_objects as k
from webhook.grammar import k8s
from webhook.cluster.state import FileClusterState

ROOT = Path(__file__).resolve().parent.parent

# -- profiles ------------------------------------------------------------------------------------

# `rdma-ci`: the same examples on every run (derandomize) so CI is reproducible and a failure
# reproduces locally; no example database (CI machines start clean, and a database written by
# one run must not change the next). `long`: fresh random examples, the database on so that a
# failure found in a long run is replayed first next time.
settings.register_profile(
    "rdma-ci",
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
settings.register_profile(
    "long",
    derandomize=False,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
# `mutation` (`make mutation`): the CI profile with a thirtieth of its examples (a tenth in test_patch and
# test_fast_paths too), since every surviving mutant reruns every property test that reaches it.
settings.register_profile("mutation", parent=settings.get_profile("rdma-ci"))
# `pure` (`make test-pure`): the CI profile with a third of its examples. The pure run checks that the
# interpreted source decides as the compiled one, which the compiled run just checked with every
# example; a third keeps `make test` within 6 minutes on 2 cores (issue 43).
settings.register_profile("pure", parent=settings.get_profile("rdma-ci"))
PROFILE_NAME = os.environ.get("HYPOTHESIS_PROFILE", "rdma-ci")
if PROFILE_NAME not in ("rdma-ci", "long", "mutation", "pure"):
    PROFILE_NAME = "rdma-ci"
PROFILE = settings.get_profile(PROFILE_NAME)
LONG = PROFILE_NAME == "long"
FEW = PROFILE_NAME == "mutation"
PURE = PROFILE_NAME == "pure"


def rare(n: int) -> st.SearchStrategy[bool]:
    """True about once in `n` draws (integers(0, n) == 0 would be far more often: Hypothesis
    favours small and boundary values)."""
    return st.sampled_from([False] * (n - 1) + [True])


def examples(ci: int, long: int) -> settings:
    """Settings for one test: `ci` examples by default, `long` under HYPOTHESIS_PROFILE=long."""
    return settings(
        PROFILE, max_examples=long if LONG else max(5, ci // 30) if FEW else max(5, ci // 3) if PURE else ci
    )


# -- the cluster the generated pods are sent into -----------------------------------------------

_EXTRA_STATE = """
- apiVersion: v1
  kind: Namespace
  metadata:
    name: pss-baseline
    labels: {rdma-webhook.io/injection: enabled, pod-security.kubernetes.io/enforce: baseline}
- apiVersion: v1
  kind: Namespace
  metadata:
    name: pss-privileged
    labels: {rdma-webhook.io/injection: enabled, pod-security.kubernetes.io/enforce: privileged,
             pod-security.kubernetes.io/warn: restricted}
- apiVersion: v1
  kind: Namespace
  metadata:
    name: team-erdma
    labels: {rdma-webhook.io/injection: enabled, rdma-webhook.io/policy: erdma}
- apiVersion: v1
  kind: Namespace
  metadata:
    name: bad-default
    labels: {rdma-webhook.io/injection: enabled, rdma-webhook.io/policy: no-such-policy}
- apiVersion: v1
  kind: Namespace
  metadata:
    name: opted-out
    labels: {rdma-webhook.io/injection: disabled, rdma-webhook.io/policy: erdma}
- apiVersion: v1
  kind: Namespace
  metadata:
    name: nad-no-resource
    labels: {rdma-webhook.io/injection: enabled, rdma-webhook.io/policy: sriov-roce}
- apiVersion: v1
  kind: Namespace
  metadata:
    name: nad-custom
    labels: {rdma-webhook.io/injection: enabled}
- apiVersion: k8s.cni.cncf.io/v1
  kind: NetworkAttachmentDefinition
  metadata: {name: rdma-network, namespace: nad-no-resource}
  spec: {config: '{"cniVersion":"0.3.1","type":"sriov"}'}
- apiVersion: k8s.cni.cncf.io/v1
  kind: NetworkAttachmentDefinition
  metadata:
    name: rdma-network
    namespace: nad-custom
    annotations: {k8s.v1.cni.cncf.io/resourceName: example.com/rdma_vf}
  spec: {config: '{"cniVersion":"0.3.1","type":"sriov"}'}
"""

# Namespaces pods are sent into; "ghost" is unknown to the webhook's cluster state.
NAMESPACES = (
    "ml-training",
    "ai-training",
    "team-restricted",
    "default",
    "pss-baseline",
    "pss-privileged",
    "team-erdma",
    "bad-default",
    "opted-out",
    "nad-no-resource",
    "nad-custom",
    "ghost",
)
# Opted-in namespaces where both shipped policies can mutate (a NetworkAttachmentDefinition for
# sriov-roce exists) are drawn more often: that is where most of the contract is exercised.
NAMESPACES_WEIGHTED = (
    "ai-training",
    "nad-custom",
    "ml-training",
    "nad-no-resource",
    "ai-training",
    "nad-custom",
) + NAMESPACES


@lru_cache(maxsize=1)
def cluster_state() -> FileClusterState:
    """examples/cluster-state.yaml plus namespaces and NetworkAttachmentDefinitions of every kind."""
    text = (ROOT / "examples" / "cluster-state.yaml").read_text()
    return FileClusterState.from_text(text.rstrip() + "\n" + _EXTRA_STATE.strip("\n") + "\n", "test cluster state")


# -- validity: what the API server would accept ---------------------------------------------------


@lru_cache(maxsize=4)
def _pod_validator(version: str):
    """The strict OpenAPI schema validator kubernetes_validate.validate builds for a v1 Pod,
    built once (kubernetes_validate re-reads its 4 MB definitions file on every call)."""
    import jsonschema
    from kubernetes_validate.utils import schema_contents
    from referencing import Registry, Resource

    folder = f"kubernetes-json-schema/v{version}-local-strict"
    schema = schema_contents(f"{folder}/pod-v1.json", version)
    defs = schema_contents(f"{folder}/_definitions.json", version)
    registry = Resource.from_contents(defs) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


SCHEMA_VERSION = "1.37.0"  # the API server e2e runs (PodResourceClaim.resourceClaimTemplateName since 1.31)


def schema_errors(pod: Any, version: str = SCHEMA_VERSION) -> list[str]:
    """Strict OpenAPI validation, as `kubernetes_validate.validate(pod, version, strict=True)`."""
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in _pod_validator(version).iter_errors(pod)]


_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_NATIVE = {"cpu", "memory", "ephemeral-storage"}


def _is_extended(resource: str) -> bool:
    return (
        "/" in resource
        and not resource.split("/", 1)[0].endswith("kubernetes.io")
        and not resource.startswith("hugepages-")
    )


def semantic_errors(pod: dict[str, Any]) -> list[str]:
    """The API server's validation rules (pkg/apis/core/validation) the schema cannot express,
    for the fields these pods use: names, uniqueness, references, quantities, extended
    resources (integer, requests == limits), privileged vs allowPrivilegeEscalation."""
    out: list[str] = []
    meta, spec = pod["metadata"], pod["spec"]
    if not meta.get("name") and not meta.get("generateName"):
        out.append("metadata: name or generateName is required")
    for key, value in (meta.get("labels") or {}).items():
        if len(value) > 63 or not _LABEL_VALUE.match(value):
            out.append(f"metadata.labels[{key}]: invalid label value {value!r}")
    vol_names = [v["name"] for v in spec.get("volumes") or ()]
    if len(vol_names) != len(set(vol_names)):
        out.append(f"spec.volumes: duplicate names {vol_names}")
    volumes = {v["name"]: v for v in spec.get("volumes") or ()}
    for name, v in volumes.items():
        if not k8s.is_dns1123_label(name):
            out.append(f"spec.volumes[{name}]: not a DNS-1123 label")
        if "hostPath" in v:
            out.append(f"spec.volumes[{name}]: hostPath")  # the generated pods never use it
        ed = v.get("emptyDir")
        if ed is not None:
            if ed.get("medium", "") not in ("", "Memory"):
                out.append(f"spec.volumes[{name}].emptyDir.medium: {ed.get('medium')!r}")
            if "sizeLimit" in ed:
                try:
                    k8s.parse_quantity(ed["sizeLimit"])
                except ValueError:
                    out.append(f"spec.volumes[{name}].emptyDir.sizeLimit: not a quantity")
    names = [c["name"] for kind in ("initContainers", "containers") for c in spec.get(kind) or ()]
    if len(names) != len(set(names)):
        out.append(f"container names not unique: {names}")
    for kind in ("initContainers", "containers"):
        for c in spec.get(kind) or ():
            where = f"spec.{kind}[{c['name']}]"
            if not k8s.is_dns1123_label(c["name"]):
                out.append(f"{where}: name is not a DNS-1123 label")
            paths = [m["mountPath"] for m in c.get("volumeMounts") or ()]
            if len(paths) != len(set(paths)):
                out.append(f"{where}.volumeMounts: duplicate mountPath {paths}")
            for m in c.get("volumeMounts") or ():
                if m["name"] not in volumes:
                    out.append(f"{where}.volumeMounts: {m['name']!r} names no volume")
            for e in c.get("env") or ():
                if not e.get("name") or "=" in e["name"]:
                    out.append(f"{where}.env: invalid name {e.get('name')!r}")
                if "value" in e and "valueFrom" in e and e["value"]:
                    out.append(f"{where}.env[{e['name']}]: value and valueFrom")
            res = c.get("resources") or {}
            limits, requests = res.get("limits") or {}, res.get("requests") or {}
            for section, values in (("limits", limits), ("requests", requests)):
                for r, q in values.items():
                    try:
                        amount = k8s.parse_quantity(q)
                    except ValueError:
                        out.append(f"{where}.resources.{section}[{r}]: {q!r} is not a quantity")
                        continue
                    if amount < 0:
                        out.append(f"{where}.resources.{section}[{r}]: negative")
                    if _is_extended(r) and amount != int(amount):
                        out.append(f"{where}.resources.{section}[{r}]: extended resources must be whole")
            for r, q in requests.items():
                if _is_extended(r):
                    if r not in limits:
                        out.append(f"{where}.resources.limits[{r}]: required for an extended resource")
                    elif k8s.parse_quantity(limits[r]) != k8s.parse_quantity(q):
                        out.append(f"{where}.resources.requests[{r}]: must equal limits")
                elif r in limits and k8s.parse_quantity(q) > k8s.parse_quantity(limits[r]):
                    out.append(f"{where}.resources.requests[{r}]: above the limit")
            sc = c.get("securityContext") or {}
            if sc.get("privileged") is True and sc.get("allowPrivilegeEscalation") is False:
                out.append(f"{where}.securityContext: privileged with allowPrivilegeEscalation false")
    return out


def validity_errors(pod: dict[str, Any]) -> list[str]:
    return schema_errors(pod) + semantic_errors(pod)


# -- building blocks ----------------------------------------------------------------------------

_dns_label = st.from_regex(r"\A[a-z][a-z0-9-]{0,14}[a-z0-9]\Z")
_c_ident = st.from_regex(r"\A[A-Z_][A-Z0-9_]{0,14}\Z")
# Arbitrary user text: unicode, controls (NUL included: the API server does not check env
# values), quotes and shell metacharacters; no surrogates (not encodable in UTF-8 JSON).
user_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=24)

# Values of the settings the webhook judges: some send NCCL to TCP, some do not.
NCCL_VALUES: dict[str, tuple[str, ...]] = {
    "NCCL_IB_DISABLE": ("0", "1", "0x1", "-1", " 1", "", "no", "010", "00", "0x0", "99999999999999999999"),
    "NCCL_NET": ("IB", "ib", "Ib", "Socket", "socket", "Bogus", "", "$(TRANSPORT)"),
    "NCCL_IB_HCA": (
        "erdma",
        "erdma_0",
        "=erdma_1",
        "^erdma_0",
        "^erdma",
        "mlx5",
        "mlx5_2:1",
        "^mlx5",
        "eth0",
        "",
        "=mlx5_0,mlx5_1:1",
    ),
    "NCCL_DEBUG": ("INFO", "WARN", "TRACE", "info", "VERSION"),
    "NCCL_SOCKET_IFNAME": ("eth0", "net1", "^lo,docker"),
    "NCCL_IB_GID_INDEX": ("1", "3"),
    "NCCL_MIN_NCHANNELS": ("4", "16", "32"),
    "NCCL_NET_GDR_LEVEL": ("SYS", "PHB", "1"),
    "NCCL_P2P_LEVEL": ("5", "NVL"),
    "NCCL_IB_QPS_PER_CONNECTION": ("2", "8"),
}
SECRET_MARKER = "SECRET-TOKEN-123"

_value_env = st.one_of(
    st.sampled_from(sorted(NCCL_VALUES)).flatmap(lambda n: st.tuples(st.just(n), st.sampled_from(NCCL_VALUES[n]))),
    st.tuples(
        st.sampled_from(["TRANSPORT", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "PYTHONUNBUFFERED"]),
        st.sampled_from(["IB", "Socket", "trainer-0.trainer", "23456", "2", "1"]),
    ),
    st.tuples(_c_ident, user_text),
    st.tuples(st.just("API_TOKEN"), st.just(SECRET_MARKER)),
).map(lambda nv: {"name": nv[0], "value": nv[1]})

_value_from = st.one_of(
    st.just({"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}),
    st.just(
        {
            "fieldRef": {
                "apiVersion": "v1",
                "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']",
            }
        }
    ),
    st.builds(
        lambda n, key: {"secretKeyRef": {"name": n, "key": key}}, _dns_label, st.sampled_from(["token", "password"])
    ),
    st.builds(
        lambda n, opt: {"configMapKeyRef": {"name": n, "key": "value", "optional": opt}}, _dns_label, st.booleans()
    ),
    st.just({"resourceFieldRef": {"resource": "limits.memory", "divisor": "0"}}),
)
_from_env = st.builds(
    lambda n, vf: {"name": n, "valueFrom": vf},
    st.one_of(st.sampled_from(["NCCL_IB_HCA", "NCCL_NET", "NCCL_IB_DISABLE", "RANK", "POD_NAME"]), _c_ident),
    _value_from,
)
env_list = st.lists(st.one_of(_value_env, _value_env, _value_env, _from_env), max_size=8)

env_from_list = st.lists(
    st.one_of(
        st.builds(lambda n: {"configMapRef": {"name": n}}, _dns_label),
        st.builds(lambda n: {"secretRef": {"name": n}}, _dns_label),
        st.builds(
            lambda n, p: {"configMapRef": {"name": n}, "prefix": p}, _dns_label, st.sampled_from(["APP_", "NCCL_", "X"])
        ),
        st.builds(
            lambda n, opt: {"secretRef": {"name": n, "optional": opt}, "prefix": "S_"}, _dns_label, st.booleans()
        ),
    ),
    max_size=2,
)

# Command lines: the ones that send NCCL to TCP and the ones that do not.
HARMLESS_LINES = (
    "export NCCL_IB_DISABLE=0",
    "export NCCL_DEBUG=INFO",
    "export NCCL_DEBUG=WARN",
    "export NCCL_NET=IB",
    "export NCCL_NET_GDR_LEVEL=SYS",
    "export NCCL_SOCKET_IFNAME=net1",
    "export MY_NCCL_NET=Socket",
    "env NCCL_NET=IB python train.py",
    "NCCL_IB_DISABLE=$DISABLE torchrun train.py",
    "NCCL_NET=IB torchrun train.py",
    "torchrun --nnodes=2 --nproc_per_node=8 --rdzv_endpoint=$(MASTER_ADDR):23456 train.py",
    "python -c \"import os; os.environ['NCCL_NET'] = 'IB'\"",
    "echo " + SECRET_MARKER,
    "nvidia-smi && sleep 1",
    "cp -r /src /data",
)
FALLBACK_LINES = (
    "export NCCL_IB_DISABLE=1",
    "export NCCL_NET=Socket",
    "export NCCL_NET='socket'",
    "export NCCL_IB_HCA=mlx5",
    "export NCCL_IB_HCA=erdma",
    "env NCCL_IB_DISABLE=1 python train.py",
    "python -c \"import os; os.environ['NCCL_NET'] = 'Socket'\"",
    "NCCL_NET=Socket torchrun --nproc_per_node=8 train.py",
    "NCCL_IB_DISABLE=1 torchrun train.py",
)
_line = st.sampled_from([0] * 6 + [1]).flatmap(lambda bad: st.sampled_from(FALLBACK_LINES if bad else HARMLESS_LINES))
_shell_cmd = st.builds(
    lambda sh, lines: [sh, "-c", "\n".join(lines)],
    st.sampled_from(["/bin/bash", "/bin/sh", "bash"]),
    st.lists(_line, min_size=1, max_size=4),
)
_mpirun_args = st.lists(
    st.sampled_from(
        [
            ["-np", "16"],
            ["-x", "NCCL_IB_DISABLE=0"],
            ["-x", "NCCL_DEBUG=INFO"],
            ["-x", "NCCL_NET=IB"],
            ["-x", "LD_LIBRARY_PATH"],
            ["-x", "NCCL_SOCKET_IFNAME=net1"],
            ["--allow-run-as-root"],
            ["-bind-to", "none"],
            ["-x", "NCCL_IB_DISABLE=1"],
            ["-x", "NCCL_NET=Socket"],
        ]
    ),
    max_size=4,
).map(lambda parts: [w for p in parts for w in p] + ["python", "train.py"])
_torchrun_args = st.lists(
    st.sampled_from(
        ["--nnodes=2", "--nproc_per_node=8", "--rdzv_backend=c10d", "train.py", "--fp16", "--bf16", "NCCL_NET=Socket"]
    ),
    max_size=4,
)
# (command, args)
command_and_args = st.one_of(
    st.just((None, None)),
    st.just((None, None)),
    _shell_cmd.map(lambda c: (c, None)),
    st.builds(lambda a: (["mpirun"], a), _mpirun_args),
    st.builds(lambda a: (["torchrun"], a or None), _torchrun_args),
    st.builds(lambda c: (["/bin/bash", "-c"], c[2:]), _shell_cmd),
)

CAPS_ADD = ("IPC_LOCK", "CAP_IPC_LOCK", "NET_ADMIN", "SYS_PTRACE", "SYS_RESOURCE", "NET_RAW", "ipc_lock")
CAPS_DROP = ("ALL", "NET_RAW", "MKNOD", "IPC_LOCK", "CAP_IPC_LOCK")


@st.composite
def security_context(draw) -> dict[str, Any] | None:
    if draw(rare(4)):
        return None
    sc: dict[str, Any] = {}
    if draw(st.booleans()):
        caps: dict[str, Any] = {}
        if draw(st.booleans()):
            caps["add"] = draw(st.lists(st.sampled_from(CAPS_ADD), unique=True, max_size=3))
        if draw(st.booleans()):
            caps["drop"] = draw(st.lists(st.sampled_from(CAPS_DROP), unique=True, max_size=2))
        sc["capabilities"] = caps
    user = draw(st.sampled_from([None, 0, 1000, 65534]))
    if user is not None:
        sc["runAsUser"] = user
    if draw(rare(4)):
        sc["runAsNonRoot"] = user != 0
    privileged = draw(st.sampled_from([None, None, False, True]))
    if privileged is not None:
        sc["privileged"] = privileged
    if draw(rare(4)):
        sc["allowPrivilegeEscalation"] = bool(privileged) or draw(st.booleans())
    if draw(rare(4)):
        sc["readOnlyRootFilesystem"] = draw(st.booleans())
    return sc


_cpu = st.sampled_from(["8", "500m", "32", "2500m", "1", 4, 16])
_memory = st.sampled_from(["64Gi", "512Mi", "128Gi", "1G", "100M", 1073741824])
# Device resources a user may already have set (a zero is denied by the webhook).
_preset_device = st.sampled_from(
    [
        None,
        None,
        None,
        ("aliyun/erdma", "1"),
        ("aliyun/erdma", "2"),
        ("aliyun/erdma", "0"),
        ("openshift.io/mellanoxrdma", "1"),
        ("openshift.io/mellanoxrdma", 2),
        ("example.com/rdma_vf", "1"),
    ]
)


@st.composite
def resources(draw, gpu: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """(limits, requests) before defaulting (kube_objects copies limits into missing requests)."""
    limits: dict[str, Any] = {}
    requests: dict[str, Any] = {}
    for name, values in (("cpu", _cpu), ("memory", _memory)):
        shape = draw(st.sampled_from(["none", "limits", "requests", "both"]))
        value = draw(values)
        if shape in ("limits", "both"):
            limits[name] = value
        if shape in ("requests", "both"):
            requests[name] = value  # equal to the limit: requests <= limits always holds
    if gpu:
        n = draw(st.sampled_from([1, 2, 4, 8]))
        value = draw(st.sampled_from([str(n), str(n), n]))
        limits["nvidia.com/gpu"] = value
        if draw(st.booleans()):
            requests["nvidia.com/gpu"] = value
        preset = draw(_preset_device)
        if preset:
            limits[preset[0]] = preset[1]
    elif draw(rare(10)):
        limits["nvidia.com/gpu"] = "0"  # asks for zero GPUs: not a target
    if draw(rare(6)):
        limits["ephemeral-storage"] = "20Gi"
    return limits, requests


# Volumes: (name, source). Names include the webhook's own so that collisions are exercised.
VOLUME_NAMES = ("dshm", "shm", "data", "config", "rdma-webhook-dshm", "rdma-webhook-dshm-1", "scratch", "creds", "ckpt")
_size = st.sampled_from(["1Gi", "8Gi", "64Gi", "256Gi", "512Mi", "300Gi"])
_volume_source = st.one_of(
    st.just({"emptyDir": {}}),
    st.just({"emptyDir": {"medium": "Memory"}}),
    _size.map(lambda s: {"emptyDir": {"medium": "Memory", "sizeLimit": s}}),
    _size.map(lambda s: {"emptyDir": {"sizeLimit": s}}),
    _dns_label.map(lambda n: {"configMap": {"name": n, "defaultMode": 420}}),
    _dns_label.map(lambda n: {"secret": {"secretName": n, "defaultMode": 420}}),
    _dns_label.map(lambda n: {"persistentVolumeClaim": {"claimName": n}}),
    st.just(
        {
            "projected": {
                "defaultMode": 420,
                "sources": [{"serviceAccountToken": {"audience": "vault", "expirationSeconds": 3600, "path": "token"}}],
            }
        }
    ),
    st.just(
        {
            "downwardAPI": {
                "defaultMode": 420,
                "items": [{"path": "labels", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.labels"}}],
            }
        }
    ),
)
volumes_list = st.lists(
    st.tuples(st.sampled_from(VOLUME_NAMES), _volume_source), unique_by=lambda t: t[0], max_size=4
).map(lambda items: [{"name": n, **src} for n, src in items])


@st.composite
def mounts(draw, volumes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if not volumes:
        return []
    chosen = draw(st.lists(st.sampled_from([v["name"] for v in volumes]), unique=True, max_size=len(volumes)))
    shm_at = draw(st.sampled_from([None, None] + list(range(len(chosen))))) if chosen else None
    out = []
    for i, name in enumerate(chosen):
        path = draw(st.sampled_from(["/dev/shm", "/dev/shm/"])) if i == shm_at else f"/mnt/{name}"
        m: dict[str, Any] = {"name": name, "mountPath": path}
        if draw(rare(4)):
            m["readOnly"] = True
        out.append(m)
    return out


@st.composite
def container(draw, name: str, volumes: list[dict[str, Any]], gpu_weight: int, init: bool = False) -> dict[str, Any]:
    gpu = draw(st.sampled_from([True] * gpu_weight + [False] * (10 - gpu_weight)))
    limits, requests = draw(resources(gpu))
    command, args = draw(command_and_args)
    extra: dict[str, Any] = {}
    env = draw(env_list)
    env_from = draw(env_from_list) if draw(rare(4)) else []
    if env_from:
        extra["envFrom"] = env_from
    sc = draw(security_context())
    if sc is not None:
        extra["securityContext"] = sc
    ms = draw(mounts(volumes))
    if ms:
        extra["volumeMounts"] = ms
    if init and draw(rare(5)):
        extra["restartPolicy"] = "Always"  # a native sidecar
    if not init and draw(rare(5)):
        extra["ports"] = [{"name": "rdzv", "containerPort": 23456, "protocol": "TCP"}]
    image = draw(
        st.sampled_from(
            [
                "nvcr.io/nvidia/pytorch:25.11-py3",
                "busybox:1.36",
                "my-registry/trainer:latest",
                "registry.example.com/llm/trainer@sha256:" + "ab" * 32,
                "python",
            ]
        )
    )
    return k.container(
        name,
        image,
        gpus=None,
        env=env or None,
        command=command,
        args=args,
        limits=limits or None,
        requests=requests or None,
        **extra,
    )


# Networks other than the policy's come first: Hypothesis favours the first elements.
_MULTUS_CSV = (
    "other-net",
    "kube-system/macvlan-conf@net2",
    "rdma-network",
    "rdma-network@net1",
    "ai-training/rdma-network",
    "nad-custom/rdma-network@net1",
)
_MULTUS_JSON = (
    {"name": "other-net", "interface": "net2"},
    {"name": "macvlan-conf", "namespace": "kube-system"},
    {"name": "rdma-network"},
    {"name": "rdma-network", "interface": "net1"},
    {"name": "rdma-network", "namespace": "ai-training", "ips": ["10.0.100.5/24"]},
)
multus_annotation = st.one_of(
    st.lists(st.sampled_from(_MULTUS_CSV), unique=True, min_size=1, max_size=3).flatmap(
        lambda xs: st.sampled_from([",", ", "]).map(lambda sep: sep.join(xs))
    ),
    st.lists(st.sampled_from(_MULTUS_JSON), max_size=3).flatmap(
        lambda xs: st.sampled_from([None, 2]).map(lambda indent: json.dumps(xs, indent=indent))
    ),
    st.sampled_from(["", "[{\"name\": ", "[\"rdma-network\"]"]),  # empty, and JSON-looking but unreadable by Multus
)

# GKE multi-networking's annotation (webhook/fabrics/gke.py): entries of the pod network, the
# shipped GKE policies' networks, others; repeated names and unreadable text included.
_GKE_ENTRIES = [
    {"interfaceName": i, "network": n}
    for i, n in [
        ("eth0", "default"),
        ("eth1", "gvnic-1"),
        ("eth2", "rdma-0"),
        ("eth3", "rdma-1"),
        ("eth1", "vpc1"),
        ("eth9", "scratch"),
        ("gpu0", "rdma-7"),
        ("eth2", "vpc2"),
    ]
]
gke_annotation = st.one_of(
    st.lists(st.sampled_from(_GKE_ENTRIES), max_size=4).flatmap(
        lambda xs: st.sampled_from([None, 2]).map(lambda indent: json.dumps(xs, indent=indent))
    ),
    st.sampled_from(["", "[{\"interfaceName\": \"eth1\"}]", "eth1@rdma-0"]),  # unreadable by GKE
)

POLICY_CHOICES = (None, None, "erdma", "sriov-roce", "gke-gib", "gke-tcpxo", "no-such-policy")

OPERATOR_LABELS = (
    {},
    {
        "training.kubeflow.org/job-name": "llama",
        "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": "0",
    },
    {"jobset.sigs.k8s.io/jobset-name": "llm", "batch.kubernetes.io/job-completion-index": "3"},
    {"leaderworkerset.sigs.k8s.io/name": "pytorch-training", "apps.kubernetes.io/pod-index": "1"},
)


@st.composite
def pods(draw, namespaces: tuple[str, ...] = NAMESPACES_WEIGHTED) -> dict[str, Any]:
    """A pod as the API server sends it on CREATE (see the module docstring for what varies)."""
    vols = draw(volumes_list)
    n_main = draw(st.integers(1, 4))
    n_init = draw(st.integers(0, 2))
    names: list[str] = []
    for i in range(n_main + n_init):  # unique across containers and init containers
        name = draw(
            st.one_of(st.sampled_from(["trainer", "pytorch", "worker", "launcher", "sidecar", "init-data"]), _dns_label)
        )
        names.append(name if name not in names else f"{name}-{i}")
    containers = [draw(container(n, vols, gpu_weight=6)) for n in names[:n_main]]
    inits = [draw(container(n, vols, gpu_weight=1, init=True)) for n in names[n_main:]]
    labels = dict(draw(st.sampled_from(OPERATOR_LABELS)))
    inject = draw(st.sampled_from(["true"] * 9 + [None, "false", "True", "1"]))
    if inject is not None:
        labels["rdma-webhook.io/inject"] = inject
    annotations: dict[str, str] = {}
    policy = draw(st.sampled_from(POLICY_CHOICES))
    if policy is not None:
        annotations["rdma-webhook.io/policy"] = policy
    if draw(st.booleans()):
        annotations["k8s.v1.cni.cncf.io/networks"] = draw(multus_annotation)
    if draw(rare(3)):
        annotations["networking.gke.io/interfaces"] = draw(gke_annotation)
    if draw(rare(4)):
        annotations["example.com/note"] = draw(user_text)
    named = draw(st.booleans())
    spec_extra: dict[str, Any] = {}
    pod_sc = draw(
        st.sampled_from(
            [
                {},
                {},
                {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000, "runAsNonRoot": True},
                {"seccompProfile": {"type": "RuntimeDefault"}},
                {"runAsUser": 0},
            ]
        )
    )
    spec_extra["securityContext"] = pod_sc
    if draw(rare(10)):
        spec_extra["hostNetwork"] = True
    if draw(rare(15)):
        spec_extra["hostIPC"] = True
    return k.pod(
        containers,
        namespace=draw(st.sampled_from(namespaces)),
        name=draw(_dns_label) + "-0" if named else None,
        generate_name=draw(_dns_label) + "-",
        labels=labels,
        annotations=annotations or None,
        inject=False,
        automount=not draw(rare(4)),
        init_containers=inits or None,
        volumes=vols or None,
        **spec_extra,
    )
