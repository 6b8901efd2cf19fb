"""webhook.policy.lint: what `policy lint` says of a valid policy beyond the loader's errors (the
NCCL block's keys that are no variable of the fabric's transport; what an aligned claim needs of
the cluster), for every policy document of a folder."""

from __future__ import annotations

from pathlib import Path

from webhook.policy.lint import lint_notes, lint_warnings

ROOT = Path(__file__).resolve().parent.parent.parent
ERDMA = (ROOT / "policies" / "erdma.yaml").read_text()
EFA = (ROOT / "policies" / "efa.yaml").read_text()
ALIGNED = (ROOT / "policies" / "roce-dranet-aligned.yaml").read_text()


def warning(path: Path, name: str, key: str) -> str:
    return (
        f"{path}: policy {name!r}: field nccl.{key}: not a variable of the fabric's transport "
        "(NCCL reads NCCL_*, libfabric FI_*); set it in the pod spec, or check the spelling"
    )


def note(path: Path, name: str, attribute: str) -> str:
    return (
        f"{path}: policy {name!r}: claim.aligned needs Kubernetes >= 1.34 (resource.k8s.io/v1, the {attribute} "
        "attribute) and GPUs from a DRA driver (NVIDIA's GPU DRA driver, DeviceClass gpu.nvidia.com), not the "
        "device plugin: a pod's nvidia.com/gpu request is taken out and its GPUs claimed with their NICs; create "
        f"the templates with `rdma-webhook policy claim-template {name} --gpus N` in each namespace"
    )


def test_the_shipped_policies_have_no_warning_and_one_note():
    assert lint_warnings(str(ROOT / "policies")) == []
    assert lint_notes(str(ROOT / "policies")) == [
        note(ROOT / "policies" / "roce-dranet-aligned.yaml", "roce-dranet-aligned", "resource.kubernetes.io/pcieRoot")
    ]


def test_keys_that_are_not_nccl_variables_are_warned_of_in_the_file_order(tmp_path):
    text = ERDMA.replace("\nnccl:\n", "\nnccl:\n  UCX_NET_DEVICES: mlx5_0:1\n  FI_PROVIDER: efa\n  GLOO_X: '1'\n", 1)
    (tmp_path / "a.yaml").write_text(text)
    assert lint_warnings(str(tmp_path)) == [
        warning(tmp_path / "a.yaml", "erdma", "UCX_NET_DEVICES"),
        warning(tmp_path / "a.yaml", "erdma", "FI_PROVIDER"),
        warning(tmp_path / "a.yaml", "erdma", "GLOO_X"),
    ]


def test_a_libfabric_policy_may_set_fi_variables(tmp_path):
    text = EFA.replace("\nnccl:\n", "\nnccl:\n  FI_EFA_FORK_SAFE: '1'\n  UCX_TLS: rc\n", 1)
    (tmp_path / "efa.yaml").write_text(text)
    assert lint_warnings(str(tmp_path)) == [warning(tmp_path / "efa.yaml", "efa", "UCX_TLS")]


def test_every_document_of_every_file_is_read_and_what_is_not_a_policy_skipped(tmp_path):
    second = ERDMA.replace("\nname: erdma\n", "\nname: two\n", 1).replace("\nnccl:\n", "\nnccl:\n  X: '1'\n", 1)
    (tmp_path / "a.yaml").write_text("- a list\n---\n" + ERDMA + "---\n" + second)
    (tmp_path / "b.yml").write_text("nccl: {Y: '1'}\nname: bare\n---\nnccl: [Z]\n---\nnccl: {7: x}\nfabric: text\n")
    (tmp_path / "0.yaml").write_text("nccl: [unclosed\n")  # first in order: the files after it are read
    (tmp_path / "c.yaml").write_text("nccl: [unclosed\n")
    (tmp_path / "d.yaml").write_bytes(b"\xff\xfe")
    (tmp_path / "e.txt").write_text("nccl: {W: '1'}\n")
    assert lint_warnings(str(tmp_path)) == [
        warning(tmp_path / "a.yaml", "two", "X"),
        warning(tmp_path / "b.yml", "bare", "Y"),
    ]


def test_a_missing_folder_is_no_warning_and_no_note(tmp_path):
    assert lint_warnings(str(tmp_path / "nope")) == [] and lint_notes(str(tmp_path / "nope")) == []


def test_an_aligned_claim_gets_a_note_naming_its_attribute(tmp_path):
    (tmp_path / "a.yaml").write_text(ALIGNED)
    numa = ALIGNED.replace("\nname: roce-dranet-aligned\n", "\nname: numa\n", 1).replace(
        "  aligned: true\n", "  aligned: true\n  alignment: numaNode\n", 1
    )
    (tmp_path / "b.yaml").write_text(numa)
    odd = ALIGNED.replace("\nname: roce-dranet-aligned\n", "\nname: odd\n", 1).replace(
        "  aligned: true\n", "  aligned: true\n  alignment: rack\n", 1
    )
    (tmp_path / "c.yaml").write_text(odd)
    not_aligned = ALIGNED.replace("\nname: roce-dranet-aligned\n", "\nname: plain\n", 1).replace(
        "  aligned: true\n", "  aligned: 'true'\n", 1
    )
    (tmp_path / "d.yaml").write_text(not_aligned + "---\nclaim: aligned\n")
    assert lint_notes(str(tmp_path)) == [
        note(tmp_path / "a.yaml", "roce-dranet-aligned", "resource.kubernetes.io/pcieRoot"),
        note(tmp_path / "b.yaml", "numa", "resource.kubernetes.io/numaNode"),
        note(tmp_path / "c.yaml", "odd", "its alignment"),
    ]
