"""MPI launcher pods (issue 24, webhook/core/ranks.py): how a launcher is recognised, what it
gets so that every rank sees the policy's block, how the user's forwarding combines with it, and
how what the ranks would see is judged. Pods as the API server sends them (kube_objects), the
patch applied with jsonpatch and a second pass empty (mutate_twice). The real launchers run in
tests/test_mpi_real.py; the real-shaped manifests through `review` and `/validate` in
tests/test_manifests.py (allowed/mpijob-nccl-tests-ib.yaml, allowed/trainer-mpi-runtime.yaml,
denied/mpijob-launcher-ib-disable.yaml)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import kube_objects as k
from test_decision import ML, mutate_twice, respond
from webhook.admission import review
from webhook.core import decision

ROOT = Path(__file__).resolve().parent.parent
IB_SHARED = {"rdma-webhook.io/policy": "ib-shared"}
BLOCK = ["NCCL_NET", "NCCL_IB_HCA", "NCCL_DEBUG"]  # policies/ib-shared.yaml, in its order
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


ARGS = ["--allow-run-as-root", "-np", "16", "-bind-to", "none", "-map-by", "slot", "-x", "LD_LIBRARY_PATH", "python", "train.py"]


def test_an_mpijob_launcher_gets_the_block_and_forwards_it(policies):
    resp, out, d = mutate_twice(launcher(ARGS), ML, policies)
    env = env_of(out)
    assert [env[n] for n in BLOCK] == ["IB", "mlx5", "WARN"] and env[ENV_LIST] == ";".join(BLOCK)
    c = out["spec"]["containers"][0]  # the block only: no device, IPC_LOCK, /dev/shm or network
    assert "rdma/rdma_shared_device_a" not in json.dumps(c) and "securityContext" not in c
    assert all(v.get("name") != "rdma-webhook-dshm" for v in out["spec"].get("volumes", []))
    assert out["metadata"]["annotations"]["rdma-webhook.io/applied-policy"] == "ib-shared"
    assert d.notes == [f"launcher: 3 NCCL variables + {ENV_LIST}"]


def test_the_users_env_list_is_kept_and_an_enforced_item_takes_the_policys_value(policies):
    pod = launcher(ARGS, env=[{"name": ENV_LIST, "value": "OMP_NUM_THREADS=4;NCCL_NET=ib;NCCL_IB_HCA=mlx5_0"}])
    _, out, d = mutate_twice(pod, ML, policies)
    # NCCL_NET is enforced: its item forwards the launcher's (enforced) value; NCCL_IB_HCA is not: the user's stays
    assert env_of(out)[ENV_LIST] == "OMP_NUM_THREADS=4;NCCL_NET;NCCL_IB_HCA=mlx5_0;NCCL_DEBUG"


def test_a_fallback_setting_in_the_env_list_is_denied(policies):
    pod = launcher(ARGS, env=[{"name": ENV_LIST, "value": "NCCL_IB_DISABLE=1"}])
    resp, _, d = respond(pod, ML, policies)
    assert not resp["allowed"] and [f.rule for f in d.denials] == ["env-fallback"]
    assert f"in env {ENV_LIST} (Open MPI forwards it to every rank)" in resp["status"]["message"]


def test_a_launcher_env_fallback_setting_is_denied_gpu_or_not(policies):
    """Hydra forwards the launcher's whole environment: its env is what every rank sees."""
    pod = launcher(["-n", "16", "python", "train.py"], env=[{"name": "NCCL_NET", "value": "Socket"}], command=("mpiexec",))
    resp, _, d = respond(pod, ML, policies)
    assert not resp["allowed"] and [(f.rule, f.container) for f in d.denials] == [("env-fallback", "launcher")]


def test_a_user_x_nccl_ib_disable_is_denied(policies):
    resp, _, d = respond(launcher(["-np", "16", "-x", "NCCL_IB_DISABLE=1", "python", "train.py"]), ML, policies)
    assert not resp["allowed"] and [f.rule for f in d.denials] == ["command-fallback"]
    assert "mpirun -x exports it to every rank" in resp["status"]["message"]


def test_a_command_value_of_an_enforced_variable_is_denied(policies):
    """`-x NAME=VALUE` wins over the env list in Open MPI (tests/test_mpi_real.py shows it), so the
    policy's enforced value cannot win there: a different value is refused, the same is fine."""
    text = (ROOT / "policies" / "ib-shared.yaml").read_text().replace("NCCL_IB_HCA: mlx5", "NCCL_IB_HCA: {value: mlx5, enforce: true}")
    from webhook.policy.load import load_texts
    ps, errors = load_texts([("ib-shared.yaml", text)])
    assert ps is not None, errors
    resp, _, d = respond(launcher(["-np", "16", "-x", "NCCL_IB_HCA=mlx5_1", "python", "train.py"]), ML, ps)
    assert not resp["allowed"] and [f.rule for f in d.denials] == ["launcher-enforced"], d.denials
    assert "enforces NCCL_IB_HCA='mlx5'" in resp["status"]["message"]
    mutate_twice(launcher(["-np", "16", "-x", "NCCL_IB_HCA=mlx5", "python", "train.py"]), ML, ps)


def test_forwarding_the_launcher_cannot_add_is_warned_about(policies):
    _, out, d = mutate_twice(launcher(["-n", "16", "-genvnone", "python", "train.py"], command=("mpiexec",)), ML, policies)
    assert any("-genvnone/-genvlist" in w and "add them to -genvlist" in w for w in d.warnings)
    _, out, d = mutate_twice(launcher(["-np", "16", "--mca", "mca_base_env_list", "A=1", "python", "train.py"]), ML, policies)
    assert any(f"replaces {ENV_LIST}" in w for w in d.warnings)
    assert ENV_LIST not in env_of(out)  # it would be ignored


def test_a_hydra_only_launcher_gets_no_open_mpi_list(policies):
    _, out, _ = mutate_twice(launcher(["-n", "16", "python", "train.py"], command=("mpiexec.hydra",)), ML, policies)
    assert ENV_LIST not in env_of(out) and env_of(out)["NCCL_NET"] == "IB"


def test_a_launcher_is_recognised_by_labels_or_by_its_command(policies):
    # the MPI Operator's labels, a script in the image: both ways are used
    mpi_operator = {"training.kubeflow.org/job-role": "launcher", "training.kubeflow.org/replica-type": "launcher",
                    "rdma-webhook.io/inject": "true"}
    trainer = {"jobset.sigs.k8s.io/replicatedjob-name": "launcher", "jobset.sigs.k8s.io/jobset-name": "pi",
               "rdma-webhook.io/inject": "true"}
    for labels in (mpi_operator, trainer):
        pod = launcher([], command=("/opt/launch.sh",), labels=labels)
        _, out, d = mutate_twice(pod, ML, policies)
        assert env_of(out)["NCCL_NET"] == "IB" and env_of(out)[ENV_LIST] == ";".join(BLOCK)
    # no operator label: the command makes it a launcher (a bash -c script too)
    pod = launcher(["-c", "cd /workspace && mpirun -np 16 python train.py"], command=("bash",), labels={"rdma-webhook.io/inject": "true"})
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
    assert names.count("NCCL_NET") == 1 and names.count(ENV_LIST) == 1
    assert out["spec"]["containers"][0]["resources"]["limits"]["rdma/rdma_shared_device_a"] == "1"


def _validate(obj, policies):
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u1", "kind": {"group": "kubeflow.org", "version": "v2beta1", "kind": "MPIJob"},
        "resource": {"group": "kubeflow.org", "version": "v2beta1", "resource": "mpijobs"},
        "namespace": "ml-training", "operation": "CREATE", "object": obj}}).encode()
    return review.handle_validate(body, policies, lambda ns: ML, None)[1]["response"]


def test_an_unlabelled_launcher_template_is_warned_about_at_apply_time(policies):
    import yaml
    obj = next(yaml.safe_load_all((ROOT / "tests" / "manifests" / "allowed" / "mpijob-nccl-tests-ib.yaml").read_text()))
    resp = _validate(obj, policies)
    assert resp["allowed"] and any("Launcher.template (ib-shared): launcher: 3 NCCL variables" in w for w in resp["warnings"])
    del obj["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["metadata"]["labels"]["rdma-webhook.io/inject"]
    resp = _validate(obj, policies)
    assert resp["allowed"] and any("MPI launcher template does not carry rdma-webhook.io/inject=true" in w
                                   for w in resp["warnings"]), resp["warnings"]


def test_review_of_the_why_examples():
    """`rdma-webhook review` on the launcher pods of the issue's examples: the mutated launcher
    (exit 0, the env list in the patch) and the -x NCCL_IB_DISABLE=1 one (exit 1)."""
    good = ROOT / "examples" / "pods" / "mpijob-launcher.yaml"
    out = subprocess.run([sys.executable, "-m", "webhook", "review", "--policies", str(ROOT / "policies"), "--output", "json", str(good)],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    rec = json.loads(out.stdout.splitlines()[0])
    assert rec["outcome"] == "mutated", rec
    bad = ROOT / "tests" / "manifests" / "denied" / "mpijob-launcher-ib-disable.yaml"
    out = subprocess.run([sys.executable, "-m", "webhook", "review", "--policies", str(ROOT / "policies"), str(bad)], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 1 and "NCCL_IB_DISABLE='1'" in out.stdout + out.stderr
