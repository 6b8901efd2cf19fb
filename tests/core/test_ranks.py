"""MPI launcher pods (issue 24, webhook/core/ranks.py): how a launcher is recognised, what it
gets so that every rank sees the policy's block, how the user's forwarding combines with it, and
how what the ranks would see is judged. Pods as the API server sends them (kube_objects), the
patch applied with jsonpatch and a second pass empty (mutate_twice). The real launchers run in
tests/core/test_ranks_real_launchers.py; the real-shaped manifests through `review` and `/validate` in
tests/kinds/test_verdict_manifests.py (allowed/mpijob-nccl-tests-ib.yaml, allowed/trainer-mpi-runtime.yaml,
denied/mpijob-launcher-ib-disable.yaml)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import kube_objects as k
from core.test_decision import ML, mutate_twice, respond
from webhook.admission import review
from webhook.core import decision

ROOT = Path(__file__).resolve().parent.parent.parent
IB_SHARED = {"rdma-webhook.io/policy": "ib-shared"}
BLOCK = ["NCCL_NET", "NCCL_IB_HCA", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS"]  # policies/ib-shared.yaml, in its order
ENV_LIST = "OMPI_MCA_mca_base_env_list"


def launcher(args, env=None, command=("mpirun",), labels=None):
    pod = k.mpijob_launcher(args=list(args), annotations=IB_SHARED)
    c = pod["spec"]["containers"][0]
    c["command"] = list(command)
    c["env"] = c.get("env", []) + list(env or [])
    if labels is not None:
        pod["metadata"]["labels"] = labels
    return pod


def env_of(pod, i=0):
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][i].get("env", [])}


ARGS = [
    "--allow-run-as-root",
    "-np",
    "16",
    "-bind-to",
    "none",
    "-map-by",
    "slot",
    "-x",
    "LD_LIBRARY_PATH",
    "python",
    "train.py",
]


ARGS_NO_X = ["--allow-run-as-root", "-np", "16", "-bind-to", "none", "python", "train.py"]
X_BLOCK = ["-x", "NCCL_NET", "-x", "NCCL_IB_HCA", "-x", "NCCL_DEBUG", "-x", "NCCL_DEBUG_SUBSYS"]


def test_an_mpijob_launcher_gets_the_block_and_forwards_it(policies):
    """A command without -x: the block is forwarded by Open MPI's env list (Hydra forwards the
    whole env anyway)."""
    resp, out, d = mutate_twice(launcher(ARGS_NO_X), ML, policies)
    env = env_of(out)
    assert [env[n] for n in BLOCK] == ["IB", "mlx5", "INFO", "INIT,NET"] and env[ENV_LIST] == ";".join(BLOCK)
    c = out["spec"]["containers"][0]  # the block only: no device, IPC_LOCK, /dev/shm or network
    assert "rdma/rdma_shared_device_a" not in json.dumps(c) and "securityContext" not in c
    assert c["command"] == ["mpirun"] and c["args"] == ARGS_NO_X
    assert all(v.get("name") != "rdma-webhook-dshm" for v in out["spec"].get("volumes", []))
    assert out["metadata"]["annotations"]["rdma-webhook.io/applied-policy"] == "ib-shared"
    assert d.notes == [f"launcher: 4 NCCL variables + {ENV_LIST}"]


def test_a_launcher_command_with_x_gets_x_flags_not_the_env_list(policies):
    """Open MPI 4 refuses -x together with mca_base_env_list (tests/core/test_ranks_real_launchers.py runs it):
    a command that gives -x is Open MPI's, and the block goes out as -x NAME right after the
    launcher's name, whether the launcher is `command` or the first word of `args`."""
    for command, args in ((["mpirun"], ARGS), ([], ["mpirun", *ARGS]), (["/usr/bin/mpirun", *ARGS], [])):
        pod = launcher(ARGS)
        sent = pod["spec"]["containers"][0]
        for key, words in (("command", command), ("args", args)):
            sent.pop(key)
            if words:
                sent[key] = list(words)
        _, out, d = mutate_twice(pod, ML, policies)
        c = out["spec"]["containers"][0]
        words = [*c.get("command", []), *c.get("args", [])]
        assert words == [(command or args)[0], *X_BLOCK, *[*command, *args][1:]], words
        assert ENV_LIST not in env_of(out) and [env_of(out)[n] for n in BLOCK] == ["IB", "mlx5", "INFO", "INIT,NET"]
        assert d.notes == ["launcher: 4 NCCL variables + -x NCCL_NET -x NCCL_IB_HCA -x NCCL_DEBUG -x NCCL_DEBUG_SUBSYS"]


def test_the_users_x_flags_are_kept_and_not_repeated(policies):
    args = ["-np", "16", "-x", "NCCL_NET", "-x", "NCCL_DEBUG=INFO", "python", "train.py"]
    _, out, d = mutate_twice(launcher(args), ML, policies)
    c = out["spec"]["containers"][0]
    assert [*c["command"], *c["args"]] == [
        "mpirun",
        "-x",
        "NCCL_IB_HCA",
        *args,
    ]  # NCCL_DEBUG is not enforced: INFO stays


def test_x_in_a_script_warns_and_set_x_before_the_launcher_does_not_count(policies):
    """In a `bash -c` script the flags cannot be placed safely: a warning says what to add, and
    the env list is not set (Open MPI 4 would refuse it). A `set -x` before the launcher is
    the shell's trace flag, not an export: that script gets the env list."""
    pod = launcher([], command=("bash", "-c", "mpirun -np 16 -x LD_LIBRARY_PATH python train.py"))
    del pod["spec"]["containers"][0]["args"]
    _, out, d = mutate_twice(pod, ML, policies)
    assert (
        ENV_LIST not in env_of(out)
        and out["spec"]["containers"][0]["command"] == pod["spec"]["containers"][0]["command"]
    )
    assert any("Open MPI 4 refuses together with" in w and "add -x NAME for each" in w for w in d.warnings), d.warnings
    pod = launcher([], command=("bash", "-c", "set -x\nmpirun -np 16 python train.py"))
    del pod["spec"]["containers"][0]["args"]
    _, out, d = mutate_twice(pod, ML, policies)
    assert env_of(out)[ENV_LIST] == ";".join(BLOCK)


def test_the_users_env_list_is_kept_and_an_enforced_item_takes_the_policys_value(policies):
    pod = launcher(ARGS, env=[{"name": ENV_LIST, "value": "OMP_NUM_THREADS=4;NCCL_NET=ib;NCCL_IB_HCA=mlx5_0"}])
    _, out, d = mutate_twice(pod, ML, policies)
    # NCCL_NET is enforced: its item forwards the launcher's (enforced) value; NCCL_IB_HCA is not: the user's stays
    assert env_of(out)[ENV_LIST] == "OMP_NUM_THREADS=4;NCCL_NET;NCCL_IB_HCA=mlx5_0;NCCL_DEBUG;NCCL_DEBUG_SUBSYS"


def test_a_fallback_setting_in_the_env_list_is_denied(policies):
    pod = launcher(ARGS, env=[{"name": ENV_LIST, "value": "NCCL_IB_DISABLE=1"}])
    resp, _, d = respond(pod, ML, policies)
    assert not resp["allowed"] and [f.rule for f in d.denials] == ["env-fallback"]
    assert f"in env {ENV_LIST} (Open MPI forwards it to every rank)" in resp["status"]["message"]


def test_a_launcher_env_fallback_setting_is_denied_gpu_or_not(policies):
    """Hydra forwards the launcher's whole environment: its env is what every rank sees."""
    pod = launcher(
        ["-n", "16", "python", "train.py"], env=[{"name": "NCCL_NET", "value": "Socket"}], command=("mpiexec",)
    )
    resp, _, d = respond(pod, ML, policies)
    assert not resp["allowed"] and [(f.rule, f.container) for f in d.denials] == [("env-fallback", "launcher")]


def test_a_user_x_nccl_ib_disable_is_denied(policies):
    resp, _, d = respond(launcher(["-np", "16", "-x", "NCCL_IB_DISABLE=1", "python", "train.py"]), ML, policies)
    assert not resp["allowed"] and [f.rule for f in d.denials] == ["command-fallback"]
    assert "mpirun -x exports it to every rank" in resp["status"]["message"]


def test_a_command_value_of_an_enforced_variable_is_denied(policies):
    """`-x NAME=VALUE` wins over the env list in Open MPI (tests/core/test_ranks_real_launchers.py shows it), so the
    policy's enforced value cannot win there: a different value is refused, the same is fine."""
    text = (
        (ROOT / "policies" / "ib-shared.yaml")
        .read_text()
        .replace("NCCL_IB_HCA: mlx5", "NCCL_IB_HCA: {value: mlx5, enforce: true}")
    )
    from webhook.policy.load import load_texts

    ps, errors = load_texts([("ib-shared.yaml", text)])
    assert ps is not None, errors
    resp, _, d = respond(launcher(["-np", "16", "-x", "NCCL_IB_HCA=mlx5_1", "python", "train.py"]), ML, ps)
    assert not resp["allowed"] and [f.rule for f in d.denials] == ["launcher-enforced"], d.denials
    assert "enforces NCCL_IB_HCA='mlx5'" in resp["status"]["message"]
    mutate_twice(launcher(["-np", "16", "-x", "NCCL_IB_HCA=mlx5", "python", "train.py"]), ML, ps)


def test_forwarding_the_launcher_cannot_add_is_warned_about(policies):
    _, out, d = mutate_twice(
        launcher(["-n", "16", "-genvnone", "python", "train.py"], command=("mpiexec",)), ML, policies
    )
    assert any("-genvnone/-genvlist" in w and "add them to -genvlist" in w for w in d.warnings)
    _, out, d = mutate_twice(
        launcher(["-np", "16", "--mca", "mca_base_env_list", "A=1", "python", "train.py"]), ML, policies
    )
    assert any(f"replaces {ENV_LIST}" in w for w in d.warnings)
    assert ENV_LIST not in env_of(out)  # it would be ignored


def test_a_hydra_only_launcher_gets_no_open_mpi_list(policies):
    _, out, _ = mutate_twice(launcher(["-n", "16", "python", "train.py"], command=("mpiexec.hydra",)), ML, policies)
    assert ENV_LIST not in env_of(out) and env_of(out)["NCCL_NET"] == "IB"


def test_a_launcher_is_recognised_by_labels_or_by_its_command(policies):
    # the MPI Operator's labels, a script in the image: both ways are used
    mpi_operator = {
        "training.kubeflow.org/job-role": "launcher",
        "training.kubeflow.org/replica-type": "launcher",
        "rdma-webhook.io/inject": "true",
    }
    trainer = {
        "jobset.sigs.k8s.io/replicatedjob-name": "launcher",
        "jobset.sigs.k8s.io/jobset-name": "pi",
        "rdma-webhook.io/inject": "true",
    }
    for labels in (mpi_operator, trainer):
        pod = launcher([], command=("/opt/launch.sh",), labels=labels)
        _, out, d = mutate_twice(pod, ML, policies)
        # its args give the ranks `-x NCCL_DEBUG=INFO`, the user's own: the policy's NCCL_DEBUG_SUBSYS
        # is not added beside it (policies/*.yaml: it goes only with the policy's NCCL_DEBUG)
        assert env_of(out)["NCCL_NET"] == "IB" and env_of(out)[ENV_LIST] == ";".join(BLOCK[:3])
    # no operator label: the command makes it a launcher (a bash -c script too)
    pod = launcher(
        ["-c", "cd /workspace && mpirun -np 16 python train.py"],
        command=("bash",),
        labels={"rdma-webhook.io/inject": "true"},
    )
    _, out, _ = mutate_twice(pod, ML, policies)
    assert env_of(out)["NCCL_NET"] == "IB"
    # neither: a CPU pod is left alone
    pod = launcher(["prepare.py"], command=("python",), labels={"rdma-webhook.io/inject": "true"})
    assert decision.decide(pod, ML, policies).outcome == "unchanged"


def test_an_unlabelled_launcher_is_not_considered(policies):
    """Without rdma-webhook.io/inject the webhook never sees it (the object selector), and it
    skips it if sent: its ranks get nothing; /validate says so for the workload (below)."""
    pod = launcher(["-np", "16", "-x", "NCCL_IB_DISABLE=1", "python", "train.py"])
    del pod["metadata"]["labels"]["rdma-webhook.io/inject"]
    assert decision.decide(pod, ML, policies).outcome == "skipped"


def test_a_launcher_that_is_also_a_node_gets_the_list_once(policies):
    pod = launcher(ARGS)
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "8"}, "requests": {"nvidia.com/gpu": "8"}}
    _, out, d = mutate_twice(pod, ML, policies)
    names = [e["name"] for e in out["spec"]["containers"][0]["env"]]
    c = out["spec"]["containers"][0]
    assert names.count("NCCL_NET") == 1 and [*c["command"], *c["args"]] == ["mpirun", *X_BLOCK, *ARGS]
    assert out["spec"]["containers"][0]["resources"]["limits"]["rdma/rdma_shared_device_a"] == "1"


def _validate(obj, policies):
    body = json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u1",
                "kind": {"group": "kubeflow.org", "version": "v2beta1", "kind": "MPIJob"},
                "resource": {"group": "kubeflow.org", "version": "v2beta1", "resource": "mpijobs"},
                "namespace": "ml-training",
                "operation": "CREATE",
                "object": obj,
            },
        }
    ).encode()
    return review.handle_validate(body, policies, lambda ns: ML, None)[1]["response"]


def test_an_unlabelled_launcher_template_is_warned_about_at_apply_time(policies):
    import yaml

    obj = next(yaml.safe_load_all((ROOT / "tests" / "manifests" / "allowed" / "mpijob-nccl-tests-ib.yaml").read_text()))
    resp = _validate(obj, policies)
    assert resp["allowed"] and any(
        "Launcher.template (ib-shared): launcher: 4 NCCL variables" in w for w in resp["warnings"]
    )
    del obj["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["metadata"]["labels"]["rdma-webhook.io/inject"]
    resp = _validate(obj, policies)
    assert resp["allowed"] and any(
        "MPI launcher template does not carry rdma-webhook.io/inject=true" in w for w in resp["warnings"]
    ), resp["warnings"]


def test_review_of_the_why_examples():
    """`rdma-webhook review` on the launcher pods of the issue's examples: the mutated launcher
    (exit 0, mutated: the block and its -x flags) and the -x NCCL_IB_DISABLE=1 one (exit 1)."""
    good = ROOT / "examples" / "pods" / "mpijob-launcher.yaml"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook",
            "review",
            "--policies",
            str(ROOT / "policies"),
            "--output",
            "json",
            str(good),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    rec = json.loads(out.stdout.splitlines()[0])
    assert rec["outcome"] == "mutated", rec
    bad = ROOT / "tests" / "manifests" / "denied" / "mpijob-launcher-ib-disable.yaml"
    out = subprocess.run(
        [sys.executable, "-m", "webhook", "review", "--policies", str(ROOT / "policies"), str(bad)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 1 and "NCCL_IB_DISABLE='1'" in out.stdout + out.stderr
