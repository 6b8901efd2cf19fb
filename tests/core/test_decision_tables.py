"""Every entry of every table, tested from the table itself (issue 28, item 1).

Each test below is parametrized over the items of a table in webhook/, so an entry added there is
tested the day it is added: its case appears here and checks the behaviour the entry exists for.
An entry of a new *kind* (a launcher flag action, a transport signature, a workload source type)
gets a case that fails until it is taught here what to expect ("no sample for ..."), never one that
passes by default.

- `LAUNCHERS` (webhook/commands/launchers.py): each flag of each launcher, in a command, is read by
  `webhook.commands.reader.settings` as the launcher reads it;
- `WELL_KNOWN_RDMA`, `SHARED_DEVICE_PREFIX`, `NETWORK_DEVICE_PREFIXES` (webhook/fabrics/transports.py):
  each is an RDMA device (a network device when the pod's Multus network names it), equivalent
  under a policy of its family and denied [fabric-mismatch] under a policy of another fabric;
- `TRANSPORTS`: each signature of each transport judges a falling-back value so and a good value
  not, through the decision of a pod under each shipped policy of that transport;
- `TEMPLATES` (webhook/kinds/workloads.py): each kind, built from its own entry, expands to exactly
  its template paths, and `check_workload` denies it when the template sets NCCL_IB_DISABLE=1;
- every accepted `fabric.ncclNet` name (and `netPlugins`) of every shipped policy is not a fallback.
"""

from __future__ import annotations

import copy

import pytest

import kube_objects as k
from conftest import CLUSTER_STATE, POLICIES
from webhook.cluster.state import FileClusterState
from webhook.commands import reader
from webhook.commands.launchers import FAMILIES, FORWARDS_ALL, LAUNCHERS, MCA_ENV_LIST
from webhook.core import keys
from webhook.core.decision import DENIED, select_policy
from webhook.core.decision import decide as _decide
from webhook.core.model import PolicySet
from webhook.fabrics.transports import (
    DENY,
    NETWORK_DEVICE,
    NETWORK_DEVICE_PREFIXES,
    RDMA_SHARED,
    SHARED_DEVICE_PREFIX,
    TRANSPORTS,
    WARN,
    WELL_KNOWN_RDMA,
)
from webhook.kinds import trainer, verdict, workloads
from webhook.kinds.workloads import TEMPLATES, Converted, Embedded, Nested, TrainJobPods
from webhook.policy.claim_template import aligned_template
from webhook.policy.load import load_dir

PS, _ERRORS = load_dir(POLICIES)
assert PS is not None, _ERRORS
SHIPPED = sorted(PS.by_name)
STATE = FileClusterState.from_file(str(CLUSTER_STATE))
NAMESPACES = sorted(STATE._namespaces)  # the example cluster's namespaces, where each policy's baseline pod is sent


def _nic_objects(policy) -> list[dict]:
    """A DeviceClass of a DRA policy's NICs (its first named class, else one selecting its first
    driver) and, in every namespace of the example cluster, a ResourceClaimTemplate of it."""
    dra = policy.dra
    driver = sorted(dra.drivers)[0] if dra.drivers else "nic.example.com"
    cel = f'device.driver == "{driver}"' + "".join(
        f' && device.attributes["{driver}"].note == "{t}"' for t in dra.selectors[:1]
    )
    cls = sorted(dra.classes)[0] if dra.classes else f"{policy.name}-nic"
    out = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": cls},
            "spec": {"selectors": [{"cel": {"expression": cel}}]},
        }
    ]
    for ns in NAMESPACES:
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": f"{policy.name}-nic", "namespace": ns},
                "spec": {"spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": cls}}]}}},
            }
        )
        if policy.claim is not None and policy.claim.aligned:  # its GPU and NIC pairs, as the CLI writes them
            out.extend(
                aligned_template(policy.claim.template_for(n), n, "gpu.nvidia.com", cls, ns) for n in range(1, 9)
            )
    return out


CLAIMS = FileClusterState([], [], [], [o for p in PS.by_name.values() if p.dra for o in _nic_objects(p)]).claims()


def decide(*args, **kw):
    """The decision with the DRA objects of the shipped DRA policies known."""
    kw.setdefault("claims", CLAIMS)
    return _decide(*args, **kw)


def _nic_claim(policy) -> dict:
    """What a pod under a DRA policy brings: its claim of the policy's NIC."""
    if policy.dra is None or policy.devices or policy.networks or policy.claim is not None:
        return {}
    return {"resourceClaims": [{"name": "nic", "resourceClaimTemplateName": f"{policy.name}-nic"}]}


class Env(dict):
    """A container's env as the reader looks it up."""

    def get(self, name):  # type: ignore[override]
        return dict.get(self, name)


NAMES = frozenset({"NCCL_IB_DISABLE", "NCCL_NET", "NCCL_IB_HCA"})
RANK_PROGRAM = ["bash", "-c", "export NCCL_NET=Socket; exec python train.py"]


# -- launchers and their flags ---------------------------------------------------------------------

LAUNCHER_FLAGS = [(launcher, flag, action) for launcher, flags in LAUNCHERS.items() for flag, action in flags.items()]


def _setting_flag(flags: dict[str, str]) -> list[str]:
    """A flag of the same family that sets NCCL_IB_DISABLE=1 for the ranks, taken from the table."""
    for flag, action in flags.items():
        if action == "export":
            return [flag, "NCCL_IB_DISABLE=1"]
    for flag, action in flags.items():
        if action == "set":
            return [flag, "NCCL_IB_DISABLE", "1"]
    raise AssertionError("a launcher family with no flag that sets a variable for the ranks")


def test_every_launcher_has_a_family_and_a_forwarding_rule():
    for launcher in LAUNCHERS:
        assert FAMILIES.get(launcher) in FORWARDS_ALL, launcher
    assert set(FAMILIES) == set(LAUNCHERS)


@pytest.mark.parametrize("launcher,flag,action", LAUNCHER_FLAGS, ids=[f"{a}{b}" for a, b, _ in LAUNCHER_FLAGS])
def test_each_launcher_flag_is_read_as_the_launcher_reads_it(launcher, flag, action):
    path = f"/usr/local/bin/{launcher}"
    if action == "export":
        argv = [path, flag, "NCCL_IB_DISABLE=1", *RANK_PROGRAM]
        assert ("NCCL_IB_DISABLE", "1") in reader.settings(argv, NAMES)
        # NAME alone forwards the launcher's own value (its container env)
        argv = [path, flag, "NCCL_IB_DISABLE", *RANK_PROGRAM]
        assert ("NCCL_IB_DISABLE", "1") in reader.settings(argv, NAMES, Env(NCCL_IB_DISABLE="1"))
    elif action == "set":
        argv = [path, flag, "NCCL_IB_DISABLE", "1", *RANK_PROGRAM]
        assert ("NCCL_IB_DISABLE", "1") in reader.settings(argv, NAMES)
    elif action == "forward":
        argv = [path, flag, "NCCL_IB_HCA,NCCL_IB_DISABLE", *RANK_PROGRAM]
        got = reader.settings(argv, NAMES, Env(NCCL_IB_DISABLE="1", NCCL_IB_HCA="eth0"))
        assert ("NCCL_IB_DISABLE", "1") in got and ("NCCL_IB_HCA", "eth0") in got
    elif action == "mca":
        argv = [path, flag, MCA_ENV_LIST, "NCCL_IB_DISABLE=1;NCCL_IB_HCA", *RANK_PROGRAM]
        got = reader.settings(argv, NAMES, Env(NCCL_IB_HCA="eth0"))
        assert ("NCCL_IB_DISABLE", "1") in got and ("NCCL_IB_HCA", "eth0") in got
        # another MCA parameter's value is not a list of variables
        argv = [path, flag, "btl_tcp_if_include", "NCCL_IB_DISABLE=1", *RANK_PROGRAM]
        assert ("NCCL_IB_DISABLE", "1") not in reader.settings(argv, NAMES)
    elif action == "arg":
        # the flag's argument is not the program: the family's own setting flag after it still
        # counts, and the program after that is read in turn
        argv = [path, flag, "4", *_setting_flag(LAUNCHERS[launcher]), *RANK_PROGRAM]
        got = reader.settings(argv, NAMES)
        assert ("NCCL_IB_DISABLE", "1") in got, got
    else:
        pytest.fail(f"no test for launcher flag action {action!r}: teach test_tables what {flag} does")
    # whatever the flag, the program the ranks run is read (a `bash -c` there too)
    if action != "mca":
        assert ("NCCL_NET", "Socket") in reader.settings(argv, NAMES, Env(NCCL_IB_DISABLE="1", NCCL_IB_HCA="eth0"))


# The tests above are generated from the table, so an entry removed from it takes its case along.
# What must stay is pinned here, from the launchers' own documentation: the flags of mpirun(1)
# (Open MPI 4/5) and mpiexec(1) (MPICH Hydra, Intel MPI) that take a word, and those that set or
# forward variables, each in a command as those pages show it. A flag missing from a family's
# table makes its argument the program, and the setting after it is lost.
DOCUMENTED = {
    "openmpi": (
        ("orterun", "prterun", "mpirun.openmpi", "mpiexec.openmpi", "mpirun", "mpiexec"),
        {
            "-np": "16",
            "-n": "16",
            "-c": "16",
            "-H": "node1:8,node2:8",
            "--host": "node1,node2",
            "-host": "node1",
            "--hostfile": "/etc/mpi/hostfile",
            "-hostfile": "/etc/mpi/hostfile",
            "--machinefile": "/etc/mpi/hostfile",
            "--map-by": "ppr:8:node",
            "--bind-to": "none",
            "--rank-by": "slot",
            "-N": "8",
            "-npernode": "8",
            "--prefix": "/opt/openmpi",
            "--wdir": "/workspace",
            "-wdir": "/workspace",
            "--output-filename": "/tmp/out",
        },
        {"-x": "export", "--mca": "mca", "-mca": "mca", "--gmca": "mca"},
    ),
    "hydra": (
        ("mpiexec.hydra", "mpirun.mpich", "mpiexec.mpich", "mpirun", "mpiexec"),
        {
            "-n": "16",
            "-np": "16",
            "-f": "/etc/mpi/hostfile",
            "-hostfile": "/etc/mpi/hostfile",
            "-machinefile": "/etc/mpi/hostfile",
            "-host": "node1",
            "-hosts": "node1,node2",
            "-ppn": "8",
            "-perhost": "8",
            "-wdir": "/workspace",
            "-configfile": "/etc/mpi/config",
            "-bootstrap": "ssh",
            "-bootstrap-exec": "/usr/bin/ssh",
            "-launcher": "ssh",
            "-iface": "eth0",
            "-genvexcl": "PATH",
            "-envexcl": "PATH",
            "-bind-to": "core",
            "-map-by": "socket",
        },
        {"-genv": "set", "-env": "set", "-genvlist": "forward", "-envlist": "forward"},
    ),
}
DOCUMENTED_ARGS = [
    (fam, launcher, flag, word)
    for fam, (launchers, args, _) in DOCUMENTED.items()
    for launcher in launchers
    for flag, word in args.items()
]
DOCUMENTED_SETTERS = [
    (fam, launcher, flag, action)
    for fam, (launchers, _, setters) in DOCUMENTED.items()
    for launcher in launchers
    for flag, action in setters.items()
]
_SETTING = {"openmpi": ["-x", "NCCL_IB_DISABLE=1"], "hydra": ["-genv", "NCCL_IB_DISABLE", "1"]}


@pytest.mark.parametrize(
    "family,launcher,flag,word",
    DOCUMENTED_ARGS,
    ids=[f"{f}-{launcher}{flag}" for f, launcher, flag, _ in DOCUMENTED_ARGS],
)
def test_each_documented_flag_with_an_argument_is_in_the_table_and_read(family, launcher, flag, word):
    argv = [launcher, flag, word, *_SETTING[family], *RANK_PROGRAM]
    got = reader.settings(argv, NAMES)
    assert ("NCCL_IB_DISABLE", "1") in got and ("NCCL_NET", "Socket") in got, (argv, got)
    assert LAUNCHERS[launcher].get(flag) == "arg", f"{launcher} {flag} takes an argument ({family} documents it)"


@pytest.mark.parametrize(
    "family,launcher,flag,action",
    DOCUMENTED_SETTERS,
    ids=[f"{f}-{launcher}{flag}" for f, launcher, flag, _ in DOCUMENTED_SETTERS],
)
def test_each_documented_setting_flag_is_in_the_table(family, launcher, flag, action):
    assert LAUNCHERS[launcher].get(flag) == action


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_a_program_argument_that_looks_like_a_flag_is_not_a_launcher_flag(launcher):
    """What follows the program belongs to it: `mpirun python t.py -x NCCL_NET=Socket` sets nothing."""
    setting = _setting_flag(LAUNCHERS[launcher])
    argv = [launcher, "python", "train.py", *setting]
    assert reader.settings(argv, NAMES) == []


# -- the RDMA device families ------------------------------------------------------------------------

# The device-plugin resources named in the plugins' and operators' documentation (AWS EFA device
# plugin, Alibaba eRDMA controller, NVIDIA network-operator SR-IOV and RDMA shared device plugin,
# OpenShift SR-IOV operator): pinned here, since a case generated from the table goes with its entry.
DOCUMENTED_RDMA = [
    "vpc.amazonaws.com/efa",
    "aliyun/erdma",
    "rdma/rdma_shared_device_a",
    "rdma/hca_shared_devices_a",
    "rdma/shared_ib",
]
# SR-IOV VFs and host devices as the operators' examples name them: network devices, known as such
# through the NetworkAttachmentDefinition that names them.
DOCUMENTED_NETWORK_DEVICES = [
    "nvidia.com/rdma-vf",
    "openshift.io/mellanoxrdma",
    "openshift.io/sriovlegacy",
    "nvidia.com/hostdev",
    "intel.com/intel_sriov_netdevice",
]


def _rdma_families() -> list[str]:
    table = [*WELL_KNOWN_RDMA, SHARED_DEVICE_PREFIX + "rdma_shared_device_z"]
    return table + [r for r in DOCUMENTED_RDMA if r not in table]


def _network_devices() -> list[str]:
    table = [prefix.rstrip("/") + ("/vf_z" if prefix.endswith("/") else "") for prefix in NETWORK_DEVICE_PREFIXES]
    return table + [r for r in DOCUMENTED_NETWORK_DEVICES if r not in table]


def _baseline(policy_name: str, env=None, limits=None, policies: PolicySet = PS):
    """A labelled GPU pod that policy `policy_name` mutates (in a namespace of the example
    cluster that allows it), with `env` and extra `limits` on its container."""
    policy = PS.get(policy_name)
    assert policy is not None
    kw = {}
    if policy.host_network == "Required":
        kw = {"hostNetwork": True}
    sec = {"securityContext": {"privileged": True}} if policy.host_network == "Required" else {}
    for name in NAMESPACES:
        ns = STATE.namespace(name)
        if ns is None or not policy.allows_namespace(ns.labels):
            continue
        c = k.container("trainer", env=env, limits=limits, **sec)
        # the sidecar a fabric needs (GPUDirect-TCPXO's tcpxo-daemon), as the policy names its image
        side = (
            [k.container(policy.sidecar.name, f"registry.example/{policy.sidecar.image}:1", gpus=None)]
            if policy.sidecar
            else []
        )
        pod = k.pod([c, *side], namespace=name, annotations={keys.POD_POLICY: policy_name}, **kw, **_nic_claim(policy))
        chosen, why = select_policy(pod, ns, policies)
        if chosen is None or chosen.name != policy_name:
            continue
        plain = k.pod(
            [k.container("trainer", **sec), *side],
            namespace=name,
            annotations={keys.POD_POLICY: policy_name},
            **kw,
            **_nic_claim(policy),
        )
        if decide(plain, ns, policies, STATE.attachments()).outcome == "mutated":  # the namespace has what it needs
            return pod, ns
    raise AssertionError(f"no namespace of {CLUSTER_STATE} allows policy {policy_name}")


@pytest.mark.parametrize("policy_name", SHIPPED)
def test_the_baseline_pod_of_each_policy_is_mutated(policy_name):
    pod, ns = _baseline(policy_name)
    d = decide(pod, ns, PS, STATE.attachments())
    assert d.outcome == "mutated", (d.outcome, [f.message for f in d.denials])


@pytest.mark.parametrize("resource", _rdma_families())
def test_each_rdma_family_is_an_rdma_resource_with_no_policy_that_provides_it(resource):
    assert PolicySet([]).is_rdma_resource(resource)
    others = [p for p in PS.by_name.values() if resource not in (*p.own_resources, *p.equivalent_resources)]
    assert PolicySet(others).is_rdma_resource(resource)


def test_a_plain_resource_is_not_rdma():
    for resource in ("nvidia.com/gpu", "cpu", "memory", "hugepages-2Mi", "example.com/fpga", "rdmax/foo"):
        assert not PolicySet([]).is_rdma_resource(resource), resource


FOREIGN = [(p, r) for p in SHIPPED for r in _rdma_families()]


@pytest.mark.parametrize("policy_name,resource", FOREIGN)
def test_each_rdma_family_under_another_fabric_is_that_fabrics_device(policy_name, resource):
    policy = PS.get(policy_name)
    alone = PolicySet([policy])  # only the well-known list can tell this resource is RDMA
    pod, ns = _baseline(policy_name, limits={resource: "1"}, policies=alone)
    d = decide(pod, ns, alone, STATE.attachments())
    mismatch = [f for f in d.denials if f.rule == "fabric-mismatch"]
    if (
        resource in policy.expected_resources
        or resource in policy.equivalent_resources
        or (resource.startswith(SHARED_DEVICE_PREFIX) and RDMA_SHARED in policy.families)
    ):
        assert not mismatch, [f.message for f in mismatch]
        return
    assert d.outcome == DENIED and len(mismatch) == 1, (d.outcome, [f.message for f in d.denials])
    assert f"requests {resource}, another fabric's RDMA device; policy {policy_name} provides" in mismatch[0].message
    # and the policy set's kinds say so for the next pod
    assert alone.resource_kind(policy, resource, {}) == 2  # RESOURCE_FOREIGN


NETWORK = [(p, r) for p in SHIPPED for r in _network_devices()]


@pytest.mark.parametrize("policy_name,resource", NETWORK)
def test_each_network_device_named_by_the_pods_network_is_that_family(policy_name, resource):
    """A pod that requests a VF or host device and attaches the NetworkAttachmentDefinition naming
    it brings a network device: under a policy of that family it gets no second device or network,
    under any other it is denied, the network-device policy that fits named."""
    from webhook.cluster.state import FileClusterState as State

    policy = PS.get(policy_name)
    pod, ns = _baseline(policy_name, limits={resource: "1"})
    pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] = "own-vf@ownnet"
    nad = {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {
            "name": "own-vf",
            "namespace": ns.name,
            "annotations": {"k8s.v1.cni.cncf.io/resourceName": resource},
        },
    }
    state = State(list(STATE._namespaces.values()), [*STATE._nads.values(), nad])
    d = decide(pod, ns, PS, state.attachments())
    mismatch = [f for f in d.denials if f.rule == "fabric-mismatch"]
    if NETWORK_DEVICE in policy.families:
        assert d.outcome == "mutated", (d.outcome, [f.message for f in d.denials])
        limits = d.pod["spec"]["containers"][0]["resources"]["limits"]
        assert [r for r in limits if r not in ("nvidia.com/gpu", "cpu", "memory")] == [resource], limits
        assert d.pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "own-vf@ownnet"
        env = {e["name"]: e.get("value") for e in d.pod["spec"]["containers"][0]["env"]}
        assert env.get("NCCL_SOCKET_IFNAME", "ownnet") == "ownnet", env
        return
    assert d.outcome == DENIED and len(mismatch) == 1, (d.outcome, [f.message for f in d.denials])
    assert f"requests {resource}, another fabric's network device" in mismatch[0].message
    fits = [p for p in PS.by_family.get(NETWORK_DEVICE, []) if p.allows_namespace(ns.labels)]
    if fits:
        assert f"select policy {fits[0].name}" in mismatch[0].message, mismatch[0].message


@pytest.mark.parametrize("resource", [r for r in _network_devices() if r not in PS.by_resource])
def test_a_network_device_without_a_network_naming_it_is_nothing_to_the_fabric(resource):
    """The same resource with no Multus network of the pod naming it (the example cluster's
    NADs known) and no loaded policy giving it: not recognised as RDMA, so neither equivalent
    nor foreign."""
    pod, ns = _baseline("ib-shared", limits={resource: "1"})
    d = decide(pod, ns, PS, STATE.attachments())
    assert d.outcome == "mutated", (d.outcome, [f.message for f in d.denials])
    assert "rdma/rdma_shared_device_a" in d.pod["spec"]["containers"][0]["resources"]["limits"]


class NO_TYPES:  # noqa: N801 (stands for a policy's absent Machines)
    types = ()


# -- transports' signatures --------------------------------------------------------------------------


def _first_device(fabric) -> str:
    """The fabric's first device; of a name family (`ibp*`), its first member."""
    first = fabric.hca_devices[0]
    return first[:-1] + "0" if first.endswith("*") else first


def _all_stems(fabric) -> str:
    """A prefix list that covers every device of the fabric (every name family too)."""
    return ",".join(sorted({d.rstrip("*").rstrip("0123456789") for d in fabric.hca_devices}))


# For each variable a signature judges: values that fall back and values that keep RDMA, as
# functions of the policy's fabric. A signature of a new variable has no entry and its cases fail.
SAMPLES = {
    "NCCL_IB_DISABLE": (lambda f: ["1", "0x1", "-1"], lambda f: ["0", "00"]),
    "NCCL_NET": (lambda f: ["Socket", "socket"], lambda f: list(f.nccl_nets) + [n.lower() for n in f.nccl_nets]),
    "NCCL_IB_HCA": (
        lambda f: ["eth0", "^" + _all_stems(f)],
        lambda f: [_first_device(f), "=" + _first_device(f), _first_device(f) + ":1"],
    ),
    "FI_PROVIDER": (lambda f: ["tcp", "sockets", "^" + ",".join(f.providers)], lambda f: [*f.providers, "^tcp"]),
    "NCCL_NET_PLUGIN": (lambda f: ["none", "nccl-net-other"], lambda f: list(f.net_plugins)),
    "FI_EFA_USE_DEVICE_RDMA": (lambda f: ["0", "false"], lambda f: ["1"]),
    "NCCL_FASTRAK_IFNAME": (
        lambda f: ["eth0", "eth0,lo"],
        lambda f: ["eth1,eth2,eth3,eth4,eth5,eth6,eth7,eth8", "eth1"],
    ),
    "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME": (lambda f: ["eth0", "eth0,lo"], lambda f: ["eth1,eth2,eth3,eth4", "eth1"]),
}

SIGNATURE_CASES = [
    (p, transport, i)
    for transport, sigs in TRANSPORTS.items()
    for i in range(len(sigs))
    for p in SHIPPED
    if PS.get(p).fabric.transport == transport
]


# What each transport must judge (docs/pods.md, "Denials"), pinned: a signature removed from the table
# takes its generated case along.
DOCUMENTED_SIGNATURES = {
    "ib-verbs": {"NCCL_IB_DISABLE": DENY, "NCCL_NET": DENY, "NCCL_IB_HCA": DENY},
    "libfabric": {"FI_PROVIDER": DENY, "NCCL_NET_PLUGIN": DENY, "NCCL_NET": DENY, "FI_EFA_USE_DEVICE_RDMA": WARN},
    "gib": {"NCCL_NET": DENY, "NCCL_NET_PLUGIN": DENY, "NCCL_IB_DISABLE": DENY, "NCCL_IB_HCA": DENY},
    "fastrak": {"NCCL_NET": DENY, "NCCL_NET_PLUGIN": DENY, "NCCL_FASTRAK_IFNAME": WARN},
    "tcpx": {"NCCL_NET": DENY, "NCCL_NET_PLUGIN": DENY, "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME": WARN},
}


@pytest.mark.parametrize("transport", sorted(DOCUMENTED_SIGNATURES))
def test_each_documented_signature_is_in_its_transports_table(transport):
    table = {sig.variable: sig.severity for sig in TRANSPORTS[transport]}
    for variable, severity in DOCUMENTED_SIGNATURES[transport].items():
        assert table.get(variable) == severity, (transport, variable)


def test_each_transport_is_used_by_a_shipped_policy():
    """By a shipped policy or one of its machine types (GPUDirect-TCPX: `gke`'s A3 High, whose
    signatures tests/fabrics/test_gke_machines.py judges through the decision)."""
    used = {PS.get(p).fabric.transport for p in SHIPPED}
    used |= {t.policy.fabric.transport for p in SHIPPED for t in (PS.get(p).machines or NO_TYPES).types}
    assert set(TRANSPORTS) <= used, f"transports no shipped policy tests: {set(TRANSPORTS) - used}"


@pytest.mark.parametrize(
    "policy_name,transport,index",
    SIGNATURE_CASES,
    ids=[f"{p}-{TRANSPORTS[t][i].variable}" for p, t, i in SIGNATURE_CASES],
)
def test_each_signature_judges_its_values_through_the_decision(policy_name, transport, index):
    sig = TRANSPORTS[transport][index]
    assert sig.variable in SAMPLES, f"no sample for {sig.variable}: add its falling-back and good values to SAMPLES"
    policy = PS.get(policy_name)
    bad, good = (fn(policy.fabric) for fn in SAMPLES[sig.variable])
    assert bad and good
    assert sig.variable in policy.watched
    for value in bad:
        assert sig.judge(value, policy.fabric) is not None, value
        pod, ns = _baseline(policy_name, env=[{"name": sig.variable, "value": value}])
        d = decide(pod, ns, PS, STATE.attachments())
        said = f"{sig.variable}={value!r}"
        if sig.severity == DENY:
            assert d.outcome == DENIED, (value, d.outcome)
            assert any(f.rule == "env-fallback" and said in f.message for f in d.denials), [
                f.message for f in d.denials
            ]
        else:
            assert sig.severity == WARN
            assert d.allowed and any(said in w for w in d.warnings), d.warnings
    for value in good:
        assert sig.judge(value, policy.fabric) is None, value
        pod, ns = _baseline(policy_name, env=[{"name": sig.variable, "value": value}])
        d = decide(pod, ns, PS, STATE.attachments())
        assert d.allowed, (value, [f.message for f in d.denials])
        assert not any(f"{sig.variable}={value!r}" in f.message for f in d.denials)


# -- accepted net-plugin names -----------------------------------------------------------------------

NET_NAMES = [(p, name) for p in SHIPPED for name in PS.get(p).fabric.nccl_nets]
PLUGIN_NAMES = [(p, name) for p in SHIPPED for name in PS.get(p).fabric.net_plugins]


@pytest.mark.parametrize("policy_name,name", NET_NAMES)
def test_each_accepted_nccl_net_name_is_not_a_fallback(policy_name, name):
    pod, ns = _baseline(policy_name, env=[{"name": "NCCL_NET", "value": name}])
    d = decide(pod, ns, PS, STATE.attachments())
    assert d.allowed, [f.message for f in d.denials]
    assert not any(f"NCCL_NET={name!r}" in f.message for f in d.denials)
    # in a command too
    pod, ns = _baseline(policy_name)
    pod["spec"]["containers"][0]["command"] = ["bash", "-c", f"export NCCL_NET='{name}'; exec python train.py"]
    d = decide(pod, ns, PS, STATE.attachments())
    assert d.allowed, [f.message for f in d.denials]


@pytest.mark.parametrize("policy_name,name", PLUGIN_NAMES)
def test_each_accepted_net_plugin_is_not_a_fallback(policy_name, name):
    pod, ns = _baseline(policy_name, env=[{"name": "NCCL_NET_PLUGIN", "value": name}])
    d = decide(pod, ns, PS, STATE.attachments())
    assert d.allowed, [f.message for f in d.denials]


# -- workload kinds ----------------------------------------------------------------------------------

INJECT = {keys.POD_INJECT: "true"}
MAP_KEY, ITEM_NAME = "Worker", "w0"


def gpu_template(env=None):
    c = {"name": "node", "image": "registry.example/trainer:v1", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
    if env:
        c["env"] = env
    return {"metadata": {"labels": dict(INJECT)}, "spec": {"restartPolicy": "OnFailure", "containers": [c]}}


def _place(path: str, leaf) -> tuple[dict, str]:
    """An object holding `leaf` at `path` (`*` a map key, `x[]` a one-item list) and the path as
    people read it, built here independently of workloads._walk."""
    parts = path.split(".")
    root: dict = {}
    node = root
    shown: list[str] = []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "*":
            shown[-1] += f".{MAP_KEY}" if shown else MAP_KEY
            child = leaf if last else {}
            node[MAP_KEY] = child
        elif part.endswith("[]"):
            name = part[:-2]
            item = leaf if last else {}
            if isinstance(item, dict):
                item.setdefault("name", ITEM_NAME)
            node[name] = [item]
            shown.append(f"{name}[{ITEM_NAME}]")
            child = item
        else:
            child = leaf if last else {}
            node[part] = child
            shown.append(part)
        node = child
    return root, ".".join(shown)


def _argo_step(env):
    tmpl = gpu_template(env)
    container = dict(tmpl["spec"]["containers"][0])
    return {"name": ITEM_NAME, "metadata": tmpl["metadata"], "container": container}


class _Runtimes:
    def __init__(self, runtime):
        self.runtime = runtime

    def training_runtime(self, namespace, name):
        return self.runtime if name == "rt" else None

    def cluster_training_runtime(self, name):
        return self.runtime if name == "rt" else None


def _runtime(env):
    job = {
        "name": "node",
        "template": {
            "metadata": {"labels": {trainer.ANCESTOR_LABEL: "trainer"}},
            "spec": {"template": gpu_template(env)},
        },
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "rt"},
        "spec": {"template": {"spec": {"replicatedJobs": [job]}}},
    }


def build(group: str, kind: str, env=None, depth: int = 0) -> tuple[dict, list[str], _Runtimes | None]:
    """An object of (group, kind) with one labelled GPU template at each source of its own
    table entry, the template paths `expand` must give, and the runtimes it needs."""
    obj: dict = {}
    expected: list[str] = []
    runtimes = None
    for source in TEMPLATES[(group, kind)]:
        if isinstance(source, str):
            placed, shown = _place(source, gpu_template(env))
            expected.append(shown)
        elif isinstance(source, Nested):
            inner, inner_paths, _ = build(source.group, source.kind, env, depth + 1)
            value = inner.get("spec", {}) if source.spec else inner
            placed, shown = _place(source.path, value)
            for p in inner_paths:
                expected.append(f"{shown}.{p[len('spec.') :] if source.spec and p.startswith('spec.') else p}")
        elif isinstance(source, Embedded):
            job = {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": gpu_template(env)}}
            placed, shown = _place(source.path, job)
            expected.append(f"{shown}.spec.template")
        elif isinstance(source, Converted) and source.build is workloads._rbg_role:
            placed, shown = _place(source.path, {"replicas": 2, "template": gpu_template(env)})
            expected.append(f"{shown}.template")
        elif (
            isinstance(source, Converted) and "_argo" in source.build.__qualname__
        ):  # mutmut renames it x__argo__mutmut_orig
            placed, shown = _place(source.path, None)
            parent = placed
            for part in source.path.split(".")[:-1]:
                parent = parent[part]
            parent[source.path.rsplit(".", 1)[1]] = [_argo_step(env)]
            expected.append(f"{shown}[{ITEM_NAME}]")
        elif isinstance(source, TrainJobPods):
            placed = {"spec": {"runtimeRef": {"name": "rt", "kind": "ClusterTrainingRuntime"}}}
            runtimes = _Runtimes(_runtime(env))
            expected.append("ClusterTrainingRuntime/rt replicatedJobs[node]")
        else:
            pytest.fail(f"no builder for source {source!r} of {kind}: teach test_tables.build this source type")
        _deep_merge(obj, placed)
    api = f"{group}/v1" if group else "v1"
    return (
        {"apiVersion": api, "kind": kind, "metadata": {"name": "train", "namespace": "ml-training"}, **obj},
        expected,
        runtimes,
    )


def _deep_merge(into: dict, other: dict) -> None:
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _deep_merge(into[key], value)
        elif isinstance(value, list) and isinstance(into.get(key), list):
            for a, b in zip(into[key], value):
                _deep_merge(a, b)
        else:
            into[key] = copy.deepcopy(value)


KINDS = sorted(TEMPLATES)
# The kinds docs/workloads.md and webhook/kinds/workloads.py promise to check, pinned.
DOCUMENTED_KINDS = [
    ("batch", "Job"),
    ("batch", "CronJob"),
    ("apps", "Deployment"),
    ("apps", "StatefulSet"),
    ("jobset.x-k8s.io", "JobSet"),
    ("kubeflow.org", "PyTorchJob"),
    ("kubeflow.org", "MPIJob"),
    ("trainer.kubeflow.org", "TrainJob"),
    ("trainer.kubeflow.org", "TrainingRuntime"),
    ("trainer.kubeflow.org", "ClusterTrainingRuntime"),
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"),
    ("batch.volcano.sh", "Job"),
    ("ray.io", "RayCluster"),
    ("ray.io", "RayJob"),
    ("workload.codeflare.dev", "AppWrapper"),
    ("workloads.x-k8s.io", "RoleBasedGroup"),
    ("argoproj.io", "Workflow"),
]


# Where the operators' CRDs keep the pod templates, for kinds with more than one: pinned, since the
# expansion test builds its object from the table's own paths and a path removed goes unseen there.
DOCUMENTED_PATHS = {
    ("ray.io", "RayCluster"): ["spec.headGroupSpec.template", "spec.workerGroupSpecs[].template"],
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): [
        "spec.leaderWorkerTemplate.leaderTemplate",
        "spec.leaderWorkerTemplate.workerTemplate",
    ],
    ("ray.io", "RayJob"): ["spec.submitterPodTemplate"],
    ("batch.volcano.sh", "Job"): ["spec.tasks[].template"],
    ("jobset.x-k8s.io", "JobSet"): ["spec.replicatedJobs[].template.spec.template"],
}


def test_each_documented_kind_is_in_the_table():
    assert [kind for kind in DOCUMENTED_KINDS if kind not in TEMPLATES] == []
    for kind, paths in DOCUMENTED_PATHS.items():
        assert [p for p in paths if p not in TEMPLATES[kind]] == [], kind


ML = STATE.namespace("ml-training")


@pytest.mark.parametrize("group,kind", KINDS, ids=[f"{g or 'core'}/{k_}" for g, k_ in KINDS])
def test_each_kind_expands_to_exactly_its_template_paths(group, kind):
    obj, expected, runtimes = build(group, kind)
    found = workloads.expand(obj, group, kind, runtimes, "ml-training")
    assert sorted(path for path, _ in found.templates) == sorted(expected)
    assert not found.unresolved
    for _, template in found.templates:  # each is the labelled GPU template (Argo renames its container)
        assert template["metadata"]["labels"][keys.POD_INJECT] == "true"
        assert template["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"


@pytest.mark.parametrize("group,kind", KINDS, ids=[f"{g or 'core'}/{k_}" for g, k_ in KINDS])
def test_each_kind_is_denied_when_its_template_turns_ib_off(group, kind):
    # ml-training's policy (erdma) is IB verbs, where NCCL_IB_DISABLE=1 is TCP. A cluster-scoped
    # kind is judged under every policy an opted-in namespace could use and denied only when
    # denied under all: EFA's has no IB transport to turn off, so there the IB verbs policies only.
    cluster = (group, kind) in workloads.CLUSTER_SCOPED
    ns = None if cluster else ML
    policies = PolicySet([p for p in PS.by_name.values() if p.fabric.transport == "ib-verbs"]) if cluster else PS
    obj, expected, runtimes = build(group, kind)
    good = verdict.check_workload(obj, group, kind, ns, policies, STATE.attachments(), runtimes)
    assert good.allowed and len(good.results) >= len(expected), good.message()
    obj, expected, runtimes = build(group, kind, env=[{"name": "NCCL_IB_DISABLE", "value": "1"}])
    bad = verdict.check_workload(obj, group, kind, ns, policies, STATE.attachments(), runtimes)
    assert not bad.allowed
    denied = {r.path for r in bad.results if r.deny}
    for path in expected:
        assert any(d == path or d.startswith(path) for d in denied), (path, denied)
    assert all(f.rule == "env-fallback" for f in bad.denials())
    assert "NCCL_IB_DISABLE='1'" in bad.message()
