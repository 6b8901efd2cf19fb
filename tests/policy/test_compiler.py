"""webhook.policy.compiler: what a policy author reads when a document is wrong (the field each
problem names, the hint, every problem of a document in one run) and the v1alpha1 migration's
own check. The policies here are loaded by each test itself (mutation/MUTATION.md: a session
fixture's code is linked to the first test that asks for it)."""

from __future__ import annotations

import copy
import time
from pathlib import Path

import pytest
import yaml

from webhook.policy.compiler import compile_policy

ROOT = Path(__file__).resolve().parent.parent.parent
# A shipped v1alpha2 policy (one device-plugin resource, no network) as the base of every case.
ERDMA = yaml.safe_load((ROOT / "policies" / "erdma.yaml").read_text())

V1 = {
    "apiVersion": "rdma-webhook.io/v1alpha1",
    "kind": "RdmaPolicy",
    "name": "old",
    "description": "a v1alpha1 SR-IOV policy",
    "namespaceSelector": {},
    "fabric": {"kind": "sriov", "ncclNet": ["IB"], "hcaDevices": ["mlx5_*"]},
    "device": {"resource": "openshift.io/mellanoxrdma", "count": 1},
    "network": {"name": "rdma-network", "interface": "net1"},
    "shm": {"sizeLimit": "16Gi"},
    "nccl": {"NCCL_NET": {"value": "IB", "enforce": True}, "NCCL_IB_HCA": "mlx5", "NCCL_SOCKET_IFNAME": "net1"},
}


def doc(**changes):
    out = copy.deepcopy(ERDMA)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def errors(document, file="p.yaml"):
    policy, errs = compile_policy(document, file)
    assert policy is None, "an invalid document compiled"
    return [str(e) for e in errs]


def test_the_shipped_document_compiles():
    policy, errs = compile_policy(doc(), "p.yaml")
    assert errs == [] and policy is not None and policy.name == "erdma"


# -- the field each problem names -----------------------------------------------------------------


def test_a_problem_in_a_list_item_names_its_index():
    bad = doc(devices=[{"resource": "aliyun/erdma", "count": 1}, {"resource": "aliyun/erdma", "count": 0}])
    found = errors(bad)
    assert any(e.startswith("p.yaml: policy 'erdma': field devices[1].count: ") for e in found), found


def test_a_problem_in_a_nested_field_names_its_dotted_path():
    found = errors(doc(fabric={**ERDMA["fabric"], "hcaDevices": [""]}))
    assert any(e.startswith("p.yaml: policy 'erdma': field fabric.hcaDevices[0]: ") for e in found), found


def test_a_missing_field_is_named_and_the_author_told_to_add_it():
    assert errors(doc(description=None)) == [
        "p.yaml: policy 'erdma': field description: missing: this field is required; add it"
    ]
    nested = doc(fabric={"kind": "erdma"})
    assert "p.yaml: policy 'erdma': field fabric.ncclNet: missing: this field is required; add it" in errors(nested)


def test_a_missing_field_with_its_typo_present_is_the_typo_only():
    found = errors(doc(description=None, descripton="x"))
    assert found == [
        "p.yaml: policy 'erdma': field descripton: unknown field 'descripton': did you mean 'description'?"
    ]


def test_several_missing_fields_are_each_named():
    found = errors(doc(description=None, shm=None))
    assert "p.yaml: policy 'erdma': field description: missing: this field is required; add it" in found
    assert "p.yaml: policy 'erdma': field shm: missing: this field is required; add it" in found


# -- unknown fields -------------------------------------------------------------------------------


def test_an_unknown_field_far_from_any_known_lists_the_fields_of_its_object():
    found = errors(doc(fabric={**ERDMA["fabric"], "zzz": 1}))
    fields = ", ".join(sorted(["kind", "transport", "ncclNet", "hcaDevices", "providers", "netPlugins"]))
    assert found == [f"p.yaml: policy 'erdma': field fabric.zzz: unknown field 'zzz': the fields here are {fields}"]


def test_an_unknown_field_with_a_case_or_separator_typo_is_recognised():
    fabric = {k: v for k, v in ERDMA["fabric"].items() if k != "hcaDevices"}
    for typo in ("HCA_devices", "HCA-DEVICES", "HCADEVICES", "hca-devices"):
        found = errors(doc(fabric={**fabric, typo: ERDMA["fabric"]["hcaDevices"]}))
        assert found == [
            f"p.yaml: policy 'erdma': field fabric.{typo}: unknown field {typo!r}: did you mean 'hcaDevices'?"
        ], typo


def test_a_field_already_given_is_not_suggested_for_a_typo_of_it():
    # `priorty` beside `priority`: suggesting the field that is there would be wrong
    found = errors(doc(priorty=3))
    assert found[0].startswith("p.yaml: policy 'erdma': field priorty: unknown field 'priorty': the fields here are ")
    # the folded match (case, separators) leaves out a field already given too
    found = errors(doc(fabric={**ERDMA["fabric"], "HCA_DEVICES": ["x"]}))
    assert "did you mean" not in found[0] and found[0].startswith(
        "p.yaml: policy 'erdma': field fabric.HCA_DEVICES: unknown field 'HCA_DEVICES': the fields here are "
    )


def test_an_unknown_key_that_is_not_a_string_gets_the_fields_list():
    bad = doc()
    bad[7] = "x"
    found = errors(bad)
    assert len(found) == 1 and found[0].startswith(
        "p.yaml: policy 'erdma': field [7]: unknown field 7: the fields here are apiVersion, claim, "
    ), found


def test_one_problem_reported_once():
    found = errors(doc(priority="high"))
    assert found == ["p.yaml: policy 'erdma': field priority: 'high' is not of type 'integer'"]


# -- apiVersion ------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["rdma-webhook.io/v9", None, 2, ["rdma-webhook.io/v1alpha2"]])
def test_an_unknown_api_version_is_one_error_naming_both_readable_ones(version):
    found = errors(doc(apiVersion=version) if version is not None else doc(apiVersion=None))
    assert found == [
        f"p.yaml: policy 'erdma': field apiVersion: {version!r} is not a policy version this webhook reads "
        "(rdma-webhook.io/v1alpha2 or rdma-webhook.io/v1alpha1)"
    ]


def test_a_document_that_is_not_a_mapping_is_refused_without_a_name():
    for bad in (["a", "list"], "text"):
        policy, errs = compile_policy(bad, "p.yaml")
        assert policy is None and [str(e) for e in errs] == [
            "p.yaml: field apiVersion: None is not a policy version this webhook reads "
            "(rdma-webhook.io/v1alpha2 or rdma-webhook.io/v1alpha1)"
        ]


def test_a_name_that_is_not_a_string_is_not_used_as_the_policy_name():
    found = errors(doc(name=5))
    assert found and all(e.startswith("p.yaml: field ") for e in found), found


# -- forbidden fields --------------------------------------------------------------------------------

FORBIDDEN = (
    "policies may not ask for privileged mode, host namespaces, hostPath or capabilities "
    "(the webhook only ever adds IPC_LOCK)"
)


def test_forbidden_fields_are_named_where_they_are_even_in_lists_and_deep():
    bad = doc(devices=[{"resource": "aliyun/erdma", "count": 1}, {"resource": "x/y", "hostPath": "/dev"}])
    bad["shm"] = {"sizeLimit": "1Gi", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}
    found = errors(bad)
    assert f"p.yaml: policy 'erdma': field devices[1].hostPath: {FORBIDDEN}" in found
    assert f"p.yaml: policy 'erdma': field shm.securityContext.capabilities: {FORBIDDEN}" in found
    # a forbidden field is not also an unknown one
    assert not any("unknown field 'hostPath'" in e or "unknown field 'capabilities'" in e for e in found), found


def test_host_network_as_a_mode_is_allowed_only_at_the_top_and_as_text():
    assert compile_policy(doc(hostNetwork="Allowed"), "p.yaml")[1] == []
    assert f"p.yaml: policy 'erdma': field hostNetwork: {FORBIDDEN}" in errors(doc(hostNetwork=True))
    nested = doc(shm={"sizeLimit": "1Gi", "hostNetwork": "Allowed"})
    assert f"p.yaml: policy 'erdma': field shm.hostNetwork: {FORBIDDEN}" in errors(nested)


def test_one_object_under_two_aliases_is_walked_once_and_an_alias_bomb_stays_fast():
    text = (ROOT / "policies" / "erdma.yaml").read_text()
    bomb = "x0: &a0 {privileged: true}\n" + "".join(
        f"x{i}: &a{i} [{', '.join(['*a' + str(i - 1)] * 9)}]\n" for i in range(1, 12)
    )
    document = yaml.safe_load(text + bomb)
    start = time.process_time()
    found = errors(document)
    assert time.process_time() - start < 5
    assert f"p.yaml: policy 'erdma': field x0.privileged: {FORBIDDEN}" in found
    assert sum("privileged" in e and "may not" in e for e in found) == 1, found


# -- every problem of a document in one run -----------------------------------------------------------


def test_a_refused_field_leaves_the_rest_checked():
    # the schema refuses the typo; the rest still holds an NCCL_IB_HCA that selects no device
    nccl = {**ERDMA["nccl"], "NCCL_IB_HCA": "mlx5"}
    found = errors(doc(priorty=1, nccl=nccl))
    assert any("unknown field 'priorty'" in e for e in found), found
    assert any("field nccl.NCCL_IB_HCA: NCCL_IB_HCA='mlx5' selects none" in e for e in found), found


def test_a_wrong_list_item_goes_with_its_list_and_the_rest_is_checked():
    nccl = {**ERDMA["nccl"], "NCCL_IB_HCA": "mlx5"}
    fabric = {**ERDMA["fabric"], "providers": ["efa", 3]}
    found = errors(doc(fabric=fabric, nccl=nccl))
    assert any(e.startswith("p.yaml: policy 'erdma': field fabric.providers[1]: 3 is not of type") for e in found)
    assert any("field nccl.NCCL_IB_HCA: NCCL_IB_HCA='mlx5' selects none" in e for e in found), found


def test_a_typo_stands_for_its_field_in_the_rest():
    # `ncclNets` for `ncclNet`: one problem, not also "ncclNet missing" and what follows from it
    fabric = {k: v for k, v in ERDMA["fabric"].items() if k != "ncclNet"}
    fabric["ncclNets"] = ["IB"]
    found = errors(doc(fabric=fabric))
    assert found == ["p.yaml: policy 'erdma': field fabric.ncclNets: unknown field 'ncclNets': did you mean 'ncclNet'?"]
    # the typo's value is checked in its field's place: a transport the NCCL block does not name
    fabric["ncclNets"] = ["Simple"]
    found = errors(doc(fabric=fabric))
    assert any("unknown field 'ncclNets'" in e for e in found), found
    assert any("field nccl.NCCL_NET: NCCL_NET='IB'" in e and "does not provide (Simple)" in e for e in found), found


def test_a_refused_required_field_ends_the_run_with_the_schema_errors():
    nccl = {**ERDMA["nccl"], "NCCL_IB_HCA": "mlx5"}
    found = errors(doc(description=7, nccl=nccl))
    assert found == ["p.yaml: policy 'erdma': field description: 7 is not of type 'string'"]


def test_a_forbidden_field_ends_the_run_with_what_was_found():
    nccl = {**ERDMA["nccl"], "NCCL_IB_HCA": "mlx5"}
    found = errors(doc(privileged=True, nccl=nccl))
    assert found == [f"p.yaml: policy 'erdma': field privileged: {FORBIDDEN}"]


def test_a_refused_optional_field_of_a_list_item_leaves_the_rest_checked():
    nccl = {**ERDMA["nccl"], "NCCL_IB_HCA": "mlx5"}
    found = errors(doc(devices=[{"resource": "aliyun/erdma", "count": 0}], nccl=nccl))
    assert any(e.startswith("p.yaml: policy 'erdma': field devices[0].count: ") for e in found), found
    assert any("selects none" in e for e in found), found


def test_a_refused_required_field_of_a_list_item_ends_the_run():
    nccl = {**ERDMA["nccl"], "NCCL_IB_HCA": "mlx5"}
    mounts = [{"hostDir": "/opt/plugin", "mountPath": "relative"}]
    found = errors(doc(pluginMounts=mounts, nccl=nccl))
    assert found == ["p.yaml: policy 'erdma': field pluginMounts[0].mountPath: 'relative' does not match '^/'"]


def test_a_problem_reported_by_both_runs_is_listed_once():
    # the selector operator is refused by the schema; the rest (without the selector's list) is
    # still invalid, and nothing is said twice
    selector = {"matchExpressions": [{"key": "a", "operator": "Like"}]}
    found = errors(doc(namespaceSelector=selector, priorty=1))
    assert len(found) == len(set(found)), found


# -- v1alpha1 -------------------------------------------------------------------------------------------


def test_v1alpha1_compiles_as_its_migration():
    policy, errs = compile_policy(copy.deepcopy(V1), "old.yaml")
    assert errs == [] and policy is not None
    assert [(n.name, n.interface, n.resource) for n in policy.networks] == [
        ("rdma-network", "net1", "openshift.io/mellanoxrdma")
    ]


def test_v1alpha1_without_a_resource_needs_a_network():
    bad = copy.deepcopy(V1)
    del bad["network"]
    bad["device"] = {"count": 1}
    assert errors(bad, "old.yaml") == [
        "old.yaml: policy 'old': field device.resource: "
        "required when the policy has no Multus network to take the resource from"
    ]
    # with a network, the NetworkAttachmentDefinition names the resource
    ok = copy.deepcopy(V1)
    ok["device"] = {"count": 1}
    assert compile_policy(ok, "old.yaml")[1] == []


def test_v1alpha1_errors_name_the_fields_as_the_v1alpha1_file_has_them():
    bad = copy.deepcopy(V1)
    bad["device"]["resource"] = "kubernetes.io/rdma"
    policy, errs = compile_policy(bad, "old.yaml")
    found = [str(e) for e in errs]
    assert policy is None and any(e.startswith("old.yaml: policy 'old': field device.resource: ") for e in found), found
    assert not any("networks[0]" in e for e in found), found
    # the exception's own text (what a traceback or a log of it shows) is the renamed one too
    assert [e.args for e in errs] == [(text,) for text in found]


def test_a_field_far_from_a_known_one_is_not_guessed():
    # `prio` is 0.67 like `priority`: below the 0.75 a suggestion needs
    found = errors(doc(prio=1))
    assert len(found) == 1 and found[0].startswith(
        "p.yaml: policy 'erdma': field prio: unknown field 'prio': the fields here are apiVersion, "
    ), found


def test_a_typo_beside_its_field_is_dropped_not_put_in_the_fields_place():
    # `ncclNets` beside `ncclNet`: the typo's value does not replace the field's (no NCCL_NET problem)
    found = errors(doc(fabric={**ERDMA["fabric"], "ncclNets": ["Simple"]}))
    assert found == [
        "p.yaml: policy 'erdma': field fabric.ncclNets: unknown field 'ncclNets': the fields here are "
        "hcaDevices, kind, ncclNet, netPlugins, providers, transport"
    ]


def test_a_typo_inside_a_list_item_stands_for_its_field():
    assert errors(doc(devices=[{"resourc": "aliyun/erdma"}])) == [
        "p.yaml: policy 'erdma': field devices[0].resourc: unknown field 'resourc': did you mean 'resource'?"
    ]


def test_a_refused_top_level_field_leaves_the_rest_checked():
    found = errors(doc(priority="high", nccl={**ERDMA["nccl"], "NCCL_IB_HCA": "mlx5"}))
    assert found[0] == "p.yaml: policy 'erdma': field priority: 'high' is not of type 'integer'"
    assert len(found) == 2 and "field nccl.NCCL_IB_HCA: NCCL_IB_HCA='mlx5' selects none" in found[1], found


def test_two_problems_of_one_field_are_both_named():
    found = errors(doc(fabric={**ERDMA["fabric"], "kind": "X" * 70}))
    assert found == [
        f"p.yaml: policy 'erdma': field fabric.kind: {'X' * 70!r} does not match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'",
        f"p.yaml: policy 'erdma': field fabric.kind: {'X' * 70!r} is too long",
    ]


def test_a_wrong_item_before_a_wrong_field_of_a_later_item():
    # the first item takes its list out; the second's field is then nowhere to take out
    found = errors(doc(devices=["text", {"resource": "aliyun/erdma", "count": 0}]))
    assert found[:2] == [
        "p.yaml: policy 'erdma': field devices[0]: 'text' is not of type 'object'",
        "p.yaml: policy 'erdma': field devices[1].count: 0 is less than the minimum of 1",
    ]


def test_schema_messages_of_objects_are_the_validators_own():
    assert errors(doc(nccl={})) == ["p.yaml: policy 'erdma': field nccl: {} should be non-empty"]
    found = errors(doc(shm={"sizeLimit": {"a": 1}}))
    assert found[0] == "p.yaml: policy 'erdma': field shm.sizeLimit: {'a': 1} is not of type 'string', 'integer'"
    assert not any("missing" in e for e in found), found


def test_the_document_read_is_left_as_it_was():
    bad = doc(fabric={**ERDMA["fabric"], "ncclNets": ["IB"], "hcaDevices": [""]}, priorty=1)
    del bad["fabric"]["ncclNet"]
    before = copy.deepcopy(bad)
    errors(bad)
    assert bad == before


def test_a_forbidden_field_after_the_host_network_mode_is_found():
    # hostNetwork as a mode is passed over, not the end of its object
    found = errors(doc(hostNetwork="Allowed", privileged=True))
    assert found == [f"p.yaml: policy 'erdma': field privileged: {FORBIDDEN}"]


def test_a_typo_of_an_object_whose_contents_the_schema_refuses_ends_the_run():
    # `proff` stands for `proof`, whose schema refuses its `zzz`: no document is left to check further
    found = errors(doc(proff={"onFallback": "fail", "zzz": 1}, nccl={**ERDMA["nccl"], "NCCL_IB_HCA": "mlx5"}))
    assert found == ["p.yaml: policy 'erdma': field proff: unknown field 'proff': did you mean 'proof'?"]
