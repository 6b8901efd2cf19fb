"""The Helm chart (charts/rdma-webhook) installed and upgraded into the real control plane.

Here the chart runs without the node (e2e/test_node_chart.py installs it on the node, Deployment
and Service included): it is installed in its URL mode (`webhook.url`, `deployment.enabled=false`), which points both webhook configurations at a
webhook process on the host, and that process is started with what the chart made: the serving
certificate and CA of the chart's Secret (`certificates.source=chart`, with 127.0.0.1 as an extra
IP address), the policy files of the chart's ConfigMap (`policies.enabled={ib-shared}`), and a
token of the chart's ServiceAccount (so the chart's RBAC is what it lists and watches with).
A labelled pod in an opted-in namespace is then mutated through the chart-made configuration;
`helm upgrade` keeps the CA (Secret and caBundle) and the pods are still admitted; `helm
uninstall` removes the configurations. Every object of the default install and of the chart with
all its opt-in parts is also applied with `--dry-run=server`.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from e2e import cluster as c
from e2e.conftest import OPT_IN, create, gpu_pod, make_namespace, pod_path, stored, unique

CHART = c.ROOT / "charts" / "rdma-webhook"
RELEASE = NAMESPACE = "helm-e2e"
FULLNAME = f"{RELEASE}-rdma-webhook"


@pytest.fixture(scope="module")
def helm(cp, workdir):
    proc = subprocess.run(
        ["bash", str(c.ROOT / "scripts" / "build-helm.sh")], capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    binary = proc.stdout.strip().splitlines()[-1]
    home = Path(workdir) / "helm-home"
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
        "KUBECONFIG": str(cp.admin_kubeconfig),
    }

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run([binary, *args], capture_output=True, text=True, timeout=300, env=env)
        if check:
            assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
        return result

    return run


def _sets(**values: str) -> list[str]:
    return [a for k, v in values.items() for a in ("--set", f"{k.replace('__', '.')}={v}")]


def _configurations(cp) -> dict[str, dict]:
    out = {}
    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        out[kind] = stored(cp, f"/apis/admissionregistration.k8s.io/v1/{kind}/{FULLNAME}")
    return out


def _secret(cp) -> dict[str, bytes]:
    data = stored(cp, f"/api/v1/namespaces/{NAMESPACE}/secrets/{FULLNAME}-tls")["data"]
    return {k: base64.b64decode(v) for k, v in data.items()}


def _write_files(folder: Path, files: dict[str, bytes]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (folder / name).write_bytes(content)
        (folder / name).chmod(0o600)
    return folder


def test_helm_install_mutates_through_the_chart_and_upgrade_keeps_the_ca(cp, helm, workdir):
    port = c.free_port()
    url = f"https://127.0.0.1:{port}"
    values = _sets(
        **{
            "policies.enabled": "{ib-shared}",
            "webhook.url": url,
            "deployment.enabled": "false",
            "certificates.source": "chart",
            "certificates.chart.extraIPs": "{127.0.0.1}",
        }
    )
    helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace", *values)
    served: c.Webhook | None = None
    try:
        # what the chart made, as the Deployment's pod would have mounted it
        secret = _secret(cp)
        certs = _write_files(Path(workdir) / "helm-certs", {k: secret[k] for k in ("tls.crt", "tls.key", "ca.crt")})
        cm = stored(cp, f"/api/v1/namespaces/{NAMESPACE}/configmaps/{FULLNAME}-policies")
        assert sorted(cm["data"]) == ["ib-shared.yaml"]
        assert cm["data"]["ib-shared.yaml"].encode() == (CHART / "policies" / "ib-shared.yaml").read_bytes()
        policies = _write_files(Path(workdir) / "helm-policies", {k: v.encode() for k, v in cm["data"].items()})
        before = _configurations(cp)
        for conf in before.values():
            for hook in conf["webhooks"]:
                assert hook["clientConfig"]["url"].startswith(url + "/"), hook["clientConfig"]
                assert base64.b64decode(hook["clientConfig"]["caBundle"]) == secret["ca.crt"]
        kc = c.service_account_kubeconfig(cp, NAMESPACE, FULLNAME, Path(workdir) / "helm-webhook.kubeconfig")
        served = c.Webhook(workdir, kc, policies=policies, port=port, certs=certs, name="helm-webhook").start()

        # The namespace names ib-shared as its policy: the session's webhook (deploy/'s
        # configurations, the whole catalogue), if this session started it, decides the same.
        ns = make_namespace(cp, unique("e2e-helm"), {**OPT_IN, "rdma-webhook.io/policy": "ib-shared"})
        assert _admitted_with_ib_shared(cp, served, ns, "before-upgrade")

        helm(
            "upgrade",
            RELEASE,
            str(CHART),
            "--namespace",
            NAMESPACE,
            "--reuse-values",
            *_sets(**{"policies.enabled": "{ib-shared,efa}"}),
        )
        assert _secret(cp) == secret, "helm upgrade replaced the chart-made certificate"
        after = _configurations(cp)
        for kind, conf in after.items():
            assert [h["clientConfig"] for h in conf["webhooks"]] == [
                h["clientConfig"] for h in before[kind]["webhooks"]
            ]
            assert conf["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        cm = stored(cp, f"/api/v1/namespaces/{NAMESPACE}/configmaps/{FULLNAME}-policies")
        assert sorted(cm["data"]) == ["efa.yaml", "ib-shared.yaml"]  # the upgrade did apply
        # the process still serves the same certificate, and the API server still trusts it
        assert _admitted_with_ib_shared(cp, served, ns, "after-upgrade")

        # without a policy in force nothing is enforced: the chart's default
        helm(
            "upgrade",
            RELEASE,
            str(CHART),
            "--namespace",
            NAMESPACE,
            "--reuse-values",
            "--set-json",
            "policies.enabled=[]",
        )
        assert not stored(cp, f"/api/v1/namespaces/{NAMESPACE}/configmaps/{FULLNAME}-policies").get("data")
        assert _secret(cp) == secret
    finally:
        if served is not None:
            served.stop()
        helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", "120s", check=False)
    status, _ = cp.request("GET", f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{FULLNAME}")
    assert status == 404, "helm uninstall left the MutatingWebhookConfiguration"
    cp.kubectl("delete", "namespace", NAMESPACE, "--wait=false")


def _admitted_with_ib_shared(cp, served: c.Webhook, ns: str, name: str) -> bool:
    proc = create(cp, gpu_pod(name, ns))
    assert proc.returncode == 0, proc.stderr
    got = stored(cp, pod_path(ns, name))
    ann = got["metadata"]["annotations"]
    assert ann["rdma-webhook.io/status"] == "injected", ann
    assert ann["rdma-webhook.io/applied-policy"] == "ib-shared", ann
    limits = got["spec"]["containers"][0]["resources"]["limits"]
    assert limits["rdma/rdma_shared_device_a"] == "1", limits
    # the chart-made configuration called the host process: its admission log has the pod
    c.wait_for(
        f"{name} in the helm webhook's admission log",
        lambda: [a for a in served.admissions(ns) if name in json.dumps(a)],
        10,
    )
    return True


@pytest.mark.parametrize(
    "combination",
    [
        [],
        [
            "policies.enabled={ib-shared}",
            "certificates.source=certManager",
            "monitoring.serviceMonitor.enabled=true",
            "monitoring.prometheusRule.enabled=true",
            "monitoring.dashboard.enabled=true",
            "networkPolicy.enabled=true",
        ],
        ["policies.enabled={ib-shared,erdma}", "finalStateCheck.mode=admissionPolicy", "finalStateCheck.dryRun=true"],
    ],
    ids=["default", "everything", "admission-policy"],
)
def test_chart_objects_pass_server_side_dry_run(cp, helm, combination):
    """The API server's own validation (and the minimal cert-manager and Prometheus Operator CRDs
    of e2e/crds.yaml) of every object, in a namespace made for it as --create-namespace would."""
    ns = make_namespace(cp, unique("helm-dry-run"))
    args = [a for s in combination for a in ("--set", s)]
    rendered = helm("template", "dry-run", str(CHART), "--namespace", ns, *args).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    proc = cp.kubectl(
        "apply", "--dry-run=server", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("(server dry run)") == len(docs), proc.stdout
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "ConfigMap"} <= kinds
    if "networkPolicy.enabled=true" in combination:
        assert {"Certificate", "Issuer", "ServiceMonitor", "PrometheusRule", "NetworkPolicy"} <= kinds
    if "finalStateCheck.mode=admissionPolicy" in combination:  # the API server compiled their CEL
        vaps = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
        assert sorted(d["metadata"]["name"] for d in vaps) == [
            "rdma-webhook-final-state-erdma",
            "rdma-webhook-final-state-ib-shared",
        ]
        assert [d["spec"]["validationActions"] for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"] == [
            ["Warn", "Audit"]
        ] * 2
        vwc = [d for d in docs if d["kind"] == "ValidatingWebhookConfiguration"][0]
        assert [h["name"] for h in vwc["webhooks"]] == ["workloads.validate.rdma-webhook.io"]
