"""Kubernetes semantics: env resolution as the kubelet does it, selectors, quantities, names."""

import pytest

from webhook.grammar import k8s


def test_env_later_duplicates_win_and_expand_against_earlier_entries():
    env = k8s.Env(
        [
            {"name": "A", "value": "one"},
            {"name": "B", "value": "$(A)-$(C)"},  # C is defined later: stays as written
            {"name": "C", "value": "three"},
            {"name": "A", "value": "two"},
            {"name": "D", "value": "$(A)"},  # the A before D is the second one
            {"name": "E", "value": "$$(A)"},  # escaped
            {"name": "F", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "G", "value": "$(F)"},  # a valueFrom source cannot be resolved here
            {"name": "H"},
        ]
    )
    assert env.get("A") == "two" and env["B"] == "one-$(C)" and env["D"] == "two" and env["E"] == "$(A)"
    assert "F" not in env and env.unknown("F") and env.get("F") is None
    assert env["G"] == "$(F)" and env["H"] == "" and env.get("Z") is None and not env.unknown("Z")
    with pytest.raises(KeyError):
        env["F"]


def test_env_redefinition_refers_to_the_previous_value():
    env = k8s.Env([{"name": "P", "value": "/a"}, {"name": "P", "value": "$(P):/b"}])
    assert env["P"] == "/a:/b"


def test_env_finds_indexed_and_other_names_alike():
    env = k8s.Env(
        [
            {"name": "NCCL_NET", "value": "IB"},
            {"name": "MODE", "value": "x"},
            {"name": "NCCL_NET", "value": "$(NCCL_NET)-$(MODE)"},
            {"name": "MODE", "value": "y"},
            {"name": "NCCL_IB_HCA", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        ]
    )
    assert env["NCCL_NET"] == "IB-x"  # the earlier NCCL_NET and MODE, as the kubelet expands
    assert (
        env.index("NCCL_NET") == 2
        and env.index("MODE") == 3
        and env.index("NCCL_NET", 2) == 0
        and env.index("MODE", 3) == 1
    )
    assert env.unknown("NCCL_IB_HCA") and not env.unknown("NCCL_DEBUG") and env.index("NCCL_DEBUG") is None
    assert env["MODE"] == "y" and env.index("NCCL_NET", 0) is None


def test_env_tolerates_junk_entries():
    env = k8s.Env([None, "x", {"name": 5, "value": "v"}, {"value": "no name"}, {"name": "OK", "value": 7}])
    assert env["OK"] == "7" and env.index("OK") == 4 and env.index("5") is None and env.index("") is None
    assert k8s.Env(None).get("A") is None


def test_selector_and_quantities():
    sel = k8s.compile_selector(
        {"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "NotIn", "values": ["x"]}]}
    )
    assert sel({"a": "1"}) and sel({"a": "1", "b": "y"}) and not sel({"a": "1", "b": "x"}) and not sel({})
    assert k8s.parse_quantity("64Gi") == 64 * 2**30 and k8s.parse_quantity(8) == 8
    with pytest.raises(ValueError):
        k8s.parse_quantity(True)
    assert k8s.format_bytes(3 * 2**30) == "3Gi" and k8s.format_bytes(1000) == "1000"


@pytest.mark.parametrize(
    "name,ok",
    [
        ("aliyun/erdma", True),
        ("openshift.io/mellanoxrdma", True),
        ("nvidia.com/gpu", True),
        ("erdma", False),
        ("kubernetes.io/x", False),
        ("Bad_Domain/x", False),
        ("a.b/-x", False),
    ],
)
def test_extended_resource_names(name, ok):
    assert (k8s.is_extended_resource_name(name) is None) is ok


def test_expansion_replaces_every_reference_in_order():
    defined = {"PROTO": "tcp", "HOST": "llama-master-0", "PORT": "23456"}
    assert (
        k8s.expand("$(PROTO)://$(HOST):$(PORT)/$(UNSET)/$$(HOST)/$(PORT)", defined)
        == "tcp://llama-master-0:23456/$(UNSET)/$(HOST)/23456"
    )


def test_a_reference_to_an_nccl_variable_defined_nowhere_stays_as_written():
    """NCCL_ names are found through the index; one that no entry defines is not an error."""
    env = k8s.Env(
        [{"name": "NCCL_SOCKET_IFNAME", "value": "$(NCCL_IFACE),eth0"}, {"name": "LOG", "value": "$(NCCL_DEBUG_FILE)"}]
    )
    assert env["NCCL_SOCKET_IFNAME"] == "$(NCCL_IFACE),eth0" and env["LOG"] == "$(NCCL_DEBUG_FILE)"


def test_dns_names_follow_the_length_and_character_rules():
    assert k8s.is_dns1123_label("a" * 63) and not k8s.is_dns1123_label("a" * 64)
    assert not k8s.is_dns1123_label("Trainer") and not k8s.is_dns1123_label("rdma.net")
    longest = ".".join(["a" * 63] * 3 + ["b" * 61])
    assert len(longest) == 253 and k8s.is_dns1123_subdomain(longest) and not k8s.is_dns1123_subdomain(longest + "b")
    assert k8s.is_dns1123_subdomain("rdma-network.ai-training")
    for bad in ("Rdma-Network", "rdma_network", "-rdma", "rdma..net", ""):
        assert not k8s.is_dns1123_subdomain(bad), bad


def test_capability_lists_match_with_or_without_the_cap_prefix_in_any_case():
    assert k8s.has_capability(["NET_ADMIN", "cap_ipc_lock"], "IPC_LOCK") and k8s.has_capability(
        ["Ipc_Lock"], "IPC_LOCK"
    )
    assert not k8s.has_capability(["NET_ADMIN"], "IPC_LOCK") and not k8s.has_capability([], "IPC_LOCK")
    # only a list is a capability list: a map or a string that holds the name is not one
    for items in (None, "IPC_LOCK", {"IPC_LOCK": True}, {"add": ["IPC_LOCK"]}, 7):
        assert not k8s.has_capability(items, "IPC_LOCK"), items


def test_all_dict_and_all_str_say_whether_every_item_is_one():
    assert k8s.all_dict([]) and k8s.all_dict([{}, {"name": "a"}])
    assert not k8s.all_dict(["trainer"]) and not k8s.all_dict([{}, None]) and not k8s.all_dict([[]])
    assert k8s.all_str([]) and k8s.all_str(["a", ""]) and not k8s.all_str([1]) and not k8s.all_str(["a", None])


def test_an_unknown_selector_operator_is_named():
    with pytest.raises(ValueError) as e:
        k8s.compile_selector({"matchExpressions": [{"key": "team", "operator": "Gt", "values": ["1"]}]})
    assert str(e.value) == "unknown selector operator 'Gt'"


@pytest.mark.parametrize(
    "value,message",
    [
        (True, "True is not a quantity"),
        ("8²", "'8²' is not a quantity"),
        ([8], "[8] is not a quantity"),
        (None, "None is not a quantity"),
        ("8 GPUs", "'8 GPUs' is not a quantity"),
    ],
)
def test_what_is_not_a_quantity_is_named_in_the_error(value, message):
    with pytest.raises(ValueError) as e:
        k8s.parse_quantity(value)
    assert str(e.value) == message
