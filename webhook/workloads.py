"""Workloads checked at apply time: where each kind keeps its pod templates, and what their pods
would meet.

When the webhook denies a pod that a controller creates, the person who ran `kubectl apply` sees
nothing: the controller retries in the background and the job hangs with a FailedCreate event.
So `/validate` (and `rdma-webhook review`) run the very same decision on every labelled pod
template of a Job, PyTorchJob, MPIJob, JobSet, LeaderWorkerSet, ... and answer at submit time:
the reasons its pods would be denied (a deny by default, warnings where the policy says
`workloadValidation: Warn`), else one short warning listing what will be injected.

`TEMPLATES` is the whole knowledge of kinds: one line per kind, a path per pod template. In a
path, `*` walks every value of a map (the key names the template, e.g. Worker) and `[]` every
item of a list (its `name` names it). Adding a kind is adding a line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

from webhook import keys
from webhook.decision import DENIED, MUTATED, Attachments, Decision, Namespace, decide
from webhook.fallback import Finding
from webhook.policy import PolicySet

# (API group, kind) -> paths to the pod templates (PodTemplateSpec) inside the object.
TEMPLATES: dict[tuple[str, str], tuple[str, ...]] = {
    ("batch", "Job"): ("spec.template",),
    ("batch", "CronJob"): ("spec.jobTemplate.spec.template",),
    ("apps", "Deployment"): ("spec.template",),
    ("apps", "StatefulSet"): ("spec.template",),
    ("apps", "ReplicaSet"): ("spec.template",),
    ("apps", "DaemonSet"): ("spec.template",),
    ("jobset.x-k8s.io", "JobSet"): ("spec.replicatedJobs[].template.spec.template",),
    ("kubeflow.org", "PyTorchJob"): ("spec.pytorchReplicaSpecs.*.template",),
    ("kubeflow.org", "MPIJob"): ("spec.mpiReplicaSpecs.*.template",),  # v1 and v2beta1 alike
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): ("spec.leaderWorkerTemplate.leaderTemplate",
                                                       "spec.leaderWorkerTemplate.workerTemplate"),
    ("batch.volcano.sh", "Job"): ("spec.tasks[].template",),
}


def group_of(api_version: Any) -> str:
    return api_version.rpartition("/")[0] if isinstance(api_version, str) and "/" in api_version else ""


def is_workload(group: str, kind: str) -> bool:
    return (group, kind) in TEMPLATES


def templates(obj: dict[str, Any], group: str, kind: str) -> Iterator[tuple[str, Any]]:
    """(path as people read it, pod template) for every template of a workload object."""
    for pattern in TEMPLATES.get((group, kind), ()):
        yield from _walk(obj, pattern.split("."), "")


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
                name = item.get("name") if isinstance(item, dict) else None
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
    meta = dict(template.get("metadata") or {}) if isinstance(template.get("metadata"), dict) else template.get("metadata")
    if isinstance(meta, dict):
        meta.setdefault("namespace", namespace)
        if not meta.get("name"):
            meta.setdefault("generateName", f"{owner}-")
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template.get("spec")}


@dataclass
class TemplateResult:
    path: str
    pod: Any  # the pod built from the template, as the decision saw it
    decision: Decision
    deny: bool  # its findings deny the workload (policy workloadValidation: Deny)


@dataclass
class WorkloadVerdict:
    kind: str
    name: str
    results: list[TemplateResult] = field(default_factory=list)

    @property
    def allowed(self) -> bool:
        return not any(r.deny for r in self.results)

    @property
    def outcome(self) -> str:
        if not self.allowed:
            return DENIED
        if any(r.decision.outcome == MUTATED for r in self.results):
            return MUTATED
        return "unchanged" if self.results else "skipped"

    @property
    def policy(self) -> str | None:
        names = sorted({r.decision.policy for r in self.results if r.decision.policy})
        return ",".join(names) or None

    def denials(self) -> list[Finding]:
        return [Finding(f.rule, f"{r.path}: container {f.container!r}" if f.container else r.path, f.message)
                for r in self.results if r.deny for f in r.decision.denials]

    def message(self) -> str:
        parts = []
        for r in self.results:
            if r.deny:
                for f in r.decision.denials:
                    where = f"{r.path}, container {f.container!r}" if f.container else r.path
                    parts.append(f"{where}: {f.message} [{f.rule}]")
        return (f"rdma-webhook: pods of {self.kind} {self.name} would be denied or fall back to TCP: "
                + "; ".join(parts))

    def warnings(self) -> list[str]:
        """One short warning summing up what the pods will get, then each template's own."""
        out = []
        injected = [f"{r.path} ({r.decision.policy}): " + ", ".join(r.decision.notes)
                    for r in self.results if r.decision.outcome == MUTATED]
        if injected:
            out.append("rdma-webhook will inject " + "; ".join(injected))
        for r in self.results:
            d = r.decision
            if d.outcome == DENIED and not r.deny:
                out.extend(f"{r.path}: {f.text()}" for f in d.denials)
            out.extend(f"{r.path}: {w}" for w in d.warnings)
        return out


def check_workload(obj: Any, group: str, kind: str, namespace: Namespace | None, policies: PolicySet | None,
                   attachments: Attachments | None) -> WorkloadVerdict:
    """What the labelled pod templates of a workload would meet, template by template."""
    meta = obj.get("metadata") if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict) else {}
    name = meta.get("name") or (f"{meta['generateName']}*" if meta.get("generateName") else "(unnamed)")
    verdict = WorkloadVerdict(kind, str(name))
    if not isinstance(obj, dict):
        return verdict
    ns_name = namespace.name if namespace else str(meta.get("namespace") or "")
    for path, template in templates(obj, group, kind):
        labels = ((template.get("metadata") or {}).get("labels") or {}) if isinstance(template, dict) else {}
        if not isinstance(labels, dict) or labels.get(keys.POD_INJECT) != keys.POD_INJECT_TRUE:
            continue
        pod = pod_from_template(template, ns_name, str(name))
        decision = decide(pod, namespace, policies, attachments, "CREATE")
        if decision.outcome == "skipped":
            continue
        policy = policies.get(decision.policy) if policies and decision.policy else None
        deny = decision.outcome == DENIED and (policy is None or policy.workload_validation == "Deny")
        verdict.results.append(TemplateResult(path, pod, decision, deny))
    return verdict
