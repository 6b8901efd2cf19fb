"""Every real NCCL log excerpt of tests/proof/nccl-logs/ (copied from public threads, sources in
SOURCES.yaml) read as `nccl-log` reads it, against the shipped policy it fits (or none), and the
verdict, reasons, transport, devices, GDR and ranks its lines prove."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from webhook.policy.load import default_policies_dir, load_dir
from webhook.proof import expectation, nccl_log, verdict

LOGS = Path(__file__).parent / "nccl-logs"
ANY = object()  # not asserted

# file: (policy, verdict, reasons, transport, devices, gdr, ranks)
CASES: dict[str, tuple] = {
    # InfiniBand and RoCE on NCCL's IB verbs (and HPC-X's IBext), versions 2.2 to 2.25
    "aks-rdma-infiniband-30-mpijob-8rail-2.25.log": (
        "sriov-roce-8rail",
        "verified",
        [],
        "ib-verbs",
        [f"mlx5_{i}" for i in range(8)],
        None,
        1,
    ),
    "aks-rdma-infiniband-30-mpijob-interleaved-2.25.log": (
        "ib-shared",
        "unverifiable",
        ["Unverifiable"],
        "ib-verbs",
        [f"mlx5_{i}" for i in range(8)],
        None,
        9,
    ),
    # eRDMA on an ACK GPU node, its NICs under their RoCE names (the eRDMA controller's OFED driver)
    "ack-erdma-gdr-rocep.log": ("erdma", "verified", [], "ib-verbs", ["rocep26s0"], None, 1),
    "nccl-tests-185-roce-2.19.log": ("roce-dranet", "verified", [], "ib-verbs", ["mlx5_10", "mlx5_11"], None, 2),
    "nccl-1052-roce-2.18.log": ("roce-dranet", "verified", [], "ib-verbs", ["mlx5_4"], None, 2),
    "nccl-302-ib-2.5.6.log": ("ib-shared", "verified", [], "ib-verbs", [f"mlx5_{i}" for i in range(5)], None, 1),
    "nccl-147-ib-2.3.5.log": ("ib-shared", "verified", [], "ib-verbs", [f"mlx5_{i}" for i in range(4)], None, 1),
    "horovod-489-nccl-2.2-no-marker.log": (None, "verified", [], "ib-verbs", ["mlx4_0"], None, 5),
    "nccl-707-gdrdma-channels.log": ("ib-shared", "verified", [], "ib-verbs", [], True, 1),
    "deit-28-mlx4-roce.log": ("ib-shared", "degraded", ["WrongDevice"], "ib-verbs", ["mlx4_0"], None, 1),
    "pytorch-43258-18-hcas-old-format.log": ("ib-shared", "degraded", ["WrongDevice"], "ib-verbs", ANY, None, 1),
    "nccl-1016-pytorchjob-roce-vf-ibext.log": (
        "sriov-roce",
        "degraded",
        ["WrongDevice", "Unverifiable"],
        "ib-verbs",
        ["rocep204s0f0v6"],
        None,
        4,
    ),
    "nccl-1357-ibext-sharp.log": (
        "sriov-roce-8rail",
        "degraded",
        ["FewerRails", "Unverifiable"],
        "ib-verbs",
        ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5"],
        None,
        5,
    ),
    "nccl-1537-gdr-disabled.log": (
        "roce-dranet",
        "degraded",
        ["GdrDisabled"],
        "ib-verbs",
        ["mlx5_0", "mlx5_1"],
        False,
        1,
    ),
    "nccl-392-gdr-off-2.5.7.log": ("sriov-roce", "degraded", ["GdrDisabled"], "ib-verbs", ["mlx5_0"], False, 1),
    "pytorch-81628-roce-i40iw.log": (
        "roce-dranet",
        "degraded",
        ["WrongDevice", "GdrDisabled"],
        "ib-verbs",
        ["i40iw0", "mlx5_0", "mlx5_1"],
        False,
        1,
    ),
    # HPC-X's IBext_v8 over four IB/SHARP HCAs and one RoCE NIC (2.21): five rails, not eight
    "nccl-1737-ibext-sharp-roce-listing-2.21.log": (
        "sriov-roce-8rail",
        "degraded",
        ["FewerRails"],
        "ib-verbs",
        ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_4", "mlx5_5"],
        None,
        1,
    ),
    "nv-peer-memory-56-ib-and-socket-2.4.7.log": (
        "ib-shared",
        "unverifiable",
        ["Unverifiable"],
        "ib-verbs",
        ["mlx5_0"],
        None,
        8,
    ),
    # EFA through aws-ofi-nccl
    "nccl-1597-efa-h200-2.23.log": ("efa", "verified", [], "libfabric", [], None, 2),
    "nccl-1597-efa-gdrdma-channel-2.23.log": ("efa", "verified", [], "libfabric", [], True, 1),
    "aws-ofi-nccl-24-horovod-efa-2019.log": (
        "efa",
        "degraded",
        ["GdrDisabled", "Unverifiable"],
        "libfabric",
        [],
        False,
        10,
    ),
    "nccl-229-efa-ring-libfabric-2.4.6.log": (
        "efa",
        "degraded",
        ["GdrDisabled", "Unverifiable"],
        "libfabric",
        [],
        False,
        7,
    ),
    "nccl-229-efa-tcp-provider-2.4.6.log": ("efa", "fallback", ["NetSocket"], "libfabric", [], None, 2),
    # gIB, GPUDirectTCPX
    "dranet-kuberay-gib-a4.log": ("gke-gib", "verified", [], "gib", ["mlx5_0"], True, 1),
    # GKE A3 Ultra: a net plugin fails to load (GLIBC) and NCCL stops at init with "network gIB
    # not found": no network ever named, so Unknown (PluginFailed), never True nor a TCP fallback
    "gpu-recipes-5-a3ultra-gib-not-found.log": (
        "gke-gib",
        "unverifiable",
        ["Unverifiable", "PluginFailed"],
        None,
        [],
        None,
        2,
    ),
    "skypilot-tcpx-plugin-lines.log": (None, "unverifiable", ["Unverifiable"], None, [], None, 1),
    "nccl-1652-tcpx-warn-only.log": ("gke-tcpxo", "unverifiable", ["Unverifiable"], None, [], None, 2),
    # Socket fallbacks
    "nccl-226-ec2-socket-2.4.7.log": (
        None,
        "fallback",
        ["NetSocket", "NoDevice", "Unverifiable"],
        "socket",
        [],
        None,
        8,
    ),
    "horovod-685-socket-2.3.7.log": (
        "sriov-roce",
        "fallback",
        ["NetSocket", "NoDevice", "Unverifiable"],
        "socket",
        [],
        None,
        2,
    ),
    "nccl-1053-socket-lo.log": ("nd-infiniband", "fallback", ["NetSocket"], "socket", [], None, 1),
    "pytorch-72835-lo-socket-2.10.3.log": (None, "fallback", ["NetSocket", "NoDevice"], "socket", [], None, 2),
    "nccl-1410-k8s-verbs-missing.log": (
        "roce-dranet",
        "fallback",
        ["NetSocket", "VerbsMissing", "Unverifiable"],
        "socket",
        [],
        None,
        4,
    ),
    "nccl-367-socket-verbs-missing-2.4.8.log": (
        None,
        "fallback",
        ["NetSocket", "VerbsMissing", "Unverifiable"],
        "socket",
        [],
        None,
        6,
    ),
    "nccl-367-ring-via-socket.log": (None, "fallback", ["NetSocket", "Unverifiable"], "socket", [], None, 6),
    # 2.27: "No device found", then an IB listing with no device ("NET/IB : Using [RO]"), then
    # Socket: the empty listing is never IB; the other process never named its network
    "nccl-1936-ib-no-device-socket-2.27.log": (
        "ib-shared",
        "fallback",
        ["NetSocket", "NoDevice", "Unverifiable"],
        "socket",
        [],
        None,
        2,
    ),
    # failures
    "nccl-1405-completion-ib-plugin.log": ("ib-shared", "failed", ["CompletionError"], None, [], None, 1),
    "nccl-1737-completion-err5.log": ("ib-shared", "failed", ["CompletionError"], None, [], None, 1),
    "nccl-1814-completion-status12.log": ("roce-dranet", "failed", ["CompletionError"], None, [], None, 1),
    "nccl-928-completion-error4.log": ("nd-infiniband", "failed", ["CompletionError"], None, [], None, 2),
    # no line naming the network: never verified, never fallback
    "nccl-1504-container-no-network-line-2.21.log": (None, "unverifiable", ["Unverifiable"], None, [], None, 4),
    "nccl-676-ibext-disabled-no-network-line.log": (None, "unverifiable", ["Unverifiable"], None, [], None, 1),
    "pytorch-111424-no-device-only.log": (None, "unverifiable", ["Unverifiable", "NoDevice"], None, [], None, 1),
}


@pytest.fixture(scope="module")
def catalogue():
    loaded, errors = load_dir(default_policies_dir())
    assert loaded is not None, errors
    return loaded


def judged(name: str, policy) -> verdict.Verdict:
    with open(LOGS / name, "rb") as f:
        reading = nccl_log.read_stream(f)
    return verdict.judge(reading, expectation.expectation(policy))


def test_every_log_has_a_source_and_a_case():
    sources = yaml.safe_load((LOGS / "SOURCES.yaml").read_text())
    logs = {p.name for p in LOGS.glob("*.log")}
    assert len(logs) >= 30
    assert set(sources) == logs
    assert set(CASES) == logs
    for name, source in sources.items():
        if "page" in source:  # a vendor's documentation page that prints NCCL's own lines (title, URL)
            assert source["page"] and source.get("url", "").startswith("https://"), name
            continue
        assert source.get("repository") and source.get("url", "").startswith("https://github.com/"), name
        assert source.get("issue") or source.get("path"), name


@pytest.mark.parametrize("name", sorted(CASES))
def test_real_log(name, catalogue):
    policy_name, want, reasons, transport, devices, gdr, ranks = CASES[name]
    policy = catalogue.get(policy_name) if policy_name else None
    assert policy_name is None or policy is not None
    got = judged(name, policy)
    assert got.verdict == want
    assert got.reasons == reasons
    assert got.transport == transport
    if devices is not ANY:
        assert got.devices == sorted(devices)
    assert got.gdr is gdr
    assert len(got.ranks) == ranks
    status, reason, _ = got.condition()
    assert status == {"verified": "True", "unverifiable": "Unknown"}.get(want, "False")
    assert reason == ("Verified" if want == "verified" else reasons[0])


def test_versions_read_from_the_lines():
    want = {
        "nccl-tests-185-roce-2.19.log": "2.19.3",
        "nccl-147-ib-2.3.5.log": "2.3.5",
        "nccl-226-ec2-socket-2.4.7.log": "2.4.7",
        "nccl-1597-efa-gdrdma-channel-2.23.log": "2.23.4",
        "nccl-392-gdr-off-2.5.7.log": "2.5.7",
        "nccl-1737-ibext-sharp-roce-listing-2.21.log": "2.21.5",
        "nccl-1936-ib-no-device-socket-2.27.log": "2.27.5",
    }
    for name, version in want.items():
        assert judged(name, None).version == version, name


def test_plugins_read_from_the_lines():
    want = {
        "dranet-kuberay-gib-a4.log": "gIB",
        "nccl-1016-pytorchjob-roce-vf-ibext.log": "IBext",  # said by one rank (P2P plugin IBext)
        "nccl-676-ibext-disabled-no-network-line.log": "IBext",
        "skypilot-tcpx-plugin-lines.log": "GPUDirectTCPX",
        "nccl-1052-roce-2.18.log": "internal",
    }
    for name, plugin in want.items():
        assert judged(name, None).plugin == plugin, name


def test_same_ib_lines_verified_without_a_policy_and_rails_checked_with_one(catalogue):
    """The 8-rail log proves 8 rails: verified under an 8-rail policy; the 4-NIC one is not."""
    assert (
        judged("aks-rdma-infiniband-30-mpijob-8rail-2.25.log", catalogue.get("sriov-roce-8rail")).verdict == "verified"
    )
    assert judged("nccl-tests-185-roce-2.19.log", catalogue.get("sriov-roce-8rail")).reasons == ["FewerRails"]
    assert judged("nccl-tests-185-roce-2.19.log", None).verdict == "verified"


def test_socket_log_is_fallback_under_every_rdma_policy(catalogue):
    for policy in catalogue.ranked():
        got = judged("pytorch-72835-lo-socket-2.10.3.log", policy)
        assert (got.verdict, got.reasons[0]) == ("fallback", "NetSocket"), policy.name
