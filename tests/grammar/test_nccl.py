"""NCCL's own reading of the settings that choose between RDMA and TCP."""

import pytest

from webhook.grammar import nccl


@pytest.mark.parametrize(
    "value,disabled",
    [
        ("1", True),
        ("0x1", True),
        ("-1", True),
        ("2", True),
        (" 1", True),
        ("1abc", True),
        ("010", True),
        ("0", False),
        ("abc", False),
        ("", False),
        ("0x", False),
        ("08", False),
        ("false", False),
        ("true", False),
        ("99999999999999999999", False),  # ERANGE: NCCL keeps the default
    ],
)
def test_ib_disable_is_read_with_strtoll(value, disabled):
    assert nccl.ib_disabled(value) is disabled


def test_strtoll_bases():
    assert nccl.strtoll("0x1f") == 31
    assert nccl.strtoll("017") == 15
    assert nccl.strtoll("-42xyz") == -42
    assert nccl.strtoll("x") == 0


@pytest.mark.parametrize(
    "value,selected",
    [
        ("erdma", ["erdma_0", "erdma_1"]),
        ("erdma_1", ["erdma_1"]),
        ("=erdma", []),
        ("=erdma_0", ["erdma_0"]),
        ("^erdma", []),
        ("^erdma_0", ["erdma_1"]),
        ("^mlx5", ["erdma_0", "erdma_1"]),
        ("mlx5", []),
        ("Erdma", []),  # case-sensitive prefix match
        ("erdma_0:1", ["erdma_0"]),
        ("erdma_0:2", []),  # RoCE/eRDMA devices expose port 1
        ("erdma_0:", []),  # atoi("") is port 0
        ("mlx5_0,erdma_1", ["erdma_1"]),
        ("", ["erdma_0", "erdma_1"]),
        (",", ["erdma_0", "erdma_1"]),
    ],
)
def test_ib_hca_grammar(value, selected):
    assert nccl.hca_selected_devices(value, ["erdma_0", "erdma_1"]) == selected


@pytest.mark.parametrize(
    "value,ok", [("IB", True), ("ib", True), ("Ib", True), ("Socket", False), ("SOCKET", False), ("", False)]
)
def test_net_is_case_insensitive(value, ok):
    assert nccl.net_selected(value, ["IB"]) is ok


def test_debug_levels():
    assert nccl.debug_verbose("info") and nccl.debug_verbose("TRACE")
    assert not nccl.debug_verbose("WARN") and not nccl.debug_verbose(None)


def test_debug_subsys_light():
    """INFO narrowed to init subsystems is a few lines per rank (policies/*.yaml set INIT,NET)."""
    from webhook.grammar.nccl import debug_subsys_light

    assert debug_subsys_light("INIT,NET") and debug_subsys_light("init, net,ENV") and debug_subsys_light("BOOTSTRAP")
    assert not debug_subsys_light(None) and not debug_subsys_light("") and not debug_subsys_light(" , ")
    assert not debug_subsys_light("INIT,COLL") and not debug_subsys_light("ALL") and not debug_subsys_light("^COLL")


@pytest.mark.parametrize(
    "value, selected",
    [
        ("ibp", True),  # CoreWeave's documented value
        ("ibp0,ibp1", True),  # members of the family
        ("ib", True),  # a prefix that covers the family
        ("=ibp3", True),
        ("ibp2:1", True),
        ("", True),
        ("mlx5", False),  # the family has no mlx5 device
        ("=ibp", False),  # exact: no device is named just `ibp`
        ("ibp2:2", False),  # port 2: the family's devices are port 1
        ("^ibp", False),  # excludes every ibp device
        ("^ib", False),
        ("^mlx5", True),
        ("^ibp0", True),  # excludes one member; the others stay
    ],
)
def test_a_device_family_is_selected_by_a_member_or_a_covering_prefix(value, selected):
    """`ibp*` in a policy's hcaDevices: the node names its devices (ibp0.., rocep..._dma), the
    policy knows their stem; NCCL_IB_HCA keeps the fabric when it keeps some device of it."""
    assert (nccl.hca_selected_devices(value, ["ibp*"]) == ["ibp*"]) == selected
