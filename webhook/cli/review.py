"""`rdma-webhook review`: the decision `serve` runs, offline, on Pod manifests, workloads and
AdmissionReview files, so that a platform team can fail a CI build on a training manifest that
would fall back to TCP. Exit status: 0 all allowed, 1 any denied, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from webhook.cli.common import EXIT_BAD_INPUT, EXIT_DENIED, EXIT_OK
from webhook.cli.review_input import InputError

# Kinds that hold no pod template: listed as "not checked", they never change the exit status
# (kustomize and Helm output always carries them next to the training job).
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


def _as_request(doc: Any, where: str, namespace: str | None) -> dict[str, Any] | None:
    """An AdmissionReview request for a document: its own request, or one made for a Pod or a
    workload kind that carries pod templates (see webhook/kinds/workloads.py); None for a kind that
    holds no pods."""
    from webhook.kinds import workloads

    if not isinstance(doc, dict):
        raise InputError(f"{where}: expected a Kubernetes object or an AdmissionReview, found a {type(doc).__name__}")
    if doc.get("kind") == "AdmissionReview":
        req = doc.get("request")
        if not isinstance(req, dict) or not req.get("uid"):
            raise InputError(f"{where}: AdmissionReview without request.uid")
        return req
    kind = doc.get("kind")
    api_version = doc.get("apiVersion") if isinstance(doc.get("apiVersion"), str) else ""
    group = workloads.group_of(api_version)
    if kind != "Pod" and not workloads.is_workload(group, kind):
        return None
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    cluster_scoped = (group, kind) in workloads.CLUSTER_SCOPED
    # --namespace only fills in a namespace the object does not name (as `kubectl apply -n` would)
    ns = "" if cluster_scoped else (meta.get("namespace") or namespace or "default")
    version = api_version.rpartition("/")[2] or "v1"
    return {
        "uid": f"review-{where}",
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": "pods" if kind == "Pod" else kind.lower() + "s"},
        "namespace": ns,
        "operation": "CREATE",
        "object": doc,
    }


def _record(path: str, index: int, doc: Any) -> dict[str, Any]:
    """The `--output json` record of one document, before its outcome is known."""
    meta = doc.get("metadata") if isinstance(doc, dict) and isinstance(doc.get("metadata"), dict) else {}
    if isinstance(doc, dict) and doc.get("kind") == "AdmissionReview" and isinstance(doc.get("request"), dict):
        req = doc["request"]
        obj = req.get("object") if isinstance(req.get("object"), dict) else {}
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        kind = (req.get("kind") or {}).get("kind") if isinstance(req.get("kind"), dict) else None
        return {"file": path, "document": index, "kind": "AdmissionReview", "apiVersion": doc.get("apiVersion"),
                "objectKind": kind, "namespace": req.get("namespace") or meta.get("namespace"),
                "name": meta.get("name") or meta.get("generateName"), "outcome": "error", "allowed": False,
                "policy": None, "rules": [], "messages": [], "warnings": [], "templates": []}
    return {"file": path, "document": index,
            "kind": doc.get("kind") if isinstance(doc, dict) else None,
            "apiVersion": doc.get("apiVersion") if isinstance(doc, dict) else None,
            "objectKind": None, "namespace": meta.get("namespace"), "name": meta.get("name") or meta.get("generateName"),
            "outcome": "error", "allowed": False, "policy": None, "rules": [], "messages": [], "warnings": [], "templates": []}


NO_STATE_NOTE = ("note: no --cluster-state: every namespace the input does not describe with a Namespace document is "
                 "taken as opted in ({injection}=enabled) with no other labels, NetworkAttachmentDefinitions as "
                 "unknown and Trainer runtimes as those in the input; policies chosen by namespace labels may differ "
                 "from the cluster's. Pass --cluster-state (kubectl get ns,net-attach-def,trainingruntimes,"
                 "clustertrainingruntimes -A -o yaml) to decide as the cluster does")


def _is_namespace(doc: Any) -> bool:
    """A v1 Namespace document review uses as cluster state: metadata a mapping with a non-empty
    string name and labels a mapping (or none), as the API server takes it; any other is listed
    as holding no pods, and not used."""
    meta = doc.get("metadata") if isinstance(doc, dict) and doc.get("kind") == "Namespace" \
        and doc.get("apiVersion") == "v1" else None
    return (isinstance(meta, dict) and isinstance(meta.get("name"), str) and meta["name"] != ""
            and isinstance(meta.get("labels") or {}, dict))


def _labelled(templates: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The templates (or the pod) that carry the pod opt-in label: the ones a decision reads."""
    from webhook.core import keys

    out = []
    for path, t in templates:
        meta = t.get("metadata") if isinstance(t, dict) else None
        labels = meta.get("labels") if isinstance(meta, dict) else None
        if isinstance(labels, dict) and labels.get(keys.POD_INJECT) == keys.POD_INJECT_TRUE:
            out.append((path, t))
    return out


def _fill(record: dict[str, Any], r: dict[str, Any], decision: Any) -> None:
    """The record of a decided document: outcome, policy, rules, messages (denials, else why it
    is left as it is), the decision's warnings in full, and each template's."""
    record.update(allowed=r["allowed"], warnings=list(decision.warnings) if decision is not None
                  else list(r.get("warnings") or []))
    if decision is None:
        record.update(outcome="denied" if not r["allowed"] else "skipped",
                      messages=[r["status"]["message"]] if not r["allowed"] else ["not a pod or workload"])
        return
    templates = decision.templates
    record.update(outcome=decision.outcome, policy=decision.policy, rules=sorted({f.rule for f in decision.denials}),
                  messages=[f.text() for f in decision.denials])
    record["templates"] = [{"path": t.path, "outcome": t.decision.outcome, "policy": t.decision.policy,
                            "deniesWorkload": t.deny, "rules": sorted({f.rule for f in t.decision.denials}),
                            "messages": [f.text() for f in t.decision.denials] or
                            ([t.decision.reason] if t.decision.reason else [])} for t in templates]
    if not r["allowed"]:
        record["outcome"] = "denied"
    elif templates and any(t.decision.outcome == "mutated" for t in templates):
        record["outcome"] = "mutated"  # a workload: its pods will be
    elif templates:
        record["outcome"] = "unchanged" if any(t.decision.outcome != "skipped" for t in templates) else "skipped"
    if record["outcome"] in ("unchanged", "skipped") and not record["messages"]:
        if templates:
            record["messages"] = [f"{t['path']}: {m}" for t in record["templates"] for m in t["messages"]]
        elif decision.reason:
            record["messages"] = [decision.reason]
    if record["outcome"] == "mutated":
        record["messages"] = []


def _catalogue_hint(obj: Any, namespace: Any, policies: Any, names: list[str]) -> list[str]:
    """When a pod's annotation or its namespace's label names a catalogue policy that is not in
    force: how to review against it."""
    from webhook.core import keys

    meta = obj.get("metadata") if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict) else {}
    asked = [(meta.get("annotations") or {}).get(keys.POD_POLICY) if isinstance(meta.get("annotations"), dict) else None,
             namespace.labels.get(keys.NS_POLICY) if namespace is not None else None]
    return [f"policy {name!r} is in the shipped catalogue but not in force for this review: add --policy {name}"
            for name in dict.fromkeys(a for a in asked if isinstance(a, str))
            if name in names and policies.get(name) is None]


def cmd_review(args: argparse.Namespace) -> int:
    from webhook.admission import review
    from webhook.cli import review_input, review_scope
    from webhook.cli.review_explain import color as paint, explain
    from webhook.cluster.state import AssumedClusterState, ClusterStateError, FileClusterState, RuntimeStore, is_dra, is_runtime
    from webhook.core import keys, scripts
    from webhook.kinds import trainer, workloads

    os.environ[trainer.TRAINER_RELEASE_ENV] = args.trainer_release
    runtimes = RuntimeStore()
    if args.cluster_state:
        try:
            base: FileClusterState | AssumedClusterState = FileClusterState.from_file(args.cluster_state)
        except ClusterStateError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        runtimes.update(base.runtimes())
    else:
        base = AssumedClusterState()
    state = review_scope.ReviewState(base, assumed=not args.cluster_state)
    color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty() and not os.environ.get("NO_COLOR"))
    status = EXIT_OK
    records: list[dict[str, Any]] = []

    def bad(message: str, record: dict[str, Any] | None = None, where: str = "") -> None:
        nonlocal status
        print(f"error: {message}", file=sys.stderr)
        status = EXIT_BAD_INPUT
        if record is not None:
            prefix = f"{where}: "
            record.update(outcome="error", allowed=False,
                          messages=[message[len(prefix):] if where and message.startswith(prefix) else message])
            records.append(record)
            if args.explain:
                explain(sys.stdout, where or record["file"], record, None, None, color)

    # Every input first: a TrainJob's runtime, a Namespace or a policy may come later in the
    # same file, or in another one.
    files, trees = review_input.input_files(args.files)
    inputs: list[tuple[str, list[Any]]] = []
    policy_docs: list[tuple[str, Any]] = []
    config_maps = scripts.ConfigMapStore()  # for the scripts containers run from ConfigMap volumes
    for path in files:
        try:
            docs = review_input.documents(path)
        except InputError as exc:
            bad(str(exc), {**_record(path, 0, None), "document": 0})
            continue
        inputs.append((path, docs))
        if path in trees:
            continue
        for i, doc in enumerate(docs, 1):
            where = f"{path}#{i}" if len(docs) > 1 else path
            if scripts.is_config_map(doc):
                config_maps.add(doc, args.namespace or "default")
            elif is_runtime(doc):
                runtimes.add(doc, args.namespace or "default")
            elif is_dra(doc):
                state.dra.add(doc, args.namespace or "default")
            elif review_scope.is_policy_document(doc):
                policy_docs.append((where, doc))
            elif _is_namespace(doc):
                state.add(doc, where, args.cluster_state)
    policies, errors, names = review_scope.choose(args.policy or [], args.policies, policy_docs)
    if errors:
        for err in errors:
            print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not args.cluster_state:
        print(NO_STATE_NOTE.format(injection=keys.NS_INJECTION), file=sys.stderr)
    for note in state.notes:
        print(note, file=sys.stderr)
    if policies is None:
        print(f"note: no policy is in force: {review_scope.how_to_choose(names)}", file=sys.stderr)

    for path, docs in inputs:
        for i, doc in enumerate(docs, 1):
            where = f"{path}#{i}" if len(docs) > 1 else path
            record = _record(path, i, doc)
            if path in trees:
                why = review_input.kustomize_message(trees[path])
                record.update(outcome="not-checked", allowed=True, messages=[why])
                if args.strict or keys.POD_INJECT in json.dumps(doc, default=str):
                    bad(f"{where}: {why}", record, where)
                else:
                    records.append(record)
                    if args.explain:
                        explain(sys.stdout, where, record, None, None, color)
                continue
            try:
                req = _as_request(doc, where, args.namespace)
            except InputError as exc:
                bad(str(exc), record, where)
                continue
            if req is None:
                kind = doc.get("kind")
                known = isinstance(kind, str) and kind in COMPANION_KINDS
                # Neither apiVersion nor kind: another tool's YAML (a GitHub Actions workflow, a
                # Compose file, Helm values), which no cluster would take; --strict lets it be.
                foreign = "kind" not in doc and "apiVersion" not in doc
                why = ("holds no pods" if known else
                       "unknown kind: pods it may create are not checked" if kind else
                       "not a Kubernetes object (no apiVersion, no kind)" if foreign else "not a Kubernetes object (no kind)")
                if not known and kind and keys.POD_INJECT in json.dumps(doc, default=str):
                    why = (f"unknown kind that carries pod templates labelled {keys.POD_INJECT}: the pods it makes "
                           f"are not checked here (review them as they are made, or use --strict to fail)")
                if review_input.is_kustomization(doc):
                    why = review_input.kustomize_message(where)
                elif _is_namespace(doc) and doc["metadata"]["name"] in state.input:
                    why = "holds no pods; its labels decide opt-in and policy for the documents in it"
                elif review_scope.is_policy_document(doc):
                    why = "holds no pods; a policy in force for this review"
                record.update(outcome="not-checked", allowed=True, messages=[why])
                if args.strict and ((not known and not foreign) or review_input.is_kustomization(doc)):
                    bad(f"{where}: {why} ({kind!r}, {doc.get('apiVersion')!r}); --strict refuses what it cannot check",
                        record, where)
                    continue
                records.append(record)
                if args.explain:
                    explain(sys.stdout, where, record, None, None, color)
                elif args.output == "review":
                    print(f"{where}: {kind}: not checked ({why})" if kind else f"{where}: not checked ({why})",
                          file=sys.stderr)
                continue
            kind_of = (req.get("kind") or {}).get("kind", "Pod") if isinstance(req.get("kind"), dict) else "Pod"
            group_of = (req.get("kind") or {}).get("group", "") if isinstance(req.get("kind"), dict) else ""
            obj = req.get("object")
            ns = str(req.get("namespace") or "")
            if ns:
                record["namespace"] = ns
            is_pod = kind_of == "Pod"
            found = None
            if not is_pod and workloads.is_workload(group_of, kind_of):
                found = workloads.expand(obj, group_of, kind_of, runtimes, ns)
                labelled = _labelled(found.templates)
            elif is_pod:
                labelled = _labelled([("", obj)])
            else:  # an AdmissionReview of a kind that holds no pods: /validate lets it be, nothing to check here
                labelled = []
            would_check = (bool(labelled) or bool(found and found.unresolved)) and req.get("operation", "CREATE") == "CREATE"
            if would_check and args.cluster_state and ns and not state.known(ns):
                bad(f"{where}: namespace {ns!r} is not in {args.cluster_state}: add it to the cluster-state file "
                    f"(kubectl get namespace {ns} -o yaml >> {args.cluster_state}) or to the input, or name another "
                    f"with --namespace for objects that name none", record, where)
                continue
            # Bad input only where something would be checked: in an opted-in namespace (a
            # cluster-scoped object may be used by any), a pod or template that carries the label.
            if would_check and (not ns or state.opted_in(ns)):
                if found is not None and found.unresolved:
                    bad(f"{where}: " + "; ".join(found.unresolved) + " (give the runtime in the input, or in "
                        "--cluster-state)", record, where)
                    continue
                problems = [p for path_, t in labelled for p in review_input.template_problems(path_, t)]
                if problems:
                    bad(f"{where}: " + "; ".join(problems), record, where)
                    continue
                if policies is None and labelled:
                    bad(f"{where}: no policy is in force, so its pods cannot be judged: "
                        f"{review_scope.how_to_choose(names)}", record, where)
                    continue
            body = json.dumps({"apiVersion": review.API_VERSION, "kind": "AdmissionReview", "request": req}).encode()
            if is_pod:
                code, resp, decision, _ = review.handle(body, policies, state.namespace, state.attachments(), config_maps,
                                                        claims=state.claims())
            else:
                code, resp, decision, _ = review.handle_validate(body, policies, state.namespace, state.attachments(),
                                                                 runtimes, config_maps, claims=state.claims())
            if code != 200:
                bad(f"{where}: {resp.get('error')}", record, where)
                continue
            r = resp["response"]
            _fill(record, r, decision)
            if policies is not None and "no-policy" in record["rules"]:
                record["messages"].extend(_catalogue_hint(obj, state.namespace(ns) if ns else None, policies, names))
            records.append(record)
            if args.explain:
                explain(sys.stdout, where, record, decision, obj, color)
            elif args.output == "review":
                sys.stdout.write(json.dumps(resp, indent=2) + "\n")
            if not r["allowed"] and status == EXIT_OK:
                status = EXIT_DENIED
    if args.output == "json" and not args.explain:
        for record in records:
            sys.stdout.write(json.dumps(record, sort_keys=True) + "\n")
    return status
