"""How each NCCL transport falls back to TCP: one table of signatures per transport.

A fabric is reached through one transport, and each transport has its own ways of silently
ending up on TCP sockets. A policy names its transport (`fabric.transport`); the decision
judges the variables of that transport's table, and only those, in the environment and the
commands of every GPU container. Adding a fabric whose transport falls back differently is
adding a table here (and naming it in a policy): no change to the decision, the patch or the
HTTP layer.

Each `Signature` is one variable, how bad a bad value is (`DENY`: NCCL runs on TCP or finds no
RDMA device; `WARN`: RDMA stays but loses a feature) and the source that says so.

- `ib-verbs`: NCCL's built-in IB plugin (InfiniBand, RoCE, SR-IOV VFs, Alibaba eRDMA). Source:
  NVIDIA NCCL, https://github.com/NVIDIA/nccl (src/misc/param.cc ncclLoadParam,
  src/plugin/net.cc ncclNetInit, src/transport/net_ib.cc ncclIbInit, src/misc/utils.cc
  matchIfList); NCCL's environment variable documentation,
  https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html
- `libfabric`: the aws-ofi-nccl net plugin over libfabric (AWS EFA). The plugin registers as
  `Libfabric` and also answers to `AWS Libfabric` and `OFI` when NCCL_NET asks for those
  (https://github.com/aws/aws-ofi-nccl, src/nccl_ofi_interface_nvidia.cpp,
  nvidia_plugin_name_fixup). It supports libfabric's tcp provider too, so with
  `FI_PROVIDER=tcp` NCCL logs the Libfabric network while its bytes go over TCP: pinning
  NCCL_NET cannot catch that, the provider must be judged as well. FI_PROVIDER is a comma list
  with an optional leading `^` that excludes (libfabric, https://ofiwg.github.io/libfabric/,
  fi_fabric(7) "FI_PROVIDER"; src/fabric.c ofi_create_filter). NCCL_NET_PLUGIN names the
  plugin library NCCL opens (libnccl-net-<name>.so; `none` opens none), so another name leaves
  NCCL with its internal IB and Socket transports, and on EFA that is Socket (NCCL
  src/plugin/plugin_open.cc). FI_EFA_USE_DEVICE_RDMA=0 keeps EFA but turns off RDMA reads from
  GPU memory (libfabric prov/efa, fi_efa(7)): slower, not TCP, so a warning.
- `gib`: Google's gIB NCCL net plugin (GKE A3 Ultra and A4: RoCE NICs, mlx5, on GKE RDMA
  networks), installed on the node under /home/kubernetes/bin/gib and selected with
  `NCCL_NET=gIB` (Google's `set_nccl_env.sh`; GoogleCloudPlatform/container-engine-accelerators
  gpudirect-rdma/). gIB is NCCL's IB verbs transport built as a plugin: it is tuned with NCCL's
  own NCCL_IB_* variables (NCCL_IB_TC, NCCL_IB_QPS_PER_CONNECTION, NCCL_IB_ADAPTIVE_ROUTING in
  Google's environment) and its devices are filtered by NCCL_IB_HCA as NCCL's are, so
  NCCL_IB_DISABLE and NCCL_IB_HCA are judged as for `ib-verbs`. What turns it into TCP: an
  NCCL_NET that is not gIB (`Socket`, `IB` outside the plugin), and an NCCL_NET_PLUGIN that does
  not open the plugin (/usr/local/gib/lib64/libnccl-net_internal.so; `none` opens none: NCCL
  src/plugin/plugin_open.cc), leaving NCCL only its internal transports. Without the plugin and
  with NCCL_NET=gIB pinned, NCCL stops with "network gIB not found" instead.
- `fastrak`: GPUDirect-TCPXO (GKE A3 Mega), neither RDMA nor a socket fallback: the FasTrak NCCL
  net plugin (`NCCL_NET=FasTrak`, loaded as libnccl-net.so from the host's
  /home/kubernetes/bin/nvidia/lib64) moves GPU memory over the eight secondary gVNICs named by
  NCCL_FASTRAK_IFNAME, with the receive data path managed by the `tcpxo-daemon` sidecar
  (Google Cloud, "Maximize GPU network bandwidth in Standard mode clusters",
  https://cloud.google.com/kubernetes-engine/docs/how-to/gpu-bandwidth-gpudirect-tcpx). Its
  fallback is NCCL's own Socket transport over eth0: an NCCL_NET that is not FasTrak, or an
  NCCL_NET_PLUGIN that does not open the installer's libnccl-net.so (`none`, another name).
NCCL_FASTRAK_IFNAME naming only the pod network (eth0) keeps the plugin
  but not the GPU NICs: a warning (the policy sets it from the pod's GKE interfaces).
- `tcpx`: GPUDirect-TCPX (GKE A3 High), TCPXO's predecessor: Google's GPUDirectTCPX NCCL net
  plugin (registered as `GPUDirectTCPX_v7`, google/nccl-plugin-gpudirecttcpx src/net_tcpx.cc;
  loaded as libnccl-net.so from the host's /home/kubernetes/bin/nvidia/lib64 by the
  nccl-tcpx-installer) over the four GPU gVNICs named by NCCL_GPUDIRECTTCPX_SOCKET_IFNAME, with
  the `tcpgpudmarxd` receive-datapath manager as a sidecar (GoogleCloudPlatform/container-engine-
  accelerators gpudirect-tcpx/nccl-test-latest.yaml and nccl-config-latest.yaml). It falls back
  as FasTrak does: an NCCL_NET that is not the plugin, an NCCL_NET_PLUGIN that does not open it;
  NCCL_GPUDIRECTTCPX_SOCKET_IFNAME naming only eth0 is a warning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from webhook.grammar import nccl

DENY, WARN = "deny", "warn"


@dataclass(frozen=True)
class Signature:
    """One variable of a transport: `judge(value, fabric)` says why `value` sends NCCL to TCP (or
    costs RDMA a feature), None when it does not. (A dataclass: the tables below are built at
    import, so a hand-written __init__ was code no test could reach under mutation testing.)"""

    variable: str
    severity: str
    judge: Callable[[str, "Fabric"], str | None]
    source: str


class Fabric:
    """What the signatures need to know of a policy's fabric (built once at policy load)."""

    def __init__(
        self,
        policy: str,
        kind: str,
        transport: str,
        nccl_nets: tuple[str, ...],
        hca_devices: tuple[str, ...],
        providers: tuple[str, ...],
        net_plugins: tuple[str, ...],
    ):
        self.policy = policy
        self.kind = kind
        self.transport = transport
        self.nccl_nets = nccl_nets
        self.hca_devices = hca_devices
        self.providers = providers
        self.net_plugins = net_plugins

    def label(self) -> str:
        return f"the {self.policy} policy's {self.kind} fabric"


# -- ib-verbs ----------------------------------------------------------------------------------


def _ib_disable(value: str, f: Fabric) -> str | None:
    if not nccl.ib_disabled(value):
        return None
    return (
        f"NCCL_IB_DISABLE={value!r} turns NCCL's IB/RoCE transport off, so NCCL runs on TCP sockets "
        f"(NET/Socket); remove it or set it to 0"
    )


def _nccl_net(value: str, f: Fabric) -> str | None:
    if nccl.net_selected(value, f.nccl_nets):
        return None
    if value.casefold() == "socket":
        why = "forces NCCL's TCP socket transport (NET/Socket)"
    else:
        why = f"names a transport that {f.label()} does not provide ({'/'.join(f.nccl_nets)})"
    return f"NCCL_NET={value!r} {why}; remove it and let the policy set NCCL_NET={f.nccl_nets[0]}"


def _ib_hca(value: str, f: Fabric) -> str | None:
    if nccl.hca_selected_devices(value, f.hca_devices):
        return None
    sample = ", ".join(f.hca_devices[:2])
    return (
        f"NCCL_IB_HCA={value!r} selects none of {f.label()}'s devices ({sample}, ...), so NCCL "
        f"finds no RDMA device and uses TCP; remove it or name those devices"
    )


IB_VERBS: tuple[Signature, ...] = (
    Signature(
        "NCCL_IB_DISABLE", DENY, _ib_disable, "NCCL src/misc/param.cc ncclLoadParam; src/transport/net_ib.cc ncclIbInit"
    ),
    Signature("NCCL_NET", DENY, _nccl_net, "NCCL src/plugin/net.cc ncclNetInit (strcasecmp of plugin names)"),
    Signature("NCCL_IB_HCA", DENY, _ib_hca, "NCCL src/misc/utils.cc parseStringList/matchIfList"),
)


# -- libfabric (aws-ofi-nccl) ------------------------------------------------------------------


def fi_provider_selects(value: str, providers: tuple[str, ...]) -> bool:
    """Whether FI_PROVIDER=value leaves one of `providers` usable (libfabric's filter: a comma
    list, `^` in front excludes the list; `core;utility` names keep their core provider)."""
    text = value.strip()
    exclude = text.startswith("^")
    if exclude:
        text = text[1:]
    names: list[str] = []
    for item in text.split(","):
        name = item.split(";")[0].strip().lower()
        if name:
            names.append(name)
    if not names:
        return True  # an empty filter keeps every provider
    for p in providers:
        listed = p.lower() in names
        if listed != exclude:
            return True
    return False


def _fi_provider(value: str, f: Fabric) -> str | None:
    if fi_provider_selects(value, f.providers):
        return None
    text = value.strip()
    # `^efa` excludes efa: the plugin runs over whatever else is there, not over efa
    runs = "another provider" if text.startswith("^") else text
    return (
        f"FI_PROVIDER={value!r} keeps none of {f.label()}'s libfabric providers ({'/'.join(f.providers)}), "
        f"so the plugin runs over {runs} and NCCL's bytes go over TCP "
        f"although it logs the Libfabric network; remove it or set FI_PROVIDER={f.providers[0]}"
    )


def _net_plugin(value: str, f: Fabric) -> str | None:
    if not f.net_plugins or value in f.net_plugins or value.rsplit("/", 1)[-1] in f.net_plugins:
        return None  # a listed name, or a path to a listed library (NCCL also opens the value as given)
    what = "loads no net plugin" if value == "none" else f"loads libnccl-net-{value}.so instead of the fabric's plugin"
    return (
        f"NCCL_NET_PLUGIN={value!r} {what}, leaving NCCL its built-in transports, which on "
        f"{f.label()} means TCP sockets (NET/Socket); remove it or set NCCL_NET_PLUGIN={f.net_plugins[0]}"
    )


_FALSE = ("0", "false", "no", "off", "n", "f")


def _fastrak_ifname(value: str, f: Fabric) -> str | None:
    names = [n.strip() for n in value.split(",") if n.strip()]
    if names and all(n in ("eth0", "lo") for n in names):
        return (
            f"NCCL_FASTRAK_IFNAME={value!r} names only the pod network, so GPUDirect-TCPXO has none of "
            f"{f.label()}'s GPU NICs; remove it and let the policy name the pod's GKE interfaces"
        )
    return None


def _efa_device_rdma(value: str, f: Fabric) -> str | None:
    if value.strip().lower() not in _FALSE:
        return None
    return (
        f"FI_EFA_USE_DEVICE_RDMA={value!r} turns off EFA's RDMA reads from GPU memory: NCCL stays on EFA but "
        f"copies through host memory; remove it unless the instance type lacks device RDMA"
    )


LIBFABRIC: tuple[Signature, ...] = (
    Signature("FI_PROVIDER", DENY, _fi_provider, "libfabric fi_fabric(7) FI_PROVIDER, src/fabric.c ofi_create_filter"),
    Signature("NCCL_NET_PLUGIN", DENY, _net_plugin, "NCCL src/plugin/plugin_open.cc (libnccl-net-<name>.so, 'none')"),
    Signature(
        "NCCL_NET", DENY, _nccl_net, "aws-ofi-nccl src/nccl_ofi_interface_nvidia.cpp (Libfabric, AWS Libfabric, OFI)"
    ),
    Signature("FI_EFA_USE_DEVICE_RDMA", WARN, _efa_device_rdma, "libfabric fi_efa(7) FI_EFA_USE_DEVICE_RDMA"),
)


# -- gib (Google's gIB plugin, GKE A3 Ultra / A4) ----------------------------------------------

GIB: tuple[Signature, ...] = (
    Signature(
        "NCCL_NET", DENY, _nccl_net, "NCCL src/plugin/net.cc ncclNetInit; Google's set_nccl_env.sh (NCCL_NET=gIB)"
    ),
    Signature(
        "NCCL_NET_PLUGIN",
        DENY,
        _net_plugin,
        "NCCL src/plugin/plugin_open.cc; gIB is /usr/local/gib/lib64/libnccl-net_internal.so",
    ),
    Signature(
        "NCCL_IB_DISABLE",
        DENY,
        _ib_disable,
        "gIB reads NCCL's NCCL_IB_* settings (NCCL src/transport/net_ib.cc ncclIbInit)",
    ),
    Signature("NCCL_IB_HCA", DENY, _ib_hca, "NCCL src/misc/utils.cc parseStringList/matchIfList"),
)


# -- fastrak (GPUDirect-TCPXO, GKE A3 Mega) ------------------------------------------------------

FASTRAK: tuple[Signature, ...] = (
    Signature("NCCL_NET", DENY, _nccl_net, "NCCL src/plugin/net.cc ncclNetInit; the FasTrak plugin (GPUDirect-TCPXO)"),
    Signature(
        "NCCL_NET_PLUGIN", DENY, _net_plugin, "NCCL src/plugin/plugin_open.cc; the TCPXO installer's libnccl-net.so"
    ),
    Signature(
        "NCCL_FASTRAK_IFNAME", WARN, _fastrak_ifname, "GKE, Maximize GPU network bandwidth in Standard mode clusters"
    ),
)


# -- tcpx (GPUDirect-TCPX, GKE A3 High) ----------------------------------------------------------


def _tcpx_ifname(value: str, f: Fabric) -> str | None:
    names = [n.strip() for n in value.split(",") if n.strip()]
    if names and all(n in ("eth0", "lo") for n in names):
        return (
            f"NCCL_GPUDIRECTTCPX_SOCKET_IFNAME={value!r} names only the pod network, so GPUDirect-TCPX has "
            f"none of {f.label()}'s GPU NICs; remove it and let the policy name the pod's GKE interfaces"
        )
    return None


TCPX: tuple[Signature, ...] = (
    Signature(
        "NCCL_NET",
        DENY,
        _nccl_net,
        "NCCL src/plugin/net.cc ncclNetInit; google/nccl-plugin-gpudirecttcpx (GPUDirectTCPX_v7)",
    ),
    Signature(
        "NCCL_NET_PLUGIN", DENY, _net_plugin, "NCCL src/plugin/plugin_open.cc; the TCPX installer's libnccl-net.so"
    ),
    Signature(
        "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME",
        WARN,
        _tcpx_ifname,
        "GoogleCloudPlatform/container-engine-accelerators gpudirect-tcpx/nccl-config-latest.yaml",
    ),
)


# RDMA device families, by rule rather than by list (README "Device families"):
# - RDMA_SHARED: every `rdma/<name>` is the RDMA shared device plugin's (Mellanox/k8s-rdma-shared-dev-plugin
#   advertises each configured resource as rdma/<resourceName>; NVIDIA network-operator, AKS's
#   rdma/shared_ib), whatever the name;
# - NETWORK_DEVICE: a device the SR-IOV network device plugin gives with a Multus network, a VF or a
#   whole host device (openshift.io/<name>, intel.com/<name>, nvidia.com/hostdev, ...): known as such
#   when a NetworkAttachmentDefinition the pod attaches names it in its resourceName annotation
#   (webhook.core.families); NETWORK_DEVICE_PREFIXES are the names those plugins' operators give,
#   read as network devices when the pod's networks cannot be looked up (`review` without state).
# A policy belongs to the families of its devices (`deviceFamilies`, else derived: rdma/ devices
# make it RDMA_SHARED, Multus networks NETWORK_DEVICE); a device of a family is equivalent to the
# policy's own under a policy of that family, another fabric's under any other.
RDMA_SHARED = "rdma-shared-device"
NETWORK_DEVICE = "network-device"
FAMILIES: tuple[str, ...] = (RDMA_SHARED, NETWORK_DEVICE)
SHARED_DEVICE_PREFIX = "rdma/"
NETWORK_DEVICE_PREFIXES: tuple[str, ...] = ("openshift.io/", "intel.com/", "nvidia.com/hostdev", "nvidia.com/rdma")
# RDMA device plugins with one fixed resource name, so that a pod bringing one of another fabric is
# told so even when no loaded policy provides it: AWS's EFA device plugin, Alibaba Cloud's eRDMA
# controller.
WELL_KNOWN_RDMA: tuple[str, ...] = ("vpc.amazonaws.com/efa", "aliyun/erdma")


TRANSPORTS: dict[str, tuple[Signature, ...]] = {
    "ib-verbs": IB_VERBS,
    "libfabric": LIBFABRIC,
    "gib": GIB,
    "fastrak": FASTRAK,
    "tcpx": TCPX,
}


def signatures(transport: str) -> tuple[Signature, ...]:
    return TRANSPORTS[transport]
