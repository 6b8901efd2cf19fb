"""`rdma-webhook policy lint | migrate | admission-policy | claim-template` (webhook/cli/policy.py),
run in-process through `main(argv)` as a platform admin runs them on a policy folder: the exit
status, what goes to stdout (the policies, the YAML to apply) and what goes to stderr (each
problem, warning and note on a line of its own, with its prefix)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from fabrics.test_transports import V1
from policy.test_alignment import ALIGNED, gb200, hgx
from webhook.cli.main import main
from webhook.policy.admission_policy import objects
from webhook.policy.claim_template import aligned_template
from webhook.policy.load import load_dir, load_texts

ROOT = Path(__file__).resolve().parent.parent.parent

ERDMA = textwrap.dedent("""\
    apiVersion: rdma-webhook.io/v1alpha2
    kind: RdmaPolicy
    name: {name}
    description: test policy
    priority: 10
    namespaceSelector: {{}}
    fabric: {{kind: erdma, ncclNet: [IB], hcaDevices: ["erdma_[0-3]"]}}
    devices: [{{resource: aliyun/erdma, count: 1}}]
    shm: {{sizeLimit: 16Gi}}
    nccl:
      NCCL_NET: {{value: IB, enforce: true}}
      NCCL_IB_HCA: erdma
    """)
# a variable NCCL does not read (lint's warning) and a v1alpha1 field in a v1alpha2 file (an error)
UCX = "  UCX_TLS: rc\n"
V1_DEVICE = ERDMA.replace(
    "devices: [{{resource: aliyun/erdma, count: 1}}]", "device: {{resource: aliyun/erdma, count: 1}}"
)


def folder(tmp_path: Path, **files: str) -> str:
    d = tmp_path / "policies"
    d.mkdir(exist_ok=True)
    for name, text in files.items():
        (d / f"{name}.yaml").write_text(text)
    return str(d)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


# -- lint ------------------------------------------------------------------------------------


def test_lint_lists_each_policy_with_its_summary_and_file(tmp_path, capsys):
    d = folder(tmp_path, b=ERDMA.format(name="beta"), a=ERDMA.format(name="alpha") + UCX)
    code, out, err = run(capsys, "policy", "lint", d)
    assert code == 0
    summary = "erdma over ib-verbs; aliyun/erdma x1; hostNetwork Allowed"
    assert out.splitlines() == [f"ok  alpha  ({summary})  {d}/a.yaml", f"ok  beta  ({summary})  {d}/b.yaml"]
    assert err.splitlines() == [
        f"warning: {d}/a.yaml: policy 'alpha': field nccl.UCX_TLS: not a variable of the fabric's transport "
        "(NCCL reads NCCL_*, libfabric FI_*); set it in the pod spec, or check the spelling"
    ]


def test_lint_of_the_shipped_policies_lists_machine_types_and_notes_the_aligned_claim(capsys):
    code, out, err = run(capsys, "policy", "lint", str(ROOT / "policies"))
    assert code == 0
    lines = out.splitlines()
    gke = lines.index(next(line for line in lines if line.startswith("ok  gke  (")))
    assert lines[gke + 1 : gke + 5] == [
        "      machine type a3-high: gke-tcpx over tcpx; GKE networks vpc1, vpc2, vpc3, vpc4; sidecar tcpx-daemon",
        "      machine type a3-mega: gke-tcpxo over fastrak; GKE networks vpc1, vpc2, vpc3, vpc4, vpc5, vpc6, vpc7, "
        "vpc8; sidecar tcpxo-daemon",
        "      machine type a3-ultra-a4: gke-rdma over gib; GKE networks rdma-0, rdma-1, rdma-2, rdma-3, rdma-4, "
        "rdma-5, rdma-6, rdma-7; DRA NICs class mrdma.google.com, driver dra.net",
        "      machine type a4x: gke-rdma over gib; GKE networks rdma-0, rdma-1, rdma-2, rdma-3; DRA NICs class "
        "mrdma.google.com, driver dra.net",
    ]
    assert lines[gke + 5].startswith("ok  gke-gib  (")
    names = [line.split()[1] for line in lines if line.startswith("ok  ")]
    assert names == sorted(names) and len(names) == 15
    assert err.splitlines() == [
        f"note: {ROOT / 'policies' / 'roce-dranet-aligned.yaml'}: policy 'roce-dranet-aligned': claim.aligned "
        "needs Kubernetes >= 1.34 (resource.k8s.io/v1, the resource.kubernetes.io/pcieRoot attribute) and GPUs "
        "from a DRA driver (NVIDIA's GPU DRA driver, DeviceClass gpu.nvidia.com), not the device plugin: a pod's "
        "nvidia.com/gpu request is taken out and its GPUs claimed with their NICs; create the templates with "
        "`rdma-webhook policy claim-template roce-dranet-aligned --gpus N` in each namespace"
    ]


def test_lint_of_a_folder_with_an_invalid_policy_names_every_problem_and_loads_nothing(tmp_path, capsys):
    d = folder(tmp_path, ok=ERDMA.format(name="fine"), bad=V1_DEVICE.format(name="broken") + UCX)
    code, out, err = run(capsys, "policy", "lint", d)
    assert code == 1 and out == ""
    assert err.splitlines() == [
        f"warning: {d}/bad.yaml: policy 'broken': field nccl.UCX_TLS: not a variable of the fabric's transport "
        "(NCCL reads NCCL_*, libfabric FI_*); set it in the pod spec, or check the spelling",
        f"error: {d}/bad.yaml: policy 'broken': field device: unknown field 'device': did you mean 'devices'?",
        f"error: {d}/bad.yaml: policy 'broken': field devices: the policy gives no device resource, Multus network "
        "or DRA claim and names no DRA DeviceClass: give one, or set hostNetwork: Required for a fabric reached "
        "through the host's interfaces",
        "2 problem(s) found; no policy was loaded",
    ]


def write_state(tmp_path: Path, objects_: list[dict]) -> str:
    path = tmp_path / "cluster-state.yaml"
    path.write_text(yaml.safe_dump_all(objects_, sort_keys=False))
    return str(path)


def test_lint_against_the_cluster_state_says_which_nodes_cannot_pair_gpus_and_nics(tmp_path, capsys):
    """The shipped pcieRoot-aligned policy against a GB200 tray (an error, exit 1) and an HGX node
    with only 6 NIC pairs (a warning, exit 0); without the tray's slices the same folder passes."""
    d = folder(tmp_path, aligned=ALIGNED)
    state = write_state(tmp_path, gb200() + hgx(pairs=6))
    code, out, err = run(capsys, "policy", "lint", d, "--cluster-state", state)
    assert code == 1 and out.startswith("ok  roce-dranet-aligned  (")
    problems = [line for line in err.splitlines() if not line.startswith("note: ")]
    assert [line.split(": policy ")[0] for line in problems] == [f"warning: {state}", f"error: {state}"]
    assert "node hgx-0: only 6 of its 8 GPUs have a NIC" in problems[0]
    assert "on gb200-tray-0 (4 GPUs, 4 NICs) no GPU has a NIC" in problems[1]
    state = write_state(tmp_path, hgx(pairs=6))
    code, out, err = run(capsys, "policy", "lint", d, "--cluster-state", state)
    assert code == 0 and f"warning: {state}: policy 'roce-dranet-aligned': node hgx-0" in err and "error" not in err
    code, _, err = run(capsys, "policy", "lint", d, "--cluster-state", write_state(tmp_path, hgx()))
    assert code == 0 and [line for line in err.splitlines() if not line.startswith("note: ")] == []


@pytest.mark.parametrize(
    "content,reason",
    [
        (None, "[Errno 2] No such file or directory"),
        (b"kind: ResourceSlice\nspec: [\n", "while parsing a flow node"),
        (b"\xff\xfe not text", "'utf-8' codec can't decode byte 0xff"),
    ],
)
def test_lint_with_a_cluster_state_it_cannot_read_says_so(tmp_path, capsys, content, reason):
    d = folder(tmp_path, aligned=ALIGNED)
    path = tmp_path / "state.yaml"
    if content is not None:
        path.write_bytes(content)
    code, out, err = run(capsys, "policy", "lint", d, "--cluster-state", str(path))
    assert code == 1 and out.startswith("ok  roce-dranet-aligned")
    err = err.split("\n", 1)[1]  # after the aligned claim's note
    assert err.startswith(f"error: {path}: cannot read the cluster state: ") and reason in err, err
    assert "Traceback" not in err


# -- migrate ---------------------------------------------------------------------------------


def test_migrate_prints_v1alpha1_as_v1alpha2_and_v1alpha2_unchanged(tmp_path, capsys):
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old.write_text(V1)
    new.write_text(ERDMA.format(name="current"))
    code, out, err = run(capsys, "policy", "migrate", str(old), str(new))
    assert code == 0 and err == ""
    docs = list(yaml.safe_load_all(out))
    assert [d["name"] for d in docs] == ["old-sriov", "current"]
    assert all(list(d)[:3] == ["apiVersion", "kind", "name"] for d in docs)  # in the file's order
    assert docs[0]["apiVersion"] == "rdma-webhook.io/v1alpha2" and "network" not in docs[0]
    assert docs[0]["networks"] == [
        {"name": "rdma-network", "interface": "net1", "resource": "openshift.io/mellanoxrdma", "count": 1}
    ]
    assert docs[1] == yaml.safe_load(ERDMA.format(name="current"))
    # what it printed loads, and means what the v1alpha1 file meant
    ps, errors = load_texts([("m.yaml", out)])
    was, _ = load_texts([("o.yaml", V1)])
    assert errors == [] and ps.by_name["old-sriov"].summary() == was.by_name["old-sriov"].summary()


def test_migrate_folds_long_text_after_the_word_that_crosses_column_100(tmp_path, capsys):
    words = "x " + "a" * 86 + " then the rest of a long description"
    path = tmp_path / "old.yaml"
    path.write_text(V1.replace("description: a v1alpha1 file as written before v1alpha2", f"description: {words}"))
    code, out, _ = run(capsys, "policy", "migrate", str(path))
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("description: "))
    assert code == 0 and lines[first] == "description: x " + "a" * 86  # 101 columns
    assert lines[first + 1] == "  then the rest of a long description"
    assert yaml.safe_load(out)["description"] == words
    # words of 6 letters: the first line runs to the word that crosses column 100, not 80
    words = " ".join(f"word{i:02d}" for i in range(20))
    path.write_text(V1.replace("description: a v1alpha1 file as written before v1alpha2", f"description: {words}"))
    code, out, _ = run(capsys, "policy", "migrate", str(path))
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("description: "))
    assert lines[first] == "description: " + " ".join(f"word{i:02d}" for i in range(13))  # 103 columns


def test_migrate_reports_an_invalid_policy_and_still_prints_the_valid_ones(tmp_path, capsys):
    old, bad = tmp_path / "old.yaml", tmp_path / "bad.yaml"
    old.write_text(V1)
    bad.write_text(V1_DEVICE.format(name="broken") + "---\n" + ERDMA.format(name="fine"))
    code, out, err = run(capsys, "policy", "migrate", str(bad), str(old))
    assert code == 1
    assert [d["name"] for d in yaml.safe_load_all(out)] == ["fine", "old-sriov"]
    assert (
        err.splitlines()[0]
        == f"error: {bad}: policy 'broken': field device: unknown field 'device': did you mean 'devices'?"
    )
    assert len(err.splitlines()) == 2 and all(
        line.startswith(f"error: {bad}: policy 'broken'") for line in err.splitlines()
    )


def test_migrate_of_an_unreadable_file_prints_nothing_and_exits_1(tmp_path, capsys):
    code, out, err = run(capsys, "policy", "migrate", str(tmp_path / "missing.yaml"))
    assert code == 1 and out == ""
    assert err.startswith(f"error: {tmp_path / 'missing.yaml'}: ") and err.count("\n") == 1


# -- admission-policy ------------------------------------------------------------------------


def test_admission_policy_prints_the_header_and_every_object_to_apply(tmp_path, capsys):
    d = folder(tmp_path, b=ERDMA.format(name="beta"), a=ERDMA.format(name="alpha"))
    code, out, err = run(capsys, "policy", "admission-policy", "--policies", d)
    assert code == 0 and err == ""
    header = out.split("\n", 3)
    assert header[0] == "# Generated by `rdma-webhook policy admission-policy` from the RDMA policies alpha, beta:"
    assert header[1].startswith("# the pods' final-state check, run by the API server")
    policies, _ = load_dir(d)
    assert [d for d in yaml.safe_load_all(out) if d] == objects(policies, ("Deny",))
    bindings = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert len(bindings) == 2 and all(b["spec"]["validationActions"] == ["Deny"] for b in bindings)


def test_admission_policy_dry_run_binds_with_warn_and_audit(tmp_path, capsys):
    d = folder(tmp_path, a=ERDMA.format(name="alpha"))
    code, out, err = run(capsys, "policy", "admission-policy", "--policies", d, "--dry-run")
    assert code == 0 and err == ""
    assert out.startswith(
        "# Generated by `rdma-webhook policy admission-policy --dry-run` from the RDMA policies alpha:"
    )
    bindings = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert [b["spec"]["validationActions"] for b in bindings] == [["Warn", "Audit"]]


def test_admission_policy_writes_the_file_it_is_given(tmp_path, capsys):
    d = folder(tmp_path, a=ERDMA.format(name="alpha"), b=ERDMA.format(name="beta"))
    target = tmp_path / "vap.yaml"
    code, out, err = run(capsys, "policy", "admission-policy", "--policies", d, "--out", str(target))
    assert code == 0 and out == ""
    assert err == f"wrote 4 objects for 2 policies to {target}\n"
    code, printed, _ = run(capsys, "policy", "admission-policy", "--policies", d)
    assert target.read_text() == printed


def test_admission_policy_cannot_write_says_why(tmp_path, capsys):
    d = folder(tmp_path, a=ERDMA.format(name="alpha"))
    target = tmp_path / "no-such-dir" / "vap.yaml"
    code, out, err = run(capsys, "policy", "admission-policy", "--policies", d, "--out", str(target))
    assert code == 1 and out == ""
    assert err == f"error: cannot write {target}: No such file or directory\n"


def test_admission_policy_of_an_invalid_folder_generates_nothing(tmp_path, capsys):
    d = folder(tmp_path, bad=V1_DEVICE.format(name="broken"))
    target = tmp_path / "vap.yaml"
    code, out, err = run(capsys, "policy", "admission-policy", "--policies", d, "--out", str(target))
    assert code == 1 and out == "" and not target.exists()
    lines = err.splitlines()
    assert len(lines) == 3 and all(line.startswith(f"error: {d}/bad.yaml: policy 'broken'") for line in lines[:2])
    assert lines[2] == f"2 problem(s) in {d}; nothing generated"


def test_admission_policy_reads_the_shipped_policies_by_default(capsys):
    code, out, _ = run(capsys, "policy", "admission-policy")
    assert code == 0
    first = out.splitlines()[0]
    assert first.startswith(
        "# Generated by `rdma-webhook policy admission-policy` from the RDMA policies coreweave-ib, efa,"
    )


def key_order(doc) -> list:
    if isinstance(doc, dict):
        return [list(doc), *[key_order(v) for v in doc.values()]]
    if isinstance(doc, list):
        return [key_order(v) for v in doc]
    return []


# -- claim-template --------------------------------------------------------------------------


def test_claim_template_prints_the_aligned_template_for_a_gpu_count(tmp_path, capsys):
    """The shipped roce-dranet-aligned names its NICs by driver, not by class: --nic-class is needed."""
    d = folder(tmp_path, aligned=ALIGNED)
    code, out, err = run(capsys, "policy", "claim-template", "roce-dranet-aligned", "--policies", d, "--gpus", "4")
    assert code == 1 and out == ""
    assert err == ("error: policy roce-dranet-aligned names no NIC DeviceClass (dra.deviceClasses): give --nic-class\n")
    argv = ["policy", "claim-template", "roce-dranet-aligned", "--policies", d, "--gpus", "4", "--nic-class", "rdma"]
    code, out, err = run(capsys, *argv)
    assert code == 0 and err == ""
    pcie = "resource.kubernetes.io/pcieRoot"
    assert yaml.safe_load(out) == aligned_template("gpu-nic-aligned-4", 4, "gpu.nvidia.com", "rdma", None, pcie)
    assert key_order(yaml.safe_load(out)) == key_order(aligned_template("x", 4, "g", "n"))  # as built, not sorted
    code, out, _ = run(capsys, *argv, "--gpu-class", "gpu.example.com", "--namespace", "training")
    doc = yaml.safe_load(out)
    assert doc == aligned_template("gpu-nic-aligned-4", 4, "gpu.example.com", "rdma", "training", pcie)
    assert doc["metadata"]["namespace"] == "training"


def test_claim_template_takes_the_policys_first_nic_class_and_its_alignment(tmp_path, capsys):
    text = ALIGNED.replace("  aligned: true\n", "  aligned: true\n  alignment: numaNode\n")
    text = text.replace("\ndra:\n", "\ndra:\n  deviceClasses: [z-nics, a-nics]\n", 1)
    d = folder(tmp_path, aligned=text)
    code, out, err = run(capsys, "policy", "claim-template", "roce-dranet-aligned", "--policies", d, "--gpus", "2")
    assert code == 0, err
    numa = "resource.kubernetes.io/numaNode"
    assert yaml.safe_load(out) == aligned_template("gpu-nic-aligned-2", 2, "gpu.nvidia.com", "a-nics", None, numa)


def test_claim_template_of_a_policy_that_is_not_there_or_not_aligned(tmp_path, capsys):
    d = folder(tmp_path, aligned=ALIGNED, plain=ERDMA.format(name="plain"))
    code, out, err = run(capsys, "policy", "claim-template", "nope", "--policies", d, "--gpus", "4")
    assert code == 1 and out == ""
    assert err == f"error: no policy 'nope' in {d} (there: plain, roce-dranet-aligned)\n"
    code, out, err = run(capsys, "policy", "claim-template", "plain", "--policies", d, "--gpus", "4")
    assert code == 1 and out == ""
    assert err == "error: policy plain has no aligned claim (claim: {name, template, aligned: true})\n"


def test_claim_template_of_an_invalid_folder_prints_its_problems(tmp_path, capsys):
    d = folder(tmp_path, bad=V1_DEVICE.format(name="broken"))
    code, out, err = run(capsys, "policy", "claim-template", "broken", "--policies", d, "--gpus", "4")
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert len(lines) == 2 and all(line.startswith(f"error: {d}/bad.yaml: policy 'broken'") for line in lines)


@pytest.mark.parametrize("gpus", [1, 64])
def test_claim_template_takes_from_1_to_64_gpus(tmp_path, capsys, gpus):
    d = folder(tmp_path, aligned=ALIGNED)
    argv = ["policy", "claim-template", "roce-dranet-aligned", "--policies", d, "--nic-class", "rdma"]
    code, out, _ = run(capsys, *argv, "--gpus", str(gpus))
    assert code == 0 and yaml.safe_load(out)["metadata"]["name"] == f"gpu-nic-aligned-{gpus}"


@pytest.mark.parametrize("gpus", ["0", "65", "four"])
def test_claim_template_refuses_a_gpu_count_outside_1_to_64(tmp_path, capsys, gpus):
    with pytest.raises(SystemExit) as exc:
        main(["policy", "claim-template", "roce-dranet-aligned", "--gpus", gpus])
    assert exc.value.code == 2 and "argument --gpus" in capsys.readouterr().err


# -- what --help tells the admin -------------------------------------------------------------

HELP = {
    (): [
        "usage: rdma-webhook policy [-h] {lint,migrate,admission-policy,claim-template} ...",
        "Policy tools.",
        "lint validate the policy files of a folder",
        "migrate print v1alpha1 policy files as v1alpha2 (comments are not kept)",
        "admission-policy print the pods' final-state check as ValidatingAdmissionPolicies (CEL) and their bindings",
        "claim-template print the ResourceClaimTemplate of a policy's aligned claim (GPU and NIC pairs on one PCIe "
        "root)",
    ],
    ("lint",): [
        "usage: rdma-webhook policy lint [-h] [--cluster-state FILE] DIR",
        "Validate every policy file of a folder, reporting every problem of every file.",
        "DIR the policies folder",
        "--cluster-state FILE also check, against the DeviceClasses and ResourceSlices of FILE (kubectl get -o "
        "yaml), that each aligned claim's GPUs and NICs share its alignment attribute on the nodes (default: not "
        "checked)",
        "exit status: 0 all policies valid (warnings allowed), 1 any problem",
    ],
    ("migrate",): ["usage: rdma-webhook policy migrate [-h] FILE [FILE ...]"],
    ("admission-policy",): [
        "usage: rdma-webhook policy admission-policy [-h] [--policies DIR] [--dry-run] [--out FILE]",
        "Print, as YAML, one ValidatingAdmissionPolicy and one ValidatingAdmissionPolicyBinding per policy of the "
        "folder: the final-state check of labelled pods that `/validate` makes, run by the API server itself "
        "(Kubernetes >= 1.30), keyed on the rdma-webhook.io/applied-policy annotation the mutating webhook writes. "
        'Apply the output with the webhook configurations of the policy mode (README, "Final-state check as a '
        'ValidatingAdmissionPolicy"); regenerate it whenever a policy changes.',
        "--policies DIR the policies folder in force (default: the repository's policies/)",
        "--dry-run bind with validationActions [Warn, Audit]: a pod that fails the check is admitted, the client "
        "gets a warning and the audit log an annotation (default: off: [Deny])",
        "--out FILE write to FILE instead of stdout",
        "exit status: 0 printed, 1 a policy file is invalid (nothing printed), 2 on a bad flag",
    ],
    ("claim-template",): [
        "usage: rdma-webhook policy claim-template [-h] [--policies DIR] --gpus N [--gpu-class GPU_CLASS] "
        "[--nic-class NIC_CLASS] [--namespace NAMESPACE] POLICY",
        "Print, as YAML, the ResourceClaimTemplate that a policy with `claim: {aligned: true}` injects for a GPU "
        "count: one request per GPU and per NIC, each pair constrained to one resource.kubernetes.io/pcieRoot "
        "(Kubernetes >= 1.34; GPUs from a DRA driver, not a device plugin).",
        "POLICY the policy's name",
        "--policies DIR the policies folder (default: the repository's policies/)",
        "--gpus N GPUs per pod (1-64)",
        "--gpu-class GPU_CLASS the GPUs' DeviceClass (default: gpu.nvidia.com, NVIDIA's GPU DRA driver)",
        "--nic-class NIC_CLASS the NICs' DeviceClass (default: the policy's first dra.deviceClasses)",
        "--namespace NAMESPACE set metadata.namespace (default: none, for kubectl -n)",
        "exit status: 0 printed, 1 no such policy, its claim is not aligned, or no NIC class known, 2 on a bad flag",
    ],
}


@pytest.mark.parametrize("command", list(HELP), ids=lambda c: " ".join(c) or "policy")
def test_help_says_what_each_command_and_flag_does_and_its_exit_statuses(capsys, monkeypatch, command):
    """The help as the admin reads it on a 60-column terminal (words joined across argparse's
    line breaks): the exit statuses it lists are those the tests above see the commands return.
    A command's description and exit statuses keep their own lines, unwrapped."""
    monkeypatch.setenv("COLUMNS", "60")
    with pytest.raises(SystemExit) as exc:
        main(["policy", *command, "--help"])
    out = capsys.readouterr().out
    text = " " + " ".join(out.split()) + " "
    assert exc.value.code == 0
    for sentence in HELP[command]:
        assert f" {sentence} " in text, sentence
    lines = out.splitlines()
    for sentence in HELP[command][1:]:
        if sentence.startswith(("exit status:", "Validate", "Print, as YAML")):
            assert sentence in lines, sentence


def test_a_policy_command_is_required(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["policy"])
    assert exc.value.code == 2 and capsys.readouterr().err.splitlines()[-1] == (
        "rdma-webhook policy: error: the following arguments are required: "
        "{lint,migrate,admission-policy,claim-template}"
    )
    with pytest.raises(SystemExit) as exc:
        main(["policy", "migrate"])
    assert exc.value.code == 2 and "the following arguments are required: FILE" in capsys.readouterr().err
