"""`rdma-webhook review`: the decision `serve` runs, offline, on Pod manifests, workloads and
AdmissionReview files, so that a platform team can fail a CI build on a training manifest that
would fall back to TCP. Exit status: 0 all allowed, 1 any denied, 2 bad input.
"""

from __future__ import annotations

import argparse
import base64
import difflib
import json
import os
import sys
from typing import Any, TextIO

import yaml

from webhook.cli.common import EXIT_BAD_INPUT, EXIT_DENIED, EXIT_OK, policies_dir

class InputError(Exception):
    pass


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


def _input_files(paths: list[str]) -> list[str]:
    """The files to read: each argument, directories walked recursively for *.yaml, *.yml and
    *.json (hidden entries skipped), `-` for stdin."""
    out: list[str] = []
    for path in paths:
        if path != "-" and os.path.isdir(path):
            found = []
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                found.extend(os.path.join(root, f) for f in files
                             if not f.startswith(".") and f.endswith((".yaml", ".yml", ".json")))
            out.extend(sorted(found))
        else:
            out.append(path)
    return out


def _documents(path: str) -> list[Any]:
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]  # JSON is YAML too
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not valid YAML or JSON: {exc}") from None
    out: list[Any] = []
    for doc in docs:
        if isinstance(doc, dict) and isinstance(doc.get("kind"), str) and doc["kind"].endswith("List") \
                and isinstance(doc.get("items"), list):
            out.extend(doc["items"])
        else:
            out.append(doc)
    return out


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
    ns = "" if cluster_scoped else (namespace or meta.get("namespace") or "default")
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


def _color(enabled: bool, code: str, text: str) -> str:
    return f"\033[{code}m{text}\033[0m" if enabled else text


def _diff(before: Any, after: Any, color: bool) -> list[str]:
    a = yaml.safe_dump(before, sort_keys=False, width=1000).splitlines()
    b = yaml.safe_dump(after, sort_keys=False, width=1000).splitlines()
    lines = []
    for line in difflib.unified_diff(a, b, "before", "after", lineterm="", n=2):
        if line.startswith("+") and not line.startswith("+++"):
            line = _color(color, "32", line)
        elif line.startswith("-") and not line.startswith("---"):
            line = _color(color, "31", line)
        elif line.startswith("@@"):
            line = _color(color, "36", line)
        lines.append(line)
    return lines


def _explain_decision(out: TextIO, indent: str, before: Any, decision, color: bool) -> None:
    if decision.reason:
        out.write(f"{indent}why: {decision.reason}\n")
    for f in decision.denials:
        out.write(f"{indent}{_color(color, '31', 'deny')} {f.text()}\n")
    for note in decision.notes:
        out.write(f"{indent}{_color(color, '32', 'add ')} {note}\n")
    if decision.outcome == "mutated":
        for line in _diff(before, decision.pod, color):
            out.write(f"{indent}  {line}\n")


def _verdict(color: bool, outcome: str, allowed: bool) -> str:
    return _color(color, "31;1" if not allowed else ("32;1" if outcome == "MUTATED" else "1"), outcome)


def _explain(out: TextIO, where: str, req: dict[str, Any], resp: dict[str, Any], decision, color: bool) -> None:
    from webhook.core.decision import pod_name

    obj = req.get("object")
    kind = (req.get("kind") or {}).get("kind") or "Pod"
    name = pod_name(obj) if isinstance(obj, dict) else "(no object)"
    r = resp["response"]
    outcome = "ALLOWED (not a pod)" if decision is None and r["allowed"] else ("DENIED (bad request)" if decision is None else decision.outcome.upper())
    policy = f" by policy {decision.policy}" if decision is not None and decision.policy else ""
    out.write(f"{_color(color, '1', where)}: {kind} {req.get('namespace')}/{name}: {_verdict(color, outcome, r['allowed'])}{policy}\n")
    if decision is None:
        if not r["allowed"]:
            out.write(f"  {_color(color, '31', 'deny')} {r['status']['message']}\n")
    elif kind == "Pod":
        _explain_decision(out, "  ", obj, decision, color)
    else:
        if decision.reason:
            out.write(f"  why: {decision.reason}\n")
        for t in decision.templates:
            d = t.decision
            effect = " (denies the workload)" if t.deny else (f" (a warning: {t.why_not})" if d.outcome == "denied" else "")
            by = f" by policy {d.policy}" if d.policy else ""
            out.write(f"  {_color(color, '1', t.path)}: its pods would be "
                      f"{_verdict(color, d.outcome.upper(), d.outcome != 'denied')}{by}{effect}\n")
            _explain_decision(out, "    ", t.pod, d, color)
    for w in r.get("warnings", []):
        out.write(f"  {_color(color, '33', 'warn')} {w}\n")
    if kind == "Pod" and r.get("patch"):
        out.write(f"  {len(json.loads(base64.b64decode(r['patch'])))} patch operations\n")
    out.write("\n")


def _unrendered(templates: list[tuple[str, Any]]) -> list[str]:
    """Resource quantities that are not quantities (`nvidia.com/gpu: $GPU_PER_NODE`, `{{ .gpus }}`):
    a manifest not rendered yet, whose GPU containers the decision could not recognise."""
    from webhook.grammar import k8s

    out = []
    for path, template in templates:
        spec = template.get("spec") if isinstance(template, dict) else None
        for kind in ("containers", "initContainers"):
            for c in (spec.get(kind) if isinstance(spec, dict) and isinstance(spec.get(kind), list) else ()):
                resources = c.get("resources") if isinstance(c, dict) else None
                for section in ("limits", "requests"):
                    values = resources.get(section) if isinstance(resources, dict) else None
                    for name, value in (values.items() if isinstance(values, dict) else ()):
                        try:
                            k8s.parse_quantity(value)
                        except ValueError:
                            where = f"{path}, " if path else ""
                            out.append(f"{where}container {c.get('name')!r}: resources.{section}.{name}={value!r} "
                                       f"is not a quantity (an unrendered template?); render it first")
    return out


NO_STATE_NOTE = ("note: no --cluster-state: every namespace is taken as opted in ({injection}=enabled) with no "
                 "other labels, NetworkAttachmentDefinitions as unknown and Trainer runtimes as those in the input; "
                 "policies chosen by namespace labels may differ from the cluster's. Pass --cluster-state "
                 "(kubectl get ns,net-attach-def,trainingruntimes,clustertrainingruntimes -A -o yaml) to decide as "
                 "the cluster does")


def cmd_review(args: argparse.Namespace) -> int:
    from webhook.core import keys
    from webhook.admission import review
    from webhook.kinds import trainer, workloads
    from webhook.cluster.state import AssumedClusterState, ClusterStateError, FileClusterState, RuntimeStore, is_runtime
    from webhook.policy.load import load_dir

    os.environ[trainer.TRAINER_RELEASE_ENV] = args.trainer_release
    policies, errors = load_dir(policies_dir(args.policies))
    if policies is None:
        for err in errors:
            print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    state: FileClusterState | AssumedClusterState
    runtimes = RuntimeStore()
    if args.cluster_state:
        try:
            state = FileClusterState.from_file(args.cluster_state)
        except ClusterStateError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        runtimes.update(state.runtimes())
    else:
        state = AssumedClusterState()
        print(NO_STATE_NOTE.format(injection=keys.NS_INJECTION), file=sys.stderr)
    color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty() and not os.environ.get("NO_COLOR"))
    status = EXIT_OK
    records: list[dict[str, Any]] = []

    def bad(message: str, record: dict[str, Any] | None = None) -> None:
        nonlocal status
        print(f"error: {message}", file=sys.stderr)
        status = EXIT_BAD_INPUT
        if record is not None:
            record["outcome"], record["messages"] = "error", [message]
            records.append(record)

    # Every input first: a TrainJob's runtime may come later in the same file, or in another one.
    inputs: list[tuple[str, list[Any]]] = []
    for path in _input_files(args.files):
        try:
            docs = _documents(path)
        except InputError as exc:
            bad(str(exc), {**_record(path, 0, None), "document": 0})
            continue
        inputs.append((path, docs))
        for doc in docs:
            if is_runtime(doc):
                runtimes.add(doc, args.namespace or "default")

    for path, docs in inputs:
        for i, doc in enumerate(docs, 1):
            where = f"{path}#{i}" if len(docs) > 1 else path
            record = _record(path, i, doc)
            try:
                req = _as_request(doc, where, args.namespace)
            except InputError as exc:
                bad(str(exc), record)
                continue
            if req is None:
                kind = doc.get("kind")
                known = isinstance(kind, str) and kind in COMPANION_KINDS
                why = ("holds no pods" if known else
                       "unknown kind: pods it may create are not checked" if kind else "not a Kubernetes object (no kind)")
                record.update(outcome="not-checked", allowed=True, messages=[why])
                records.append(record)
                if args.strict and not known:
                    bad(f"{where}: {why} ({kind!r}, {doc.get('apiVersion')!r}); --strict refuses unknown kinds")
                    record["outcome"] = "error"
                elif args.explain:
                    sys.stdout.write(f"{_color(color, '1', where)}: {kind} {(doc.get('metadata') or {}).get('name') if isinstance(doc.get('metadata'), dict) else ''}: not checked ({why})\n\n")
                elif args.output == "review":
                    print(f"{where}: {kind}: not checked ({why})", file=sys.stderr)
                continue
            kind_of = (req.get("kind") or {}).get("kind", "Pod") if isinstance(req.get("kind"), dict) else "Pod"
            group_of = (req.get("kind") or {}).get("group", "") if isinstance(req.get("kind"), dict) else ""
            obj = req.get("object")
            ns = str(req.get("namespace") or "")
            if args.cluster_state and ns and state.namespace(ns) is None and req.get("operation", "CREATE") == "CREATE":
                bad(f"{where}: namespace {ns!r} is not in {args.cluster_state}: add it to the cluster-state file "
                    f"(kubectl get namespace {ns} -o yaml >> {args.cluster_state}), or name another with --namespace",
                    record)
                continue
            if kind_of != "Pod" and workloads.is_workload(group_of, kind_of):
                found = workloads.expand(obj, group_of, kind_of, runtimes, ns)
                if found.unresolved:
                    bad(f"{where}: " + "; ".join(found.unresolved) + " (give the runtime in the input, or in --cluster-state)",
                        record)
                    continue
                unrendered = _unrendered(found.templates)
            else:
                unrendered = _unrendered([("", obj)]) if isinstance(obj, dict) else []
            if unrendered:
                bad(f"{where}: " + "; ".join(unrendered), record)
                continue
            body = json.dumps({"apiVersion": review.API_VERSION, "kind": "AdmissionReview", "request": req}).encode()
            is_pod = kind_of == "Pod"
            if is_pod:
                code, resp, decision, _ = review.handle(body, policies, state.namespace, state.attachments())
            else:
                code, resp, decision, _ = review.handle_validate(body, policies, state.namespace, state.attachments(),
                                                                 runtimes)
            if code != 200:
                bad(f"{where}: {resp.get('error')}", record)
                continue
            r = resp["response"]
            record.update(allowed=r["allowed"], warnings=list(r.get("warnings") or []))
            if decision is None:
                record.update(outcome="denied" if not r["allowed"] else "skipped",
                              messages=[r["status"]["message"]] if not r["allowed"] else [])
            else:
                record.update(outcome=decision.outcome, policy=decision.policy,
                              rules=sorted({f.rule for f in decision.denials}),
                              messages=[f.text() for f in decision.denials])
                record["templates"] = [{"path": t.path, "outcome": t.decision.outcome, "policy": t.decision.policy,
                                        "deniesWorkload": t.deny, "rules": sorted({f.rule for f in t.decision.denials}),
                                        "messages": [f.text() for f in t.decision.denials]} for t in decision.templates]
                if not r["allowed"]:
                    record["outcome"] = "denied"
                elif any(t.decision.outcome == "mutated" for t in decision.templates):
                    record["outcome"] = "mutated"  # a workload: its pods will be
            records.append(record)
            if args.explain:
                _explain(sys.stdout, where, req, resp, decision, color)
            elif args.output == "review":
                sys.stdout.write(json.dumps(resp, indent=2) + "\n")
            if not r["allowed"] and status == EXIT_OK:
                status = EXIT_DENIED
    if args.output == "json" and not args.explain:
        for record in records:
            sys.stdout.write(json.dumps(record, sort_keys=True) + "\n")
    return status
