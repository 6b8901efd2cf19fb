"""Where each workload kind keeps its pod templates (what `webhook.kinds.verdict` checks at apply
time).

When the webhook denies a pod that a controller creates, the person who ran `kubectl apply` sees
nothing: the controller retries in the background and the job hangs with a FailedCreate event.
So `/validate` (and `rdma-webhook review`) run the very same decision on every labelled pod
template of a Job, PyTorchJob, MPIJob, JobSet, LeaderWorkerSet, RayCluster, TrainJob, ... and
answer at submit time: the reasons its pods would be denied (a deny by default, warnings where
the policy says `workloadValidation: Warn`), else one short warning listing what will be injected.

`TEMPLATES` is the whole knowledge of kinds: one entry per kind, one source per pod template.
A source is a path to a PodTemplateSpec; in a path, `*` walks every value of a map (the key
names the template, e.g. Worker) and `[]` every item of a list (its `name`, else `groupName`,
names it). Templates inside templates are sources too, one general mechanism each:

- `Nested(path, group, kind)`: the value is an object of another kind (Volcano CronJob's
  jobTemplate is a Volcano Job; RayJob's rayClusterSpec is a RayCluster's spec), whose own
  entry applies, its paths under this one;
- `Embedded(path)`: the value is a whole Kubernetes object, or its YAML text (AppWrapper
  components, Argo resource steps), checked by its own apiVersion and kind;
- `Converted(path, build)`: the value is not a PodTemplateSpec but a controller builds pods
  from it (Argo steps, RoleBasedGroup roles with leader/worker patches);
- `TrainJobPods()`: a Kubeflow TrainJob's pods come from the runtime it references, with the
  TrainJob's overrides applied as the Trainer release in use applies them (`webhook.kinds.trainer`).

Adding a kind is adding an entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import re

import yaml

from webhook.kinds.merge import strategic_merge
from webhook.kinds.trainer import OVERRIDES, TRAINER_GROUP, Runtimes, runtime_ref, trainer_release, trainjob_pods


@dataclass(frozen=True)
class Nested:
    """The value at `path` is an object of (group, kind), or that object's spec when `spec`."""

    path: str
    group: str
    kind: str
    spec: bool = False


@dataclass(frozen=True)
class Embedded:
    """The value at `path` is a whole Kubernetes object (a mapping or its YAML text). With
    `pod_sets`, for an object of a kind this table does not know, the sibling field of that name
    lists where its pod templates are (AppWrapper's podSets[].path, relative to the component)."""

    path: str
    pod_sets: str = ""


@dataclass(frozen=True)
class Converted:
    """The value at `path` becomes pod templates through `build(value, whole object)`, which
    yields (path suffix, PodTemplateSpec)."""

    path: str
    build: Callable[[Any, dict[str, Any]], Iterator[tuple[str, Any]]]


@dataclass(frozen=True)
class TrainJobPods:
    """A TrainJob: the pods of the runtime it references, with its overrides applied."""


Source = str | Nested | Embedded | Converted | TrainJobPods


# -- walking the table ----------------------------------------------------------------------------


@dataclass
class Expansion:
    """What `expand` found in one object: its pod templates, the references it could not
    resolve (a TrainJob's runtime) and notes for people."""

    templates: list[tuple[str, Any]] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _argo_template(step: Any, workflow: dict[str, Any], wf_spec: Any) -> Iterator[tuple[str, Any]]:
    """The pod Argo makes for one template of a Workflow: its container (renamed `main`, as the
    executor does) or script, its containerSet, sidecars and init containers, with the
    workflow's podMetadata, volumes and security context under the template's own."""
    if not isinstance(step, dict):
        return
    main: list[Any] = []
    if isinstance(step.get("container"), dict):
        main = [{**step["container"], "name": "main"}]
    elif isinstance(step.get("script"), dict):
        script = dict(step["script"])
        source = script.pop("source", None)
        if isinstance(source, str):  # the executor writes the source to a file the command runs:
            # for a shell or Python that is `command -c source` as the command reader reads it
            command = script.get("command") if isinstance(script.get("command"), list) else []
            # the interpreter is the last word that is no option: `[bash, -e]`, `[python3, -u]`,
            # `[/usr/bin/env, python3]` (the executor runs `command args file`)
            words = [str(w) for w in command if not str(w).startswith("-")]
            interpreter = words[-1].rsplit("/", 1)[-1] if words else ""
            if interpreter in ("sh", "bash", "dash", "zsh", "ash") or interpreter.startswith("python"):
                script["args"] = ["-c", source]
            else:
                script["args"] = (
                    [*(script.get("args") or []), source] if isinstance(script.get("args"), list) else [source]
                )
        main = [{**script, "name": "main"}]
    elif isinstance(step.get("containerSet"), dict) and isinstance(step["containerSet"].get("containers"), list):
        main = list(step["containerSet"]["containers"])
    if not main:
        return
    spec_all = wf_spec if isinstance(wf_spec, dict) else {}
    meta = strategic_merge(spec_all.get("podMetadata") or {}, step.get("metadata") or {})
    pod_spec: dict[str, Any] = {"containers": main + [s for s in step.get("sidecars") or () if isinstance(s, dict)]}
    if isinstance(step.get("initContainers"), list):
        pod_spec["initContainers"] = step["initContainers"]
    volumes = [*(spec_all.get("volumes") or []), *(step.get("volumes") or [])]
    if volumes:
        pod_spec["volumes"] = volumes
    for key in ("securityContext", "nodeSelector", "tolerations", "hostNetwork"):
        value = step.get(key, spec_all.get(key))
        if value is not None:
            pod_spec[key] = value
    yield "", {"metadata": meta, "spec": pod_spec}


def _argo(path: str) -> Converted:
    def build(templates: Any, obj: dict[str, Any]) -> Iterator[tuple[str, Any]]:
        wf_spec = _get(obj, path.rsplit(".", 1)[0].split("."))
        for step in templates if isinstance(templates, list) else ():
            name = step.get("name") if isinstance(step, dict) else None
            for suffix, pod in _argo_template(step, obj, wf_spec):
                yield f"[{name}]{suffix}", pod

    return Converted(path, build)


def _rbg_role(role: Any, obj: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """A RoleBasedGroup role: its template; for a LeaderWorkerSet role, the leader and worker
    templates its patches make of it (strategic merge, as the RBG controller applies them)."""
    if not isinstance(role, dict):
        return
    base = role.get("template")
    lws = role.get("leaderWorkerSet") if isinstance(role.get("leaderWorkerSet"), dict) else None
    if lws is None or not (lws.get("patchLeaderTemplate") or lws.get("patchWorkerTemplate")):
        if base is not None:
            yield ".template", base
        return
    for which in ("patchLeaderTemplate", "patchWorkerTemplate"):
        yield f".leaderWorkerSet.{which}", strategic_merge(base or {}, lws.get(which) or {})


_REPLICAS = "spec.{}ReplicaSpecs.*.template"

# (API group, kind) -> where its pod templates are.
TEMPLATES: dict[tuple[str, str], tuple[Source, ...]] = {
    ("batch", "Job"): ("spec.template",),
    ("batch", "CronJob"): ("spec.jobTemplate.spec.template",),
    ("apps", "Deployment"): ("spec.template",),
    ("apps", "StatefulSet"): ("spec.template",),
    ("apps", "ReplicaSet"): ("spec.template",),
    ("apps", "DaemonSet"): ("spec.template",),
    ("jobset.x-k8s.io", "JobSet"): ("spec.replicatedJobs[].template.spec.template",),
    ("kubeflow.org", "PyTorchJob"): (_REPLICAS.format("pytorch"),),
    ("kubeflow.org", "MPIJob"): (_REPLICAS.format("mpi"),),  # v1 and v2beta1 alike
    ("kubeflow.org", "TFJob"): (_REPLICAS.format("tf"),),
    ("kubeflow.org", "PaddleJob"): (_REPLICAS.format("paddle"),),
    ("kubeflow.org", "XGBoostJob"): (_REPLICAS.format("xgb"),),
    ("kubeflow.org", "JAXJob"): (_REPLICAS.format("jax"),),
    (TRAINER_GROUP, "TrainJob"): (TrainJobPods(),),
    (TRAINER_GROUP, "TrainingRuntime"): ("spec.template.spec.replicatedJobs[].template.spec.template",),
    (TRAINER_GROUP, "ClusterTrainingRuntime"): ("spec.template.spec.replicatedJobs[].template.spec.template",),
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): (
        "spec.leaderWorkerTemplate.leaderTemplate",
        "spec.leaderWorkerTemplate.workerTemplate",
    ),
    ("batch.volcano.sh", "Job"): ("spec.tasks[].template",),
    ("batch.volcano.sh", "CronJob"): (Nested("spec.jobTemplate", "batch.volcano.sh", "Job"),),
    ("ray.io", "RayCluster"): ("spec.headGroupSpec.template", "spec.workerGroupSpecs[].template"),
    ("ray.io", "RayJob"): (
        Nested("spec.rayClusterSpec", "ray.io", "RayCluster", spec=True),
        "spec.submitterPodTemplate",
    ),
    ("ray.io", "RayService"): (Nested("spec.rayClusterConfig", "ray.io", "RayCluster", spec=True),),
    ("workload.codeflare.dev", "AppWrapper"): (Embedded("spec.components[].template", pod_sets="podSets"),),
    ("workloads.x-k8s.io", "RoleBasedGroup"): (Converted("spec.roles[]", _rbg_role),),
    ("argoproj.io", "Workflow"): (_argo("spec.templates"), Embedded("spec.templates[].resource.manifest")),
    ("argoproj.io", "WorkflowTemplate"): (_argo("spec.templates"), Embedded("spec.templates[].resource.manifest")),
    ("argoproj.io", "ClusterWorkflowTemplate"): (
        _argo("spec.templates"),
        Embedded("spec.templates[].resource.manifest"),
    ),
    ("argoproj.io", "CronWorkflow"): (
        _argo("spec.workflowSpec.templates"),
        Embedded("spec.workflowSpec.templates[].resource.manifest"),
    ),
}

# Kinds without a namespace: their templates are checked against any opted-in namespace.
CLUSTER_SCOPED = {(TRAINER_GROUP, "ClusterTrainingRuntime"), ("argoproj.io", "ClusterWorkflowTemplate")}

# Kinds that hold no pod template, the other half of the table: `rdma-webhook review` lists them as
# "not checked" and they never change its exit status (kustomize and Helm output always carries
# them next to the training job); a kind in neither is unknown (refused by `review --strict`).
# (a table: one line a group of kinds, not one line a kind, hence fmt: off)
# fmt: off
COMPANION_KINDS = frozenset({
    # core and built-in APIs
    "Namespace", "Service", "Endpoints", "EndpointSlice", "ConfigMap", "Secret", "ServiceAccount",
    "PersistentVolume", "PersistentVolumeClaim", "StorageClass", "VolumeAttachment", "CSIDriver", "LimitRange",
    "ResourceQuota", "PriorityClass", "RuntimeClass", "Ingress", "IngressClass", "NetworkPolicy",
    "PodDisruptionBudget", "HorizontalPodAutoscaler", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding",
    "CustomResourceDefinition", "APIService", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "Lease", "CertificateSigningRequest",
    "FlowSchema", "PriorityLevelConfiguration", "Event",
    # Dynamic Resource Allocation
    "ResourceClaim", "ResourceClaimTemplate", "DeviceClass", "ResourceSlice",
    # Kueue
    "ResourceFlavor", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass", "AdmissionCheck", "Topology",
    "Cohort", "ProvisioningRequestConfig", "MultiKueueConfig", "MultiKueueCluster",
    # Volcano, Multus, Gateway API, cert-manager, Prometheus operator, Kustomize, KEDA, Argo
    "Queue", "PodGroup", "NetworkAttachmentDefinition", "Gateway", "GatewayClass", "HTTPRoute", "GRPCRoute",
    "Certificate", "Issuer", "ClusterIssuer", "ServiceMonitor", "PodMonitor", "PrometheusRule", "Kustomization",
    "ScaledObject", "TriggerAuthentication", "WorkflowEventBinding", "EventSource", "Sensor",
    # rdma-webhook's own policy
    "RdmaPolicy",
})
# fmt: on


def group_of(api_version: Any) -> str:
    return api_version.rpartition("/")[0] if isinstance(api_version, str) and "/" in api_version else ""


def is_workload(group: str, kind: str) -> bool:
    return (group, kind) in TEMPLATES


def _get(node: Any, parts: list[str]) -> Any:
    for part in parts:
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def expand(
    obj: Any,
    group: str,
    kind: str,
    runtimes: Runtimes | None = None,
    namespace: str = "",
    release: str | None = None,
    _depth: int = 0,
) -> Expansion:
    """Every pod template of a workload object, through nested and embedded objects."""
    out = Expansion()
    if not isinstance(obj, dict) or _depth > 8:
        return out
    for source in TEMPLATES.get((group, kind), ()):
        if isinstance(source, str):
            out.templates.extend(_walk(obj, source.split("."), ""))
        elif isinstance(source, Nested):
            for path, value in _walk(obj, source.path.split("."), ""):
                inner = expand(
                    {"spec": value} if source.spec else value,
                    source.group,
                    source.kind,
                    runtimes,
                    namespace,
                    release,
                    _depth + 1,
                )
                _merge(out, inner, path, drop_spec=source.spec)
        elif isinstance(source, Embedded):
            parent, _, field_name = source.path.rpartition(".")
            for item_path, item in _walk(obj, parent.split("."), ""):
                value = item.get(field_name) if isinstance(item, dict) else None
                if value is None:
                    continue
                path = f"{item_path}.{field_name}"
                if not _embedded(out, path, value, runtimes, namespace, release, _depth) and source.pod_sets:
                    for pod_set in item.get(source.pod_sets) or () if isinstance(item, dict) else ():
                        where = pod_set.get("path") if isinstance(pod_set, dict) else None
                        if isinstance(where, str) and where:
                            template = _at(item, where)
                            if template is not None:
                                out.templates.append((f"{item_path}.{where}", template))
        elif isinstance(source, Converted):
            for path, value in (
                _walk(obj, source.path.split("."), "")
                if source.path.endswith("[]")
                else [(source.path, _get(obj, source.path.split(".")))]
            ):
                for suffix, template in source.build(value, obj):
                    out.templates.append((f"{path}{suffix}", template))
        elif isinstance(source, TrainJobPods):
            _trainjob(out, obj, runtimes, namespace, release)
    return out


def _merge(out: Expansion, inner: Expansion, prefix: str, drop_spec: bool) -> None:
    for path, template in inner.templates:
        if drop_spec and path.startswith("spec."):
            path = path[len("spec.") :]
        out.templates.append((f"{prefix}.{path}", template))
    out.unresolved.extend(inner.unresolved)
    out.notes.extend(inner.notes)


# An embedded manifest (an Argo resource step's text) is parsed on the admission path: bounded,
# and with libyaml's parser when PyYAML has it (pure-Python YAML parses about 1 MB/s).
MAX_EMBEDDED_YAML = 256 * 1024
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_PLACEHOLDER = re.compile(r"(?<!['\"])\{\{[^{}\n]*\}\}")


def _embedded(
    out: Expansion, path: str, value: Any, runtimes: Runtimes | None, namespace: str, release: str | None, depth: int
) -> bool:
    """Expand an embedded object; False when its kind is not one this table knows."""
    if isinstance(value, str):
        if len(value) > MAX_EMBEDDED_YAML:
            out.notes.append(f"{path}: over {MAX_EMBEDDED_YAML // 1024} KiB of text, not checked")
            return True
        try:
            value = yaml.load(value, Loader=_YAML_LOADER)  # noqa: S506 - a safe loader
        except yaml.YAMLError:
            # `{{inputs.parameters.x}}` unquoted (Argo fills it in when the step runs) is no
            # YAML: read with each placeholder as the string it stands for, so the fields that
            # hold one can be named
            quoted = _PLACEHOLDER.sub(lambda m: "'" + m.group(0).replace("'", "''") + "'", value)
            try:
                value = yaml.load(quoted, Loader=_YAML_LOADER) if quoted != value else None  # noqa: S506
            except yaml.YAMLError:
                value = None
            if value is None:
                out.notes.append(f"{path}: not valid YAML, not checked")
                return True
    if not isinstance(value, dict):
        return False
    kind = str(value.get("kind") or "")
    group = group_of(value.get("apiVersion"))
    if kind == "Pod" and group == "":
        out.templates.append((path, {"metadata": value.get("metadata"), "spec": value.get("spec")}))
    elif is_workload(group, kind):
        _merge(out, expand(value, group, kind, runtimes, namespace, release, depth + 1), path, drop_spec=False)
    else:
        return False
    return True


def _at(node: Any, path: str) -> Any:
    """The value at a dotted path with optional list indexes (`a.b[0].c`), None when absent."""
    for part in path.split("."):
        name, _, index = part.partition("[")
        node = node.get(name) if isinstance(node, dict) and name else (node if not name else None)
        while index:
            number, _, rest = index.partition("]")
            if not number.isdigit() or not isinstance(node, list) or int(number) >= len(node):
                return None
            node = node[int(number)]
            index = rest[1:] if rest.startswith("[") else ""
    return node


def _trainjob(
    out: Expansion, obj: dict[str, Any], runtimes: Runtimes | None, namespace: str, release: str | None
) -> None:
    rt_kind, rt_name = runtime_ref(obj)
    where = f"runtime {rt_kind} {rt_name!r}"
    if rt_kind not in ("TrainingRuntime", "ClusterTrainingRuntime") or not rt_name:
        out.unresolved.append(f"spec.runtimeRef names {where}, not a TrainingRuntime or ClusterTrainingRuntime")
        return
    runtime = None
    if runtimes is not None:
        runtime = (
            runtimes.training_runtime(namespace, rt_name)
            if rt_kind == "TrainingRuntime"
            else runtimes.cluster_training_runtime(rt_name)
        )
    if runtime is None:
        scope = f" in namespace {namespace!r}" if rt_kind == "TrainingRuntime" else ""
        known = "is not known" if runtimes is not None else "cannot be looked up here"
        out.unresolved.append(f"{where}{scope} {known}, so the pods of this TrainJob cannot be checked")
        return
    release = release or trainer_release()
    for other, since in (("podSpecOverrides", "v2.0"), ("podTemplateOverrides", "v2.1"), ("runtimePatches", "v2.2")):
        if other != OVERRIDES[release] and obj.get("spec", {}).get(other):
            out.notes.append(
                f"spec.{other} is not read by Trainer {release} (the release this check models), so it is ignored"
            )
    for job, pod in trainjob_pods(obj, runtime, release):
        out.templates.append((f"{rt_kind}/{rt_name} replicatedJobs[{job}]", pod))


def templates(obj: dict[str, Any], group: str, kind: str) -> Iterator[tuple[str, Any]]:
    """(path as people read it, pod template) for every template of a workload object."""
    yield from expand(obj, group, kind).templates


def _walk(node: Any, parts: list[str], path: str) -> Iterator[tuple[str, Any]]:
    if not parts:
        yield path, node
        return
    head, rest = parts[0], parts[1:]
    if head == "*":
        if isinstance(node, dict):
            for key, value in node.items():
                yield from _walk(value, rest, f"{path}.{key}")
        return
    if head.endswith("[]"):
        items = node.get(head[:-2]) if isinstance(node, dict) else None
        if isinstance(items, list):
            for i, item in enumerate(items):
                name = (item.get("name") or item.get("groupName")) if isinstance(item, dict) else None
                label = name if isinstance(name, str) and name else str(i)
                yield from _walk(item, rest, f"{path}.{head[:-2]}[{label}]".lstrip("."))
        return
    child = node.get(head) if isinstance(node, dict) else None
    if child is not None:
        yield from _walk(child, rest, f"{path}.{head}".lstrip("."))


def pod_from_template(template: Any, namespace: str, owner: str) -> Any:
    """The pod a controller would create from a template (as far as the decision cares)."""
    if not isinstance(template, dict):
        return template
    meta = (
        dict(template.get("metadata") or {}) if isinstance(template.get("metadata"), dict) else template.get("metadata")
    )
    if isinstance(meta, dict):
        meta.setdefault("namespace", namespace)
        if not meta.get("name"):
            meta.setdefault("generateName", f"{owner}-")
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template.get("spec")}
