"""A policy's `machineTypes` compiled (webhook/policy/machines.py): each type a whole policy, checked
as one and named under machineTypes.types[i]; the default, the mode and the labels checked; every
problem of a file reported in one lint run, never a traceback."""

from __future__ import annotations

import pytest

import kube_objects as k
from core.test_machines import ITYPE, policy_text
from webhook.core import machines
from webhook.policy.load import load_texts


def errors_of(text: str) -> list[str]:
    ps, errors = load_texts([("t.yaml", text)])
    assert ps is None, "expected the policy to be refused"
    return [str(e) for e in errors]


@pytest.mark.parametrize(
    "change, error",
    [
        (("  default: eight\n", ""), "field machineTypes.default: required with whenUnselected: Default"),
        (
            ("  default: eight\n", "  default: nine\n"),
            "field machineTypes.default: 'nine' is not a type (the types: eight, four)",
        ),
        (
            ("whenUnselected: Default", "whenUnselected: Deny"),
            "field machineTypes.default: whenUnselected: Deny takes no default",
        ),
        (("- name: four", "- name: eight"), "field machineTypes.types[1].name: 'eight': two types have this name"),
        (("- name: four", "- name: Four_"), "field machineTypes.types[1].name: 'Four_' must be a DNS-1123 label"),
        (
            ("cloud.google.com/gke-accelerator: nvidia-gb200", "cloud.google.com/gke-accelerator: 'bad value!'"),
            "field machineTypes.types[1].nodeLabels.cloud.google.com/gke-accelerator: "
            "cloud.google.com/gke-accelerator=bad value! is not a valid node label",
        ),
        (
            ("fabric: {hcaDevices: [\"mlx5_[0-3]\"]}", "fabric: {transport: tcpx}"),
            "field machineTypes.types[1].fabric.hcaDevices: not read by the tcpx transport",
        ),
        (
            ("fabric: {hcaDevices: [\"mlx5_[0-3]\"]}", "nccl: {NCCL_NET: {value: Socket, enforce: true}}"),
            "field machineTypes.types[1].nccl.NCCL_NET:",
        ),
        (
            ("fabric: {hcaDevices: [\"mlx5_[0-3]\"]}", "fabric: {kind: null}"),
            "field machineTypes.types[1].fabric.kind",
        ),
        (("      nodeLabels: {cloud", "      nodLabels: {cloud"), "did you mean 'nodeLabels'?"),
        (
            ("cloud.google.com/gke-accelerator: nvidia-gb200", "Cloud_Google/gke-accelerator: nvidia-gb200"),
            "field machineTypes.types[1].nodeLabels.Cloud_Google/gke-accelerator: "
            "Cloud_Google/gke-accelerator=nvidia-gb200 is not a valid node label",
        ),
        (("namespaceSelector: {}\n", "namespaceSelector: {}\nsidecar: {name: d}\n"), "field sidecar"),
    ],
)
def test_problems_are_named_where_they_are(change, error):
    """Each problem on a line of its own, naming the file and the policy, then the field."""
    old, new = change
    text = policy_text()
    assert old in text
    found = errors_of(text.replace(old, new, 1))
    assert any(e.startswith("t.yaml: policy 'two-types': ") and error in e for e in found), found


def test_a_policy_without_machine_types_names_its_file_and_policy_in_its_problems():
    text = policy_text()
    text = text[: text.index("machineTypes:")] + "sidecar: {name: d}\n"
    found = errors_of(text)
    assert found and all(e.startswith("t.yaml: policy 'two-types': ") for e in found), found


def test_an_empty_label_value_and_no_when_unselected_are_accepted():
    """A node label may have the empty value (Kubernetes' label syntax); whenUnselected defaults to
    Default, whose default type takes a pod that names none."""
    text = policy_text().replace("  whenUnselected: Default\n", "")
    text = text.replace("node.kubernetes.io/instance-type: a4x-highgpu-4g}", "node.kubernetes.io/instance-type: ''}")
    assert "whenUnselected" not in text and "instance-type: ''" in text
    ps, errors = load_texts([("t.yaml", text)])
    assert ps is not None, [str(e) for e in errors]
    typed = ps.get("two-types").machines
    assert typed.default is not None and typed.default.name == "eight" and not typed.add_affinity
    assert dict(typed.types[1].labels)["node.kubernetes.io/instance-type"] == ("",)


def test_two_types_with_the_same_labels_cannot_be_chosen_between():
    text = policy_text().replace(
        "{cloud.google.com/gke-accelerator: nvidia-gb200, node.kubernetes.io/instance-type: a4x-highgpu-4g}",
        "{node.kubernetes.io/instance-type: a4-highgpu-8g, cloud.google.com/gke-accelerator: [nvidia-b200, nvidia-h200-141gb]}",
    )
    found = errors_of(text)
    assert "t.yaml: policy 'two-types': field machineTypes.types[1].nodeLabels: the same labels as type 'eight'" in (
        "\n".join(found)
    ), found


def test_a_null_sidecar_or_variable_takes_the_policys_own_out():
    text = policy_text().replace(
        "nccl:\n  NCCL_NET: {value: gIB, enforce: true}\n",
        "nccl:\n  NCCL_NET: {value: gIB, enforce: true}\n  NCCL_IB_TC: '52'\nsidecar: {name: d, image: x}\n",
    )
    text = text.replace(
        '      fabric: {hcaDevices: ["mlx5_[0-3]"]}\n', "      nccl: {NCCL_IB_TC: null}\n      sidecar: null\n"
    )
    ps, errors = load_texts([("t.yaml", text)])
    assert ps is not None, [str(e) for e in errors]
    eight, four = (t.policy for t in ps.get("two-types").machines.types)
    assert [e.name for e in eight.env] == ["NCCL_NET", "NCCL_IB_TC"] and eight.sidecar is not None
    assert [e.name for e in four.env] == ["NCCL_NET"] and four.sidecar is None


def test_the_policy_without_its_machine_types_is_the_policy_as_before():
    ps, _ = load_texts([("t.yaml", policy_text())])
    base = ps.get("two-types")
    assert len(base.gke_networks) == 8 and base.machines is not None and base.machine == ""


def test_a_null_dra_takes_the_policys_dra_nic_classes_out_of_that_type_only():
    """`gke`'s TCPX types have no RDMA NICs to claim: `dra: null` there, the policy's `dra` elsewhere."""
    text = policy_text().replace(
        "shm: {perGpu: 8Gi}\n", "shm: {perGpu: 8Gi}\ndra: {deviceClasses: [mrdma.google.com]}\n"
    )
    text = text.replace(
        '      fabric: {hcaDevices: ["mlx5_[0-3]"]}\n', '      fabric: {hcaDevices: ["mlx5_[0-3]"]}\n      dra: null\n'
    )
    ps, errors = load_texts([("t.yaml", text)])
    assert ps is not None, [str(e) for e in errors]
    eight, four = (t.policy for t in ps.get("two-types").machines.types)
    assert eight.dra is not None and eight.dra.classes == {"mrdma.google.com"} and four.dra is None
    assert errors_of(text.replace("      dra: null\n", "      dra: {}\n")), "an empty dra is still refused"


def test_each_type_keeps_the_policys_name_and_a_null_for_a_section_the_policy_lacks_is_nothing():
    """A type's policy is named as the policy (its refusals say `policy two-types`), and its
    own name and node labels are no section of it; `sidecar: null` on a type of a policy with no
    sidecar takes nothing out (and is no error)."""
    text = policy_text().replace('      fabric: {hcaDevices: ["mlx5_[0-3]"]}\n', "      sidecar: null\n")
    ps, errors = load_texts([("t.yaml", text)])
    assert ps is not None, [str(e) for e in errors]
    typed = ps.get("two-types").machines
    assert [t.policy.name for t in typed.types] == ["two-types", "two-types"]
    assert [t.policy.sidecar for t in typed.types] == [None, None]


def test_types_sharing_a_label_value_are_both_named_by_it():
    """Two types on the same instance type, told apart by their accelerator: a pod that selects
    only the instance type names both, so the webhook cannot choose (and denies it)."""
    text = policy_text().replace(
        "node.kubernetes.io/instance-type: a4x-highgpu-4g", "node.kubernetes.io/instance-type: a4-highgpu-8g"
    )
    ps, errors = load_texts([("t.yaml", text)])
    assert ps is not None, [str(e) for e in errors]
    typed = ps.get("two-types").machines
    assert typed.by_label["node.kubernetes.io/instance-type"]["a4-highgpu-8g"] == {"eight", "four"}
    pod = k.pod([k.container("w", gpus=4)], namespace="ml", generate_name="w-", nodeSelector={ITYPE: "a4-highgpu-8g"})
    assert machines.choose(pod, ps.get("two-types"), ps)[0] is None
