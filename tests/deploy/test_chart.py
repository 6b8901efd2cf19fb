"""The Helm chart, charts/rdma-webhook/ (issue 26): `helm lint`, `helm template` for the default
values and each documented combination, every rendered object validated against the newest
Kubernetes schemas kubernetes-validate ships (1.37.0 with kubernetes-validate 1.37.0; the test
fails if that is older than 1.37), the values schema refusing bad values with a clear message,
and the chart's objects equal to kustomize's deploy/ for the same choices.

Helm is built from the Go module proxy by scripts/build-helm.sh (cached in ~/.cache) the first
time; RDMA_WEBHOOK_HELM names another binary.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import shutil
import subprocess
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from fake_apiserver import JsonHandler

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "rdma-webhook"
CATALOGUE = REPO / "policies"  # the source; the chart's policies/ holds the copies `make catalogue` makes
CHART_POLICIES = CHART / "policies"
NAMES = sorted(p.stem for p in CATALOGUE.glob("*.yaml"))
RELEASE, NAMESPACE = "rdma-webhook", "rdma-webhook"
CRD_KINDS = {
    ("cert-manager.io/v1", "Certificate"),
    ("cert-manager.io/v1", "Issuer"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}
K8S_SCHEMAS = "1.37"


@functools.lru_cache(maxsize=None)
def helm() -> str:
    if os.environ.get("RDMA_WEBHOOK_HELM"):
        return os.environ["RDMA_WEBHOOK_HELM"]
    if shutil.which("go") is None:
        pytest.fail("go is not on PATH: scripts/build-helm.sh builds Helm with it", pytrace=False)
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "build-helm.sh")], capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0, f"scripts/build-helm.sh failed:\n{proc.stderr[-3000:]}"
    return proc.stdout.strip().splitlines()[-1]


def run_helm(*args: str) -> subprocess.CompletedProcess:
    # HOME and the Helm folders in a temporary place: Helm writes nothing into the checkout or ~
    env = {
        **os.environ,
        "HELM_CACHE_HOME": "/tmp/rdma-webhook-helm-test/cache",
        "HELM_CONFIG_HOME": "/tmp/rdma-webhook-helm-test/config",
        "HELM_DATA_HOME": "/tmp/rdma-webhook-helm-test/data",
    }
    return subprocess.run([helm(), *args], capture_output=True, text=True, timeout=300, env=env)


def template(
    *sets: str, values: dict | None = None, release: str = RELEASE, namespace: str = NAMESPACE, tmp: Path | None = None
) -> list[dict]:
    args = ["template", release, str(CHART), "--namespace", namespace]
    for s in sets:
        args += ["--set", s]
    if values is not None:
        assert tmp is not None
        f = tmp / "values.yaml"
        f.write_text(yaml.safe_dump(values))
        args += ["--values", str(f)]
    proc = run_helm(*args)
    assert proc.returncode == 0, f"helm {' '.join(args)} failed:\n{proc.stderr}"
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert docs
    return docs


def refused(*sets: str) -> str:
    proc = run_helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *[a for s in sets for a in ("--set", s)])
    assert proc.returncode != 0, f"helm template accepted {sets}"
    return proc.stderr


def find(docs, kind, name=None):
    """The objects of `kind` (named `name`; None: the webhook's own, not the verifier's, which
    test_the_verifier_* below read by name)."""
    return [
        d
        for d in docs
        if d["kind"] == kind
        and (d["metadata"]["name"] == name if name is not None else not d["metadata"]["name"].endswith("-verifier"))
    ]


def one(docs, kind, name=None) -> dict:
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def policies(docs) -> dict[str, bytes]:
    cm = one(docs, "ConfigMap", f"{RELEASE}-policies")
    assert "binaryData" not in cm
    return {k: v.encode() for k, v in (cm.get("data") or {}).items()}


def webhooks(docs) -> list[dict]:
    return [
        h
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        for h in one(docs, kind)["webhooks"]
    ]


# --- Kubernetes schemas ---------------------------------------------------------------------------


def newest_schemas() -> str:
    import kubernetes_validate

    version = kubernetes_validate.latest_version()
    assert tuple(int(p) for p in version.split(".")[:2]) >= (1, 37), (
        f"kubernetes-validate {version} has no {K8S_SCHEMAS} schemas: upgrade it"
    )
    return version


def validate_all(docs: list[dict]) -> int:
    import kubernetes_validate

    version = newest_schemas()
    checked = 0
    for obj in docs:
        what = f"{obj['kind']}/{obj['metadata']['name']}"
        if (obj["apiVersion"], obj["kind"]) in CRD_KINDS:
            assert obj["metadata"].get("namespace") and isinstance(obj.get("spec"), dict), what
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{what} is invalid for Kubernetes {version}: {e.message} at {list(e.path)}")
        checked += 1
    return checked


# The documented combinations (charts/rdma-webhook/README.md), each rendered and validated.
COMBINATIONS = {
    "default": [],
    "one-policy": ["policies.enabled={ib-shared}"],
    "whole-catalogue": ["policies.enabled={" + ",".join(NAMES) + "}"],
    "cert-manager": ["certificates.source=certManager"],
    "cert-manager-issuer": [
        "certificates.source=certManager",
        "certificates.certManager.issuerRef.name=corp-ca",
        "certificates.certManager.issuerRef.kind=ClusterIssuer",
    ],
    "provided": [
        "certificates.source=provided",
        "certificates.provided.secretName=my-tls",
        "certificates.provided.caCert=-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    ],
    "chart-certs": ["certificates.source=chart", "certificates.chart.extraIPs={127.0.0.1}"],
    "monitoring": [
        "monitoring.serviceMonitor.enabled=true",
        "monitoring.prometheusRule.enabled=true",
        "monitoring.dashboard.enabled=true",
    ],
    "network-policy": ["networkPolicy.enabled=true"],
    "admission-policy": ["policies.enabled={" + ",".join(NAMES) + "}", "finalStateCheck.mode=admissionPolicy"],
    "admission-policy-dry-run": [
        "policies.enabled={erdma}",
        "finalStateCheck.mode=admissionPolicy",
        "finalStateCheck.dryRun=true",
    ],
    "url": ["webhook.url=https://127.0.0.1:8443", "deployment.enabled=false"],
    "scheduling": [
        "replicaCount=3",
        "priorityClassName=rdma-webhook-critical",
        "nodeSelector.pool=system",
        "tolerations[0].key=dedicated",
        "tolerations[0].operator=Exists",
        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
        ".matchExpressions[0].key=pool",
        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
        ".matchExpressions[0].operator=Exists",
        "resources.requests.cpu=500m",
        "podDisruptionBudget.minAvailable=2",
    ],
}


def test_helm_lint():
    proc = run_helm("lint", str(CHART), "--strict")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


def test_helm_is_the_pinned_release():
    pinned = next(
        line.split("=", 1)[1].split()[0]
        for line in (REPO / "scripts" / "build-helm.sh").read_text().splitlines()
        if line.startswith("HELM_VERSION=")
    )
    proc = run_helm("version", "--template", "{{.Version}}")
    assert proc.stdout.strip() == pinned


@pytest.mark.parametrize("combination", sorted(COMBINATIONS))
def test_every_combination_renders_valid_objects(combination):
    docs = template(*COMBINATIONS[combination])
    assert validate_all(docs) >= 5


# --- safe by default --------------------------------------------------------------------------------


def test_default_values_enforce_no_policy():
    docs = template()
    assert policies(docs) == {}
    dep = one(docs, "Deployment")
    vols = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert vols["policies"]["configMap"]["name"] == f"{RELEASE}-policies"


def test_one_policy_by_name_enforces_exactly_that_one():
    assert policies(template("policies.enabled={ib-shared}")) == {
        "ib-shared.yaml": (CHART_POLICIES / "ib-shared.yaml").read_bytes()
    }


def test_the_whole_catalogue_is_byte_identical():
    """To the chart's copies: policies/ with the line saying they are generated (tests/deploy/test_catalogue.py)."""
    assert policies(template(*COMBINATIONS["whole-catalogue"])) == {
        f"{n}.yaml": (CHART_POLICIES / f"{n}.yaml").read_bytes() for n in NAMES
    }


def test_inline_policy_beside_a_catalogue_one(tmp_path):
    own = (CATALOGUE / "sriov-roce.yaml").read_text().replace("name: sriov-roce\n", "name: my-fabric\n")
    docs = template(values={"policies": {"enabled": ["efa"], "inline": {"my-fabric.yaml": own}}}, tmp=tmp_path)
    assert policies(docs) == {"efa.yaml": (CHART_POLICIES / "efa.yaml").read_bytes(), "my-fabric.yaml": own.encode()}


def test_a_policy_change_rolls_the_deployment():
    def checksum(*sets):
        return one(template(*sets), "Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/policies"]

    assert checksum() != checksum("policies.enabled={ib-shared}") != checksum("policies.enabled={efa}")
    assert checksum("policies.enabled={efa}") == checksum("policies.enabled={efa}")


def test_existing_configmap():
    docs = template("policies.existingConfigMap=my-policies")
    assert not [d for d in find(docs, "ConfigMap") if d["metadata"]["name"].endswith("-policies")]
    vols = {v["name"]: v for v in one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert vols["policies"]["configMap"]["name"] == "my-policies"
    assert "policies.enabled and policies.inline must be empty" in refused(
        "policies.existingConfigMap=my-policies", "policies.enabled={efa}"
    )


# --- certificates ---------------------------------------------------------------------------------


def _ca_bundles(docs) -> set[str]:
    return {h["clientConfig"].get("caBundle") for h in webhooks(docs)}


def test_chart_made_certificates():
    from cryptography import x509

    docs = template("certificates.chart.extraIPs={127.0.0.1}", "certificates.chart.extraDNSNames={webhook.example}")
    secret = one(docs, "Secret", f"{RELEASE}-tls")
    assert secret["type"] == "kubernetes.io/tls"
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    assert sorted(data) == ["ca.crt", "tls.crt", "tls.key"]
    assert _ca_bundles(docs) == {secret["data"]["ca.crt"]}
    ca = x509.load_pem_x509_certificate(data["ca.crt"])
    cert = x509.load_pem_x509_certificate(data["tls.crt"])
    cert.verify_directly_issued_by(ca)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.DNSName)) == {
        f"{RELEASE}.{NAMESPACE}.svc",
        f"{RELEASE}.{NAMESPACE}.svc.cluster.local",
        "webhook.example",
    }
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert not find(docs, "Certificate") and not find(docs, "Issuer")
    vols = {v["name"]: v for v in one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert vols["tls"]["secret"]["secretName"] == f"{RELEASE}-tls"


class _SecretServer(ThreadingHTTPServer):
    """The two calls `lookup "v1" "Secret"` makes of an API server under `helm template
    --dry-run=server`: the discovery of the core group (/api/v1) and the GET of the Secret
    (`secret`, or 404 when None). Every path asked for is recorded in `asked`."""

    def __init__(self, secret: dict | None):
        self.secret, self.asked = secret, []
        super().__init__(("127.0.0.1", 0), _SecretHandler)


class _SecretHandler(JsonHandler):
    server: _SecretServer

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        self.server.asked.append(path)
        doc, code = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}, 404
        if path == "/api/v1":
            resource = {"name": "secrets", "singularName": "secret", "namespaced": True, "kind": "Secret"}
            doc, code = (
                {"kind": "APIResourceList", "groupVersion": "v1", "resources": [{**resource, "verbs": ["get"]}]},
                200,
            )
        elif path == f"/api/v1/namespaces/{NAMESPACE}/secrets/{RELEASE}-tls" and self.server.secret is not None:
            doc, code = self.server.secret, 200
        self.send_json(code, doc)


def _template_against(secret: dict | None, tmp: Path) -> tuple[list[dict], list[str]]:
    """`helm template --dry-run=server` against a stand-in API server holding `secret` (the
    release's TLS Secret, None: none): where `lookup` reads a cluster. (The rendered docs, the
    paths the server was asked for.)"""
    server = _SecretServer(secret)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        kubeconfig = tmp / "kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                    "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                    "current-context": "c",
                }
            )
        )
        args = [
            "template",
            RELEASE,
            str(CHART),
            "--namespace",
            NAMESPACE,
            "--dry-run=server",
            "--kubeconfig",
            str(kubeconfig),
        ]
        proc = run_helm(*args)
        assert proc.returncode == 0, f"helm {' '.join(args)} failed:\n{proc.stderr}"
        return [d for d in yaml.safe_load_all(proc.stdout) if d], server.asked
    finally:
        server.shutdown()
        server.server_close()


def test_chart_certificates_are_kept_from_the_existing_secret(tmp_path):
    """`lookup` of the release's TLS Secret, read from a stand-in API server (`helm template`
    alone has no cluster, so there lookup finds nothing and every run makes a new CA; e2e/test_helm.py
    checks a real `helm upgrade` keeps it): a Secret with a certificate, key and CA is rendered
    again as it is, and its CA is both webhooks' caBundle; a Secret that lacks one of them, or
    none, gets a new CA, a new one each time."""
    kept = {"tls.crt": base64.b64encode(b"CERT").decode(), "tls.key": base64.b64encode(b"KEY").decode()}
    kept["ca.crt"] = base64.b64encode(b"CA").decode()
    existing = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"{RELEASE}-tls", "namespace": NAMESPACE},
        "type": "kubernetes.io/tls",
        "data": kept,
    }
    docs, asked = _template_against(existing, tmp_path)
    assert f"/api/v1/namespaces/{NAMESPACE}/secrets/{RELEASE}-tls" in asked
    assert one(docs, "Secret", f"{RELEASE}-tls")["data"] == kept
    assert _ca_bundles(docs) == {kept["ca.crt"]}
    partial = {**existing, "data": {k: v for k, v in kept.items() if k != "tls.key"}}
    made = []
    for secret in (partial, None, None):
        docs, asked = _template_against(secret, tmp_path)
        data = one(docs, "Secret", f"{RELEASE}-tls")["data"]
        assert data["ca.crt"] != kept["ca.crt"] and data["tls.crt"] != kept["tls.crt"]
        assert _ca_bundles(docs) == {data["ca.crt"]}
        made.append(data["ca.crt"])
    assert len(set(made)) == len(made)  # generated afresh each time (as under `helm template`, which finds nothing)


def test_cert_manager():
    docs = template("certificates.source=certManager")
    assert not find(docs, "Secret")
    assert _ca_bundles(docs) == {None}
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        assert one(docs, kind)["metadata"]["annotations"] == {
            "cert-manager.io/inject-ca-from": f"{NAMESPACE}/{RELEASE}-serving"
        }
    serving = one(docs, "Certificate", f"{RELEASE}-serving")["spec"]
    assert serving["secretName"] == f"{RELEASE}-tls"
    assert serving["issuerRef"] == {"group": "cert-manager.io", "kind": "Issuer", "name": f"{RELEASE}-ca"}
    docs = template(*COMBINATIONS["cert-manager-issuer"])
    assert not find(docs, "Issuer") and len(find(docs, "Certificate")) == 1
    assert one(docs, "Certificate")["spec"]["issuerRef"] == {"kind": "ClusterIssuer", "name": "corp-ca"}


def test_provided_certificates():
    ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    docs = template(*COMBINATIONS["provided"])
    assert not find(docs, "Secret") and not find(docs, "Certificate")
    assert _ca_bundles(docs) == {base64.b64encode(ca.encode()).decode()}
    vols = {v["name"]: v for v in one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert vols["tls"]["secret"]["secretName"] == "my-tls"
    sm = one(template(*COMBINATIONS["provided"], "monitoring.serviceMonitor.enabled=true"), "ServiceMonitor")
    assert sm["spec"]["endpoints"][0]["tlsConfig"]["ca"]["secret"] == {"name": "my-tls", "key": "ca.crt"}


# --- where the API server calls ------------------------------------------------------------------------


def test_service_mode():
    for hook in webhooks(template()):
        service = hook["clientConfig"]["service"]
        assert service == {"name": RELEASE, "namespace": NAMESPACE, "path": service["path"], "port": 443}
        assert "url" not in hook["clientConfig"]


def test_url_mode():
    docs = template(*COMBINATIONS["url"])
    paths = {h["name"]: h["clientConfig"]["url"] for h in webhooks(docs)}
    assert paths == {
        "pods.mutate.rdma-webhook.io": "https://127.0.0.1:8443/mutate",
        "pods.validate.rdma-webhook.io": "https://127.0.0.1:8443/validate",
        "workloads.validate.rdma-webhook.io": "https://127.0.0.1:8443/validate",
    }
    assert all("service" not in h["clientConfig"] and h["clientConfig"]["caBundle"] for h in webhooks(docs))
    assert not find(docs, "Deployment") and not find(docs, "PodDisruptionBudget")


def test_other_release_namespace_is_excluded_by_the_selectors_and_cel():
    docs = template(release="rdma", namespace="gpu-admission")
    for hook in webhooks(docs):
        names = [e for e in hook["namespaceSelector"]["matchExpressions"] if e["key"] == "kubernetes.io/metadata.name"]
        assert names == [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "gpu-admission"]}
        ]
        cel = {c["name"]: c["expression"] for c in hook["matchConditions"]}
        assert (
            cel["not-webhook-namespace"] == "request.namespace != 'gpu-admission' && request.namespace != 'kube-system'"
        )
        if "service" in hook["clientConfig"]:
            assert hook["clientConfig"]["service"]["name"] == "rdma-rdma-webhook"


# --- scheduling, extras ----------------------------------------------------------------------------------


def test_scheduling_values_reach_the_pod():
    docs = template(*COMBINATIONS["scheduling"])
    dep = one(docs, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    assert dep["spec"]["replicas"] == 3
    assert pod["priorityClassName"] == "rdma-webhook-critical"
    assert pod["nodeSelector"] == {"pool": "system"}
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    assert pod["affinity"]["nodeAffinity"]
    assert pod["containers"][0]["resources"]["requests"]["cpu"] == "500m"
    assert one(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 2
    default = one(template(), "Deployment")["spec"]["template"]["spec"]
    assert "priorityClassName" not in default and "nodeSelector" not in default and "tolerations" not in default


def test_extras_are_opt_in():
    kinds = {d["kind"] for d in template()}
    assert not kinds & {"ServiceMonitor", "PrometheusRule", "NetworkPolicy"}
    assert [d["metadata"]["name"] for d in find(template(), "ConfigMap")] == [f"{RELEASE}-policies"]


def test_network_policy():
    np_ = one(template("networkPolicy.enabled=true"), "NetworkPolicy")
    assert np_["spec"]["ingress"] == [{"ports": [{"port": 8443, "protocol": "TCP"}]}]
    assert {p["port"] for r in np_["spec"]["egress"] for p in r["ports"]} == {443, 6443, 53}
    dep = one(template("networkPolicy.enabled=true"), "Deployment")
    assert all(
        dep["spec"]["template"]["metadata"]["labels"].get(k) == v
        for k, v in np_["spec"]["podSelector"]["matchLabels"].items()
    )
    narrowed = one(
        template("networkPolicy.enabled=true", "networkPolicy.ingressFrom[0].ipBlock.cidr=10.0.0.0/24"), "NetworkPolicy"
    )
    assert narrowed["spec"]["ingress"][0]["from"] == [{"ipBlock": {"cidr": "10.0.0.0/24"}}]


# --- the values schema ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad, message",
    [
        (
            "policies.enabled={infiniband}",
            "value must be one of 'coreweave-ib', 'efa', 'efa-dra', 'erdma', 'gb200-roce', 'gke', 'gke-gib'",
        ),
        ("certificates.source=vault", "value must be one of 'chart', 'certManager', 'provided'"),
        ("replicaCount=0", "/replicaCount"),
        ("webhook.url=http://127.0.0.1:8443", "/webhook/url"),
        ("monitoring.serviceMonitor.enabeld=true", "additional properties 'enabeld' not allowed"),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        ("certificates.source=provided", "/certificates/provided/caCert"),
        ("networkPolicy.apiServerPorts={0}", "/networkPolicy/apiServerPorts/0"),
        ("finalStateCheck.mode=policy", "value must be one of 'webhook', 'admissionPolicy'"),
    ],
)
def test_bad_values_fail_with_a_clear_message(bad, message):
    err = refused(bad)
    assert "values don't meet the specifications of the schema" in err, err
    assert message in err, err


def test_schema_enum_is_the_catalogue():
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["properties"]["policies"]["properties"]["enabled"]["items"]["enum"] == NAMES


# --- the same objects as kustomize's deploy/ ---------------------------------------------------------------

HELM_ONLY_KEYS = {
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/version",
    "helm.sh/chart",
    "checksum/policies",
}


def _normalise(value):
    """Helm's own labels and the policy checksum dropped, kustomize's hash suffix of the policies
    ConfigMap's name removed; everything else compared as is."""
    if isinstance(value, dict):
        out = {k: _normalise(v) for k, v in value.items() if k not in HELM_ONLY_KEYS}
        return {k: v for k, v in out.items() if not (k in ("annotations", "labels") and v == {})}
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    if isinstance(value, str) and value.startswith("rdma-webhook-policies-"):
        return "rdma-webhook-policies"
    return value


def _kustomize(folder: Path) -> list[dict]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl not found on PATH (kubectl kustomize renders deploy/)", pytrace=False)
    proc = subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def _by_key(docs) -> dict:
    return {(d["kind"], _normalise(d["metadata"]["name"])): _normalise(d) for d in docs}


@pytest.mark.parametrize(
    "chosen,policy_mode",
    [([], False), (["ib-shared"], False), (NAMES, False), (["erdma", "sriov-roce"], True), (NAMES, True)],
    ids=["none", "one", "all", "two-policy-mode", "all-policy-mode"],
)
def test_chart_equals_kustomize_with_cert_manager(tmp_path, chosen, policy_mode):
    """The policy mode too: finalStateCheck.mode=admissionPolicy against the components
    deploy/admission-policy/NAME and deploy/admission-policy/mode."""
    rel = os.path.relpath(REPO / "deploy", tmp_path)
    components = [f"{rel}/catalogue/{n}" for n in chosen]
    if policy_mode:
        components += [f"{rel}/admission-policy/{n}" for n in chosen] + [f"{rel}/admission-policy/mode"]
    (tmp_path / "kustomization.yaml").write_text(
        f"resources: [{rel}]\n" + (f"components: [{', '.join(components)}]\n" if components else "")
    )
    kustomize = _by_key(_kustomize(tmp_path))
    sets = ["certificates.source=certManager"] + (["policies.enabled={" + ",".join(chosen) + "}"] if chosen else [])
    sets += ["finalStateCheck.mode=admissionPolicy"] if policy_mode else []
    assert sum(k[0] == "ValidatingAdmissionPolicy" for k in kustomize) == (len(chosen) if policy_mode else 0)
    chart = _by_key(template(*sets))
    # The chart creates no Namespace (`helm install --create-namespace`, Helm's convention);
    # deploy/'s carries the Pod Security and opt-out labels that deploy/README.md asks Helm users to add.
    assert kustomize.pop(("Namespace", NAMESPACE))["metadata"]["labels"]["rdma-webhook.io/injection"] == "disabled"
    assert sorted(chart) == sorted(kustomize)
    for key in kustomize:
        k, c = kustomize[key], chart[key]
        # labels: kustomize's are a subset of the chart's (which adds app.kubernetes.io/component
        # to the Deployment's own labels)
        k_labels, c_labels = k["metadata"].pop("labels", {}), c["metadata"].pop("labels", {})
        assert k_labels.items() <= c_labels.items(), (key, k_labels, c_labels)
        if key[0] == "Deployment":
            for doc in (k, c):
                doc["spec"]["template"]["metadata"].pop("annotations", None)
        assert c == k, f"{key} differs between the chart and kustomize"


def test_chart_monitoring_equals_kustomize_monitoring():
    kustomize = _by_key(_kustomize(REPO / "deploy" / "monitoring"))
    chart = {
        key: doc
        for key, doc in _by_key(template(*COMBINATIONS["monitoring"])).items()
        if key[0] in ("ServiceMonitor", "PrometheusRule") or key == ("ConfigMap", "rdma-webhook-dashboard")
    }
    assert sorted(chart) == sorted(kustomize)
    for key in kustomize:
        k, c = kustomize[key], chart[key]
        assert {name: v for name, v in c["metadata"]["labels"].items()} == k["metadata"]["labels"], key
        if key[0] == "ConfigMap":
            assert json.loads(c["data"]["rdma-webhook.json"]) == json.loads(k["data"]["rdma-webhook.json"])
            assert c["data"]["rdma-webhook.json"] == k["data"]["rdma-webhook.json"]
            continue
        assert c == k, f"{key} differs between the chart and deploy/monitoring"


@pytest.mark.parametrize("name", ["dashboard.json", "prometheusrule.yaml"])
def test_chart_monitoring_files_are_byte_identical(name):
    assert (CHART / "files" / name).read_bytes() == (REPO / "deploy" / "monitoring" / name).read_bytes(), (
        f"copy deploy/monitoring/{name} to charts/rdma-webhook/files/ again"
    )


# --- the final-state check's policy mode ---------------------------------------------------------------------


def test_policy_mode_objects_are_the_generators(tmp_path):
    """What the chart renders for finalStateCheck.mode=admissionPolicy is what `rdma-webhook
    policy admission-policy` makes from policies.enabled, with the dry run in the binding; the pod webhook of /validate is gone, the
    workloads' one stays; the webhook gets read-only access and the --check-admission-policy flag."""
    from webhook.policy import admission_policy as ap
    from webhook.policy.load import load_texts

    chosen = ["erdma", "sriov-roce"]
    wanted, errors = load_texts([(f"{n}.yaml", (CATALOGUE / f"{n}.yaml").read_text()) for n in chosen])
    assert wanted is not None, errors
    docs = template(
        "policies.enabled={erdma,sriov-roce}",
        "finalStateCheck.mode=admissionPolicy",
        "finalStateCheck.dryRun=true",
        release="other",
        namespace="gpu-admission",
    )
    got = [d for d in docs if d["kind"] in (ap.POLICY_KIND, ap.BINDING_KIND)]
    expected = ap.objects(wanted, ap.DRY_RUN)  # unchanged by the release namespace: they select by our label

    def order(d):
        return d["kind"], d["metadata"]["name"]  # helm sorts its output by kind

    assert sorted(got, key=order) == sorted(expected, key=order)
    assert (
        ap.mismatches(
            wanted, [d for d in got if d["kind"] == ap.POLICY_KIND], [d for d in got if d["kind"] == ap.BINDING_KIND]
        )
        == []
    )
    assert [h["name"] for h in one(docs, "ValidatingWebhookConfiguration")["webhooks"]] == [
        "workloads.validate.rdma-webhook.io"
    ]
    assert "--check-admission-policy" in one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    rules = one(docs, "ClusterRole")["rules"]
    assert [r for r in rules if r["apiGroups"] == ["admissionregistration.k8s.io"]] == [
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["validatingadmissionpolicies", "validatingadmissionpolicybindings"],
            "verbs": ["get", "list", "watch"],
        }
    ]
    # the webhook mode (the default) has none of it
    default = template("policies.enabled={erdma}")
    assert not find(default, ap.POLICY_KIND) and not find(default, ap.BINDING_KIND)
    assert "pods.validate.rdma-webhook.io" in [
        h["name"] for h in one(default, "ValidatingWebhookConfiguration")["webhooks"]
    ]
    assert all("admissionregistration.k8s.io" not in r["apiGroups"] for r in one(default, "ClusterRole")["rules"])


# --- the verifier (rdma-webhook verify) ---------------------------------------------------------------


def test_the_verifier_is_in_the_default_install_with_exactly_what_it_uses():
    docs = template()
    name = "rdma-webhook-verifier"
    dep = one(docs, "Deployment", name)
    [ctr] = dep["spec"]["template"]["spec"]["containers"]
    assert ctr["args"] == ["verify", "--policies", "/etc/rdma-webhook/policies", "--metrics-port", "9090"]
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["template"]["spec"]["serviceAccountName"] == name
    assert ctr["securityContext"]["readOnlyRootFilesystem"] and ctr["securityContext"]["capabilities"] == {
        "drop": ["ALL"]
    }
    webhook_selector = one(docs, "Service")["spec"]["selector"]
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert not all(pod_labels.get(k) == v for k, v in webhook_selector.items())  # not behind the webhook's Service
    policies_volume = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}["policies"]
    webhook_volume = {v["name"]: v for v in one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]}["policies"]
    assert policies_volume == webhook_volume  # the same policies as the webhook's
    rules = one(docs, "ClusterRole", name)["rules"]
    assert sorted((r["apiGroups"][0], r["resources"][0], tuple(r["verbs"])) for r in rules) == [
        ("", "pods", ("list", "watch")),
        ("", "pods/eviction", ("create",)),
        ("", "pods/log", ("get",)),
        ("", "pods/status", ("patch",)),
        ("events.k8s.io", "events", ("create",)),
    ]
    deploy_rules = [d for d in yaml.safe_load_all((REPO / "deploy" / "verifier" / "rbac.yaml").read_text()) if d]
    assert one(deploy_rules, "ClusterRole", name)["rules"] == rules  # kustomize's and the chart's agree
    binding = one(docs, "ClusterRoleBinding", name)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": "rdma-webhook"}]


def test_the_verifier_can_be_switched_off_or_narrowed_to_one_namespace():
    assert [d for d in template("verifier.enabled=false") if "verifier" in d["metadata"]["name"]] == []
    docs = template("verifier.namespace=ml-training")
    name = "rdma-webhook-verifier"
    assert find(docs, "ClusterRoleBinding", name) == []
    binding = one(docs, "RoleBinding", name)
    assert binding["metadata"]["namespace"] == "ml-training" and binding["roleRef"]["kind"] == "ClusterRole"
    args = one(docs, "Deployment", name)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-2:] == ["--namespace", "ml-training"]
