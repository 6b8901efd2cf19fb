"""Kubeflow Trainer: the pods of a TrainJob, made from the runtime it references with the
TrainJob's overrides applied as the Trainer release in use applies them."""

from __future__ import annotations

import copy
import os
from typing import Any, Iterator, Protocol

from webhook.kinds.merge import strategic_merge

TRAINER_GROUP = "trainer.kubeflow.org"


class Runtimes(Protocol):
    """TrainingRuntimes (namespaced) and ClusterTrainingRuntimes, as the cluster state knows them."""

    def training_runtime(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def cluster_training_runtime(self, name: str) -> dict[str, Any] | None: ...


# Trainer releases whose TrainJob-to-JobSet rules are modelled (kubeflow/trainer, pkg/runtime/core
# trainingruntime.go and pkg/runtime/framework/plugins/jobset/builder.go at each tag):
#   v2.0  spec.podSpecOverrides: a strategic merge patch of each target job's pod spec
#   v2.1  spec.podTemplateOverrides: the same of the pod template (metadata labels/annotations, spec)
#   v2.2  spec.runtimePatches[].trainingRuntimeSpec.template.spec.replicatedJobs[]: a strategic
#         merge patch of the job template
#   v2.3  as v2.2, except that trainer.resourcesPerNode is merged into the `node` container's
#         resources (MergeResourceRequirements); up to v2.2 it replaces them whole, so a device
#         the runtime requests disappears when resourcesPerNode does not repeat it.
# Fields a release does not know are pruned by the API server (structural CRD schemas): ignored.
TRAINER_RELEASES = ("v2.0", "v2.1", "v2.2", "v2.3")
DEFAULT_TRAINER_RELEASE = "v2.3"
TRAINER_RELEASE_ENV = "RDMA_WEBHOOK_TRAINER_RELEASE"
OVERRIDES = {
    "v2.0": "podSpecOverrides",
    "v2.1": "podTemplateOverrides",
    "v2.2": "runtimePatches",
    "v2.3": "runtimePatches",
}
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
NODE = "node"  # the trainer's job and container name in every runtime


def trainer_release() -> str:
    release = os.environ.get(TRAINER_RELEASE_ENV) or DEFAULT_TRAINER_RELEASE
    return release if release in TRAINER_RELEASES else DEFAULT_TRAINER_RELEASE


def runtime_ref(trainjob: dict[str, Any]) -> tuple[str, str]:
    """(kind, name) of the runtime a TrainJob references (kind defaults to ClusterTrainingRuntime)."""
    spec = trainjob.get("spec") if isinstance(trainjob.get("spec"), dict) else {}
    ref = spec.get("runtimeRef") if isinstance(spec.get("runtimeRef"), dict) else {}
    return str(ref.get("kind") or "ClusterTrainingRuntime"), str(ref.get("name") or "")


def _container(pod_spec: Any, name: str) -> dict[str, Any] | None:
    if not isinstance(pod_spec, dict) or not isinstance(pod_spec.get("containers"), list):
        return None
    return next((c for c in pod_spec["containers"] if isinstance(c, dict) and c.get("name") == name), None)


def _upsert_env(container: dict[str, Any], env: Any) -> None:
    if not isinstance(env, list):
        return
    current = container.get("env") if isinstance(container.get("env"), list) else []
    container["env"] = strategic_merge(current, [e for e in env if isinstance(e, dict)], "env")


def trainjob_pods(trainjob: dict[str, Any], runtime: dict[str, Any], release: str) -> Iterator[tuple[str, Any]]:
    """(replicated job name, PodTemplateSpec) for each job of the JobSet the Trainer controller of
    `release` builds from `runtime` for `trainjob`. What matters to the decision is modelled:
    labels and annotations, containers' image, command, args, env and resources, volumes and
    security contexts. Not modelled: the env the ML policy plugins add (PET_*, OMPI_*: no NCCL
    variable), replica counts, initializer storage variables."""
    spec = trainjob.get("spec") if isinstance(trainjob.get("spec"), dict) else {}
    rt_spec = runtime.get("spec") if isinstance(runtime.get("spec"), dict) else {}
    template = rt_spec.get("template") if isinstance(rt_spec.get("template"), dict) else {}
    jobset_spec = copy.deepcopy(template.get("spec")) if isinstance(template.get("spec"), dict) else {}
    jobs = [j for j in jobset_spec.get("replicatedJobs") or () if isinstance(j, dict)]
    overrides = spec.get(OVERRIDES[release])
    for override in overrides if isinstance(overrides, list) else ():
        if not isinstance(override, dict):
            continue
        if release == "v2.0":
            targets = {t.get("name") for t in override.get("targetJobs") or () if isinstance(t, dict)}
            patch = {k: v for k, v in override.items() if k != "targetJobs"}
            for job in jobs:
                if job.get("name") in targets:
                    pod = job.setdefault("template", {}).setdefault("spec", {}).setdefault("template", {})
                    pod["spec"] = strategic_merge(pod.get("spec"), patch)
        elif release == "v2.1":
            targets = {t.get("name") for t in override.get("targetJobs") or () if isinstance(t, dict)}
            meta = override.get("metadata") if isinstance(override.get("metadata"), dict) else {}
            patch = {"metadata": {k: meta[k] for k in ("labels", "annotations") if k in meta}}
            if isinstance(override.get("spec"), dict):
                patch["spec"] = override["spec"]
            for job in jobs:
                if job.get("name") in targets:
                    job_spec = job.setdefault("template", {}).setdefault("spec", {})
                    job_spec["template"] = strategic_merge(job_spec.get("template"), patch)
        else:
            rt_patch = (
                override.get("trainingRuntimeSpec") if isinstance(override.get("trainingRuntimeSpec"), dict) else {}
            )
            js_patch = rt_patch.get("template") if isinstance(rt_patch.get("template"), dict) else {}
            js_spec = js_patch.get("spec") if isinstance(js_patch.get("spec"), dict) else {}
            for rj in js_spec.get("replicatedJobs") or ():
                if not isinstance(rj, dict) or not isinstance(rj.get("template"), dict):
                    continue
                for job in jobs:
                    if job.get("name") == rj.get("name"):
                        job["template"] = strategic_merge(job.get("template"), rj["template"])
    trainer = spec.get("trainer") if isinstance(spec.get("trainer"), dict) else {}
    ml = rt_spec.get("mlPolicy") if isinstance(rt_spec.get("mlPolicy"), dict) else {}
    mpi = ml.get("mpi") if isinstance(ml.get("mpi"), dict) else {}
    for job in jobs:
        job_template = job.get("template") if isinstance(job.get("template"), dict) else {}
        job_labels = (
            (job_template.get("metadata") or {}).get("labels")
            if isinstance(job_template.get("metadata"), dict)
            else None
        )
        is_trainer = isinstance(job_labels, dict) and job_labels.get(ANCESTOR_LABEL) == "trainer"
        pod = (job_template.get("spec") or {}).get("template") if isinstance(job_template.get("spec"), dict) else None
        node = _container(pod.get("spec") if isinstance(pod, dict) else None, NODE)
        # from v2.1 an MPI runtime that runs its launcher as a node gives the `node` job the trainer's
        # resources and env even without the trainer label (builder.go Trainer, trainingruntime.go)
        launcher_as_node = release != "v2.0" and mpi.get("runLauncherAsNode") is True and job.get("name") == NODE
        if node is not None and (is_trainer or launcher_as_node):
            if is_trainer:
                for key in ("image", "command", "args"):
                    if trainer.get(key) is not None:
                        node[key] = copy.deepcopy(trainer[key])
            resources = trainer.get("resourcesPerNode")
            if isinstance(resources, dict) and (
                resources.get("limits") is not None or resources.get("requests") is not None
            ):
                if release == "v2.3":
                    node["resources"] = strategic_merge(node.get("resources"), resources)
                else:
                    node["resources"] = {
                        k: copy.deepcopy(resources[k]) for k in ("limits", "requests") if resources.get(k) is not None
                    }
            _upsert_env(node, trainer.get("env"))
        yield str(job.get("name") or ""), pod
