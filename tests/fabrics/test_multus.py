"""Issue 28 item 4: what the fabrics' own modules decide that the fabric tests did not pin down,
found by mutation testing (`make mutation MUTANTS='webhook.fabrics.*'`, mutation/MUTATION.md):
Multus annotations the pod brings that Multus reads differently from a naive reading (an
entry without a name, an empty interface request, a policy network that asks for its own
interface name), and what the libfabric table tells the user about NCCL_NET_PLUGIN.

Every test goes through the admission review of an API-server-shaped pod (tests/kube_objects.py)
with the shipped policies or one changed in a single field."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

import kube_objects as k
from fabrics.test_transports import EKS, STATE, efa_worker, env_of, mutated, respond
from webhook.cluster.state import FileClusterState
from webhook.core import keys
from webhook.policy.load import load_dir, load_texts

ROOT = Path(__file__).resolve().parent.parent.parent
AI = STATE.namespace("ai-training")  # policy sriov-roce: the rdma-network attachment, interface net1


def sriov_worker(annotation: str | None = None) -> dict:
    """A PyTorchJob worker in ai-training (sriov-roce), optionally listing networks of its own."""
    pod = k.pytorchjob_worker()
    pod["metadata"]["namespace"] = AI.name
    for c in pod["spec"]["containers"]:
        c["env"] = [e for e in c.get("env", []) if e["name"] != "NCCL_SOCKET_IFNAME"]
    if annotation is not None:
        pod["metadata"].setdefault("annotations", {})[keys.MULTUS_NETWORKS] = annotation
    return pod


def policies_with_interface(interface: str, namespace: str | None = None):
    """The shipped policies, sriov-roce asking Multus for `interface` instead of net1 (and for
    its network in `namespace` instead of the pod's)."""
    texts = []
    for p in sorted((ROOT / "policies").glob("*.yaml")):
        text = p.read_text()
        if p.name == "sriov-roce.yaml":
            assert "    interface: net1\n" in text
            text = text.replace("    interface: net1\n", f"    interface: {interface}\n")
            if namespace:
                text = text.replace("  - name: rdma-network\n", f"  - name: rdma-network\n    namespace: {namespace}\n")
        texts.append((str(p), text))
    ps, errors = load_texts(texts)
    assert errors == []
    return ps


# -- what Multus cannot read is denied, saying so ----------------------------------------------------


@pytest.mark.parametrize(
    "annotation",
    [
        '[{"interface": "net1"}]',  # a selection object without a name: Multus has no network to attach
        '[{"name": 7}]',  # a name that is not a string
        '["rdma-network"]',  # the comma form's entry written as a JSON string
    ],
    ids=["no-name", "name-not-a-string", "json-string-entry"],
)
def test_a_json_annotation_multus_cannot_read_is_denied_with_the_fix(policies, annotation):
    resp, _, d = respond(sriov_worker(annotation), AI, policies)
    assert not resp["allowed"]
    assert [f.rule for f in d.denials] == ["multus-annotation"]
    assert (
        f"{keys.MULTUS_NETWORKS}: annotation is neither a comma-separated list of networks nor a JSON list of "
        f"network objects with a name; Multus would reject the pod. Fix the annotation"
    ) in resp["status"]["message"]


@pytest.mark.parametrize("annotation", ["macvlan-conf@net1@net2", "shared/extra/macvlan-conf", "ok-net, a@b@c"])
def test_a_comma_entry_multus_cannot_read_is_denied_with_the_fix(policies, annotation):
    """Multus splits an entry once at '/' and once at '@' and refuses more ("Invalid network
    object (failed at '/')" or "(failed at '@')"): such a pod never starts, so it is denied here
    with the fix instead of mutated."""
    resp, _, d = respond(sriov_worker(annotation), AI, policies)
    assert not resp["allowed"] and [f.rule for f in d.denials] == ["multus-annotation"], d.denials
    assert "Multus would reject the pod. Fix the annotation" in resp["status"]["message"]


def test_a_json_annotation_of_named_objects_is_read(policies):
    resp, out = mutated(sriov_worker('[{"name": "macvlan-conf", "namespace": "shared"}]'), AI, policies)
    entries = json.loads(out["metadata"]["annotations"][keys.MULTUS_NETWORKS])
    assert entries == [{"name": "macvlan-conf", "namespace": "shared"}, {"name": "rdma-network", "interface": "net2"}]
    assert env_of(out["spec"]["containers"][0])["NCCL_SOCKET_IFNAME"] == "net2"


# -- interface names as Multus gives them ---------------------------------------------------------


def test_an_empty_interface_request_is_multus_default_name(policies):
    """`"interface": ""` asks for nothing: Multus names the attachment net<position>, so the
    policy's network cannot be net1 too."""
    resp, out = mutated(sriov_worker('[{"name": "macvlan-conf", "interface": ""}]'), AI, policies)
    entries = json.loads(out["metadata"]["annotations"][keys.MULTUS_NETWORKS])
    assert entries[1] == {"name": "rdma-network", "interface": "net2"}
    assert env_of(out["spec"]["containers"][0])["NCCL_SOCKET_IFNAME"] == "net2"
    resp, out = mutated(sriov_worker("macvlan-conf@"), AI, policies)  # the comma form's empty request
    assert out["metadata"]["annotations"][keys.MULTUS_NETWORKS] == "macvlan-conf@,rdma-network@net2"


def test_the_policy_networks_own_interface_name_is_asked_for(policies):
    ps = policies_with_interface("rdma0")
    resp, out = mutated(sriov_worker(), AI, ps)
    assert out["metadata"]["annotations"][keys.MULTUS_NETWORKS] == "rdma-network@rdma0"
    assert env_of(out["spec"]["containers"][0])["NCCL_SOCKET_IFNAME"] == "rdma0"
    _, _, d = respond(sriov_worker(), AI, ps)
    assert "network ai-training/rdma-network@rdma0" in d.notes  # what the user is told was added


def test_when_the_pod_has_the_policys_interface_the_lowest_free_net_name_is_taken(policies):
    """rdma0 is the pod's own macvlan: the policy's network gets net1, the lowest name Multus
    would not give another attachment."""
    ps = policies_with_interface("rdma0")
    resp, out = mutated(sriov_worker("macvlan-conf@rdma0"), AI, ps)
    assert out["metadata"]["annotations"][keys.MULTUS_NETWORKS] == "macvlan-conf@rdma0,rdma-network@net1"
    assert env_of(out["spec"]["containers"][0])["NCCL_SOCKET_IFNAME"] == "net1"


def test_a_policy_network_in_another_namespace_is_named_with_it(policies, tmp_path):
    """A network the policy takes from a shared namespace: the JSON form names the namespace, the
    comma form writes namespace/name, and the note says which namespace's network was added."""
    ps = policies_with_interface("net1", namespace="sriov-nets")
    doc = yaml.safe_load((ROOT / "examples" / "cluster-state.yaml").read_text())
    nad = copy.deepcopy(
        next(
            i
            for i in doc["items"]
            if i["kind"] == "NetworkAttachmentDefinition" and i["metadata"]["name"] == "rdma-network"
        )
    )
    nad["metadata"]["namespace"] = "sriov-nets"
    doc["items"].append(nad)
    (tmp_path / "state.yaml").write_text(yaml.safe_dump(doc))
    state = FileClusterState.from_file(str(tmp_path / "state.yaml"))
    resp, out, d = respond(sriov_worker('[{"name": "macvlan-conf"}]'), AI, ps, state)
    assert resp["allowed"], resp.get("status")
    entries = json.loads(out["metadata"]["annotations"][keys.MULTUS_NETWORKS])
    assert entries[1] == {"name": "rdma-network", "namespace": "sriov-nets", "interface": "net2"}
    assert "network sriov-nets/rdma-network@net2" in d.notes
    resp, out, d = respond(sriov_worker("macvlan-conf"), AI, ps, state)
    assert out["metadata"]["annotations"][keys.MULTUS_NETWORKS] == "macvlan-conf,sriov-nets/rdma-network@net2"


# -- the libfabric table's NCCL_NET_PLUGIN ---------------------------------------------------------


def shipped():
    """The shipped policies loaded by the test itself (the session's `policies` are loaded once,
    before mutation testing's mutant of the policy model is in place)."""
    ps, errors = load_dir(ROOT / "policies")
    assert ps is not None, errors
    return ps


def test_nccl_net_plugin_none_says_no_plugin_is_loaded():
    policies = shipped()
    resp, _, d = respond(efa_worker(env=[{"name": "NCCL_NET_PLUGIN", "value": "none"}]), EKS, policies)
    assert not resp["allowed"] and [f.rule for f in d.denials] == ["env-fallback"]
    assert (
        "NCCL_NET_PLUGIN='none' loads no net plugin, leaving NCCL its built-in transports, which on the efa "
        "policy's efa fabric means TCP sockets (NET/Socket); remove it or set NCCL_NET_PLUGIN=ofi"
    ) in d.denials[0].message


def test_nccl_net_plugin_naming_another_library_says_which():
    policies = shipped()
    resp, _, d = respond(efa_worker(env=[{"name": "NCCL_NET_PLUGIN", "value": "ib"}]), EKS, policies)
    assert not resp["allowed"]
    assert (
        "NCCL_NET_PLUGIN='ib' loads libnccl-net-ib.so instead of the fabric's plugin, leaving NCCL its built-in "
        "transports"
    ) in d.denials[0].message
    assert d.denials[0].message.endswith("remove it or set NCCL_NET_PLUGIN=ofi in env")
    for value in ("ofi", "aws-ofi"):  # both names the policy lists open the plugin
        resp, _, _ = respond(efa_worker(env=[{"name": "NCCL_NET_PLUGIN", "value": value}]), EKS, policies)
        assert resp["allowed"], resp.get("status")


@pytest.mark.parametrize(
    "value, allowed",
    [
        ("efa;ofi_rxr", True),  # core;utility: the efa core provider under the rxr utility provider
        ("efa;ofi_rxm,shm", True),
        ("tcp;ofi_rxm", False),  # the tcp core provider: bytes over TCP
        ("^efa;ofi_rxr", False),
    ],
)
def test_fi_provider_core_and_utility_names_are_judged_by_their_core_provider(value, allowed):
    resp, _, d = respond(efa_worker(env=[{"name": "FI_PROVIDER", "value": value}]), EKS, shipped())
    assert resp["allowed"] is allowed, resp.get("status")
    assert [f.rule for f in d.denials] == ([] if allowed else ["env-fallback"])


def test_the_policy_lint_line_names_fabric_and_transport():
    """`rdma-webhook policy lint` prints each policy's summary: its fabric over its transport."""
    ps = shipped()
    assert ps.get("efa").summary() == "efa over libfabric; vpc.amazonaws.com/efa x4/GPU; hostNetwork Allowed"
    assert ps.get("sriov-roce").summary() == (
        "sriov over ib-verbs; networks rdma-network; DRA NICs class "
        "sriovnetwork.k8snetworkplumbingwg.io, driver sriovnetwork.k8snetworkplumbingwg.io"
    )
    assert ps.get("roce-dranet").summary().startswith("roce over ib-verbs; DRA NICs driver dra.net")


@pytest.mark.parametrize("value", ["^", ",", " , "])
def test_an_fi_provider_filter_that_names_no_provider_keeps_them_all(value):
    """libfabric's filter without a name (`^` alone, empty items) filters nothing out."""
    resp, _, d = respond(efa_worker(env=[{"name": "FI_PROVIDER", "value": value}]), EKS, shipped())
    assert resp["allowed"], resp.get("status")


@pytest.mark.parametrize(
    "value, runs",
    [
        ("tcp", "tcp"),
        (" sockets ", "sockets"),
        ("^efa,efa-direct", "another provider"),
        ("^shm,efa-direct,efa", "another provider"),
    ],
)
def test_the_fi_provider_denial_says_what_the_plugin_runs_over(value, runs):
    ps, errors = load_texts(
        [
            (str(p), p.read_text().replace("providers: [efa]", "providers: [efa, efa-direct]"))
            for p in sorted((ROOT / "policies").glob("*.yaml"))
        ]
    )
    assert errors == []
    resp, _, d = respond(efa_worker(env=[{"name": "FI_PROVIDER", "value": value}]), EKS, ps)
    assert not resp["allowed"]
    assert (
        f"FI_PROVIDER={value!r} keeps none of the efa policy's efa fabric's libfabric providers (efa/efa-direct), "
        f"so the plugin runs over {runs} and NCCL's bytes go over TCP although it logs the Libfabric network; "
        f"remove it or set FI_PROVIDER=efa"
    ) in d.denials[0].message
