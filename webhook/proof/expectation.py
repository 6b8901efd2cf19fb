"""What proof looks like for a policy: which transport NCCL must say it uses, over which devices,
with GPUDirect RDMA or not, on how many rails.

Derived from the policy's fabric, because that is what the admission decision promised: the
transport is `fabric.transport` (NCCL's built-in IB verbs, the aws-ofi-nccl plugin over
libfabric, Google's gIB, FasTrak); the devices are the fabric's HCA names (`hcaDevices`, the names
NCCL_IB_HCA must keep), so a job on another NIC is seen; GDR is expected on every RDMA transport
unless the policy's own NCCL block turns it off (NCCL_NET_GDR_LEVEL=LOC/0, or
FI_EFA_USE_DEVICE_RDMA=0 for EFA); the rails are the NICs the pod is attached to one by one (its
Multus or GKE networks), and unknown (not checked) when one device-plugin resource or claim gives
however many the node has. A policy's `proof` section overrides any of these (core.model.Proof).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from webhook.core.model import Policy

# NCCL's names for its networks (`Using network X`, `via NET/X/0`), by transport. IBext is HPC-X's
# SHARP plugin, NCCL's IB verbs transport built as a plugin; FastSocket is Google's TCP plugin.
NETWORKS: dict[str, str] = {
    "ib": "ib-verbs",
    "ibext": "ib-verbs",
    "ibp": "ib-verbs",
    "libfabric": "libfabric",
    "aws libfabric": "libfabric",
    "ofi": "libfabric",
    "gib": "gib",
    "fastrak": "fastrak",
    "gpudirecttcpx": "tcpx",
    "socket": "socket",
    "fastsocket": "socket",
}
TCP = "socket"
PLUGIN_TRANSPORTS = ("libfabric", "gib", "fastrak", "tcpx")
_GDR_OFF = ("0", "loc")


_VERSIONED = re.compile(r"_v\d+$")


def transport_of(network: str) -> str:
    """The transport an NCCL network name belongs to (its own name, lowercased, when unknown); a
    plugin's interface version (`GPUDirectTCPX_v7`, `IBext_v8`) is not part of its name."""
    name = _VERSIONED.sub("", network.strip().lower())
    return NETWORKS.get(name, name)


@dataclass(frozen=True)
class Expectation:
    """What a job's NCCL log must show. `devices` None: any device name; `gdr` None: not
    checked; `rails` None: not checked. `policy` None: no policy, any RDMA transport is proof."""

    policy: str | None
    transport: str | None
    devices: tuple[str, ...] | None
    gdr: bool | None
    rails: int | None
    on_fallback: str = "report"
    providers: tuple[str, ...] = ()  # libfabric providers that are the fabric (efa)

    def device_ok(self, name: str) -> bool:
        """`name` is one of the promised devices: listed, or of a family the policy names by its
        stem (`rocep*`: ConnectX-8's and eRDMA's RoCE names, `ibp*`: CoreWeave's HCAs)."""
        if self.devices is None or name in self.devices:
            return True
        return any(d.endswith("*") and name.startswith(d[:-1]) for d in self.devices)


ANY_RDMA = Expectation(policy=None, transport=None, devices=None, gdr=None, rails=None)


def _env(policy: Policy, name: str) -> str | None:
    for setting in policy.env:
        if setting.name == name:
            return setting.value
    return None


def _derived_gdr(policy: Policy, transport: str) -> bool | None:
    if transport not in ("ib-verbs", "libfabric", "gib"):
        return None  # TCPX/FasTrak move GPU memory over TCP: NCCL prints no GDR line for them
    level = _env(policy, "NCCL_NET_GDR_LEVEL")
    if level is not None and level.strip().lower() in _GDR_OFF:
        return False
    efa = _env(policy, "FI_EFA_USE_DEVICE_RDMA")
    if transport == "libfabric" and efa is not None and efa.strip().lower() in ("0", "false", "no", "off"):
        return False
    return True


def _derived_rails(policy: Policy) -> int | None:
    if policy.gke_networks:
        return len(policy.gke_networks)
    if policy.networks and not any(n.per_gpu for n in policy.networks):
        return sum(n.count for n in policy.networks)
    return None


def expectation(policy: Policy | None) -> Expectation:
    """What `policy` promised, in the terms of NCCL's log; ANY_RDMA for no policy."""
    if policy is None:
        return ANY_RDMA
    fabric = policy.fabric
    derived_devices = fabric.hca_devices or None
    proof = policy.proof
    transport = fabric.transport
    if proof is not None and proof.transport is not None:
        transport = proof.transport
    gdr = _derived_gdr(policy, transport)
    rails = _derived_rails(policy)
    devices = derived_devices if transport in ("ib-verbs", "gib") else None
    on_fallback = "report"
    if proof is not None:
        devices = proof.devices if proof.devices is not None else devices
        gdr = proof.gdr if proof.gdr is not None else gdr
        rails = proof.rails if proof.rails is not None else rails
        on_fallback = proof.on_fallback
    return Expectation(
        policy=policy.name,
        transport=transport,
        devices=devices,
        gdr=gdr,
        rails=rails,
        on_fallback=on_fallback,
        providers=fabric.providers,
    )
