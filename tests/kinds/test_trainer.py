"""Issue 28 item 4: what the kinds modules decide that the workload tests did not pin down, found
by mutation testing (`make mutation MUTANTS='webhook.kinds.merge.* webhook.kinds.trainer.*'
PART_NAME=kinds.merge-trainer`, mutation/MUTATION.md): how a Kubeflow Trainer TrainJob's pods are
made from its runtime (the `node` container found by name beside sidecars, v2.0's
podSpecOverrides, runtimes and overrides missing parts), on runtimes shaped like Trainer's
torch-distributed ClusterTrainingRuntime."""

from __future__ import annotations

import copy

from webhook.kinds import trainer

INJECT = {"rdma-webhook.io/inject": "true"}


def runtime(containers: list | None = None, jobs: list | None = None) -> dict:
    """A ClusterTrainingRuntime of the torch-distributed shape: one `node` replicated job."""
    node = {
        "name": "node",
        "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
        "command": ["torchrun", "/workspace/train.py"],
        "resources": {"limits": {"nvidia.com/gpu": "8", "rdma/rdma_shared_device_a": "1"}},
    }
    job = {
        "name": "node",
        "template": {
            "metadata": {"labels": {trainer.ANCESTOR_LABEL: "trainer"}},
            "spec": {"template": {"metadata": {"labels": dict(INJECT)}, "spec": {"containers": containers or [node]}}},
        },
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "torch-distributed"},
        "spec": {
            "mlPolicy": {"numNodes": 2, "torch": {"numProcPerNode": "auto"}},
            "template": {"spec": {"replicatedJobs": jobs if jobs is not None else [job]}},
        },
    }


def trainjob(**spec) -> dict:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "llama-finetune", "namespace": "ml-training"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, **spec},
    }


def pods(tj: dict, rt: dict, release: str = "v2.3") -> dict:
    return dict(trainer.trainjob_pods(tj, rt, release))


def containers(pod: dict) -> dict:
    return {c["name"]: c for c in pod["spec"]["containers"]}


def test_the_trainer_settings_go_to_the_node_container_not_a_sidecar_listed_first():
    sidecar = {"name": "log-shipper", "image": "fluent/fluent-bit:3.2", "resources": {"limits": {"cpu": "100m"}}}
    node = {"name": "node", "image": "pytorch/pytorch:2.7.1", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
    tj = trainjob(
        trainer={
            "image": "registry.example/llama-finetune:1.4",
            "command": ["torchrun", "/workspace/finetune.py"],
            "env": [{"name": "NCCL_IB_DISABLE", "value": "1"}],
            "resourcesPerNode": {"limits": {"nvidia.com/gpu": "4"}},
        }
    )
    for release in trainer.TRAINER_RELEASES:
        got = containers(pods(tj, runtime([sidecar, node]), release)["node"])
        assert got["log-shipper"] == sidecar, release
        assert got["node"]["image"] == "registry.example/llama-finetune:1.4"
        assert got["node"]["env"] == [{"name": "NCCL_IB_DISABLE", "value": "1"}]
        assert got["node"]["resources"]["limits"]["nvidia.com/gpu"] == "4"


def test_a_runtime_job_without_a_node_container_is_left_as_it_is():
    worker = {"name": "worker", "image": "pytorch/pytorch:2.7.1", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
    tj = trainjob(trainer={"image": "registry.example/other:1", "env": [{"name": "NCCL_NET", "value": "Socket"}]})
    assert containers(pods(tj, runtime([worker]))["node"]) == {"worker": worker}


def test_v2_0_pod_spec_overrides_patch_only_the_target_jobs_pod_spec():
    initializer = {
        "name": "dataset-initializer",
        "template": {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "dataset-initializer", "image": "ghcr.io/kubeflow/trainer/dataset-initializer"}
                        ]
                    }
                }
            }
        },
    }
    rt = runtime()
    rt["spec"]["template"]["spec"]["replicatedJobs"].insert(0, initializer)
    override = {
        "targetJobs": [{"name": "node"}],
        "nodeSelector": {"node.kubernetes.io/instance-type": "p5.48xlarge"},
        "containers": [{"name": "node", "env": [{"name": "NCCL_DEBUG", "value": "WARN"}]}],
    }
    got = pods(trainjob(podSpecOverrides=[override]), rt, "v2.0")
    spec = got["node"]["spec"]
    assert set(spec) == {"containers", "nodeSelector"}  # the override's own targetJobs is not pod spec
    assert spec["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    assert containers(got["node"])["node"]["env"] == [{"name": "NCCL_DEBUG", "value": "WARN"}]
    assert "nodeSelector" not in got["dataset-initializer"]["spec"]


def test_v2_0_override_of_a_job_without_a_pod_template_makes_one():
    rt = runtime(jobs=[{"name": "node", "template": {"metadata": {"labels": {trainer.ANCESTOR_LABEL: "trainer"}}}}])
    override = {"targetJobs": [{"name": "node"}], "containers": [{"name": "node", "image": "registry.example/t:1"}]}
    got = pods(trainjob(podSpecOverrides=[override]), rt, "v2.0")
    assert got == {"node": {"spec": {"containers": [{"name": "node", "image": "registry.example/t:1"}]}}}
    rt = runtime(jobs=[{"name": "node"}])
    assert pods(trainjob(podSpecOverrides=[override]), rt, "v2.0") == {
        "node": {"spec": {"containers": [{"name": "node", "image": "registry.example/t:1"}]}}
    }


def test_an_override_that_is_not_an_object_is_skipped_not_the_ones_after_it():
    override = {"targetJobs": [{"name": "node"}], "metadata": {"labels": {"team": "llm"}}}
    for release, key in (("v2.0", "podSpecOverrides"), ("v2.1", "podTemplateOverrides")):
        got = pods(trainjob(**{key: [None, "x", override]}), runtime(), release)["node"]
        if release == "v2.1":
            assert got["metadata"]["labels"] == {**INJECT, "team": "llm"}
        else:
            assert got["spec"]["metadata"] == {"labels": {"team": "llm"}}  # v2.0 patches the pod spec itself


def test_runtimes_and_trainjobs_missing_their_parts_make_no_pods_and_raise_nothing():
    tj = trainjob(trainer={"image": "registry.example/t:1"})
    for rt in (
        {"kind": "ClusterTrainingRuntime", "metadata": {"name": "torch-distributed"}},
        {"kind": "ClusterTrainingRuntime", "spec": None},
        {"spec": {"template": None}},
        {"spec": {"template": {"spec": None}}},
        {"spec": {"template": {"spec": ["not", "a", "map"]}}},
    ):
        assert pods(tj, rt) == {}, rt
    for bad in (None, [], "spec"):  # a TrainJob whose spec is not an object gets the runtime as it is
        broken = trainjob()
        broken["spec"] = bad
        assert pods(broken, runtime()) == pods(trainjob(), runtime())


def test_a_job_whose_pod_template_has_no_spec_is_yielded_without_one():
    rt = runtime(
        jobs=[
            {
                "name": "node",
                "template": {
                    "metadata": {"labels": {trainer.ANCESTOR_LABEL: "trainer"}},
                    "spec": {"template": {"metadata": {"labels": dict(INJECT)}}},
                },
            }
        ]
    )
    tj = trainjob(trainer={"image": "registry.example/t:1", "resourcesPerNode": {"limits": {"nvidia.com/gpu": "8"}}})
    before = copy.deepcopy(rt)
    assert pods(tj, rt) == {"node": {"metadata": {"labels": INJECT}}}
    assert rt == before  # the runtime itself is never changed
