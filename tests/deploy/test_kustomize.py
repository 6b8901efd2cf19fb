"""Checks of the Kubernetes manifests (deploy/), the monitoring bundle
(deploy/monitoring/) and the Containerfile.

Everything is rendered with the real `kubectl kustomize` (kustomize v5): a
missing kubectl is a test failure, not a skip, because these tests are the
only thing standing between a typo in deploy/ and a webhook that blocks pod
creation cluster-wide.
"""

from __future__ import annotations

import base64
import functools
import os
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from webhook.core import keys
from webhook.telemetry.metrics import EXPORTED_METRIC_NAMES
import yaml
from conftest import CLI

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
NAMESPACE = "rdma-webhook"
SERVICE = "rdma-webhook"
DNS_NAMES = ["rdma-webhook.rdma-webhook.svc", "rdma-webhook.rdma-webhook.svc.cluster.local"]

# The sample names the server exposes on /metrics: alerts and dashboard panels
# may only use these (plus EXTERNAL_METRICS). tests/serving/test_server.py checks that
# the live /metrics page carries exactly these names.
EXPORTED_METRICS = EXPORTED_METRIC_NAMES

# Series the alerts/dashboard use that are not ours (kube-state-metrics).
EXTERNAL_METRICS = frozenset({"kube_deployment_status_replicas_available"})

# Kinds that come from CRDs (cert-manager, Prometheus Operator): not in the
# kubernetes-validate schemas, checked structurally below instead.
CRD_KINDS = {
    ("cert-manager.io/v1", "Certificate"),
    ("cert-manager.io/v1", "Issuer"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}

# What the container runs (the contract with webhook/cli/).
SERVE_ARGS = [
    "serve",
    "--policies",
    "/etc/rdma-webhook/policies",
    "--tls-cert",
    "/etc/rdma-webhook/tls/tls.crt",
    "--tls-key",
    "/etc/rdma-webhook/tls/tls.key",
    "--host",
    "0.0.0.0",
    "--port",
    "8443",
    "--workers",
    "2",
]

POD_OPT_IN_CEL = (
    "has(object.metadata.labels) && 'rdma-webhook.io/inject' in object.metadata.labels"
    " && object.metadata.labels['rdma-webhook.io/inject'] == 'true'"
)
NAMESPACE_CEL = "request.namespace != 'rdma-webhook' && request.namespace != 'kube-system'"
EXPECTED_NAMESPACE_SELECTOR = {
    "matchExpressions": [
        {"key": "rdma-webhook.io/injection", "operator": "In", "values": ["enabled"]},
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "rdma-webhook"]},
    ]
}
EXPECTED_OBJECT_SELECTOR = {"matchLabels": {"rdma-webhook.io/inject": "true"}}
POD_RULES = [
    {
        "operations": ["CREATE"],
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "resources": ["pods"],
        "scope": "Namespaced",
    }
]
WORKLOAD_RESOURCES = {
    ("batch", "v1", "jobs"),
    ("batch", "v1", "cronjobs"),
    ("apps", "v1", "deployments"),
    ("apps", "v1", "statefulsets"),
    ("apps", "v1", "replicasets"),
    ("apps", "v1", "daemonsets"),
    ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
    ("kubeflow.org", "v1", "pytorchjobs"),
    ("kubeflow.org", "v1", "mpijobs"),
    ("kubeflow.org", "v2beta1", "mpijobs"),
    ("kubeflow.org", "v1", "tfjobs"),
    ("kubeflow.org", "v1", "paddlejobs"),
    ("kubeflow.org", "v1", "xgboostjobs"),
    ("kubeflow.org", "v1", "jaxjobs"),
    ("trainer.kubeflow.org", "v1alpha1", "trainjobs"),
    ("trainer.kubeflow.org", "v1alpha1", "trainingruntimes"),
    ("trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes"),
    ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"),
    ("batch.volcano.sh", "v1alpha1", "jobs"),
    ("batch.volcano.sh", "v1alpha1", "cronjobs"),
    ("ray.io", "v1", "rayclusters"),
    ("ray.io", "v1", "rayjobs"),
    ("ray.io", "v1", "rayservices"),
    ("workload.codeflare.dev", "v1beta2", "appwrappers"),
    ("workloads.x-k8s.io", "v1alpha1", "rolebasedgroups"),
    ("argoproj.io", "v1alpha1", "workflows"),
    ("argoproj.io", "v1alpha1", "workflowtemplates"),
    ("argoproj.io", "v1alpha1", "cronworkflows"),
    ("argoproj.io", "v1alpha1", "clusterworkflowtemplates"),
}
CLUSTER_SCOPED_RESOURCES = {"clustertrainingruntimes", "clusterworkflowtemplates"}


# ---------------------------------------------------------------------------
# rendering
# ---------------------------------------------------------------------------


def _kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        pytest.fail(
            "kubectl not found on PATH: it is required to render deploy/ with kustomize "
            "(`kubectl kustomize`). Install kubectl >= 1.27 (kustomize v5).",
            pytrace=False,
        )
    return path


def _kustomize(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([_kubectl(), "kustomize", str(path)], capture_output=True, text=True, timeout=120)


def render(path: Path) -> list[dict]:
    proc = _kustomize(path)
    assert proc.returncode == 0, f"`kubectl kustomize {path}` failed:\n{proc.stderr}"
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d is not None]
    assert docs, f"`kubectl kustomize {path}` rendered nothing"
    return docs


@functools.lru_cache(maxsize=None)
def _render_cached(path: str) -> tuple:
    return tuple(render(Path(path)))


def rendered(rel: str) -> list[dict]:
    return list(_render_cached(str(DEPLOY / rel)))


def find(docs: list[dict], kind: str, name: str | None = None) -> list[dict]:
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected exactly one {kind} {name or ''}, found {len(found)}"
    return found[0]


# --- certificates for the self-managed overlay ------------------------------


def write_certs(out: Path) -> str:
    """Writes ca.crt, ca.key, tls.crt, tls.key into `out` exactly as the
    README tells users to: with `rdma-webhook certs`. Returns its stdout."""
    script = Path(sys.executable).parent / "rdma-webhook"
    cli = [str(script)] if script.exists() else [*CLI]
    proc = subprocess.run(
        [*cli, "certs", "--service", SERVICE, "--namespace", NAMESPACE, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode == 0, f"`rdma-webhook certs` failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def self_managed(tmp_path_factory) -> dict:
    """Renders deploy/overlays/self-managed in a copy of deploy/ with freshly
    generated certificates (the real checkout's certs/ is git-ignored and
    usually absent)."""
    root = tmp_path_factory.mktemp("deploy-copy") / "deploy"
    shutil.copytree(DEPLOY, root, ignore=shutil.ignore_patterns("certs"))
    certs = root / "overlays" / "self-managed" / "certs"
    stdout = write_certs(certs)
    return {"docs": render(root / "overlays" / "self-managed"), "certs": certs, "stdout": stdout, "root": root}


# ---------------------------------------------------------------------------
# every tree renders
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("rel", [".", "base", "overlays/cert-manager", "monitoring"])
def test_kustomization_renders(rel):
    proc = _kustomize(DEPLOY / rel)
    assert proc.returncode == 0, f"`kubectl kustomize deploy/{rel}` failed:\n{proc.stderr}"


def test_self_managed_overlay_renders_with_certs(self_managed):
    kinds = {d["kind"] for d in self_managed["docs"]}
    assert {"Secret", "Deployment", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} <= kinds


def test_self_managed_overlay_refuses_to_render_without_certs(tmp_path):
    # Without `rdma-webhook certs` having run, the overlay must fail loudly
    # instead of installing webhooks that nothing can serve.
    root = tmp_path / "deploy"
    shutil.copytree(DEPLOY, root, ignore=shutil.ignore_patterns("certs"))
    proc = _kustomize(root / "overlays" / "self-managed")
    assert proc.returncode != 0
    assert "certs/" in proc.stderr


def test_default_install_is_the_cert_manager_overlay():
    assert rendered(".") == rendered("overlays/cert-manager")


def test_monitoring_is_not_part_of_the_default_install():
    kinds = {d["kind"] for d in rendered(".")}
    assert not kinds & {"ServiceMonitor", "PrometheusRule"}


# ---------------------------------------------------------------------------
# schema validation
# ---------------------------------------------------------------------------


def _schema_versions() -> list[str]:
    import kubernetes_validate

    newest = kubernetes_validate.latest_version()
    # 1.30: the oldest Kubernetes these manifests target (matchConditions
    # are GA there); plus the newest schemas the installed package ships.
    return sorted({"1.30.0", newest}, key=lambda v: tuple(int(p) for p in v.split(".")))


def _check_crd_object(obj: dict) -> None:
    """Structural checks for CRD kinds, which kubernetes-validate has no schema for."""
    kind, spec = obj["kind"], obj.get("spec")
    assert obj["metadata"].get("name") and obj["metadata"].get("namespace"), obj["metadata"]
    assert isinstance(spec, dict), f"{kind} without spec"
    if kind == "Issuer":
        assert len([k for k in ("selfSigned", "ca", "acme", "vault", "venafi") if k in spec]) == 1, spec
    elif kind == "Certificate":
        assert spec["secretName"] and spec["issuerRef"]["name"], spec
        assert spec.get("dnsNames") or spec.get("commonName"), spec
    elif kind == "ServiceMonitor":
        assert spec["selector"] and spec["endpoints"], spec
        assert all(e.get("port") for e in spec["endpoints"]), spec
    elif kind == "PrometheusRule":
        assert spec["groups"], spec
        for group in spec["groups"]:
            assert group["name"] and group["rules"], group
            for rule in group["rules"]:
                assert ("alert" in rule) != ("record" in rule), rule
                assert isinstance(rule["expr"], str) and rule["expr"].strip(), rule
                if "for" in rule:
                    assert re.fullmatch(r"(\d+(ms|s|m|h|d|w|y))+", rule["for"]), rule
    else:  # pragma: no cover - CRD_KINDS and this function must agree
        raise AssertionError(f"no structural check for {kind}")


def _all_renders(self_managed) -> dict[str, list[dict]]:
    return {
        "deploy/": rendered("."),
        "deploy/overlays/cert-manager/": rendered("overlays/cert-manager"),
        "deploy/overlays/self-managed/": self_managed["docs"],
        "deploy/monitoring/": rendered("monitoring"),
    }


def test_every_object_validates_strictly(self_managed):
    import kubernetes_validate

    versions = _schema_versions()
    checked = 0
    for source, docs in _all_renders(self_managed).items():
        for obj in docs:
            what = f"{source}: {obj['kind']}/{obj['metadata']['name']}"
            if (obj["apiVersion"], obj["kind"]) in CRD_KINDS:
                _check_crd_object(obj)
                continue
            for version in versions:
                try:
                    kubernetes_validate.validate(obj, version, strict=True)
                except kubernetes_validate.ValidationError as e:
                    pytest.fail(f"{what} is invalid for Kubernetes {version}: {e.message} at {list(e.path)}")
                except kubernetes_validate.SchemaNotFoundError as e:
                    pytest.fail(f"{what}: {e.message} (a CRD kind? add it to CRD_KINDS with a check)")
            checked += 1
    assert checked >= 20


# ---------------------------------------------------------------------------
# namespace, RBAC, service account
# ---------------------------------------------------------------------------


def test_namespace_is_never_selected_by_the_webhook():
    ns = one(rendered("."), "Namespace", NAMESPACE)
    assert ns["metadata"]["labels"].get("rdma-webhook.io/injection") != "enabled"


def test_everything_namespaced_lives_in_the_webhook_namespace():
    cluster_scoped = {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    }
    for obj in rendered(".") + rendered("monitoring"):
        if obj["kind"] in cluster_scoped:
            assert "namespace" not in obj["metadata"], obj["metadata"]
        else:
            assert obj["metadata"]["namespace"] == NAMESPACE, (obj["kind"], obj["metadata"])


def test_rbac_is_read_only_on_namespaces_and_nads():
    docs = rendered(".")
    role = one(docs, "ClusterRole", "rdma-webhook")
    rules = sorted((tuple(r["apiGroups"]), tuple(r["resources"]), tuple(sorted(r["verbs"]))) for r in role["rules"])
    assert rules == [
        (("",), ("namespaces",), ("get", "list", "watch")),
        (("k8s.cni.cncf.io",), ("network-attachment-definitions",), ("get", "list", "watch")),
        (("resource.k8s.io",), ("deviceclasses", "resourceclaimtemplates", "resourceclaims"), ("get", "list", "watch")),
        (("trainer.kubeflow.org",), ("trainingruntimes", "clustertrainingruntimes"), ("get", "list", "watch")),
    ]
    for r in role["rules"]:
        assert not set(r) - {"apiGroups", "resources", "verbs"}, r  # no resourceNames/nonResourceURLs surprises
    # Nothing cluster-wide on secrets (or wildcards that would include them).
    for cr in find(docs, "ClusterRole"):
        for r in cr.get("rules", []):
            assert "secrets" not in r.get("resources", []) and "*" not in r.get("resources", []), cr
            assert "*" not in r.get("verbs", []) and "*" not in r.get("apiGroups", []), cr
        assert "aggregationRule" not in cr
    # The webhook gets no namespaced RBAC either.
    assert not find(docs, "Role") and not find(docs, "RoleBinding")
    binding = one(docs, "ClusterRoleBinding", "rdma-webhook")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "rdma-webhook",
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "rdma-webhook", "namespace": NAMESPACE}]
    one(docs, "ServiceAccount", "rdma-webhook")


# ---------------------------------------------------------------------------
# Deployment, Service, PDB, ConfigMap
# ---------------------------------------------------------------------------


def _deployment() -> dict:
    return one(rendered("."), "Deployment", "rdma-webhook")


def _container() -> dict:
    containers = _deployment()["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def _matches(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_deployment_replicas_and_spread():
    dep = _deployment()
    spec = dep["spec"]
    pod = spec["template"]["spec"]
    assert spec["replicas"] >= 2
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    labels = spec["template"]["metadata"]["labels"]
    assert _matches(spec["selector"]["matchLabels"], labels)
    hostname_spread = [
        c
        for c in pod.get("topologySpreadConstraints", [])
        if c["topologyKey"] == "kubernetes.io/hostname"
        and c["whenUnsatisfiable"] == "DoNotSchedule"
        and _matches(c["labelSelector"]["matchLabels"], labels)
    ]
    anti_affinity = pod.get("affinity", {}).get("podAntiAffinity", {})
    assert hostname_spread or anti_affinity, "replicas must be spread across nodes"
    assert not pod.get("priorityClassName", "").startswith("system-"), (
        "system-* priority classes are refused outside kube-system on many clusters"
    )


def test_deployment_security_context():
    pod = _deployment()["spec"]["template"]["spec"]
    psc = pod["securityContext"]
    assert psc["runAsNonRoot"] is True
    assert isinstance(psc["runAsUser"], int) and psc["runAsUser"] > 0
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    csc = _container()["securityContext"]
    assert csc["runAsNonRoot"] is True
    assert isinstance(csc.get("runAsUser", psc["runAsUser"]), int) and csc.get("runAsUser", psc["runAsUser"]) == 65532
    assert csc["readOnlyRootFilesystem"] is True
    assert csc["allowPrivilegeEscalation"] is False
    assert csc["capabilities"] == {"drop": ["ALL"]}
    assert csc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")


def test_deployment_command_env_and_volumes():
    dep = _deployment()
    pod = dep["spec"]["template"]["spec"]
    c = _container()
    assert "command" not in c, "the image's ENTRYPOINT is rdma-webhook"
    assert c["args"] == SERVE_ARGS
    assert c["image"].split("/")[-1].startswith("rdma-webhook")
    assert {"name": "PROMETHEUS_MULTIPROC_DIR", "value": "/tmp/rdma-webhook-metrics"} in c["env"]
    assert [p["containerPort"] for p in c["ports"] if p["name"] == "https"] == [8443]
    assert pod["serviceAccountName"] == "rdma-webhook"

    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    # No subPath: ConfigMap/Secret updates must reach the server (hot reload).
    assert all("subPath" not in m for m in c["volumeMounts"])
    tmp = volumes[mounts["/tmp"]["name"]]
    assert "emptyDir" in tmp
    tls = volumes[mounts["/etc/rdma-webhook/tls"]["name"]]
    assert tls["secret"]["secretName"] == "rdma-webhook-tls"
    policies = volumes[mounts["/etc/rdma-webhook/policies"]["name"]]
    cm_name = policies["configMap"]["name"]
    # The reference was rewritten to the generated (hash-suffixed) ConfigMap.
    one(rendered("."), "ConfigMap", cm_name)
    assert cm_name.startswith("rdma-webhook-policies")


def test_deployment_resources():
    res = _container()["resources"]
    assert res["requests"]["cpu"] and res["requests"]["memory"]
    assert res["limits"]["memory"] == "256Mi"
    assert "cpu" not in res["limits"], "a CPU limit throttles admissions into timeouts"


def test_deployment_probes_are_https_on_8443():
    c = _container()
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = c[probe]["httpGet"]
        assert get["path"] == path and get["scheme"] == "HTTPS", (probe, get)
        assert ports.get(get["port"], get["port"]) == 8443, (probe, get)
    # Liveness must not kill a replica that is merely waiting for the cluster cache.
    assert c["livenessProbe"]["httpGet"]["path"] != "/readyz"


def test_termination_lets_in_flight_admissions_finish():
    pod = _deployment()["spec"]["template"]["spec"]
    pre_stop = _container()["lifecycle"]["preStop"]
    if "sleep" in pre_stop:
        delay = pre_stop["sleep"]["seconds"]
    else:  # exec: ["sleep", "N"] or ["/bin/sh", "-c", "sleep N"]
        delay = int(re.search(r"sleep\D*(\d+)", " ".join(pre_stop["exec"]["command"])).group(1))
    assert 0 < delay <= 10
    # server drains for up to 20 s after SIGTERM, which comes after preStop
    assert pod["terminationGracePeriodSeconds"] >= delay + 20


def test_service_maps_443_to_the_https_container_port():
    docs = rendered(".")
    svc = one(docs, "Service", SERVICE)
    assert svc["spec"].get("type", "ClusterIP") == "ClusterIP"
    [port] = svc["spec"]["ports"]
    assert port["port"] == 443
    ports = {p["name"]: p["containerPort"] for p in _container()["ports"]}
    assert ports.get(port["targetPort"], port["targetPort"]) == 8443
    assert _matches(svc["spec"]["selector"], _deployment()["spec"]["template"]["metadata"]["labels"])


def test_pod_disruption_budget():
    pdb = one(rendered("."), "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert "maxUnavailable" not in pdb["spec"]
    assert _matches(pdb["spec"]["selector"]["matchLabels"], _deployment()["spec"]["template"]["metadata"]["labels"])


def _policy_files() -> dict[str, bytes]:
    files = sorted(p for p in (REPO / "policies").glob("*.y*ml") if p.suffix in (".yaml", ".yml"))
    assert files, "policies/ holds no policy files"
    return {p.name: p.read_bytes() for p in files}


def test_policies_configmap_is_empty_by_default():
    """Safe by default: the install enforces no fabric until the admin chooses one. The policies
    of policies/ are a catalogue that overlays add by name
    (deploy/catalogue/<name>/, checked in tests/deploy/test_catalogue.py)."""
    assert _policy_files(), "the catalogue is still shipped"
    [cm] = [c for c in find(rendered("."), "ConfigMap") if c["metadata"]["name"].startswith("rdma-webhook-policies")]
    assert not cm.get("data") and not cm.get("binaryData"), sorted(cm.get("data", {}))


# ---------------------------------------------------------------------------
# webhook configurations
# ---------------------------------------------------------------------------


def _webhooks(docs: list[dict]) -> dict[str, dict]:
    mwc = one(docs, "MutatingWebhookConfiguration", "rdma-webhook")
    vwc = one(docs, "ValidatingWebhookConfiguration", "rdma-webhook")
    assert len(mwc["webhooks"]) == 1
    assert len(vwc["webhooks"]) == 2
    hooks = {"mutate-pods": mwc["webhooks"][0]}
    for hook in vwc["webhooks"]:
        rules = hook["rules"]
        hooks["validate-pods" if rules == POD_RULES else "validate-workloads"] = hook
    assert set(hooks) == {"mutate-pods", "validate-pods", "validate-workloads"}
    return hooks


def _check_common(hook: dict, path: str) -> None:
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["sideEffects"] == "None"
    assert hook["clientConfig"]["service"] == {"name": SERVICE, "namespace": NAMESPACE, "path": path, "port": 443}
    assert "url" not in hook["clientConfig"]
    assert hook["namespaceSelector"] == EXPECTED_NAMESPACE_SELECTOR
    assert len(hook["name"].split(".")) >= 3  # API server requires a fully qualified name


def test_mutating_webhook():
    hook = _webhooks(rendered("."))["mutate-pods"]
    _check_common(hook, "/mutate")
    assert hook["failurePolicy"] == "Fail"
    assert hook["timeoutSeconds"] == 10
    assert hook["reinvocationPolicy"] == "IfNeeded"
    assert hook["rules"] == POD_RULES
    assert hook["objectSelector"] == EXPECTED_OBJECT_SELECTOR
    assert hook["matchConditions"] == [
        {"name": "pod-opted-in", "expression": POD_OPT_IN_CEL},
        {"name": "not-webhook-namespace", "expression": NAMESPACE_CEL},
    ]


def test_validating_pod_webhook_matches_the_mutating_one():
    hooks = _webhooks(rendered("."))
    hook = hooks["validate-pods"]
    _check_common(hook, "/validate")
    assert hook["failurePolicy"] == "Fail"
    assert hook["timeoutSeconds"] == 10
    assert hook["rules"] == POD_RULES
    for field in ("namespaceSelector", "objectSelector", "matchConditions", "rules"):
        assert hook[field] == hooks["mutate-pods"][field], field


def test_validating_workload_webhook():
    hooks = _webhooks(rendered("."))
    hook = hooks["validate-workloads"]
    _check_common(hook, "/validate")
    assert hook["failurePolicy"] == "Ignore"
    assert hook["timeoutSeconds"] == 5
    assert "objectSelector" not in hook  # the pod template carries the label, not the workload
    covered = set()
    for rule in hook["rules"]:
        assert rule["operations"] == ["CREATE"], rule  # anything else is allowed untouched
        cluster = set(rule["resources"]) <= CLUSTER_SCOPED_RESOURCES
        assert rule["scope"] == ("Cluster" if cluster else "Namespaced"), rule
        for group in rule["apiGroups"]:
            for version in rule["apiVersions"]:
                for resource in rule["resources"]:
                    assert "/" not in resource, "subresources (status, scale) must not be matched"
                    covered.add((group, version, resource))
    assert covered == WORKLOAD_RESOURCES
    # every kind the server checks is routed to it, and nothing else
    from webhook.kinds import workloads

    assert {(g, r) for g, _, r in covered} == {(g, k.lower() + "s") for g, k in workloads.TEMPLATES}
    assert {"name": "not-webhook-namespace", "expression": NAMESPACE_CEL} in hook["matchConditions"]


def test_match_conditions_check_the_pod_label():
    """The CEL conditions the API server evaluates name the label, value and namespaces the
    webhook itself reads (webhook.core.keys) and runs in (the rendered Deployment)."""
    hooks = _webhooks(rendered("."))
    deployment_ns = _deployment()["metadata"]["namespace"]
    for hook_id in ("mutate-pods", "validate-pods"):
        conditions = {c["name"]: c["expression"] for c in hooks[hook_id]["matchConditions"]}
        label = re.fullmatch(
            r"has\(object\.metadata\.labels\) && '([^']+)' in object\.metadata\.labels"
            r" && object\.metadata\.labels\['([^']+)'\] == '([^']+)'",
            conditions["pod-opted-in"],
        )
        assert label, conditions["pod-opted-in"]
        assert label.group(1) == label.group(2) == keys.POD_INJECT and label.group(3) == keys.POD_INJECT_TRUE, hook_id
        skipped = set(re.findall(r"request\.namespace != '([^']+)'", conditions["not-webhook-namespace"]))
        assert skipped == {deployment_ns, "kube-system"}, (hook_id, skipped)


@pytest.mark.parametrize("hook_id", ["mutate-pods", "validate-pods", "validate-workloads"])
def test_namespace_selector_excludes_system_and_own_namespace(hook_id):
    hook = _webhooks(rendered("."))[hook_id]
    excluded = [
        e
        for e in hook["namespaceSelector"]["matchExpressions"]
        if e["key"] == "kubernetes.io/metadata.name" and e["operator"] == "NotIn"
    ]
    assert len(excluded) == 1 and {"kube-system", NAMESPACE} <= set(excluded[0]["values"])


# ---------------------------------------------------------------------------
# certificate overlays
# ---------------------------------------------------------------------------


def test_cert_manager_overlay():
    docs = rendered("overlays/cert-manager")
    issuers = {i["metadata"]["name"]: i["spec"] for i in find(docs, "Issuer")}
    certs = {c["metadata"]["name"]: c["spec"] for c in find(docs, "Certificate")}
    assert not find(docs, "ClusterIssuer")
    # self-signed Issuer -> CA Certificate -> CA Issuer -> serving Certificate
    [selfsigned] = [n for n, s in issuers.items() if "selfSigned" in s]
    [ca_cert] = [s for s in certs.values() if s.get("isCA")]
    assert ca_cert["issuerRef"]["name"] == selfsigned
    [ca_issuer] = [n for n, s in issuers.items() if s.get("ca", {}).get("secretName") == ca_cert["secretName"]]
    serving = certs["rdma-webhook-serving"]
    assert serving["issuerRef"]["name"] == ca_issuer and serving["issuerRef"].get("kind", "Issuer") == "Issuer"
    assert serving["secretName"] == "rdma-webhook-tls"
    assert sorted(serving["dnsNames"]) == sorted(DNS_NAMES)
    assert not find(docs, "Secret")  # cert-manager writes it
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        conf = one(docs, kind, "rdma-webhook")
        assert conf["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "rdma-webhook/rdma-webhook-serving"
        assert all("caBundle" not in h["clientConfig"] for h in conf["webhooks"])


def test_self_managed_overlay(self_managed):
    docs, certs = self_managed["docs"], self_managed["certs"]
    assert not [d for d in docs if d["apiVersion"].startswith("cert-manager.io/")]
    secret = one(docs, "Secret", "rdma-webhook-tls")
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"]["namespace"] == NAMESPACE
    for key in ("tls.crt", "tls.key", "ca.crt"):
        assert base64.b64decode(secret["data"][key]) == (certs / key).read_bytes(), key
    ca_bundle = base64.b64encode((certs / "ca.crt").read_bytes()).decode()
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        conf = one(docs, kind, "rdma-webhook")
        assert "cert-manager.io/inject-ca-from" not in conf["metadata"].get("annotations", {})
        for hook in conf["webhooks"]:
            # kustomize wraps long Secret data at 70 columns and the
            # replacement copies it as is; the API server's base64 decoder
            # (Go encoding/base64) skips the newlines, so compare decoded.
            value = hook["clientConfig"]["caBundle"]
            assert re.fullmatch(r"[A-Za-z0-9+/=\n]+", value), hook["name"]
            assert value.replace("\n", "") == ca_bundle, hook["name"]
    # `rdma-webhook certs` prints the same caBundle
    assert ca_bundle in self_managed["stdout"].replace("\n", "")
    # The serving certificate is valid for the Service's DNS names.
    from cryptography import x509

    cert = x509.load_pem_x509_certificate((certs / "tls.crt").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert DNS_NAMES[0] in sans


def test_self_managed_certs_are_git_ignored():
    overlay = DEPLOY / "overlays" / "self-managed"
    assert "certs/" in (overlay / ".gitignore").read_text().split()
    if shutil.which("git") and (REPO / ".git").exists():
        proc = subprocess.run(
            ["git", "-C", str(REPO), "check-ignore", "-q", "deploy/overlays/self-managed/certs/tls.key"],
            capture_output=True,
        )
        assert proc.returncode == 0, "deploy/overlays/self-managed/certs/ must be git-ignored"


def test_readme_documents_both_certificate_paths_and_the_port():
    readme = (DEPLOY / "README.md").read_text()
    assert "kubectl apply -k deploy/" in readme
    assert (
        "rdma-webhook certs --service rdma-webhook --namespace rdma-webhook --out deploy/overlays/self-managed/certs"
        in readme
    )
    assert "kubectl apply -k deploy/overlays/self-managed/" in readme
    assert "cert-manager" in readme
    assert "10250" in readme and "8443" in readme


# ---------------------------------------------------------------------------
# monitoring
# ---------------------------------------------------------------------------

_GRAFANA_VARS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects. Uses the promql-parser
    package (a real PromQL parser, which also rejects syntax errors) when it
    is installed, else a regex over our and kube-state-metrics' prefixes."""
    for var, value in _GRAFANA_VARS.items():
        expr = expr.replace(var, value)
    assert "$" not in expr, f"unknown Grafana variable in {expr!r}"
    try:
        import promql_parser
    except ImportError:
        stripped = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # label values are not names
        return set(re.findall(r"\b((?:rdma_webhook|kube)_[A-Za-z0-9_:]+)\b", stripped))
    names: set[str] = set()

    def visit(node):
        if isinstance(node, promql_parser.VectorSelector):
            name = node.name
            if name is None:
                name = next((m.value for m in node.matchers.matchers if m.name == "__name__"), None)
            assert name, f"selector without a metric name in {expr!r}"
            names.add(name)
        return True

    try:
        tree = promql_parser.parse(expr)
    except ValueError as e:
        pytest.fail(f"invalid PromQL {expr!r}: {e}")
    promql_parser.walk(tree, visit)
    return names


def _check_names(expr: str, where: str) -> set[str]:
    names = metric_names(expr)
    assert names, f"{where}: no metric in {expr!r}"
    unknown = names - EXPORTED_METRICS - EXTERNAL_METRICS
    assert not unknown, f"{where}: {sorted(unknown)} are neither exported by the server nor external"
    return names


def _alerts() -> list[dict]:
    rule = one(rendered("monitoring"), "PrometheusRule", "rdma-webhook")
    return [r for g in rule["spec"]["groups"] for r in g["rules"]]


def test_alerts_only_use_exported_metrics():
    used = set()
    for alert in _alerts():
        used |= _check_names(alert["expr"], alert.get("alert", alert.get("record")))
        assert alert["labels"]["severity"] in {"critical", "warning", "info"}, alert
        assert alert["annotations"]["summary"], alert
    assert len(_alerts()) >= 7
    # every one of our series is alerted on, except the latency sum/count
    assert used >= EXPORTED_METRICS - {
        "rdma_webhook_admission_duration_seconds_sum",
        "rdma_webhook_admission_duration_seconds_count",
    }


def _alert_matching(*fragments: str) -> dict:
    found = [a for a in _alerts() if all(f in " ".join(a["expr"].split()) for f in fragments)]
    assert found, f"no alert whose expr contains all of {fragments}"
    return found[0]


def test_required_alerts_exist():
    latency = _alert_matching("histogram_quantile(0.99", "rdma_webhook_admission_duration_seconds_bucket", "> 8")
    assert latency["labels"]["severity"] == "critical"
    _alert_matching("rdma_webhook_http_responses_total", 'code=~"5.."')
    _alert_matching("rdma_webhook_admissions_total", 'outcome="error"')
    _alert_matching('outcome="denied"', "offset 1h")
    _alert_matching("rdma_webhook_policy_last_reload_success", "== 0")
    _alert_matching("rdma_webhook_policy_reloads_total", 'result="failure"')
    _alert_matching("rdma_webhook_certificate_expiry_timestamp_seconds", "time()", "14 * 86400")
    _alert_matching(
        'kube_deployment_status_replicas_available{namespace="rdma-webhook",deployment="rdma-webhook"}', "< 2"
    )
    _alert_matching("rdma_webhook_cluster_cache_ready", "== 0")
    # the latency threshold stays below the pod webhooks' timeout
    hooks = _webhooks(rendered("."))
    assert 8 < hooks["mutate-pods"]["timeoutSeconds"]


def test_service_monitor_scrapes_metrics_over_https():
    docs = rendered("monitoring")
    sm = one(docs, "ServiceMonitor", "rdma-webhook")
    svc = one(rendered("."), "Service", SERVICE)
    assert _matches(sm["spec"]["selector"]["matchLabels"], svc["metadata"]["labels"])
    assert sm["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]
    [endpoint] = sm["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in svc["spec"]["ports"]}
    assert endpoint["scheme"] == "https" and endpoint["path"] == "/metrics"
    tls = endpoint["tlsConfig"]
    assert tls.get("insecureSkipVerify") or (
        tls["ca"]["secret"] == {"name": "rdma-webhook-tls", "key": "ca.crt"} and tls["serverName"] in DNS_NAMES
    )


def test_dashboard_panels_only_use_exported_metrics():
    dashboard = json.loads((DEPLOY / "monitoring" / "dashboard.json").read_text())
    panels = dashboard["panels"]
    assert panels
    used = set()
    for panel in panels:
        targets = panel.get("targets", [])
        assert targets, f"panel {panel['title']!r} has no query"
        for target in targets:
            used |= _check_names(target["expr"], f"panel {panel['title']!r}")
    assert used >= EXPORTED_METRICS
    # shipped to Grafana's dashboard sidecar unchanged
    cm = one(rendered("monitoring"), "ConfigMap", "rdma-webhook-dashboard")
    assert json.loads(cm["data"]["rdma-webhook.json"]) == dashboard
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"


def test_promql_parser_accepts_every_expression():
    pytest.importorskip("promql_parser", reason="pip install promql-parser for a full PromQL syntax check")
    for alert in _alerts():
        metric_names(alert["expr"])  # fails on a syntax error


# ---------------------------------------------------------------------------
# Containerfile
# ---------------------------------------------------------------------------


def _instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_containerfile():
    instructions = _instructions((REPO / "Containerfile").read_text())
    args = dict(rest.split("=", 1) for word, rest in instructions if word == "ARG" and "=" in rest)
    base = args["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.\d+\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", base), base
    froms = [rest for word, rest in instructions if word == "FROM"]
    assert len(froms) >= 2, "multi-stage build"
    assert ("USER", "65532:65532") in instructions
    assert ("EXPOSE", "8443") in instructions
    build_stage = instructions[: [i for i, (word, _) in enumerate(instructions) if word == "FROM"][1]]
    assert any(word == "RUN" and "gcc" in rest for word, rest in build_stage), (
        "mypyc needs a compiler to build the wheel"
    )
    assert any(word == "COPY" and "setup.py" in rest.split() for word, rest in build_stage)
    assert any(word == "RUN" and "webhook.compiled()" in rest for word, rest in build_stage), (
        "the image checks its core is compiled"
    )
    assert ("ENTRYPOINT", '["rdma-webhook"]') in instructions
    [cmd] = [rest for word, rest in instructions if word == "CMD"]
    assert json.loads(cmd) == SERVE_ARGS
    # the catalogue goes where `review --policy` finds it, and nothing is enforced until an install
    # mounts its chosen policies over the empty /etc/rdma-webhook/policies
    from webhook.policy.load import IMAGE_CATALOGUE

    assert any(word == "COPY" and rest.split() == ["policies/", f"{IMAGE_CATALOGUE}/"] for word, rest in instructions)
    assert not any(word == "COPY" and "/etc/rdma-webhook/policies" in rest for word, rest in instructions)
    assert ("RUN", "mkdir -p /etc/rdma-webhook/policies") in instructions


def test_containerignore():
    entries = set((REPO / ".containerignore").read_text().split())
    assert {".venv", "tests", "mutation", ".git", "certs"} <= entries
    for needed in ("pyproject.toml", "README.md", "webhook", "policies"):
        assert needed not in entries


def test_the_verifier_is_installed_by_default_and_its_component_off_removes_it(tmp_path):
    """deploy/ includes deploy/verifier/ (its ServiceAccount, exactly the RBAC it uses, its
    Deployment on the same policies ConfigMap); `components: [.../verifier/off]` removes all four."""
    docs = rendered(".")
    names = sorted((d["kind"], d["metadata"]["name"]) for d in docs if "verifier" in d["metadata"]["name"])
    assert names == [
        ("ClusterRole", "rdma-webhook-verifier"),
        ("ClusterRoleBinding", "rdma-webhook-verifier"),
        ("Deployment", "rdma-webhook-verifier"),
        ("ServiceAccount", "rdma-webhook-verifier"),
    ]
    rel = os.path.relpath(DEPLOY, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(f"resources: [{rel}]\ncomponents: [{rel}/verifier/off]\n")
    proc = subprocess.run(["kubectl", "kustomize", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    off = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert [d for d in off if "verifier" in d["metadata"]["name"]] == []
    assert sorted((d["kind"], d["metadata"]["name"]) for d in off) == sorted(
        (d["kind"], d["metadata"]["name"]) for d in docs if "verifier" not in d["metadata"]["name"]
    )
