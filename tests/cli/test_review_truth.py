"""Issue 25, "a review that tells the truth": every example of the issue's "Why" as a test of
`rdma-webhook review` (and of `/validate` where a cluster would meet it), on manifests shaped
like the public Kubeflow Trainer, Kubeflow MPI Operator, Argo, kustomize and Kubernetes examples
(written here, not copied). Plus issue 26 item 1: review uses no policy it was not given.

`review` runs in-process (`webhook.cli.main.main`) where many runs are needed, as a subprocess
elsewhere.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

import kube_objects as k
from conftest import CLI
from webhook.admission import review as admission
from webhook.cluster.state import FileClusterState, RuntimeStore

ROOT = Path(__file__).resolve().parent.parent.parent
POLICIES = str(ROOT / "policies")
STATE = str(ROOT / "tests" / "manifests" / "cluster-state.yaml")
EXAMPLE_STATE = str(ROOT / "examples" / "cluster-state.yaml")
SCHEMA = json.loads((ROOT / "webhook" / "cli" / "review-output.schema.json").read_text())
INJECT = {"rdma-webhook.io/inject": "true"}


def review(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    """`rdma-webhook review ARGS` in-process: (exit status, stdout, stderr)."""
    from webhook.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["review", *args])
    return code, out.getvalue(), err.getvalue()


def records(stdout: str) -> list[dict]:
    recs = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    for r in recs:
        jsonschema.validate(r, SCHEMA)
    return recs


def write(tmp_path: Path, name: str, *docs) -> str:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return str(path)


def mpijob(launcher_command: list, namespace: str = "ml-training", worker_limits: dict | None = None) -> dict:
    """A Kubeflow MPI Operator v2beta1 MPIJob (the nccl-tests shape): a launcher running mpirun
    and GPU workers running sshd."""
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "nccl-allreduce", "namespace": namespace},
        "spec": {
            "slotsPerWorker": 8,
            "runPolicy": {"cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "template": {
                        "metadata": {"labels": dict(INJECT)},
                        "spec": {
                            "containers": [
                                {
                                    "name": "launcher",
                                    "image": "ghcr.io/example/nccl-tests:2.13",
                                    "command": launcher_command,
                                    "resources": {"limits": {"cpu": "2", "memory": "4Gi"}},
                                }
                            ]
                        },
                    },
                },
                "Worker": {
                    "replicas": 2,
                    "template": {
                        "metadata": {"labels": dict(INJECT)},
                        "spec": {
                            "containers": [
                                {
                                    "name": "worker",
                                    "image": "ghcr.io/example/nccl-tests:2.13",
                                    "command": ["/usr/sbin/sshd", "-De"],
                                    "resources": {"limits": worker_limits or {"nvidia.com/gpu": "8"}},
                                }
                            ]
                        },
                    },
                },
            },
        },
    }


def pytorchjob(env: list | None = None, namespace: str | None = "ml-training", limits: dict | None = None) -> dict:
    """A Kubeflow Training Operator PyTorchJob with one Worker replica spec."""
    c = {
        "name": "pytorch",
        "image": "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727",
        "command": ["torchrun", "--nnodes", "2", "--nproc-per-node", "8", "/opt/train.py"],
        "resources": {"limits": limits or {"nvidia.com/gpu": "8"}},
    }
    if env:
        c["env"] = env
    meta = {"name": "llama-finetune"}
    if namespace:
        meta["namespace"] = namespace
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": meta,
        "spec": {
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": 2,
                    "restartPolicy": "OnFailure",
                    "template": {"metadata": {"labels": dict(INJECT)}, "spec": {"containers": [c]}},
                }
            }
        },
    }


def namespace(name: str, **labels: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **labels}},
    }


# -- item 1: bad input is bad input ---------------------------------------------------------------

MPIRUN_16 = [
    "mpirun",
    "-np",
    16,
    "-x",
    "NCCL_NET=Socket",
    "/opt/nccl-tests/build/all_reduce_perf",
    "-b",
    "8",
    "-e",
    "8G",
]


def test_a_number_in_a_launcher_command_is_bad_input_naming_the_item(tmp_path):
    """`command: [mpirun, -np, 16, -x, NCCL_NET=Socket]` with 16 unquoted: the API server refuses
    the pod, and the NCCL_NET=Socket after it was never read (it was mutated and passed, exit 0)."""
    f = write(tmp_path, "mpijob.yaml", mpijob(MPIRUN_16))
    code, out, err = review("--policies", POLICIES, "--cluster-state", STATE, "--output", "json", f)
    assert code == 2, err
    assert "spec.mpiReplicaSpecs.Launcher.template, container launcher: command[2] is 16, a number, not a string" in err
    assert "quote it ('16')" in err
    (rec,) = records(out)
    assert rec["outcome"] == "error" and "command[2] is 16" in rec["messages"][0]
    # quoted, the launcher's NCCL_NET=Socket is read and denies the workload
    quoted = [str(x) for x in MPIRUN_16]
    code, out, err = review(
        "--policies", POLICIES, "--cluster-state", STATE, "--output", "json", write(tmp_path, "ok.yaml", mpijob(quoted))
    )
    assert code == 1 and records(out)[0]["rules"] == ["command-fallback"]


def test_a_number_in_an_env_value_is_bad_input(tmp_path):
    f = write(tmp_path, "job.yaml", pytorchjob(env=[{"name": "NCCL_IB_DISABLE", "value": 1}]))
    code, _, err = review("--policy", "erdma", "--cluster-state", STATE, f)
    assert code == 2 and "container pytorch: env[0] (NCCL_IB_DISABLE) value is 1, a number, not a string" in err


def test_an_empty_quantity_says_it_is_empty_not_None(tmp_path):
    f = write(tmp_path, "job.yaml", pytorchjob(limits={"nvidia.com/gpu": None}))
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, "--output", "json", f)
    assert code == 2 and "resources.limits[nvidia.com/gpu] is empty: give a quantity" in err
    assert "None is not a quantity" not in err + out


def test_placeholders_where_the_decision_reads_are_bad_input(tmp_path):
    helm = pytorchjob(env=[{"name": "NCCL_IB_HCA", "value": "${IB_HCA}"}])
    code, _, err = review("--policy", "erdma", "--cluster-state", STATE, write(tmp_path, "a.yaml", helm))
    assert code == 2 and "env[0] (NCCL_IB_HCA) value '${IB_HCA}' is a template placeholder" in err
    # a variable the decision does not read may hold one
    fine = pytorchjob(env=[{"name": "MASTER_ADDR", "value": "{{ .Values.master }}"}])
    assert review("--policy", "erdma", "--cluster-state", STATE, write(tmp_path, "b.yaml", fine))[0] == 0


ARGO_RESOURCE_STEP = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  generateName: ib-train-
spec:
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      template:
        metadata:
          labels:
            rdma-webhook.io/inject: "true"
        spec:
          containers:
          - name: pytorch
            image: nvcr.io/nvidia/pytorch:25.11-py3
            resources:
              limits:
                nvidia.com/gpu: 8
                rdma/rdma_shared_device_a: {{inputs.parameters.ib}}
"""


def argo_workflow(namespace: str = "ib-training") -> dict:
    """An Argo Workflow whose resource step creates a PyTorchJob from a parameterised manifest."""
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "train-", "namespace": namespace},
        "spec": {
            "entrypoint": "train",
            "arguments": {"parameters": [{"name": "ib", "value": "1"}]},
            "templates": [
                {
                    "name": "train",
                    "inputs": {"parameters": [{"name": "ib"}]},
                    "resource": {
                        "action": "create",
                        "successCondition": "status.replicaStatuses.Worker.succeeded = 2",
                        "manifest": ARGO_RESOURCE_STEP,
                    },
                }
            ],
        },
    }


def test_an_argo_placeholder_in_a_resource_manifest_is_named_not_called_invalid_yaml(tmp_path, policies):
    f = write(tmp_path, "wf.yaml", argo_workflow())
    for extra in ((), ("--strict",)):
        code, _, err = review("--policy", "ib-shared", "--cluster-state", EXAMPLE_STATE, *extra, f)
        assert code == 2, err
        assert (
            "resources.limits[rdma/rdma_shared_device_a] is '{{inputs.parameters.ib}}', a template placeholder" in err
        )
        assert "not valid YAML" not in err
    # /validate reads the manifest too (it was "not valid YAML, not checked"); Argo fills the
    # value in when the step runs, and the PyTorchJob it creates is checked again then
    state = FileClusterState.from_file(EXAMPLE_STATE)
    rv = k.admission_review(argo_workflow(), namespace="ib-training")
    rv["request"]["kind"] = {"group": "argoproj.io", "version": "v1alpha1", "kind": "Workflow"}
    code, resp, _, _ = admission.handle_validate(
        json.dumps(rv).encode(), policies, state.namespace, None, RuntimeStore()
    )
    assert code == 200 and resp["response"]["allowed"] is True
    assert not any("not valid YAML" in w for w in resp["response"].get("warnings", []))
    assert any("resource.manifest.spec.pytorchReplicaSpecs.Worker.template" in w for w in resp["response"]["warnings"])


def test_an_argo_placeholder_gpu_count_warns_at_validate_instead_of_denying(policies):
    wf = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "nccl-", "namespace": "ml-training"},
        "spec": {
            "entrypoint": "run",
            "templates": [
                {
                    "name": "run",
                    "metadata": {"labels": dict(INJECT)},
                    "container": {
                        "image": "nvcr.io/nvidia/pytorch:25.11-py3",
                        "command": ["python", "train.py"],
                        "resources": {"limits": {"nvidia.com/gpu": "{{inputs.parameters.gpus}}"}},
                    },
                }
            ],
        },
    }
    state = FileClusterState.from_file(STATE)
    rv = k.admission_review(wf, namespace="ml-training")
    rv["request"]["kind"] = {"group": "argoproj.io", "version": "v1alpha1", "kind": "Workflow"}
    code, resp, _, _ = admission.handle_validate(
        json.dumps(rv).encode(), policies, state.namespace, None, RuntimeStore()
    )
    assert resp["response"]["allowed"] is True
    assert any("'{{inputs.parameters.gpus}}'" in w for w in resp["response"]["warnings"])


def kustomize_tree(tmp_path: Path, labelled: bool) -> Path:
    """A kustomize base: kustomization.yaml, a Job, and a strategic-merge patch for it."""
    tree = tmp_path / ("base" if labelled else "plain")
    (tree / "patches").mkdir(parents=True)
    (tree / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: ml-training\n"
        "resources: [job.yaml]\npatches:\n- path: patches/gpus.yaml\n"
    )
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {
            "template": {
                "metadata": {"labels": dict(INJECT) if labelled else {"app": "train"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "t", "image": "nvcr.io/nvidia/pytorch:25.11-py3"}],
                },
            }
        },
    }
    (tree / "job.yaml").write_text(yaml.safe_dump(job))
    (tree / "patches" / "gpus.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": "train"},
                "spec": {
                    "template": {
                        "spec": {"containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}
                    }
                },
            }
        )
    )
    return tree


def test_a_raw_kustomize_tree_is_bad_input_saying_render_it_first(tmp_path):
    tree = kustomize_tree(tmp_path, labelled=True)
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, "--output", "json", str(tree))
    assert code == 2 and f"render it first: kubectl kustomize {tree} | rdma-webhook review -" in err
    assert "SKIPPED" not in out and all(r["outcome"] in ("error", "not-checked") for r in records(out))
    plain = kustomize_tree(tmp_path, labelled=False)
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, "--output", "json", str(plain))
    assert code == 0 and all("kustomize tree" in r["messages"][0] for r in records(out))
    assert review("--policy", "erdma", "--cluster-state", STATE, "--strict", str(plain))[0] == 2


def test_an_unknown_kind_holding_labelled_templates_says_so(tmp_path):
    widget = {
        "apiVersion": "example.com/v1",
        "kind": "TrainingWidget",
        "metadata": {"name": "w", "namespace": "ml-training"},
        "spec": {
            "template": {"metadata": {"labels": dict(INJECT)}, "spec": {"containers": [{"name": "t", "image": "x"}]}}
        },
    }
    empty = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "e", "namespace": "ml-training"}}
    code, out, _ = review("--policy", "erdma", "--output", "json", write(tmp_path, "w.yaml", widget, empty))
    assert code == 0
    labelled, plain = records(out)
    assert "carries pod templates labelled rdma-webhook.io/inject" in labelled["messages"][0]
    assert plain["messages"] == ["unknown kind: pods it may create are not checked"]


# -- item 2: one truthful story ------------------------------------------------------------------


def headlines(stdout: str) -> list[str]:
    """The outcome word of each --explain headline (the line that names the document)."""
    out = []
    for line in stdout.splitlines():
        if line and not line.startswith(" ") and ": " in line:
            words = line.rsplit(": ", 1)[1]
            out.append(words.split(" by policy ")[0])
    return out


def test_a_clean_workload_reads_mutated_in_the_headline_and_the_json(tmp_path):
    f = write(tmp_path, "job.yaml", pytorchjob())
    code, text, _ = review("--policy", "erdma", "--cluster-state", STATE, "--explain", "--color", "never", f)
    assert code == 0
    assert headlines(text) == ["MUTATED"] and "UNCHANGED" not in text and "why: pods will be mutated" not in text
    code, out, _ = review("--policy", "erdma", "--cluster-state", STATE, "--output", "json", f)
    (rec,) = records(out)
    assert rec["outcome"] == "mutated" and rec["templates"][0]["outcome"] == "mutated"


def test_warnings_are_whole_in_review_and_cut_at_a_word_in_the_admission_answer(tmp_path):
    long_env = [{"name": f"NCCL_DEBUG_SUBSYS_{i}", "value": "INIT,NET"} for i in range(3)] + [
        {"name": "NCCL_DEBUG", "value": "INFO"}
    ]
    f = write(tmp_path, "job.yaml", pytorchjob(env=long_env))
    code, out, _ = review("--policy", "sriov-roce-8rail", "--cluster-state", STATE, "--output", "json", f)
    (rec,) = records(out)
    assert rec["warnings"] and not any(w.endswith("...") for w in rec["warnings"])
    long = "rdma-webhook will inject " + "; ".join(
        f"spec.pytorchReplicaSpecs.Worker.template (sriov-roce-8rail): rdma-rail-{i}, NCCL_IB_HCA" for i in range(6)
    )
    cut = admission._cut(long)
    assert len(long) > admission.MAX_WARNING and len(cut) <= admission.MAX_WARNING and cut.endswith(" ...")
    kept = cut[: -len(" ...")]
    assert long.startswith(kept) and long[len(kept)] in " ,;:"  # never mid-word


def test_a_denied_workload_names_template_and_container_once_in_words(tmp_path):
    f = write(tmp_path, "job.yaml", pytorchjob(env=[{"name": "NCCL_NET", "value": "Socket"}]))
    code, out, _ = review("--policy", "erdma", "--cluster-state", STATE, "--output", "json", f)
    assert code == 1
    (rec,) = records(out)
    (message,) = rec["messages"]
    assert message.startswith("spec.pytorchReplicaSpecs.Worker.template, container 'pytorch': NCCL_NET='Socket'")
    assert 'container "' not in message and message.count("container") == 1


def dra_worker_job() -> dict:
    """A Job whose GPUs come from a DRA ResourceClaimTemplate (the Kubernetes DRA example shape)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "dra-train", "namespace": "ml-training"},
        "spec": {
            "template": {
                "metadata": {"labels": dict(INJECT)},
                "spec": {
                    "restartPolicy": "Never",
                    "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "eight-gpus"}],
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "nvcr.io/nvidia/pytorch:25.11-py3",
                            "command": ["torchrun", "train.py"],
                            "resources": {"claims": [{"name": "gpus"}]},
                        }
                    ],
                },
            }
        },
    }


@pytest.mark.parametrize(
    "doc,expect",
    [
        (dra_worker_job(), "container 'trainer' sees GPUs through a DRA claim"),
        (
            pytorchjob(limits={"amd.com/gpu": "8"}),
            "container 'pytorch' requests amd.com/gpu, not a GPU of policy erdma",
        ),
        (k.seed_sriov_pod(), None),
    ],
    ids=["dra-gpus", "amd-gpus", "sriov-pod"],
)
def test_each_left_unchanged_reason_is_the_real_one(tmp_path, doc, expect):
    if expect is None:  # the plain SR-IOV pod of the seed example, its GPU request taken out
        for c in doc["spec"]["containers"]:
            for section in ("limits", "requests"):
                (c.get("resources") or {}).get(section, {}).pop("nvidia.com/gpu", None)
        doc["metadata"]["namespace"] = "ml-training"
        doc["metadata"]["annotations"]["rdma-webhook.io/policy"] = "erdma"
        expect = "no container requests a GPU (nvidia.com/gpu) or runs an MPI launcher, so none gets RDMA"
    f = write(tmp_path, "doc.yaml", doc)
    code, out, _ = review("--policy", "erdma", "--cluster-state", STATE, "--output", "json", f)
    assert code == 0
    (rec,) = records(out)
    assert rec["outcome"] == "unchanged" and any(expect in m for m in rec["messages"]), rec
    assert not any("MPI launcher needs no RDMA device" in w for w in rec["warnings"] + rec["messages"])


# -- item 3: scope ---------------------------------------------------------------------------------


def ib_runtime(env: list | None = None) -> dict:
    """A Kubeflow Trainer ClusterTrainingRuntime for an InfiniBand cluster (torch-distributed shape)."""
    c = {
        "name": "node",
        "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
        "command": ["torchrun", "/workspace/train.py"],
        "resources": {"limits": {"nvidia.com/gpu": "8", "rdma/rdma_shared_device_a": "1"}},
    }
    if env:
        c["env"] = env
    return k.cluster_training_runtime(c, pod_labels=INJECT)


def validate_cluster_runtime(runtime: dict, policies) -> dict:
    rv = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "rt-1",
            "operation": "CREATE",
            "namespace": "",
            "kind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "ClusterTrainingRuntime"},
            "resource": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "resource": "clustertrainingruntimes"},
            "object": runtime,
        },
    }
    state = FileClusterState.from_file(EXAMPLE_STATE)
    code, resp, _, _ = admission.handle_validate(
        json.dumps(rv).encode(), policies, state.namespace, None, RuntimeStore()
    )
    assert code == 200
    return resp["response"]


def test_a_cluster_runtime_right_for_ib_namespaces_is_allowed_with_the_other_policies_named(tmp_path, policies):
    r = validate_cluster_runtime(ib_runtime(), policies)
    assert r["allowed"] is True, r
    assert any("would be denied in namespaces that use policy erdma" in w for w in r["warnings"])
    code, out, _ = review("--policies", POLICIES, "--output", "json", write(tmp_path, "rt.yaml", ib_runtime()))
    # its headline names no policy: the namespace of the TrainJob that uses it decides (issue 42)
    assert code == 0 and records(out)[0]["policy"] is None and records(out)[0]["outcome"] == "mutated"
    # the policy it was shown under (the same choice of the catalogue's IB policies as /mutate makes
    # for a pod of that runtime in a namespace that names none)
    assert [t["policy"] for t in records(out)[0]["templates"]] == ["coreweave-ib"]


def test_a_cluster_runtime_denied_under_every_policy_is_denied(tmp_path, policies):
    bad = ib_runtime(env=[{"name": "NCCL_IB_DISABLE", "value": "1"}])
    r = validate_cluster_runtime(bad, policies)
    assert r["allowed"] is False and "NCCL_IB_DISABLE" in r["status"]["message"]
    assert review("--policies", POLICIES, write(tmp_path, "rt.yaml", bad))[0] == 1


def test_namespace_flag_only_fills_a_missing_namespace(tmp_path):
    job = pytorchjob(env=[{"name": "NCCL_NET", "value": "Socket"}], namespace="default")  # default is not opted in
    code, out, _ = review(
        "--policy",
        "erdma",
        "--cluster-state",
        EXAMPLE_STATE,
        "--namespace",
        "ml-training",
        "--output",
        "json",
        write(tmp_path, "a.yaml", job),
    )
    assert code == 0 and records(out)[0]["namespace"] == "default" and records(out)[0]["outcome"] == "skipped"
    unnamed = pytorchjob(env=[{"name": "NCCL_NET", "value": "Socket"}], namespace=None)
    code, out, _ = review(
        "--policy",
        "erdma",
        "--cluster-state",
        EXAMPLE_STATE,
        "--namespace",
        "ml-training",
        "--output",
        "json",
        write(tmp_path, "b.yaml", unnamed),
    )
    assert code == 1 and records(out)[0]["namespace"] == "ml-training"


def test_a_namespace_document_in_the_input_decides_and_wins_over_cluster_state(tmp_path):
    ns = namespace("ml-training", **{"rdma-webhook.io/injection": "enabled", "rdma-webhook.io/policy": "ib-shared"})
    f = write(tmp_path, "all.yaml", ns, pytorchjob())
    code, out, err = review("--policies", POLICIES, "--cluster-state", STATE, "--output", "json", f)
    assert code == 0
    assert "Namespace 'ml-training' in the input is used instead of the one in" in err
    ns_rec, job_rec = records(out)
    assert ns_rec["outcome"] == "not-checked" and "decide opt-in and policy" in ns_rec["messages"][0]
    assert job_rec["policy"] == "ib-shared"
    # without --cluster-state, a Namespace document that does not opt in means nothing is checked
    off = namespace("ml-training")
    code, out, _ = review("--policies", POLICIES, "--output", "json", write(tmp_path, "off.yaml", off, pytorchjob()))
    assert code == 0 and records(out)[1]["outcome"] == "skipped"


def test_documents_in_namespaces_not_opted_in_are_never_bad_input(tmp_path):
    trainjob = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "t", "namespace": "default"},
        "spec": {"runtimeRef": {"name": "no-such-runtime"}, "trainer": {"numNodes": 2}},
    }
    unrendered = pytorchjob(namespace="default", limits={"nvidia.com/gpu": "{{ .Values.gpus }}"})
    numbers = mpijob(MPIRUN_16, namespace="default")
    f = write(tmp_path, "off.yaml", trainjob, unrendered, numbers)
    code, out, err = review("--policy", "erdma", "--cluster-state", EXAMPLE_STATE, "--output", "json", f)
    assert code == 0, err
    assert [r["outcome"] for r in records(out)] == ["skipped", "skipped", "skipped"]
    # the same in an opted-in namespace: each is bad input
    for doc in (trainjob, unrendered, numbers):
        doc["metadata"]["namespace"] = "ml-training"
        assert review("--policy", "erdma", "--cluster-state", EXAMPLE_STATE, write(tmp_path, "on.yaml", doc))[0] == 2


# -- issue 26 item 1: no policy the user did not choose --------------------------------------------


def test_without_a_chosen_policy_nothing_is_judged_and_the_message_says_how(tmp_path):
    f = write(tmp_path, "job.yaml", pytorchjob())
    out = subprocess.run([*CLI, "review", f], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2
    assert "no policy is in force" in out.stderr and "--policy NAME" in out.stderr and "--policies DIR" in out.stderr
    assert "erdma" in out.stderr and "ib-shared" in out.stderr  # the catalogue is listed, none is used
    assert "MUTATED" not in out.stdout and "aliyun/erdma" not in out.stdout
    # a document that would not be checked is fine without a policy
    assert (
        review(write(tmp_path, "plain.yaml", pytorchjob(namespace="default")), "--cluster-state", EXAMPLE_STATE)[0] == 0
    )


def test_policy_from_the_catalogue_by_name_or_shipped_in_the_input(tmp_path):
    f = write(tmp_path, "job.yaml", pytorchjob())
    code, out, _ = review("--policy", "ib-shared", "--output", "json", f)
    assert code == 0 and records(out)[0]["policy"] == "ib-shared"
    code, _, err = review("--policy", "infiniband", f)
    assert code == 2 and "no such policy in the catalogue" in err
    own = yaml.safe_load((ROOT / "policies" / "efa.yaml").read_text().split("\n---")[0])
    own["name"] = "team-efa"
    code, out, _ = review("--output", "json", write(tmp_path, "with-policy.yaml", own, pytorchjob()))
    assert code == 0 and records(out)[1]["policy"] == "team-efa"
    assert records(out)[0]["messages"] == ["holds no pods; a policy in force for this review"]


def test_a_pod_naming_a_catalogue_policy_not_in_force_says_how_to_add_it():
    code, out, _ = review(
        "--policy", "erdma", "--output", "json", str(ROOT / "examples" / "pods" / "seed-sriov-pod.yaml")
    )
    assert code == 1
    assert "add --policy sriov-roce" in records(out)[0]["messages"][-1]


# -- --output json against its schema for every outcome; --explain agrees --------------------------


def test_every_outcome_validates_against_the_schema(tmp_path):
    docs = [
        pytorchjob(),  # mutated
        pytorchjob(limits={"amd.com/gpu": "8"}),  # unchanged
        pytorchjob(namespace="default"),  # skipped
        pytorchjob(env=[{"name": "NCCL_NET", "value": "Socket"}]),  # denied
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}},  # not-checked
        mpijob(MPIRUN_16),
    ]  # error
    code, out, _ = review(
        "--policy", "erdma", "--cluster-state", EXAMPLE_STATE, "--output", "json", write(tmp_path, "all.yaml", *docs)
    )
    assert code == 2
    assert [r["outcome"] for r in records(out)] == ["mutated", "unchanged", "skipped", "denied", "not-checked", "error"]
    assert set(SCHEMA["properties"]["outcome"]["enum"]) == {r["outcome"] for r in records(out)}


MANIFESTS = sorted([*(ROOT / "tests" / "manifests").glob("*/*.yaml"), *(ROOT / "examples" / "pods").glob("*.yaml")])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.sampled_from(MANIFESTS), min_size=1, max_size=4, unique=True),
    st.sampled_from([(), ("--cluster-state", STATE), ("--cluster-state", EXAMPLE_STATE)]),
    st.sampled_from([("--policies", POLICIES), ("--policy", "erdma"), ("--policy", "ib-shared,sriov-roce"), ()]),
)
def test_the_explain_headline_and_the_json_outcome_agree(paths, state, chosen):
    args = [*chosen, *state, *map(str, paths)]
    code_text, text, _ = review(*args, "--explain", "--color", "never")
    code_json, out, _ = review(*args, "--output", "json")
    recs = records(out)
    assert code_text == code_json
    assert headlines(text) == [r["outcome"].upper().replace("-", " ") for r in recs]
    assert (code_json == 2) == any(r["outcome"] == "error" for r in recs)
    assert (code_json == 1) == (
        not any(r["outcome"] == "error" for r in recs) and any(r["outcome"] == "denied" for r in recs)
    )
