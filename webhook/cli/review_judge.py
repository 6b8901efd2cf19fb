"""`rdma-webhook review`, one document at a time: what it is (a pod, a workload, an AdmissionReview,
a kind that holds no pods), whether it is bad input where something would be checked, and the
judge's decision on it (webhook.admission.judge), called once with the templates already expanded.
The AdmissionReview answer (and its JSON patch) is built only for `--output review`."""

from __future__ import annotations

import json
from typing import Any

from webhook.cli.review_input import InputError
from webhook.cli.review_report import Report, fill, record_of


class Document:
    """One document to judge, as the server would see it: the object, its API group and kind, the
    namespace it is created in ("" for a cluster-scoped object) and, for an AdmissionReview in the
    input, its own request (None for a plain object, which is created)."""

    def __init__(self, obj: Any, group: Any, kind: Any, namespace: str, request: dict[str, Any] | None = None):
        self.obj, self.group, self.kind, self.namespace, self.request = obj, group, kind, namespace, request

    @property
    def is_pod(self) -> bool:
        return self.kind == "Pod"

    @property
    def creates(self) -> bool:
        return self.request is None or self.request.get("operation", "CREATE") == "CREATE"


def document(doc: Any, where: str, namespace: str | None) -> Document | None:
    """The document to judge: an AdmissionReview's request, or a Pod or a workload kind that
    carries pod templates (see webhook/kinds/workloads.py); None for a kind that holds no pods."""
    from webhook.kinds import workloads

    if not isinstance(doc, dict):
        raise InputError(f"{where}: expected a Kubernetes object or an AdmissionReview, found a {type(doc).__name__}")
    if doc.get("kind") == "AdmissionReview":
        req = doc.get("request")
        if not isinstance(req, dict) or not req.get("uid"):
            raise InputError(f"{where}: AdmissionReview without request.uid")
        kind = req.get("kind")
        kind_of = (kind or {}).get("kind", "Pod") if isinstance(kind, dict) else "Pod"
        group_of = (kind or {}).get("group", "") if isinstance(kind, dict) else ""
        return Document(req.get("object"), group_of, kind_of, str(req.get("namespace") or ""), req)
    kind = doc.get("kind")
    api_version = doc.get("apiVersion") if isinstance(doc.get("apiVersion"), str) else ""
    group = workloads.group_of(api_version)
    if kind != "Pod" and not workloads.is_workload(group, kind):
        return None
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    cluster_scoped = (group, kind) in workloads.CLUSTER_SCOPED
    # --namespace only fills in a namespace the object does not name (as `kubectl apply -n` would)
    return Document(doc, group, kind, "" if cluster_scoped else str(meta.get("namespace") or namespace or "default"))


def not_checked_reason(doc: dict[str, Any], where: str, input_namespaces: Any) -> tuple[str, bool]:
    """Why a document of a kind that holds no pods (or of no kind) is not checked, and whether
    `--strict` refuses it."""
    from webhook.cli import review_input, review_scope
    from webhook.core import keys
    from webhook.kinds.workloads import COMPANION_KINDS

    kind = doc.get("kind")
    known = isinstance(kind, str) and kind in COMPANION_KINDS
    # Neither apiVersion nor kind: another tool's YAML (a GitHub Actions workflow, a Compose file,
    # Helm values), which no cluster would take; --strict lets it be.
    foreign = "kind" not in doc and "apiVersion" not in doc
    why = (
        "holds no pods"
        if known
        else "unknown kind: pods it may create are not checked"
        if kind
        else "not a Kubernetes object (no apiVersion, no kind)"
        if foreign
        else "not a Kubernetes object (no kind)"
    )
    if not known and kind and keys.POD_INJECT in json.dumps(doc, default=str):
        why = (
            f"unknown kind that carries pod templates labelled {keys.POD_INJECT}: the pods it makes "
            f"are not checked here (review them as they are made, or use --strict to fail)"
        )
    if review_input.is_kustomization(doc):
        why = review_input.kustomize_message(where)
    elif review_scope.is_namespace(doc) and doc["metadata"]["name"] in input_namespaces:
        why = "holds no pods; its labels decide opt-in and policy for the documents in it"
    elif review_scope.is_policy_document(doc):
        why = "holds no pods; a policy in force for this review"
    return why, (not known and not foreign) or review_input.is_kustomization(doc)


def _catalogue_hint(obj: Any, namespace: Any, policies: Any, names: list[str]) -> list[str]:
    """When a pod's annotation or its namespace's label names a catalogue policy that is not in
    force: how to review against it."""
    from webhook.core import keys

    meta = obj.get("metadata") if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict) else {}
    asked = [
        (meta.get("annotations") or {}).get(keys.POD_POLICY) if isinstance(meta.get("annotations"), dict) else None,
        namespace.labels.get(keys.NS_POLICY) if namespace is not None else None,
    ]
    return [
        f"policy {name!r} is in the shipped catalogue but not in force for this review: add --policy {name}"
        for name in dict.fromkeys(a for a in asked if isinstance(a, str))
        if name in names and policies.get(name) is None
    ]


class Judging:
    """The documents of one run judged against what it decides with: the policies in force (and
    the catalogue's names, for hints), the namespaces, Trainer runtimes, ConfigMaps and DRA objects
    of the input and the cluster state."""

    def __init__(
        self, args: Any, report: Report, state: Any, runtimes: Any, config_maps: Any, policies: Any, names: list[str]
    ):
        self.args, self.report, self.state, self.runtimes = args, report, state, runtimes
        self.config_maps, self.policies, self.names = config_maps, policies, names

    def review(self, path: str, index: int, doc: Any, where: str, tree: str | None) -> None:
        """One document: `tree`, the kustomization file of the kustomize tree it is part of."""
        from webhook.cli import review_input
        from webhook.core import keys

        record = record_of(path, index, doc)
        if tree is not None:
            why = review_input.kustomize_message(tree)
            record.update(outcome="not-checked", allowed=True, messages=[why])
            if self.args.strict or keys.POD_INJECT in json.dumps(doc, default=str):
                self.report.bad(f"{where}: {why}", record, where)
            else:
                self.report.not_checked(where, record)
            return
        try:
            found = document(doc, where, self.args.namespace)
        except InputError as exc:
            self.report.bad(str(exc), record, where)
            return
        if found is None:
            self._not_checked(doc, where, record)
            return
        if found.namespace:
            record["namespace"] = found.namespace
        self._judge(found, where, record)

    def _not_checked(self, doc: dict[str, Any], where: str, record: dict[str, Any]) -> None:
        kind = doc.get("kind")
        why, refused = not_checked_reason(doc, where, self.state.input)
        record.update(outcome="not-checked", allowed=True, messages=[why])
        if self.args.strict and refused:
            self.report.bad(
                f"{where}: {why} ({kind!r}, {doc.get('apiVersion')!r}); --strict refuses what it cannot check",
                record,
                where,
            )
            return
        self.report.not_checked(
            where, record, f"{where}: {kind}: not checked ({why})" if kind else f"{where}: not checked ({why})"
        )

    def _expand(self, doc: Document) -> tuple[Any, list[tuple[str, Any]]]:
        """(the workload's expansion or None, the templates or the pod that carry the opt-in label)."""
        from webhook.kinds import workloads
        from webhook.kinds.verdict import carries_opt_in

        if not doc.is_pod and workloads.is_workload(doc.group, doc.kind):
            found = workloads.expand(doc.obj, doc.group, doc.kind, self.runtimes, doc.namespace)
            return found, [(path, t) for path, t in found.templates if carries_opt_in(t)]
        if doc.is_pod:
            return None, [("", doc.obj)] if carries_opt_in(doc.obj) else []
        return None, []  # an AdmissionReview of a kind that holds no pods: /validate lets it be

    def _refused(self, doc: Document, where: str, found: Any, labelled: list[tuple[str, Any]]) -> str | None:
        """Why the document is bad input, None when it is not: only where something would be
        checked, in an opted-in namespace (a cluster-scoped object may be used by any), a pod or a
        template that carries the label."""
        from webhook.cli import review_input, review_scope

        args, state = self.args, self.state
        if not ((bool(labelled) or bool(found and found.unresolved)) and doc.creates):
            return None
        ns = doc.namespace
        if args.cluster_state and ns and not state.known(ns):
            return (
                f"{where}: namespace {ns!r} is not in {args.cluster_state}: add it to the cluster-state file "
                f"(kubectl get namespace {ns} -o yaml >> {args.cluster_state}) or to the input, or name another "
                f"with --namespace for objects that name none"
            )
        if ns and not state.opted_in(ns):
            return None
        if found is not None and found.unresolved:
            return (
                f"{where}: " + "; ".join(found.unresolved) + " (give the runtime in the input, or in --cluster-state)"
            )
        problems = [p for path, t in labelled for p in review_input.template_problems(path, t)]
        if problems:
            return f"{where}: " + "; ".join(problems)
        if self.policies is None and labelled:
            return (
                f"{where}: no policy is in force, so its pods cannot be judged: "
                f"{review_scope.how_to_choose(self.names)}"
            )
        return None

    def _judge(self, doc: Document, where: str, record: dict[str, Any]) -> None:
        from webhook.admission import review
        from webhook.admission.judge import judge_pod, judge_workload
        from webhook.core.decision import DENIED

        found, labelled = self._expand(doc)
        refused = self._refused(doc, where, found, labelled)
        if refused is not None:
            self.report.bad(refused, record, where)
            return
        state, policies = self.state, self.policies
        expanded = (doc.namespace, found) if found is not None else None
        message: str | None = None
        if doc.request is not None:  # the review's own request, as /mutate or /validate reads it
            try:
                req = review.request_of(
                    {"apiVersion": review.API_VERSION, "kind": "AdmissionReview", "request": doc.request}
                )
            except review.BadReview as bad:
                self.report.bad(f"{where}: {bad}", record, where)
                return
            decision, answered, message = review.judge_request(
                req,
                not doc.is_pod,
                policies,
                state.namespace,
                state.attachments(),
                self.runtimes,
                self.config_maps,
                state.claims(),
                expanded,
            )
            uid = req.uid
        else:
            namespace = review.object_namespace(doc.namespace, doc.obj, state.namespace)
            if doc.is_pod:
                decision = judge_pod(
                    doc.obj, namespace, policies, state.attachments(), "CREATE", self.config_maps, state.claims()
                )
            else:
                decision, message = judge_workload(
                    doc.obj,
                    doc.group,
                    doc.kind,
                    namespace,
                    policies,
                    state.attachments(),
                    self.runtimes,
                    self.config_maps,
                    state.claims(),
                    expanded,
                )
            answered, uid = decision, f"review-{where}"
        fill(record, answered.outcome != DENIED, decision, message or "")
        if policies is not None and "no-policy" in record["rules"]:
            ns = doc.namespace
            record["messages"].extend(
                _catalogue_hint(doc.obj, state.namespace(ns) if ns else None, policies, self.names)
            )
        self.report.judged(where, record, decision, doc.obj, lambda: review.response(uid, answered, doc.obj, message))
