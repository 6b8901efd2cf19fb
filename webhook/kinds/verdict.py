"""What a workload's pods would meet: the decision run on the pod each labelled template would
make, gathered into one verdict for `/validate` and `rdma-webhook review` (denials, warnings,
what will be injected)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from webhook.core import keys
from webhook.core.decision import DENIED, MUTATED, Attachments, Decision, Namespace, decide, shape_problem
from webhook.core.subject import Finding
from webhook.core.targets import find_checked, find_targets
from webhook.core.model import Policy, PolicySet
from webhook.core.scripts import ConfigMaps
from webhook.kinds.trainer import Runtimes
from webhook.kinds.workloads import CLUSTER_SCOPED, Expansion, expand, pod_from_template


@dataclass
class TemplateResult:
    path: str
    pod: Any  # the pod built from the template, as the decision saw it
    decision: Decision
    deny: bool  # its findings deny the workload (policy workloadValidation: Deny)
    why_not: str = ""  # why a denied template does not deny the workload


@dataclass
class WorkloadVerdict:
    kind: str
    name: str
    results: list[TemplateResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # warnings about the workload as a whole
    unresolved: list[str] = field(default_factory=list)  # references that could not be followed
    skipped: list[str] = field(default_factory=list)  # labelled templates whose pods are left alone
    skipped_why: str = ""  # why: their namespace has not opted in
    # a cluster-scoped object judged under each policy an opted-in namespace could use: no one
    # policy is its policy (the headline names none)
    per_policy: bool = False

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
        """The policy of the results shown (of a cluster-scoped object: the one they were judged under)."""
        names = sorted({r.decision.policy for r in self.results if r.decision.policy})
        return ",".join(names) or None

    @property
    def headline_policy(self) -> str | None:
        """The policy the workload is under, as its headline names it: none for a cluster-scoped
        object, whose policy the namespace of the workload that uses it decides."""
        return None if self.per_policy else self.policy

    def denials(self) -> list[Finding]:
        return [
            Finding(
                f.rule,
                None,
                f"{r.path}, container {f.container!r}: {f.message}" if f.container else f"{r.path}: {f.message}",
            )
            for r in self.results
            if r.deny
            for f in r.decision.denials
        ]

    def message(self) -> str:
        parts = []
        for r in self.results:
            if r.deny:
                for f in r.decision.denials:
                    where = f"{r.path}, container {f.container!r}" if f.container else r.path
                    parts.append(f"{where}: {f.message} [{f.rule}]")
        return f"rdma-webhook: pods of {self.kind} {self.name} would be denied or fall back to TCP: " + "; ".join(parts)

    def skip(self, path: str, reason: str) -> None:
        """A labelled template whose pods are skipped: kept when its namespace has not opted in."""
        if keys.NS_INJECTION in reason:
            self.skipped.append(path)
            self.skipped_why = reason

    def skipped_reason(self) -> str:
        """Why labelled templates' pods are left alone (their namespace has not opted in)."""
        paths = ", ".join(self.skipped)
        verb = "carries" if len(self.skipped) == 1 else "carry"
        return f"{paths} {verb} {keys.POD_INJECT}=true, but {self.skipped_why}: their pods get no RDMA"

    def warnings(self) -> list[str]:
        """One short warning summing up what the pods will get, then the workload's own, then
        each template's."""
        out = []
        injected = [
            f"{r.path} ({r.decision.policy}): " + ", ".join(r.decision.notes)
            for r in self.results
            if r.decision.outcome == MUTATED
        ]
        if injected:
            out.append("rdma-webhook will inject " + "; ".join(injected))
        out.extend(self.unresolved)
        if self.results and self.skipped:
            out.append(self.skipped_reason())
        out.extend(self.notes)
        for r in self.results:
            d = r.decision
            if d.outcome == DENIED and not r.deny:
                out.extend(
                    f"{r.path}, container {f.container!r}: {f.message} [{f.rule}]"
                    if f.container
                    else f"{r.path}: {f.message} [{f.rule}]"
                    for f in d.denials
                )
            out.extend(f"{r.path}: {w}" for w in d.warnings)
        return out


# Denials that depend on the namespace, which a cluster-scoped object (a ClusterTrainingRuntime)
# does not have: without any policy loaded its templates are checked against an opted-in
# namespace without labels, and these become warnings (the TrainJob that uses the runtime is
# checked in its own namespace).
_NAMESPACE_RULES = ("no-policy", "namespace-unknown")
_PLACEHOLDER = re.compile(r"\{\{.*?\}\}|\$\{[^}]*\}")
# The launcher templates of MPI workloads: MPIJob's `Launcher` replica (v1, v2beta1) and the
# replicated job `launcher` of a Trainer MPI runtime or a JobSet. The pods made from them carry
# the operator's launcher label (`keys.MPI_JOB_ROLE`), which the decision reads.
_LAUNCHER_PATH = re.compile(r"\.Launcher\.template$|replicatedJobs\[launcher\]")
ANY_NAMESPACE = Namespace("(any namespace)", {keys.NS_INJECTION: keys.NS_INJECTION_ENABLED})


def example_namespace(policy: Policy) -> Namespace | None:
    """An opted-in namespace that uses `policy`: labelled with its name and with labels its
    namespaceSelector asks for; None when no labels satisfy the selector."""
    labels: dict[str, str] = {keys.NS_INJECTION: keys.NS_INJECTION_ENABLED, keys.NS_POLICY: policy.name}
    sel = policy.selector_spec if isinstance(policy.selector_spec, dict) else {}
    for key, value in (sel.get("matchLabels") or {}).items():
        labels[str(key)] = str(value)
    for expr in sel.get("matchExpressions") or ():
        if not isinstance(expr, dict):
            continue
        key, op, values = str(expr.get("key")), expr.get("operator"), [str(v) for v in expr.get("values") or ()]
        if op == "In" and values and labels.get(key) not in values:
            labels[key] = values[0]
        elif op == "Exists":
            labels.setdefault(key, "true")
        elif op == "DoesNotExist" or (op == "NotIn" and labels.get(key) in values):
            labels.pop(key, None)
    if labels.get(keys.NS_INJECTION) != keys.NS_INJECTION_ENABLED:
        return None  # the selector asks for namespaces that have not opted in: none uses the policy
    ns = Namespace(f"(a namespace using policy {policy.name})", labels)
    return ns if policy.allows_namespace(labels) else None


def _per_policy(
    templates: list[tuple[str, Any]], policies: PolicySet
) -> list[tuple[str, dict[str, tuple[Any, Decision]]]]:
    """A cluster-scoped workload's labelled templates, (path, pod maker), judged together under
    each policy that could apply to an opted-in namespace: (policy name, {path: (pod,
    decision)}), skipped templates and policies under which all are skipped left out. The
    namespace is one the policy's selector admits; its NetworkAttachmentDefinitions are unknown
    (the policy's resources are used)."""
    out = []
    for policy in sorted(policies.by_name.values(), key=lambda p: p.name):
        ns = example_namespace(policy)
        if ns is None:
            continue
        judged: dict[str, tuple[Any, Decision]] = {}
        for path, pod_of in templates:
            pod = pod_of(ns.name)
            decision = decide(pod, ns, policies, None, "CREATE")
            if decision.outcome != "skipped":
                judged[path] = (pod, decision)
        if judged:
            out.append((policy.name, judged))
    return out


def _denied(judged: dict[str, tuple[Any, Decision]]) -> bool:
    return any(d.outcome == DENIED for _, d in judged.values())


def _cluster_scoped_results(
    judged: list[tuple[str, dict[str, tuple[Any, Decision]]]], policies: PolicySet, verdict: WorkloadVerdict
) -> dict[str, tuple[Any, Decision, bool, str]]:
    """{path: (pod, decision, deny, why not)} of a cluster-scoped workload from its per-policy
    decisions. All its pods run in one namespace, so under one policy: the workload is allowed
    when some policy admits every template's pods (a warning names each policy under which some
    would be denied), denied only when every policy denies one of them. Judged template by
    template, a launcher fit for one fabric (`-x NCCL_IB_HCA=mlx5`) and nodes fit for another
    (`aliyun/erdma`) would each find a policy, and the job would be allowed to fall back."""
    verdict.per_policy = True  # the namespace of the workload that uses it decides the policy
    ok = [j for j in judged if not _denied(j[1])]
    denied = [j for j in judged if _denied(j[1])]
    if ok:
        ok.sort(key=lambda j: not any(d.outcome == MUTATED for _, d in j[1].values()))
        for name, results in denied:
            for path, (_, d) in results.items():
                if d.outcome == DENIED:
                    reasons = "; ".join(f.text() for f in d.denials)
                    verdict.notes.append(
                        f"{path}: its pods would be denied in namespaces that use policy {name}: {reasons}"
                    )
        return {path: (pod, d, False, "") for path, (pod, d) in ok[0][1].items()}
    # the reasons shown are those of a policy the pods' devices fit, when there is one
    denied.sort(key=lambda j: any(f.rule == "fabric-mismatch" for _, d in j[1].values() for f in d.denials))
    name, results = denied[0]
    out = {}
    for path, (pod, decision) in results.items():
        if decision.outcome != DENIED:
            out[path] = (pod, decision, False, "")
            continue
        if len(denied) > 1 and all(path in r and r[path][1].outcome == DENIED for _, r in denied):
            verdict.notes.append(
                f"{path}: its pods would be denied under every policy that could apply "
                f"({', '.join(j[0] for j in denied)}); the reasons under policy {name} follow"
            )
        elif len(denied) > 1:  # another template's pods are what each other policy denies
            verdict.notes.append(
                f"{path}: its pods would be denied under policy {name}, and under every other policy "
                f"that could apply ({', '.join(j[0] for j in denied[1:])}) those of another template "
                f"would be: no one policy admits all the pods; the reasons under policy {name} follow"
            )
        policy = policies.get(decision.policy) if decision.policy else None
        deny = policy is None or policy.workload_validation == "Deny"
        out[path] = (pod, decision, deny, "" if deny else "workloadValidation Warn")
    return out


def _pod(template: Any, namespace: str, owner: str, launcher: bool) -> Any:
    """The pod a template makes; an MPI launcher template's pod carries the operator's launcher
    label, as the operator sets it on the pods it creates (the decision reads it)."""
    pod = pod_from_template(template, namespace, owner)
    if launcher and isinstance(pod, dict) and isinstance(pod.get("metadata"), dict):
        labels = pod["metadata"].get("labels")
        pod["metadata"]["labels"] = {
            **(labels if isinstance(labels, dict) else {}),
            keys.MPI_JOB_ROLE: keys.MPI_LAUNCHER,
        }
    return pod


def carries_opt_in(template: Any) -> bool:
    """A pod or pod template that carries the pod opt-in label: the ones a decision reads (the
    one test of it, for `/validate` and for what `rdma-webhook review` refuses as bad input)."""
    meta = template.get("metadata") if isinstance(template, dict) else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return isinstance(labels, dict) and labels.get(keys.POD_INJECT) == keys.POD_INJECT_TRUE


def _labelled(templates: list[tuple[str, Any]]) -> tuple[list[tuple[str, Any, bool]], list[str]]:
    """The templates that carry the pod opt-in label, (path, template, is an MPI launcher), and
    the paths of the MPI launcher templates that do not."""
    unlabelled_launchers: list[str] = []
    labelled: list[tuple[str, Any, bool]] = []
    for path, template in templates:
        launcher = _LAUNCHER_PATH.search(path) is not None
        if carries_opt_in(template):
            labelled.append((path, template, launcher))
        elif launcher:
            unlabelled_launchers.append(path)
    return labelled, unlabelled_launchers


def _enforced(decision: Decision, policies: PolicySet | None, template: Any) -> tuple[bool, str]:
    """Whether a template's decision refuses the workload, and why not where it does not: the
    policy's `workloadValidation: Warn`, or a template placeholder the controller fills in."""
    policy_of = policies.get(decision.policy) if policies and decision.policy else None
    deny = decision.outcome == DENIED and (policy_of is None or policy_of.workload_validation == "Deny")
    why_not = "workloadValidation Warn" if decision.outcome == DENIED and not deny else ""
    if deny and all(f.rule == "malformed-pod" for f in decision.denials) and _PLACEHOLDER.search(str(template)):
        # `nvidia.com/gpu: "{{inputs.parameters.gpus}}"`: the controller fills it in
        # when it makes the pod, which then meets the pod webhooks
        deny, why_not = False, "a template placeholder is filled in only when the pod is made"
    return deny, why_not


def check_workload(
    obj: Any,
    group: str,
    kind: str,
    namespace: Namespace | None,
    policies: PolicySet | None,
    attachments: Attachments | None,
    runtimes: Runtimes | None = None,
    release: str | None = None,
    config_maps: ConfigMaps | None = None,
    claims: Any = None,
    expanded: tuple[str, Expansion] | None = None,
) -> WorkloadVerdict:
    """What the labelled pod templates of a workload would meet, template by template.

    Each template's answer is the one its pods get when they are made (`decide`): a labelled MPI
    launcher that the pod webhook refuses refuses the workload, even when no template gets RDMA.

    A cluster-scoped object (a ClusterTrainingRuntime) has no namespace: its templates are
    judged under every loaded policy that an opted-in namespace could use.

    `expanded`: (namespace, templates) the caller (`review`) already expanded; used when that is the
    namespace they are judged in, since a TrainJob's runtime is looked up there."""
    meta = obj.get("metadata") if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict) else {}
    name = meta.get("name") or (f"{meta['generateName']}*" if meta.get("generateName") else "(unnamed)")
    verdict = WorkloadVerdict(kind, str(name))
    if not isinstance(obj, dict):
        return verdict
    cluster_scoped = (group, kind) in CLUSTER_SCOPED and namespace is None
    per_policy = cluster_scoped and bool(policies)
    if cluster_scoped and not per_policy:
        namespace = ANY_NAMESPACE
    ns_name = namespace.name if namespace else str(meta.get("namespace") or "")
    found = (
        expanded[1]
        if expanded is not None and expanded[0] == ns_name
        else expand(obj, group, kind, runtimes, ns_name, release)
    )
    verdict.notes.extend(found.notes)
    verdict.unresolved.extend(found.unresolved)
    targeted: list[bool] = []
    labelled, unlabelled_launchers = _labelled(found.templates)
    chosen: dict[str, tuple[Any, Decision, bool, str]] = {}
    if per_policy:
        assert policies is not None
        makers = [
            (path, lambda ns, t=template, mpi=launcher: _pod(t, ns, str(name), mpi))
            for path, template, launcher in labelled
        ]
        judged = _per_policy(makers, policies)
        chosen = _cluster_scoped_results(judged, policies, verdict) if judged else {}
    for path, template, launcher in labelled:
        if per_policy:
            if path not in chosen:
                continue
            pod, decision, deny, why_not = chosen[path]
        else:
            pod = _pod(template, ns_name, str(name), launcher)
            decision = decide(pod, namespace, policies, attachments, "CREATE", config_maps, claims)
            if decision.outcome == "skipped":
                verdict.skip(path, decision.reason)
                continue
            if (
                cluster_scoped
                and decision.outcome == DENIED
                and all(f.rule in _NAMESPACE_RULES for f in decision.denials)
            ):
                verdict.notes.extend(f"{path}: checked without a namespace: {f.message}" for f in decision.denials)
                continue
            deny, why_not = _enforced(decision, policies, template)
        policy = policies.get(decision.policy) if policies and decision.policy else None
        targeted.append(
            policy is not None
            and shape_problem(pod) is None
            and bool(find_targets(pod, policy) or find_checked(pod, []))
        )  # GPUs by resource, claim or runtime
        verdict.results.append(TemplateResult(path, pod, decision, deny, why_not))
    _finish(verdict, targeted, unlabelled_launchers)
    return verdict


def _finish(verdict: WorkloadVerdict, targeted: list[bool], unlabelled_launchers: list[str]) -> None:
    """What the templates say together: an unlabelled MPI launcher beside judged templates is
    noted. A launcher that no template of the workload gives RDMA to (a CPU job, workers with
    another vendor's GPUs) still denies the workload: its pod is judged at creation without
    sight of the workers, and refused there, so allowing the workload here would leave the job
    in FailedCreate (one answer at apply time and at create time)."""
    if verdict.results:
        verdict.notes.extend(
            f"{path}: the MPI launcher template does not carry {keys.POD_INJECT}=true, so the ranks it starts "
            f"(through ssh, from a fresh environment) get none of the policy's NCCL block; label it"
            for path in unlabelled_launchers
        )
    if not any(targeted):
        for r, has_target in zip(verdict.results, targeted):
            if r.decision.outcome == DENIED and not has_target and r.decision.policy is not None:
                verdict.notes.append(
                    f"{r.path}: no template of this workload gets RDMA, but its pods carry {keys.POD_INJECT}=true "
                    f"and are judged when they are made, without sight of the others: they would be refused as "
                    f"said; for a job without RDMA remove the label"
                )
