"""Apply-time checks (`/validate`): every workload kind with pod templates, in the shapes the
operators accept, and the final-state guard on pods after every mutating webhook ran."""

from __future__ import annotations

import base64
import copy
import json

import jsonpatch
import pytest

import kube_objects as k
from webhook import keys, review, workloads
from webhook.cluster import FileClusterState
from webhook.decision import Namespace
from conftest import CLI

ML = Namespace("ml-training", {"kubernetes.io/metadata.name": "ml-training", keys.NS_INJECTION: "enabled"})
STATE = FileClusterState([ML], [])
INJECT = {keys.POD_INJECT: "true"}


def tmpl(name="trainer", gpus=4, env=None, labels=INJECT, **extra):
    c = {"name": name, "image": "registry.example/trainer:v1", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}}
    if env:
        c["env"] = env
    c.update(extra)
    meta = {"labels": dict(labels)} if labels else {}
    return {"metadata": meta, "spec": {"restartPolicy": "OnFailure", "containers": [c]}}


BAD_ENV = [{"name": "NCCL_NET", "value": "Socket"}]


def review_of(obj, api_version, kind, operation="CREATE"):
    group = workloads.group_of(api_version)
    rv = k.admission_review(obj, namespace="ml-training", operation=operation, kind=kind, resource=kind.lower() + "s")
    rv["request"]["kind"] = {"group": group, "version": api_version.rpartition("/")[2], "kind": kind}
    return rv


def validate(obj, policies, operation="CREATE"):
    rv = review_of(obj, obj["apiVersion"], obj["kind"], operation)
    code, doc, decision, _ = review.handle_validate(json.dumps(rv).encode(), policies, STATE.namespace, STATE.attachments())
    assert code == 200
    r = doc["response"]
    assert r["uid"] == rv["request"]["uid"] and "patch" not in r
    return r


def obj(api_version, kind, spec, name="train"):
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": "ml-training"}, "spec": spec}


def pytorchjob(master_env=None, worker_env=None):
    return obj("kubeflow.org/v1", "PyTorchJob", {"pytorchReplicaSpecs": {
        "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": tmpl("pytorch", env=master_env)},
        "Worker": {"replicas": 3, "restartPolicy": "OnFailure", "template": tmpl("pytorch", env=worker_env)}}})


def mpijob_v2(worker_env=None, launcher_args=None):
    launcher = tmpl("launcher", gpus=0, command=["mpirun"], args=launcher_args or ["-np", "16", "python", "train.py"])
    return obj("kubeflow.org/v2beta1", "MPIJob", {"slotsPerWorker": 8, "runPolicy": {"cleanPodPolicy": "Running"},
               "mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": launcher},
                                   "Worker": {"replicas": 2, "template": tmpl("worker", gpus=8, env=worker_env)}}})


def lws(worker_env=None):
    return obj("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", {"replicas": 1, "leaderWorkerTemplate": {
        "size": 2, "restartPolicy": "RecreateGroupOnPodRestart",
        "leaderTemplate": tmpl("training", gpus=8), "workerTemplate": tmpl("training", gpus=8, env=worker_env)}})


def jobset(worker_env=None):
    return obj("jobset.x-k8s.io/v1alpha2", "JobSet", {"replicatedJobs": [
        {"name": "driver", "replicas": 1, "template": {"spec": {"template": tmpl("driver", gpus=0, labels=None)}}},
        {"name": "workers", "replicas": 4, "template": {"spec": {"parallelism": 2, "completions": 2,
                                                                  "completionMode": "Indexed", "template": tmpl("trainer", gpus=8, env=worker_env)}}}]})


KINDS = {
    "Job": lambda env=None: obj("batch/v1", "Job", {"completionMode": "Indexed", "completions": 2, "parallelism": 2, "template": tmpl(env=env)}),
    "CronJob": lambda env=None: obj("batch/v1", "CronJob", {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": tmpl(env=env)}}}),
    "Deployment": lambda env=None: obj("apps/v1", "Deployment", {"replicas": 2, "selector": {"matchLabels": INJECT}, "template": tmpl(env=env)}),
    "StatefulSet": lambda env=None: obj("apps/v1", "StatefulSet", {"serviceName": "t", "selector": {"matchLabels": INJECT}, "template": tmpl(env=env)}),
    "ReplicaSet": lambda env=None: obj("apps/v1", "ReplicaSet", {"selector": {"matchLabels": INJECT}, "template": tmpl(env=env)}),
    "DaemonSet": lambda env=None: obj("apps/v1", "DaemonSet", {"selector": {"matchLabels": INJECT}, "template": tmpl(env=env)}),
    "JobSet": lambda env=None: jobset(worker_env=env),
    "PyTorchJob": lambda env=None: pytorchjob(worker_env=env),
    "MPIJob-v1": lambda env=None: {**mpijob_v2(worker_env=env), "apiVersion": "kubeflow.org/v1"},
    "MPIJob-v2beta1": lambda env=None: mpijob_v2(worker_env=env),
    "LeaderWorkerSet": lambda env=None: lws(worker_env=env),
    "VolcanoJob": lambda env=None: obj("batch.volcano.sh/v1alpha1", "Job", {"minAvailable": 2, "schedulerName": "volcano", "tasks": [
        {"name": "master", "replicas": 1, "template": tmpl()}, {"name": "worker", "replicas": 2, "template": tmpl(env=env)}]}),
}

BAD_PATH = {
    "Job": "spec.template", "CronJob": "spec.jobTemplate.spec.template", "Deployment": "spec.template",
    "StatefulSet": "spec.template", "ReplicaSet": "spec.template", "DaemonSet": "spec.template",
    "JobSet": "spec.replicatedJobs[workers].template.spec.template",
    "PyTorchJob": "spec.pytorchReplicaSpecs.Worker.template", "MPIJob-v1": "spec.mpiReplicaSpecs.Worker.template",
    "MPIJob-v2beta1": "spec.mpiReplicaSpecs.Worker.template", "LeaderWorkerSet": "spec.leaderWorkerTemplate.workerTemplate",
    "VolcanoJob": "spec.tasks[worker].template",
}


def test_every_issue_kind_is_in_the_table():
    assert set(workloads.TEMPLATES) == {
        ("batch", "Job"), ("batch", "CronJob"), ("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "ReplicaSet"),
        ("apps", "DaemonSet"), ("jobset.x-k8s.io", "JobSet"), ("kubeflow.org", "PyTorchJob"), ("kubeflow.org", "MPIJob"),
        ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"), ("batch.volcano.sh", "Job")}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_bad_template_denied_with_path_and_container(policies, kind):
    container = {"Job": "trainer"}.get(kind, None)
    r = validate(KINDS[kind](BAD_ENV), policies)
    assert r["allowed"] is False and r["status"]["code"] == 403
    msg = r["status"]["message"]
    assert f"{BAD_PATH[kind]}, container '" in msg, msg
    assert "NCCL_NET='Socket'" in msg and "[env-fallback]" in msg
    if container:
        assert f"container '{container}'" in msg


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_good_workload_passes_with_mutation_summary(policies, kind):
    r = validate(KINDS[kind](), policies)
    assert r["allowed"] is True
    summary = [w for w in r["warnings"] if w.startswith("rdma-webhook will inject")]
    assert len(summary) == 1 and "aliyun/erdma: 1" in summary[0] and "IPC_LOCK" in summary[0] and len(summary[0]) <= 256
    assert BAD_PATH[kind] in summary[0]


def test_update_is_checked_too(policies):
    assert validate(pytorchjob(worker_env=BAD_ENV), policies, operation="UPDATE")["allowed"] is False
    assert validate(pytorchjob(worker_env=BAD_ENV), policies, operation="DELETE")["allowed"] is True


def test_unlabelled_templates_are_not_checked(policies):
    job = obj("batch/v1", "Job", {"template": tmpl(env=BAD_ENV, labels={"app": "x"})})
    r = validate(job, policies)
    assert r["allowed"] is True and "warnings" not in r


def test_launcher_mpirun_fallback_is_caught_at_apply_time(policies):
    job = mpijob_v2(launcher_args=["-np", "16", "-x", "NCCL_IB_DISABLE=1", "python", "train.py"])
    r = validate(job, policies)
    assert r["allowed"] is False
    assert "spec.mpiReplicaSpecs.Launcher.template, container 'launcher'" in r["status"]["message"]


def test_policy_can_turn_workload_denials_into_warnings():
    from webhook.policy import load_texts

    text = open("policies/erdma.yaml").read() + "workloadValidation: Warn\n"
    ps, errors = load_texts([("erdma.yaml", text)])
    assert errors == []
    r = validate(pytorchjob(worker_env=BAD_ENV), ps)
    assert r["allowed"] is True
    assert any(w.startswith("spec.pytorchReplicaSpecs.Worker.template: container 'pytorch': NCCL_NET='Socket'") for w in r["warnings"])


def test_unknown_kinds_are_allowed(policies):
    rv = review_of({"apiVersion": "v1", "kind": "ConfigMap"}, "v1", "ConfigMap")
    code, doc, _, _ = review.handle_validate(json.dumps(rv).encode(), policies, STATE.namespace, None)
    assert doc["response"] == {"uid": rv["request"]["uid"], "allowed": True}


def test_workload_with_broken_template_is_answered(policies):
    job = obj("batch/v1", "Job", {"template": {"metadata": {"labels": INJECT}, "spec": {"containers": "nope"}}})
    r = validate(job, policies)
    assert r["allowed"] is False and "spec.containers must be a list" in r["status"]["message"]
    job = obj("kubeflow.org/v1", "PyTorchJob", {"pytorchReplicaSpecs": {"Worker": None, "Master": {"template": "x"}}})
    assert validate(job, policies)["allowed"] is True


# -- the final-state guard on pods ------------------------------------------------------------

def mutated(pod, policies):
    code, doc, decision, _ = review.handle(k.body(k.admission_review(pod)), policies, STATE.namespace, None)
    ops = json.loads(base64.b64decode(doc["response"]["patch"]))
    return jsonpatch.apply_patch(pod, ops)


def final(pod, policies):
    code, doc, decision, _ = review.handle_validate(k.body(k.admission_review(pod)), policies, STATE.namespace, None)
    r = doc["response"]
    assert "patch" not in r
    return r


def test_pod_as_mutated_passes_the_final_guard(policies):
    assert final(mutated(k.pytorchjob_worker(), policies), policies)["allowed"] is True


def test_unmutated_labelled_pod_fails_the_final_guard(policies):
    r = final(k.pytorchjob_worker(), policies)
    assert r["allowed"] is False
    msg = r["status"]["message"]
    assert "[device-missing]" in msg and "[ipc-lock-missing]" in msg and "[enforced-env]" in msg


def test_later_webhook_that_breaks_rdma_is_caught(policies):
    good = mutated(k.pytorchjob_worker(), policies)
    # a sidecar injector that appends NCCL_IB_DISABLE=1 to every container
    bad = copy.deepcopy(good)
    bad["spec"]["containers"][0]["env"].append({"name": "NCCL_IB_DISABLE", "value": "1"})
    assert "[env-fallback]" in final(bad, policies)["status"]["message"]
    # another webhook that rewrites NCCL_NET
    bad = copy.deepcopy(good)
    for e in bad["spec"]["containers"][0]["env"]:
        if e["name"] == "NCCL_NET":
            e["value"] = "Socket"
    assert "NCCL_NET='Socket'" in final(bad, policies)["status"]["message"]
    # one that strips the device or the capability
    bad = copy.deepcopy(good)
    del bad["spec"]["containers"][0]["resources"]["limits"]["aliyun/erdma"]
    assert "[device-missing]" in final(bad, policies)["status"]["message"]
    bad = copy.deepcopy(good)
    bad["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] = []
    assert "[ipc-lock-missing]" in final(bad, policies)["status"]["message"]


def test_final_guard_leaves_others_alone(policies):
    assert final(k.pod([k.container("t")], inject=False), policies)["allowed"] is True
    assert final(k.mpijob_launcher(), policies)["allowed"] is True


def test_validate_over_tls(server):
    status, data, _ = server.request("POST", "/validate", json.dumps(review_of(pytorchjob(worker_env=BAD_ENV), "kubeflow.org/v1", "PyTorchJob")).encode())
    r = json.loads(data)["response"]
    assert status == 200 and r["allowed"] is False and "spec.pytorchReplicaSpecs.Worker.template" in r["status"]["message"]
    status, data, _ = server.request("POST", "/validate", json.dumps(review_of(pytorchjob(), "kubeflow.org/v1", "PyTorchJob")).encode())
    r = json.loads(data)["response"]
    assert r["allowed"] is True and r["warnings"][0].startswith("rdma-webhook will inject")
    status, data, _ = server.request("GET", "/metrics")
    assert 'rdma_webhook_admissions_total{endpoint="validate",outcome="denied",policy="erdma"}' in data.decode()


def test_review_cli_on_workload_manifests(tmp_path):
    import subprocess
    import sys

    import yaml

    f = tmp_path / "jobs.yaml"
    f.write_text(yaml.safe_dump_all([pytorchjob(), mpijob_v2(), lws(worker_env=BAD_ENV)]))
    out = subprocess.run([*CLI, "review", "--explain", "--color", "never",
                          "--cluster-state", "examples/cluster-state.yaml", str(f)], capture_output=True, text=True)
    assert out.returncode == 1, out.stderr
    assert "spec.pytorchReplicaSpecs.Worker.template: its pods would be MUTATED by policy erdma" in out.stdout
    assert "spec.leaderWorkerTemplate.workerTemplate: its pods would be DENIED by policy erdma (denies the workload)" in out.stdout
    assert "+        aliyun/erdma: '1'" in out.stdout
