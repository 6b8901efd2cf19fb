"""Issue 28 item 4, the kinds.merge-trainer part of the mutation run (mutation/MUTATION.md): what
`webhook.kinds.merge.strategic_merge` and `webhook.kinds.trainer` decide that the workload tests
left open, found by the part's survivors.

strategic_merge is checked against the API machinery's strategic merge patch for pod templates
(k8s.io/apimachinery strategicpatch: `$patch: replace` replaces a map, `$patch: delete` removes a
list item by its merge key, other `$` directives such as `$setElementOrder/<list>` and
`$retainKeys` are not fields, a null deletes a key) and for being a new object: the pod a
controller makes from a runtime is checked and, for the pod itself, mutated, so a result that
shares a list or map with its base or patch would change the TrainJob or runtime as sent. The
TrainJob tests follow Kubeflow Trainer's builder (kubeflow/trainer, pkg/runtime/framework/plugins/
jobset/builder.go and pkg/runtime/core/trainingruntime.go at v2.0.0-v2.3.0): the `node` container
of the trainer job gets the TrainJob's image, command, args, resourcesPerNode and env; from v2.1 a
runtime whose MPI policy runs the launcher as a node gives the job named `node` the resources and
env even without the trainer label."""

from __future__ import annotations

import copy

import pytest

from kinds.test_trainer import INJECT, containers, pods, runtime, trainjob
from webhook.kinds import trainer
from webhook.kinds.merge import strategic_merge

ENV = [{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "NCCL_IB_HCA", "value": "mlx5_0"}]


# -- strategic_merge ---------------------------------------------------------------------------------------


def test_patch_replace_replaces_the_map_and_drops_the_directive():
    base = {"nodeSelector": {"pool": "a100", "zone": "z1"}}
    patch = {"nodeSelector": {"$patch": "replace", "pool": "h100", "extra": {"k": ["v"]}}}
    out = strategic_merge(base, patch)
    assert out == {"nodeSelector": {"pool": "h100", "extra": {"k": ["v"]}}}
    assert out["nodeSelector"]["extra"] is not patch["nodeSelector"]["extra"]
    assert out["nodeSelector"]["extra"]["k"] is not patch["nodeSelector"]["extra"]["k"]
    # only the exact directive replaces
    assert strategic_merge(base, {"nodeSelector": {"$patch": "Replace", "pool": "h100"}}) == {
        "nodeSelector": {"pool": "h100", "zone": "z1"}
    }


def test_directives_are_not_fields_and_the_fields_after_them_are_merged():
    base = {"containers": [{"name": "node", "env": list(ENV)}], "hostNetwork": False}
    patch = {
        "$setElementOrder/containers": [{"name": "node"}],
        "$retainKeys": ["containers"],
        "hostNetwork": True,
        "containers": [{"name": "node", "image": "x"}],
    }
    out = strategic_merge(base, patch)
    assert out == {"containers": [{"name": "node", "env": ENV, "image": "x"}], "hostNetwork": True}


def test_a_null_deletes_a_key_and_a_null_for_a_missing_key_is_nothing():
    base = {"nodeSelector": {"pool": "a100"}, "hostNetwork": True}
    assert strategic_merge(base, {"hostNetwork": None, "priorityClassName": None}) == {"nodeSelector": {"pool": "a100"}}


def test_the_result_shares_nothing_with_the_base():
    base = {
        "containers": [{"name": "node", "env": [{"name": "A", "value": "1"}]}, {"name": "sidecar", "args": ["--x"]}],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
        "tolerations": [{"key": "gpu"}],
    }
    snapshot = copy.deepcopy(base)
    out = strategic_merge(base, {"containers": [{"name": "node", "image": "x"}], "hostIPC": True})
    out["containers"][1]["args"].append("--y")
    out["containers"][0]["env"][0]["value"] = "2"
    out["volumes"][0]["emptyDir"]["medium"] = ""
    out["tolerations"].append({"key": "spot"})
    assert base == snapshot


def test_the_result_shares_nothing_with_the_patch():
    patch = {
        "containers": [{"name": "new", "command": ["torchrun"]}, "not-an-object", {"image": "keyless"}],
        "tolerations": [{"key": "gpu", "operator": "Exists"}],
    }
    snapshot = copy.deepcopy(patch)
    out = strategic_merge({"containers": [{"name": "node"}]}, patch)
    assert out["containers"] == [
        {"name": "node"},
        {"name": "new", "command": ["torchrun"]},
        "not-an-object",
        {"image": "keyless"},
    ]
    out["containers"][1]["command"].append("t.py")
    out["containers"][3]["image"] = "changed"
    out["tolerations"][0]["operator"] = "Equal"
    assert patch == snapshot


def test_a_list_merged_by_key_shares_nothing_with_its_base_or_patch():
    """As `_upsert_env` calls it: the container's env list is the base."""
    base = [{"name": "NCCL_IB_HCA", "valueFrom": {"configMapKeyRef": {"name": "rdma", "key": "hca"}}}]
    patch = [{"value": "no name", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    snapshot_base, snapshot_patch = copy.deepcopy(base), copy.deepcopy(patch)
    out = strategic_merge(base, patch, "env")
    assert out == base + patch
    out[0]["valueFrom"]["configMapKeyRef"]["key"] = "changed"
    out[1]["valueFrom"]["fieldRef"]["fieldPath"] = "changed"
    assert (base, patch) == (snapshot_base, snapshot_patch)


def test_list_items_without_a_merge_key_are_appended_and_the_items_after_them_merged():
    base = {"env": [{"name": "NCCL_IB_DISABLE", "value": "0"}]}
    patch = {"env": [{"value": "no name"}, {"name": "NCCL_IB_DISABLE", "value": "1"}, {"name": "NEW", "value": "x"}]}
    assert strategic_merge(base, patch) == {
        "env": [{"name": "NCCL_IB_DISABLE", "value": "1"}, {"value": "no name"}, {"name": "NEW", "value": "x"}]
    }
    patch = {"env": ["text", {"name": "NCCL_IB_DISABLE", "value": "1"}]}
    assert strategic_merge(base, patch) == {"env": [{"name": "NCCL_IB_DISABLE", "value": "1"}, "text"]}


def test_delete_removes_an_item_by_its_merge_key():
    base = {"volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "data", "mountPath": "/data"}]}
    patch = {
        "volumeMounts": [{"mountPath": "/dev/shm", "$patch": "delete"}, {"mountPath": "/nowhere", "$patch": "delete"}]
    }
    assert strategic_merge(base, patch) == {"volumeMounts": [{"name": "data", "mountPath": "/data"}]}


# -- trainer -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [None, [], "x", {"runtimeRef": None}, {"runtimeRef": ["x"]}, {"runtimeRef": "x"}])
def test_runtime_ref_of_a_trainjob_missing_its_parts(spec):
    assert trainer.runtime_ref({"kind": "TrainJob", "spec": spec}) == ("ClusterTrainingRuntime", "")


def mpi_runtime(run_launcher_as_node, labelled_node=False):
    """An MPI runtime of the deepspeed-distributed shape: a `launcher` job and a `node` job; the
    node job carries the trainer label only when asked."""
    launcher = {
        "name": "launcher",
        "template": {
            "spec": {
                "template": {
                    "metadata": {"labels": dict(INJECT)},
                    "spec": {
                        "containers": [
                            {
                                "name": "node",
                                "image": "mpioperator/openmpi:0.6.0",
                                "command": ["mpirun", "python3", "t.py"],
                            }
                        ]
                    },
                }
            }
        },
    }
    node = {
        "name": "node",
        "template": {
            "metadata": {"labels": {trainer.ANCESTOR_LABEL: "trainer"}} if labelled_node else {},
            "spec": {
                "template": {
                    "metadata": {"labels": dict(INJECT)},
                    "spec": {
                        "containers": [
                            {
                                "name": "node",
                                "image": "mpioperator/openmpi:0.6.0",
                                "resources": {"limits": {"nvidia.com/gpu": "8"}},
                            }
                        ]
                    },
                }
            },
        },
    }
    rt = runtime(jobs=[launcher, node])
    rt["spec"]["mlPolicy"] = {"numNodes": 2, "mpi": {"numProcPerNode": 8, "runLauncherAsNode": run_launcher_as_node}}
    return rt


def test_a_launcher_run_as_a_node_gives_the_node_job_the_trainers_env_and_resources():
    tj = trainjob(
        trainer={
            "image": "registry.example/ds:1",
            "env": [{"name": "NCCL_IB_DISABLE", "value": "1"}],
            "resourcesPerNode": {"limits": {"nvidia.com/gpu": "4", "rdma/rdma_shared_device_a": "1"}},
        }
    )
    for release in ("v2.1", "v2.2", "v2.3"):
        got = pods(tj, mpi_runtime(True), release)
        node = containers(got["node"])["node"]
        assert node["env"] == [{"name": "NCCL_IB_DISABLE", "value": "1"}], release
        assert node["resources"]["limits"] == {"nvidia.com/gpu": "4", "rdma/rdma_shared_device_a": "1"}, release
        assert node["image"] == "mpioperator/openmpi:0.6.0"  # image, command, args: the trainer job only
        launcher = containers(got["launcher"])["node"]
        assert "env" not in launcher and "resources" not in launcher, release
    # not in v2.0, and not when the launcher does not run as a node (false, missing, or not a boolean)
    for release, rt in [
        ("v2.0", mpi_runtime(True)),
        ("v2.3", mpi_runtime(False)),
        ("v2.3", mpi_runtime("true")),
        ("v2.3", runtime(jobs=mpi_runtime(True)["spec"]["template"]["spec"]["replicatedJobs"])),
    ]:
        node = containers(pods(tj, rt, release)["node"])["node"]
        assert "env" not in node and node["resources"] == {"limits": {"nvidia.com/gpu": "8"}}, release
    # a labelled node job gets everything, image included
    node = containers(pods(tj, mpi_runtime(False, labelled_node=True), "v2.3")["node"])["node"]
    assert node["image"] == "registry.example/ds:1" and node["env"] == [{"name": "NCCL_IB_DISABLE", "value": "1"}]
    # an mlPolicy or mpi that is not an object is no MPI policy
    for ml in ("mpi", {"mpi": "x"}, None):
        rt = mpi_runtime(True)
        rt["spec"]["mlPolicy"] = ml
        assert "env" not in containers(pods(tj, rt, "v2.3")["node"])["node"]


@pytest.mark.parametrize("release", ["v2.0", "v2.1", "v2.2"])
def test_resources_per_node_with_requests_only_replace_the_runtimes_up_to_v2_2(release):
    tj = trainjob(trainer={"resourcesPerNode": {"requests": {"nvidia.com/gpu": "4", "cpu": "16"}}})
    node = containers(pods(tj, runtime(), release)["node"])["node"]
    assert node["resources"] == {"requests": {"nvidia.com/gpu": "4", "cpu": "16"}}
    both = {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "2"}}
    node = containers(pods(trainjob(trainer={"resourcesPerNode": both}), runtime(), release)["node"])["node"]
    assert node["resources"] == both


@pytest.mark.parametrize("release", trainer.TRAINER_RELEASES)
def test_resources_per_node_without_limits_or_requests_leave_the_runtimes(release):
    for per_node in ({}, {"claims": [{"name": "gpus"}]}, {"limits": None}):
        node = containers(pods(trainjob(trainer={"resourcesPerNode": per_node}), runtime(), release)["node"])["node"]
        assert node["resources"] == {"limits": {"nvidia.com/gpu": "8", "rdma/rdma_shared_device_a": "1"}}, per_node


@pytest.mark.parametrize("release", trainer.TRAINER_RELEASES)
def test_the_pods_share_nothing_with_the_trainjob(release):
    tj = trainjob(
        trainer={
            "command": ["torchrun", "t.py"],
            "args": ["--epochs", "3"],
            "env": list(ENV),
            "resourcesPerNode": {"limits": {"nvidia.com/gpu": "4"}, "requests": {"nvidia.com/gpu": "4"}},
        }
    )
    snapshot = copy.deepcopy(tj)
    node = containers(pods(tj, runtime(), release)["node"])["node"]
    node["command"].append("--x")
    node["args"].append("--y")
    node["resources"]["limits"]["rdma/ib"] = "1"
    node["resources"]["requests"]["rdma/ib"] = "1"
    node["env"][0]["value"] = "WARN"
    assert tj == snapshot


def test_a_container_without_env_takes_the_trainjob_env_merged_by_name():
    """Trainer upserts each variable by name (apply.UpsertEnvVars): a TrainJob env naming a variable
    twice gives one entry with the last value, and a `$patch` entry is no variable."""
    tj = trainjob(
        trainer={
            "env": [
                {"name": "NCCL_IB_DISABLE", "value": "0"},
                {"name": "NCCL_IB_DISABLE", "value": "1"},
                {"name": "NCCL_NET", "$patch": "delete"},
            ]
        }
    )
    for env in (None, "x"):
        rt = runtime()
        node_spec = rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        node_spec["containers"][0]["env"] = env
        node = containers(pods(tj, rt)["node"])["node"]
        assert node["env"] == [{"name": "NCCL_IB_DISABLE", "value": "1"}], env


def test_v2_1_overrides_carry_labels_and_annotations_and_make_a_template_where_there_is_none():
    override = {
        "targetJobs": [{"name": "node"}],
        "metadata": {
            "labels": {"team": "llm"},
            "annotations": {"k8s.v1.cni.cncf.io/networks": "rdma-net"},
            "finalizers": ["x"],
        },
        "spec": {"containers": [{"name": "node", "env": [{"name": "NCCL_SOCKET_IFNAME", "value": "net1"}]}]},
    }
    tj = trainjob(podTemplateOverrides=[override])
    meta = pods(tj, runtime(), "v2.1")["node"]["metadata"]
    assert meta == {"labels": {**INJECT, "team": "llm"}, "annotations": {"k8s.v1.cni.cncf.io/networks": "rdma-net"}}
    for job in (
        {"name": "node"},
        {"name": "node", "template": {}},
        {"name": "node", "template": {"metadata": {"labels": {trainer.ANCESTOR_LABEL: "trainer"}}}},
    ):
        pod = pods(tj, runtime(jobs=[job]), "v2.1")["node"]
        assert pod["metadata"]["annotations"] == {"k8s.v1.cni.cncf.io/networks": "rdma-net"}, job
        assert pod["spec"]["containers"][0]["env"] == [{"name": "NCCL_SOCKET_IFNAME", "value": "net1"}], job
    # an override whose metadata is null or not an object carries none
    for metadata in (None, ["labels"], "labels"):
        bad = dict(override, metadata=metadata)
        assert pods(trainjob(podTemplateOverrides=[bad]), runtime(), "v2.1")["node"]["metadata"] == {"labels": INJECT}


@pytest.mark.parametrize("release", ["v2.2", "v2.3"])
def test_runtime_patches_missing_their_parts_are_skipped_not_the_ones_after_them(release):
    good = {
        "trainingRuntimeSpec": {
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {"spec": {"template": {"metadata": {"annotations": {"patched": "yes"}}}}},
                        }
                    ]
                }
            }
        }
    }
    broken = [
        {"trainingRuntimeSpec": None},
        {"trainingRuntimeSpec": "x"},
        {"trainingRuntimeSpec": {"template": None}},
        {"trainingRuntimeSpec": {"template": "x"}},
        {"trainingRuntimeSpec": {"template": {"spec": None}}},
        {"trainingRuntimeSpec": {"template": {"spec": "x"}}},
    ]
    for patch in broken:
        pod = pods(trainjob(runtimePatches=[patch]), runtime(), release)["node"]
        assert pod == runtime()["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"], patch
    jobs = [None, "node", {"name": "node"}, {"name": "node", "template": None}, {"name": "node", "template": "x"}]
    patch = {
        "trainingRuntimeSpec": {
            "template": {
                "spec": {"replicatedJobs": [*jobs, *good["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]]}
            }
        }
    }
    pod = pods(trainjob(runtimePatches=[patch]), runtime(), release)["node"]
    assert pod["metadata"] == {"labels": INJECT, "annotations": {"patched": "yes"}}
    assert containers(pod)["node"]["resources"]["limits"]["nvidia.com/gpu"] == "8"


@pytest.mark.parametrize(
    "template",
    [
        None,
        "x",
        {"metadata": "x", "spec": {"template": {"spec": {"containers": [{"name": "node"}]}}}},
        {"metadata": {"labels": {trainer.ANCESTOR_LABEL: "trainer"}}, "spec": "x"},
        {"metadata": {"labels": {trainer.ANCESTOR_LABEL: "trainer"}}, "spec": {"template": None}},
        {"metadata": {"labels": {trainer.ANCESTOR_LABEL: "trainer"}}, "spec": {"template": "x"}},
    ],
)
def test_a_runtime_job_missing_its_parts_yields_what_it_has_and_raises_nothing(template):
    tj = trainjob(trainer={"env": [{"name": "NCCL_IB_DISABLE", "value": "1"}]})
    got = list(trainer.trainjob_pods(tj, runtime(jobs=[{"name": "node", "template": template}]), "v2.3"))
    assert len(got) == 1 and got[0][0] == "node"
    pod = got[0][1]
    if isinstance(template, dict) and template.get("metadata") == "x":
        assert pod == {"spec": {"containers": [{"name": "node"}]}}  # no trainer label: nothing of the TrainJob's
    else:
        assert pod is None or pod == "x"


def test_a_runtime_job_without_a_name_is_yielded_under_an_empty_name():
    job = copy.deepcopy(runtime()["spec"]["template"]["spec"]["replicatedJobs"][0])
    del job["name"]
    assert list(pods(trainjob(), runtime(jobs=[job]))) == [""]
