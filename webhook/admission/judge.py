"""The judge: one object (a pod, a workload, a `v1` List of them), its namespace, the policies and
the cluster lookups the decision needs in; the decision and, for a workload, the deny message out.

`/mutate` and `/validate` (webhook.admission.review) parse a request and ask the judge;
`rdma-webhook review` asks it directly, once per document, with the pod templates it has already
expanded, and builds an AdmissionReview answer only when it prints one. No envelope here, no I/O.
"""

from __future__ import annotations

from typing import Any, Callable

from webhook.core.claims import Claims
from webhook.core.decision import DENIED, MUTATED, Attachments, Decision, Namespace, check_final, decide
from webhook.core.model import PolicySet

# A workload's pod templates as `webhook.kinds.workloads.expand` found them, with the namespace
# they were expanded in (a TrainJob's runtime is looked up there): (namespace, Expansion).
Expanded = tuple[str, Any]
# What the judge answers: the decision, and the deny message that replaces the pod-worded one
# (a workload's names its templates), None to keep it.
Judged = tuple[Decision, str | None]


def judge_pod(
    pod: Any,
    namespace: Namespace | None,
    policies: PolicySet | None,
    attachments: Attachments | None,
    operation: str,
    config_maps: Any = None,
    claims: Claims | None = None,
    final: bool = False,
) -> Decision:
    """The decision on a pod: what `/mutate` does to it, or with `final` the final-state guard
    `/validate` runs on a pod the mutating webhooks have already seen."""
    if final:
        return check_final(pod, namespace, policies, attachments, operation, config_maps, claims)
    return decide(pod, namespace, policies, attachments, operation, config_maps, claims)


def judge_workload(
    obj: Any,
    group: str,
    kind: str,
    namespace: Namespace | None,
    policies: PolicySet | None,
    attachments: Attachments | None,
    runtimes: Any = None,
    config_maps: Any = None,
    claims: Claims | None = None,
    expanded: Expanded | None = None,
) -> Judged:
    """The decision on a workload, from what its labelled templates' pods would meet
    (webhook.kinds.verdict). A validating webhook never patches: a workload whose pods will be
    mutated is allowed as is, with the summary of what they will get among its warnings.
    `expanded`: its templates, when the caller has expanded them already."""
    from webhook.kinds.verdict import check_workload

    verdict = check_workload(
        obj,
        group,
        kind,
        namespace,
        policies,
        attachments,
        runtimes,
        config_maps=config_maps,
        claims=claims,
        expanded=expanded,
    )
    outcome, reason = (
        verdict.outcome,
        ""
        if verdict.results
        else (
            verdict.unresolved[0]
            if verdict.unresolved
            else verdict.skipped_reason()
            if verdict.skipped
            else "no template carries the pod opt-in label"
        ),
    )
    if outcome == MUTATED:
        outcome, reason = "unchanged", "pods will be mutated"
    decision = Decision(
        outcome,
        obj,
        verdict.headline_policy,
        verdict.denials(),
        verdict.warnings(),
        reason=reason,
        templates=verdict.results,
    )
    return decision, (verdict.message() if not verdict.allowed else None)


def judge(
    obj: Any,
    group: str,
    kind: str,
    namespace: Namespace | None,
    policies: PolicySet | None,
    attachments: Attachments | None,
    runtimes: Any = None,
    config_maps: Any = None,
    claims: Claims | None = None,
    final: bool = False,
    expanded: Expanded | None = None,
) -> Judged | None:
    """The decision on one object by its API group and kind: a pod as it is created (or, with
    `final`, as `/validate` sees it), a workload by its templates; None for a kind that holds
    no pods."""
    from webhook.kinds import workloads

    if group == "" and kind == "Pod":
        return judge_pod(obj, namespace, policies, attachments, "CREATE", config_maps, claims, final), None
    if not workloads.is_workload(group, kind):
        return None
    return judge_workload(obj, group, kind, namespace, policies, attachments, runtimes, config_maps, claims, expanded)


def judge_list(
    obj: Any,
    items: list[Any],
    default_namespace: str,
    namespace_of: Callable[[str], Namespace | None],
    policies: PolicySet | None,
    attachments: Attachments | None,
    runtimes: Any,
    config_maps: Any,
    claims: Claims | None = None,
) -> tuple[Decision | None, str | None]:
    """A `v1` List (what `kubectl get -o yaml` and `kubectl kustomize` print, sent by a caller,
    never by the API server): every workload and pod in it, judged with the ConfigMaps it holds
    (scripts run from ConfigMap volumes), one answer naming each object. A pod is judged as its
    CREATE would be: by /mutate's decision, as a workload's template is (a manifest's pod has not
    been mutated yet; a stored one is left as it is by the decision, which is idempotent).
    (None, None) when the list holds neither."""
    from webhook.core.subject import Finding
    from webhook.core.scripts import ConfigMapStore, is_config_map
    from webhook.kinds import workloads

    store = ConfigMapStore(config_maps)
    for item in items:
        if is_config_map(item):
            store.add(item, default_namespace or "default")
    denials: list[Finding] = []
    warnings: list[str] = []
    messages: list[str] = []
    results: list[Any] = []
    policies_used: list[str] = []
    checked = False
    for item in items:
        if not isinstance(item, dict):
            continue
        group, kind = workloads.group_of(item.get("apiVersion")), str(item.get("kind") or "")
        found_meta = item.get("metadata")
        meta: dict[str, Any] = found_meta if isinstance(found_meta, dict) else {}
        ns_name = str(meta.get("namespace") or default_namespace or "")
        judged = judge(
            item,
            group,
            kind,
            namespace_of(ns_name) if ns_name else None,
            policies,
            attachments,
            runtimes,
            store,
            claims,
        )
        if judged is None:
            continue
        decision, message = judged
        checked = True
        label = f"{kind} {meta.get('name') or meta.get('generateName') or '(unnamed)'}"
        for f in decision.denials:
            denials.append(Finding(f.rule, f.container, f"{label}: {f.message}"))
        for w in decision.warnings:
            warnings.append(f"{label}: {w}")
        if decision.outcome == DENIED:
            messages.append(f"{label}: " + "; ".join(f.text() for f in decision.denials))
        if decision.policy and decision.policy not in policies_used:
            policies_used.append(decision.policy)
        results.extend(decision.templates)
    if not checked:
        return None, None
    outcome = DENIED if messages else "unchanged"
    decision = Decision(
        outcome,
        obj,
        ",".join(policies_used) or None,
        denials,
        warnings,
        reason="" if messages else "every object of the list passes",
        templates=results,
    )
    return decision, ("rdma-webhook: " + "; ".join(messages)) if messages else None
