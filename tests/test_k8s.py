"""Kubernetes semantics: env resolution as the kubelet does it, selectors, quantities, names."""

import pytest

from webhook import k8s


def test_env_later_duplicates_win_and_expand_against_earlier_entries():
    env = k8s.Env([
        {"name": "A", "value": "one"},
        {"name": "B", "value": "$(A)-$(C)"},  # C is defined later: stays as written
        {"name": "C", "value": "three"},
        {"name": "A", "value": "two"},
        {"name": "D", "value": "$(A)"},  # the A before D is the second one
        {"name": "E", "value": "$$(A)"},  # escaped
        {"name": "F", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "G", "value": "$(F)"},  # a valueFrom source cannot be resolved here
        {"name": "H"},
    ])
    assert env.get("A") == "two" and env["B"] == "one-$(C)" and env["D"] == "two" and env["E"] == "$(A)"
    assert "F" not in env and env.unknown("F") and env.get("F") is None
    assert env["G"] == "$(F)" and env["H"] == "" and env.get("Z") is None and not env.unknown("Z")
    with pytest.raises(KeyError):
        env["F"]


def test_env_redefinition_refers_to_the_previous_value():
    env = k8s.Env([{"name": "P", "value": "/a"}, {"name": "P", "value": "$(P):/b"}])
    assert env["P"] == "/a:/b"


def test_env_finds_indexed_and_other_names_alike():
    env = k8s.Env([{"name": "NCCL_NET", "value": "IB"}, {"name": "MODE", "value": "x"}, {"name": "NCCL_NET", "value": "$(NCCL_NET)-$(MODE)"},
                   {"name": "MODE", "value": "y"}, {"name": "NCCL_IB_HCA", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}])
    assert env["NCCL_NET"] == "IB-x"  # the earlier NCCL_NET and MODE, as the kubelet expands
    assert env.index("NCCL_NET") == 2 and env.index("MODE") == 3 and env.index("NCCL_NET", 2) == 0 and env.index("MODE", 3) == 1
    assert env.unknown("NCCL_IB_HCA") and not env.unknown("NCCL_DEBUG") and env.index("NCCL_DEBUG") is None
    assert env["MODE"] == "y" and env.index("NCCL_NET", 0) is None


def test_env_tolerates_junk_entries():
    env = k8s.Env([None, "x", {"name": 5, "value": "v"}, {"value": "no name"}, {"name": "OK", "value": 7}])
    assert env["OK"] == "7" and env.index("OK") == 4 and env.index("5") is None and env.index("") is None
    assert k8s.Env(None).get("A") is None


def test_selector_and_quantities():
    sel = k8s.compile_selector({"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "NotIn", "values": ["x"]}]})
    assert sel({"a": "1"}) and sel({"a": "1", "b": "y"}) and not sel({"a": "1", "b": "x"}) and not sel({})
    assert k8s.parse_quantity("64Gi") == 64 * 2**30 and k8s.parse_quantity(8) == 8
    with pytest.raises(ValueError):
        k8s.parse_quantity(True)
    assert k8s.format_bytes(3 * 2**30) == "3Gi" and k8s.format_bytes(1000) == "1000"


@pytest.mark.parametrize("name,ok", [("aliyun/erdma", True), ("openshift.io/mellanoxrdma", True), ("nvidia.com/gpu", True),
                                     ("erdma", False), ("kubernetes.io/x", False), ("Bad_Domain/x", False), ("a.b/-x", False)])
def test_extended_resource_names(name, ok):
    assert (k8s.is_extended_resource_name(name) is None) is ok
