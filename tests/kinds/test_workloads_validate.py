"""Apply-time checks (`/validate`): every workload kind with pod templates, in the shapes the
operators accept, and the final-state guard on pods after every mutating webhook ran."""

from __future__ import annotations

import base64
import copy
import json

import jsonpatch
import pytest

import kube_objects as k
from webhook.core import keys
from webhook.admission import review
from webhook.kinds import merge, trainer, verdict, workloads
from webhook.cluster.state import FileClusterState
from webhook.core.decision import Namespace
from conftest import CLI

ML = Namespace("ml-training", {"kubernetes.io/metadata.name": "ml-training", keys.NS_INJECTION: "enabled"})
STATE = FileClusterState([ML], [])
INJECT = {keys.POD_INJECT: "true"}


def tmpl(name="trainer", gpus=4, env=None, labels=INJECT, **extra):
    c = {
        "name": name,
        "image": "registry.example/trainer:v1",
        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {},
    }
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
    code, doc, decision, _ = review.handle_validate(
        json.dumps(rv).encode(), policies, STATE.namespace, STATE.attachments()
    )
    assert code == 200
    r = doc["response"]
    assert r["uid"] == rv["request"]["uid"] and "patch" not in r
    return r


def obj(api_version, kind, spec, name="train"):
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": "ml-training"},
        "spec": spec,
    }


def pytorchjob(master_env=None, worker_env=None):
    return obj(
        "kubeflow.org/v1",
        "PyTorchJob",
        {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": tmpl("pytorch", env=master_env)},
                "Worker": {"replicas": 3, "restartPolicy": "OnFailure", "template": tmpl("pytorch", env=worker_env)},
            }
        },
    )


def mpijob_v2(worker_env=None, launcher_args=None):
    launcher = tmpl("launcher", gpus=0, command=["mpirun"], args=launcher_args or ["-np", "16", "python", "train.py"])
    return obj(
        "kubeflow.org/v2beta1",
        "MPIJob",
        {
            "slotsPerWorker": 8,
            "runPolicy": {"cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": launcher},
                "Worker": {"replicas": 2, "template": tmpl("worker", gpus=8, env=worker_env)},
            },
        },
    )


def lws(worker_env=None):
    return obj(
        "leaderworkerset.x-k8s.io/v1",
        "LeaderWorkerSet",
        {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": 2,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": tmpl("training", gpus=8),
                "workerTemplate": tmpl("training", gpus=8, env=worker_env),
            },
        },
    )


def jobset(worker_env=None):
    return obj(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        {
            "replicatedJobs": [
                {
                    "name": "driver",
                    "replicas": 1,
                    "template": {"spec": {"template": tmpl("driver", gpus=0, labels=None)}},
                },
                {
                    "name": "workers",
                    "replicas": 4,
                    "template": {
                        "spec": {
                            "parallelism": 2,
                            "completions": 2,
                            "completionMode": "Indexed",
                            "template": tmpl("trainer", gpus=8, env=worker_env),
                        }
                    },
                },
            ]
        },
    )


KINDS = {
    "Job": lambda env=None: obj(
        "batch/v1", "Job", {"completionMode": "Indexed", "completions": 2, "parallelism": 2, "template": tmpl(env=env)}
    ),
    "CronJob": lambda env=None: obj(
        "batch/v1", "CronJob", {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": tmpl(env=env)}}}
    ),
    "Deployment": lambda env=None: obj(
        "apps/v1", "Deployment", {"replicas": 2, "selector": {"matchLabels": INJECT}, "template": tmpl(env=env)}
    ),
    "StatefulSet": lambda env=None: obj(
        "apps/v1", "StatefulSet", {"serviceName": "t", "selector": {"matchLabels": INJECT}, "template": tmpl(env=env)}
    ),
    "ReplicaSet": lambda env=None: obj(
        "apps/v1", "ReplicaSet", {"selector": {"matchLabels": INJECT}, "template": tmpl(env=env)}
    ),
    "DaemonSet": lambda env=None: obj(
        "apps/v1", "DaemonSet", {"selector": {"matchLabels": INJECT}, "template": tmpl(env=env)}
    ),
    "JobSet": lambda env=None: jobset(worker_env=env),
    "PyTorchJob": lambda env=None: pytorchjob(worker_env=env),
    "MPIJob-v1": lambda env=None: {**mpijob_v2(worker_env=env), "apiVersion": "kubeflow.org/v1"},
    "MPIJob-v2beta1": lambda env=None: mpijob_v2(worker_env=env),
    "LeaderWorkerSet": lambda env=None: lws(worker_env=env),
    "VolcanoJob": lambda env=None: obj(
        "batch.volcano.sh/v1alpha1",
        "Job",
        {
            "minAvailable": 2,
            "schedulerName": "volcano",
            "tasks": [
                {"name": "master", "replicas": 1, "template": tmpl()},
                {"name": "worker", "replicas": 2, "template": tmpl(env=env)},
            ],
        },
    ),
}

BAD_PATH = {
    "Job": "spec.template",
    "CronJob": "spec.jobTemplate.spec.template",
    "Deployment": "spec.template",
    "StatefulSet": "spec.template",
    "ReplicaSet": "spec.template",
    "DaemonSet": "spec.template",
    "JobSet": "spec.replicatedJobs[workers].template.spec.template",
    "PyTorchJob": "spec.pytorchReplicaSpecs.Worker.template",
    "MPIJob-v1": "spec.mpiReplicaSpecs.Worker.template",
    "MPIJob-v2beta1": "spec.mpiReplicaSpecs.Worker.template",
    "LeaderWorkerSet": "spec.leaderWorkerTemplate.workerTemplate",
    "VolcanoJob": "spec.tasks[worker].template",
}


def test_every_issue_kind_is_in_the_table():
    assert set(workloads.TEMPLATES) == {
        ("batch", "Job"),
        ("batch", "CronJob"),
        ("apps", "Deployment"),
        ("apps", "StatefulSet"),
        ("apps", "ReplicaSet"),
        ("apps", "DaemonSet"),
        ("jobset.x-k8s.io", "JobSet"),
        ("kubeflow.org", "PyTorchJob"),
        ("kubeflow.org", "MPIJob"),
        ("kubeflow.org", "TFJob"),
        ("kubeflow.org", "PaddleJob"),
        ("kubeflow.org", "XGBoostJob"),
        ("kubeflow.org", "JAXJob"),
        ("trainer.kubeflow.org", "TrainJob"),
        ("trainer.kubeflow.org", "TrainingRuntime"),
        ("trainer.kubeflow.org", "ClusterTrainingRuntime"),
        ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"),
        ("batch.volcano.sh", "Job"),
        ("batch.volcano.sh", "CronJob"),
        ("ray.io", "RayCluster"),
        ("ray.io", "RayJob"),
        ("ray.io", "RayService"),
        ("workload.codeflare.dev", "AppWrapper"),
        ("workloads.x-k8s.io", "RoleBasedGroup"),
        ("argoproj.io", "Workflow"),
        ("argoproj.io", "WorkflowTemplate"),
        ("argoproj.io", "ClusterWorkflowTemplate"),
        ("argoproj.io", "CronWorkflow"),
    }


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


def test_only_create_is_checked(policies):
    # Any other operation is allowed untouched (issue 16, point 5): pods made from an updated
    # template still meet /mutate and the final-state guard when they are created.
    assert validate(pytorchjob(worker_env=BAD_ENV), policies)["allowed"] is False
    for op in ("UPDATE", "DELETE", "CONNECT"):
        r = validate(pytorchjob(worker_env=BAD_ENV), policies, operation=op)
        assert r["allowed"] is True and "warnings" not in r and "status" not in r


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
    from webhook.policy.load import load_texts

    text = open("policies/erdma.yaml").read() + "workloadValidation: Warn\n"
    ps, errors = load_texts([("erdma.yaml", text)])
    assert errors == []
    r = validate(pytorchjob(worker_env=BAD_ENV), ps)
    assert r["allowed"] is True
    assert any(
        w.startswith("spec.pytorchReplicaSpecs.Worker.template, container 'pytorch': NCCL_NET='Socket'")
        for w in r["warnings"]
    )


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
    status, data, _ = server.request(
        "POST",
        "/validate",
        json.dumps(review_of(pytorchjob(worker_env=BAD_ENV), "kubeflow.org/v1", "PyTorchJob")).encode(),
    )
    r = json.loads(data)["response"]
    assert (
        status == 200 and r["allowed"] is False and "spec.pytorchReplicaSpecs.Worker.template" in r["status"]["message"]
    )
    status, data, _ = server.request(
        "POST", "/validate", json.dumps(review_of(pytorchjob(), "kubeflow.org/v1", "PyTorchJob")).encode()
    )
    r = json.loads(data)["response"]
    assert r["allowed"] is True and r["warnings"][0].startswith("rdma-webhook will inject")
    status, data, _ = server.request("GET", "/metrics")
    assert 'rdma_webhook_admissions_total{endpoint="validate",outcome="denied",policy="erdma"}' in data.decode()


def test_review_cli_on_workload_manifests(tmp_path):
    import subprocess

    import yaml

    f = tmp_path / "jobs.yaml"
    f.write_text(yaml.safe_dump_all([pytorchjob(), mpijob_v2(), lws(worker_env=BAD_ENV)]))
    out = subprocess.run(
        [
            *CLI,
            "review",
            "--policy",
            "erdma,sriov-roce",
            "--explain",
            "--color",
            "never",
            "--cluster-state",
            "examples/cluster-state.yaml",
            str(f),
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1, out.stderr
    assert "spec.pytorchReplicaSpecs.Worker.template: its pods would be MUTATED by policy erdma" in out.stdout
    assert (
        "spec.leaderWorkerTemplate.workerTemplate: its pods would be DENIED by policy erdma (denies the workload)"
        in out.stdout
    )
    assert "+        aliyun/erdma: '1'" in out.stdout


# -- templates inside templates, and TrainJob's runtime ------------------------------------------


def test_strategic_merge_as_the_api_machinery_merges_pod_templates():
    base = {
        "metadata": {"labels": {"a": "1", "b": "2"}},
        "spec": {
            "containers": [
                {
                    "name": "node",
                    "image": "x",
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    "volumeMounts": [{"name": "v", "mountPath": "/data"}],
                    "args": ["--x"],
                }
            ],
            "tolerations": [{"key": "gpu"}],
        },
    }
    patch = {
        "metadata": {"labels": {"b": None, "c": "3"}},
        "spec": {
            "containers": [
                {"name": "node", "env": [{"name": "B", "value": "two"}, {"name": "C", "value": "3"}], "args": ["--y"]},
                {"name": "sidecar", "image": "s"},
            ],
            "tolerations": [{"key": "rdma"}],
        },
    }
    out = merge.strategic_merge(base, patch)
    assert out["metadata"]["labels"] == {"a": "1", "c": "3"}
    node, sidecar = out["spec"]["containers"]
    assert node["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "two"}, {"name": "C", "value": "3"}]
    assert (
        node["args"] == ["--y"]
        and node["image"] == "x"
        and node["volumeMounts"] == [{"name": "v", "mountPath": "/data"}]
    )
    assert sidecar == {"name": "sidecar", "image": "s"}
    assert out["spec"]["tolerations"] == [{"key": "rdma"}]  # no merge key: replaced
    assert base["spec"]["containers"][0]["env"][1]["value"] == "2"  # inputs untouched
    gone = merge.strategic_merge(base, {"spec": {"containers": [{"name": "node", "$patch": "delete"}]}})
    assert gone["spec"]["containers"] == []


RUNTIME = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "torch"},
    "spec": {
        "mlPolicy": {"numNodes": 1, "torch": {}},
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "node",
                        "template": {
                            "metadata": {"labels": {trainer.ANCESTOR_LABEL: "trainer"}},
                            "spec": {"template": tmpl("node", gpus=8, env=[{"name": "NCCL_DEBUG", "value": "WARN"}])},
                        },
                    },
                    {"name": "sidecar-job", "template": {"spec": {"template": tmpl("helper", gpus=0)}}},
                ]
            }
        },
    },
}


def trainjob(**spec):
    return obj("trainer.kubeflow.org/v1alpha1", "TrainJob", {"runtimeRef": {"name": "torch"}, **spec})


def pods(job, release, runtime=RUNTIME):
    return dict(trainer.trainjob_pods(job, runtime, release))


@pytest.mark.parametrize("release", trainer.TRAINER_RELEASES)
def test_trainer_fields_go_to_the_node_container_of_the_trainer_job(release):
    job = trainjob(
        trainer={
            "image": "mine:1",
            "command": ["torchrun"],
            "args": ["a.py"],
            "env": [{"name": "NCCL_IB_DISABLE", "value": "1"}, {"name": "NCCL_DEBUG", "value": "INFO"}],
        }
    )
    node = pods(job, release)["node"]["spec"]["containers"][0]
    assert (node["image"], node["command"], node["args"]) == ("mine:1", ["torchrun"], ["a.py"])
    assert node["env"] == [{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "NCCL_IB_DISABLE", "value": "1"}]
    helper = pods(job, release)["sidecar-job"]["spec"]["containers"][0]
    assert helper["image"] == "registry.example/trainer:v1" and "env" not in helper  # not the trainer's job
    assert (
        RUNTIME["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][
            0
        ]["image"]
        == "registry.example/trainer:v1"
    )  # the runtime is not modified


def test_resources_per_node_replaced_up_to_v2_2_merged_from_v2_3():
    runtime = copy.deepcopy(RUNTIME)
    node = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"
    ][0]
    node["resources"] = {"limits": {"nvidia.com/gpu": "8", "aliyun/erdma": "1"}}
    job = trainjob(trainer={"resourcesPerNode": {"limits": {"nvidia.com/gpu": "4", "memory": "1Ti"}}})
    for release in ("v2.0", "v2.1", "v2.2"):
        assert pods(job, release, runtime)["node"]["spec"]["containers"][0]["resources"] == {
            "limits": {"nvidia.com/gpu": "4", "memory": "1Ti"}
        }, release
    assert pods(job, "v2.3", runtime)["node"]["spec"]["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpu": "4", "aliyun/erdma": "1", "memory": "1Ti"}
    }


def test_each_release_reads_its_own_override_field():
    bad = [{"name": "NCCL_NET", "value": "Socket"}]
    v20 = trainjob(podSpecOverrides=[{"targetJobs": [{"name": "node"}], "containers": [{"name": "node", "env": bad}]}])
    v21 = trainjob(
        podTemplateOverrides=[
            {
                "targetJobs": [{"name": "node"}],
                "metadata": {"labels": {"team": "a"}},
                "spec": {"containers": [{"name": "node", "env": bad}]},
            }
        ]
    )
    v22 = trainjob(
        runtimePatches=[
            {
                "manager": "me",
                "trainingRuntimeSpec": {
                    "template": {
                        "spec": {
                            "replicatedJobs": [
                                {
                                    "name": "node",
                                    "template": {
                                        "spec": {"template": {"spec": {"containers": [{"name": "node", "env": bad}]}}}
                                    },
                                }
                            ]
                        }
                    }
                },
            }
        ]
    )
    for job, release in ((v20, "v2.0"), (v21, "v2.1"), (v22, "v2.2"), (v22, "v2.3")):
        for other in trainer.TRAINER_RELEASES:
            env = pods(job, other)["node"]["spec"]["containers"][0]["env"]
            applies = trainer.OVERRIDES[other] == trainer.OVERRIDES[release]
            assert ({"name": "NCCL_NET", "value": "Socket"} in env) is applies, (release, other)
    assert pods(v21, "v2.1")["node"]["metadata"]["labels"] == {keys.POD_INJECT: "true", "team": "a"}
    # and the check says which field a release ignores
    result = verdict.check_workload(
        v21, "trainer.kubeflow.org", "TrainJob", ML, None, None, _Runtimes(), release="v2.3"
    )
    assert any("spec.podTemplateOverrides is not read by Trainer v2.3" in n for n in result.notes)


class _Runtimes:
    def training_runtime(self, namespace, name):
        return None

    def cluster_training_runtime(self, name):
        return RUNTIME if name == "torch" else None


def test_trainjob_at_validate_runtime_known_unknown_and_untracked(policies):
    bad = trainjob(trainer={"env": [{"name": "NCCL_IB_DISABLE", "value": "1"}]})
    rv = review_of(bad, bad["apiVersion"], "TrainJob")
    body = json.dumps(rv).encode()
    _, doc, _, _ = review.handle_validate(body, policies, STATE.namespace, None, _Runtimes())
    assert doc["response"]["allowed"] is False
    assert (
        "ClusterTrainingRuntime/torch replicatedJobs[node], container 'node': NCCL_IB_DISABLE='1'"
        in doc["response"]["status"]["message"]
    )
    for runtimes, says in ((None, "cannot be looked up here"), (FileClusterState([ML], []).runtimes(), "is not known")):
        _, doc, _, _ = review.handle_validate(body, policies, STATE.namespace, None, runtimes)
        r = doc["response"]
        assert r["allowed"] is True and any(says in w for w in r["warnings"]), r


def test_cluster_scoped_runtime_is_checked_without_a_namespace(policies):
    rt = copy.deepcopy(RUNTIME)
    rv = review_of(rt, rt["apiVersion"], "ClusterTrainingRuntime")
    rv["request"]["namespace"] = ""
    _, doc, _, _ = review.handle_validate(json.dumps(rv).encode(), policies, STATE.namespace, None)
    assert doc["response"]["allowed"] is True and doc["response"]["warnings"][0].startswith("rdma-webhook will inject")
    pod = rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    pod["spec"]["containers"][0]["env"] = BAD_ENV
    rv["request"]["object"] = rt
    _, doc, _, _ = review.handle_validate(json.dumps(rv).encode(), policies, STATE.namespace, None)
    assert doc["response"]["allowed"] is False and "NCCL_NET='Socket'" in doc["response"]["status"]["message"]


def test_argo_steps_scripts_container_sets_and_workflow_pod_metadata(policies):
    wf = obj(
        "argoproj.io/v1alpha1",
        "Workflow",
        {
            "podMetadata": {"labels": INJECT},
            "templates": [
                {"name": "dag", "dag": {"tasks": [{"name": "a", "template": "script"}]}},
                {
                    "name": "script",
                    "script": {
                        "image": "python",
                        "command": ["bash"],
                        "source": "export NCCL_IB_DISABLE=1\npython train.py",
                        "resources": {"limits": {"nvidia.com/gpu": "8"}},
                    },
                },
                {
                    "name": "set",
                    "containerSet": {
                        "containers": [
                            {"name": "a", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}},
                            {
                                "name": "b",
                                "image": "y",
                                "env": BAD_ENV,
                                "resources": {"limits": {"nvidia.com/gpu": "8"}},
                            },
                        ]
                    },
                },
                {
                    "name": "cpu",
                    "metadata": {"labels": {keys.POD_INJECT: "false"}},
                    "container": {"image": "x", "env": BAD_ENV},
                },
                {"name": "broken", "resource": {"action": "create", "manifest": "kind: [unclosed"}},
            ],
        },
    )
    r = validate(wf, policies)
    msg = r["status"]["message"]
    assert r["allowed"] is False
    assert "spec.templates[script], container 'main'" in msg and "[command-fallback]" in msg
    assert "spec.templates[set], container 'b'" in msg and "container 'a'" not in msg
    assert "templates[cpu]" not in msg and "templates[dag]" not in msg
    assert any("resource.manifest: not valid YAML" in w for w in r["warnings"])


def test_rolebasedgroup_lws_patches_make_leader_and_worker(policies):
    rbg = obj(
        "workloads.x-k8s.io/v1alpha1",
        "RoleBasedGroup",
        {
            "roles": [
                {
                    "name": "decode",
                    "leaderWorkerSet": {
                        "size": 2,
                        "patchLeaderTemplate": {"metadata": {"labels": {"role": "leader"}}},
                        "patchWorkerTemplate": {"spec": {"containers": [{"name": "sglang", "env": BAD_ENV}]}},
                    },
                    "template": tmpl("sglang", gpus=8),
                }
            ]
        },
    )
    found = dict(workloads.expand(rbg, "workloads.x-k8s.io", "RoleBasedGroup").templates)
    leader = found["spec.roles[decode].leaderWorkerSet.patchLeaderTemplate"]
    worker = found["spec.roles[decode].leaderWorkerSet.patchWorkerTemplate"]
    assert leader["metadata"]["labels"] == {**INJECT, "role": "leader"} and "env" not in leader["spec"]["containers"][0]
    assert worker["spec"]["containers"][0]["env"] == BAD_ENV and worker["spec"]["containers"][0]["image"]
    r = validate(rbg, policies)
    assert r["allowed"] is False and "patchWorkerTemplate, container 'sglang'" in r["status"]["message"]
    assert "patchLeaderTemplate" not in r["status"]["message"]


def test_nesting_paths_and_depth():
    inner = {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": "s"},
        "spec": {
            "rayClusterConfig": {
                "headGroupSpec": {"template": tmpl()},
                "workerGroupSpecs": [{"groupName": "g", "template": tmpl()}],
            }
        },
    }
    aw = obj("workload.codeflare.dev/v1beta2", "AppWrapper", {"components": [{"template": inner}]})
    paths = [p for p, _ in workloads.expand(aw, "workload.codeflare.dev", "AppWrapper").templates]
    assert paths == [
        "spec.components[0].template.spec.rayClusterConfig.headGroupSpec.template",
        "spec.components[0].template.spec.rayClusterConfig.workerGroupSpecs[g].template",
    ]

    # AppWrappers wrapped in AppWrappers: followed to a bounded depth, then no further, so a
    # deep (or hostile) nesting ends; the pod at the bottom is found only within the bound
    def chain(levels: int) -> dict:
        top = obj("workload.codeflare.dev/v1beta2", "AppWrapper", {"components": []})
        node = top
        for _ in range(levels - 1):
            child = obj("workload.codeflare.dev/v1beta2", "AppWrapper", {"components": []})
            node["spec"]["components"].append({"template": child})
            node = child
        node["spec"]["components"].append(
            {"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": tmpl()["spec"]}}
        )
        return top

    def found(levels: int) -> int:
        return len(workloads.expand(chain(levels), "workload.codeflare.dev", "AppWrapper").templates)

    deepest = max(n for n in range(1, 20) if found(n))
    assert 5 <= deepest < 19 and found(deepest + 1) == 0
    assert found(50) == 0 and found(500) == 0


def test_embedded_manifests_are_bounded(policies):
    big = "kind: Pod\nmetadata: {}\n" + "# padding\n" * 40000  # ~400 KB of text
    wf = obj("argoproj.io/v1alpha1", "Workflow", {"templates": [{"name": "r", "resource": {"manifest": big}}]})
    r = validate(wf, policies)  # not parsed at all: a note says so
    assert r["allowed"] is True and any("KiB of text, not checked" in w for w in r["warnings"])
    # an alias bomb within the limit parses to shared objects and is walked along paths only
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi")
    )
    wf["spec"]["templates"][0]["resource"]["manifest"] = (
        "apiVersion: batch/v1\nkind: Job\nspec:\n  template: {}\n" + bomb
    )
    assert validate(wf, policies)["allowed"] is True


def test_trainer_release_setting(monkeypatch):
    monkeypatch.delenv(trainer.TRAINER_RELEASE_ENV, raising=False)
    assert trainer.trainer_release() == trainer.DEFAULT_TRAINER_RELEASE == "v2.3"
    monkeypatch.setenv(trainer.TRAINER_RELEASE_ENV, "v2.1")
    assert trainer.trainer_release() == "v2.1"
    monkeypatch.setenv(trainer.TRAINER_RELEASE_ENV, "v9")
    assert trainer.trainer_release() == "v2.3"


def test_appwrapper_of_an_unknown_kind_is_read_through_its_pod_sets(policies):
    custom = {
        "apiVersion": "example.com/v1",
        "kind": "TrainingThing",
        "metadata": {"name": "t"},
        "spec": {"roles": [{"pods": {"template": tmpl(env=BAD_ENV)}}, {"pods": {"template": tmpl()}}]},
    }
    aw = obj(
        "workload.codeflare.dev/v1beta2",
        "AppWrapper",
        {
            "components": [
                {
                    "podSets": [
                        {"replicas": 2, "path": "template.spec.roles[0].pods.template"},
                        {"replicas": 1, "path": "template.spec.roles[1].pods.template"},
                        {"replicas": 1, "path": "template.spec.roles[7].pods.template"},
                    ],
                    "template": custom,
                }
            ]
        },
    )
    r = validate(aw, policies)
    assert r["allowed"] is False
    assert "spec.components[0].template.spec.roles[0].pods.template, container 'trainer'" in r["status"]["message"]
    assert "roles[1]" not in r["status"]["message"]
    # a known kind is read by its own entry, not its podSets
    aw["spec"]["components"][0]["template"] = pytorchjob(worker_env=BAD_ENV)
    r = validate(aw, policies)
    assert "spec.components[0].template.spec.pytorchReplicaSpecs.Worker.template" in r["status"]["message"]
