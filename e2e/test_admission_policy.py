"""The policy mode of the pods' final-state check against the real kube-apiserver 1.37 (issue 29,
item 1): the ValidatingAdmissionPolicies `rdma-webhook policy admission-policy` generates from
the session webhook's policies, and the webhook configurations of deploy/admission-policy/mode.

- A later webhook that undoes RDMA after our last call (e2e/second_webhook.py, the late webhook)
  is refused by /validate in the webhook mode, and by the generated policy, with the same rule,
  in the policy mode.
- Each labelled pod costs two webhook calls in the webhook mode and one in the policy mode,
  counted from the API server's own metrics (apiserver_admission_webhook_admission_duration_seconds_count
  by name and type), while the API server checks each pod with the generated policy
  (apiserver_validating_admission_policy_check_duration_seconds_count by policy).
- A policy change: a webhook started with --check-admission-policy (read-only RBAC of the mode's
  ClusterRole) reports the mismatch on /metrics and /readyz and stays ready; regenerating and
  applying brings it back in sync, and the API server then enforces the changed policy.

Tests run in file order: the webhook-mode tests first, then `mode.switch()` (idempotent); the
module restores deploy/'s configurations and deletes the generated objects at the end.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from e2e import cluster as c
from e2e.conftest import INJECT, OPT_IN, create, gpu_pod, make_namespace, pod_path, stored, unique
from e2e.second_webhook import LATE_LABEL, LATE_MODES

pytestmark = pytest.mark.usefixtures("hook")

VAP_PATH = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
BINDING_PATH = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
VWC_PATH = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/rdma-webhook"


def generate(policies: Path, *flags: str) -> list[dict]:
    """`rdma-webhook policy admission-policy`, as an installer runs it."""
    exe = Path(sys.executable).with_name("rdma-webhook")
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "webhook"]
    proc = subprocess.run(
        [*argv, "policy", "admission-policy", "--policies", str(policies), *flags],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=c.ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def render_mode(cp, workdir: Path) -> list[dict]:
    """deploy/ with the policy mode's component, rendered by kustomize from a copy (kustomize
    reads components by relative path)."""
    root = Path(workdir) / "deploy-policy-mode" / "deploy"
    shutil.rmtree(root.parent, ignore_errors=True)
    shutil.copytree(c.ROOT / "deploy", root, ignore=shutil.ignore_patterns("certs"))
    (root / "mine").mkdir()
    (root / "mine" / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": ["../overlays/cert-manager"],
                "components": ["../admission-policy/mode"],
            }
        )
    )
    return c.render_deploy(cp, str(root / "mine"))


def replace(cp, doc: dict) -> None:
    """The object exactly as given (kubectl replace, or create when absent): `apply` would merge
    the webhooks list with what an earlier apply left."""
    doc = json.loads(json.dumps(doc))
    doc["metadata"].pop("resourceVersion", None)
    proc = cp.kubectl("replace", "-f", "-", input=json.dumps(doc))
    if proc.returncode != 0:
        proc = cp.kubectl("create", "-f", "-", input=json.dumps(doc))
    assert proc.returncode == 0, proc.stderr


class Mode:
    def __init__(self, cp, workdir: Path, hook: c.Webhook, deploy_docs: list[dict]):
        self.cp, self.workdir, self.hook, self.deploy_docs = cp, Path(workdir), hook, deploy_docs
        self.docs = render_mode(cp, workdir)
        self.on = False

    def switch(self) -> None:
        """The policy mode: the generated objects, then deploy/admission-policy/mode's
        configurations and ClusterRole (what `kubectl apply -k` of an overlay with the component
        does, pointed at the session webhook on loopback)."""
        if self.on:
            return
        self.cp.apply(generate(c.ROOT / "policies"))
        self.cp.apply([c.pick(self.docs, "ClusterRole", "rdma-webhook")])
        for doc in c.loopback_webhooks(self.docs, self.hook.port, self.hook.ca_bundle):
            replace(self.cp, doc)
        names = [h["name"] for h in stored(self.cp, VWC_PATH)["webhooks"]]
        assert names == ["workloads.validate.rdma-webhook.io"], names
        # the API server picks configurations up from its informers, a moment later
        c.wait_for("the API server without pods.validate", lambda: self._validate_calls() == 0, 60, interval=0.5)
        c.wait_for("the generated policies in effect", self.denies, 60, interval=0.5)
        self.on = True

    def probe_namespace(self) -> str:
        if not hasattr(self, "_probe_ns"):
            self._probe_ns = make_namespace(self.cp, unique("e2e-probe"), OPT_IN)
        return self._probe_ns

    def _validate_calls(self) -> float:
        """pods.validate calls one server-side dry run of a labelled pod makes."""
        before = webhook_calls(self.cp)
        proc = create(self.cp, gpu_pod(unique("probe"), self.probe_namespace()), "--dry-run=server")
        assert proc.returncode == 0, proc.stderr
        return _delta(webhook_calls(self.cp), before, VALIDATE)

    def denies(self) -> bool:
        """A dry run of a pod whose device the late webhook strips is refused by the policy."""
        proc = create(self.cp, _late_pod(self.probe_namespace(), unique("probe"), "strip-device"), "--dry-run=server")
        return proc.returncode != 0 and "ValidatingAdmissionPolicy 'rdma-webhook-final-state-erdma'" in proc.stderr

    def warns(self) -> bool:
        """The same dry run is admitted with the policy's warning: the --dry-run bindings
        (validationActions [Warn]) are in effect."""
        proc = create(self.cp, _late_pod(self.probe_namespace(), unique("probe"), "strip-device"), "--dry-run=server")
        return proc.returncode == 0 and "Warning: Validation failed for ValidatingAdmissionPolicy" in proc.stderr

    def restore(self) -> None:
        for doc in c.loopback_webhooks(self.deploy_docs, self.hook.port, self.hook.ca_bundle):
            replace(self.cp, doc)
        self.cp.apply([c.pick(self.deploy_docs, "ClusterRole", "rdma-webhook")])
        self.cp.kubectl(
            "delete",
            "validatingadmissionpolicybindings,validatingadmissionpolicies",
            "-l",
            "app.kubernetes.io/part-of=rdma-webhook",
            "--ignore-not-found",
        )
        c.wait_for("the API server with pods.validate again", lambda: self._validate_calls() == 1, 60, interval=0.5)
        self.on = False


@pytest.fixture(scope="module")
def mode(cp, workdir, hook, deploy_docs, late):
    m = Mode(cp, workdir, hook, deploy_docs)
    try:
        yield m
    finally:
        m.restore()


@pytest.fixture(scope="module")
def late(cp, second):
    """The late webhook of e2e/second_webhook.py, registered for this module."""
    cp.apply([second.late_configuration()])
    ns = make_namespace(cp, unique("e2e-probe"), OPT_IN)

    def called() -> bool:  # the API server has the configuration: its mark is on a dry run's pod
        proc = create(cp, _late_pod(ns, unique("probe"), "none"), "--dry-run=server")
        return proc.returncode == 0 and "e2e.rdma-webhook.io/late-seen" in proc.stdout

    c.wait_for("the late webhook registered", called, 60, interval=0.5)
    try:
        yield second
    finally:
        cp.kubectl("delete", "mutatingwebhookconfiguration", "zzz-e2e-late", "--ignore-not-found")


def _late_pod(namespace: str, name: str, how: str) -> dict:
    return gpu_pod(name, namespace, labels={**INJECT, LATE_LABEL: how})


# -- (b) what /validate denies, the generated policy denies --------------------------------------------------

# The changes /validate denies today; shm-disk is the policy's own (see below).
VALIDATE_DENIES = [m for m in LATE_MODES if m != "shm-disk"]


@pytest.mark.parametrize("how", VALIDATE_DENIES)
def test_webhook_mode_validate_refuses_a_later_change(cp, hook, late, mode, namespace, how):
    assert not mode.on
    proc = create(cp, _late_pod(namespace, f"late-{how}", how))
    assert proc.returncode != 0, f"admitted: {proc.stdout[:300]}"
    assert 'admission webhook "pods.validate.rdma-webhook.io" denied the request' in proc.stderr, proc.stderr
    assert f"[{LATE_MODES[how]}]" in proc.stderr, proc.stderr
    assert late.late_calls.count(f"late-{how}") == 2  # its first call, then the one after our reinvocation


def test_webhook_mode_admits_what_the_late_webhook_leaves_alone(cp, late, mode, namespace):
    """The late webhook's calls alone (its mark, our status annotation removed and put back)
    are harmless: the denials above are its second change, made after our last call."""
    assert not mode.on
    proc = create(cp, _late_pod(namespace, "late-none", "none"))
    assert proc.returncode == 0, proc.stderr
    assert late.late_calls.count("late-none") == 2
    got = stored(cp, pod_path(namespace, "late-none"))
    assert got["metadata"]["annotations"]["rdma-webhook.io/status"] == "injected"


# -- (a) one webhook call per pod --------------------------------------------------------------------------------


def webhook_calls(cp) -> dict[tuple[str, str], float]:
    """apiserver_admission_webhook_admission_duration_seconds_count summed by (webhook name, type)."""
    return _counts(cp, "apiserver_admission_webhook_admission_duration_seconds", ("name", "type"))


def policy_denials(cp) -> dict[tuple[str, str], float]:
    """apiserver_validating_admission_policy_check_duration_seconds_count by (policy, error_type):
    kube-apiserver 1.37 records the checks that fail (error_type invalid_error), not those that pass."""
    return _counts(cp, "apiserver_validating_admission_policy_check_duration_seconds", ("policy", "error_type"))


def _counts(cp, family: str, labels: tuple[str, ...]) -> dict[tuple[str, ...], float]:
    status, data = cp.request("GET", "/metrics")
    assert status == 200, status
    out: dict[tuple[str, ...], float] = {}
    for fam in text_string_to_metric_families(data.decode()):
        if fam.name != family:
            continue
        for sample in fam.samples:
            if sample.name == family + "_count":
                key = tuple(sample.labels.get(name, "") for name in labels)
                out[key] = out.get(key, 0.0) + sample.value
    return out


def _delta(after: dict, before: dict, key: tuple) -> float:
    return after.get(key, 0.0) - before.get(key, 0.0)


PODS = 5
MUTATE = ("pods.mutate.rdma-webhook.io", "admit")
VALIDATE = ("pods.validate.rdma-webhook.io", "validating")


def _create_pods(cp, namespace: str, prefix: str) -> None:
    for i in range(PODS):
        proc = create(cp, gpu_pod(f"{prefix}-{i}", namespace))
        assert proc.returncode == 0, proc.stderr
        got = stored(cp, pod_path(namespace, f"{prefix}-{i}"))
        assert got["metadata"]["annotations"]["rdma-webhook.io/applied-policy"] == "erdma"
        # the label the generated policy selects its pods by (no CEL match condition)
        assert got["metadata"]["labels"]["rdma-webhook.io/applied-policy"] == "erdma"


def test_one_webhook_call_per_pod_in_the_policy_mode(cp, hook, mode, namespace, record_property):
    before = webhook_calls(cp)
    _create_pods(cp, namespace, "webhook-mode")
    after = webhook_calls(cp)
    assert _delta(after, before, MUTATE) == PODS and _delta(after, before, VALIDATE) == PODS, after
    record_property(
        "webhook_calls_per_pod_webhook_mode", (_delta(after, before, MUTATE) + _delta(after, before, VALIDATE)) / PODS
    )

    mode.switch()
    before = webhook_calls(cp)
    _create_pods(cp, namespace, "policy-mode")
    after = webhook_calls(cp)
    calls = {k: _delta(after, before, k) for k in set(after) | set(before) if _delta(after, before, k)}
    assert calls == {MUTATE: PODS}, calls  # /mutate once per pod, nothing else of ours or anyone's
    record_property("webhook_calls_per_pod_policy_mode", calls[MUTATE] / PODS)
    print(
        f"\nwebhook calls per labelled pod: {(PODS + PODS) / PODS:.0f} in the webhook mode, "
        f"{calls[MUTATE] / PODS:.0f} in the policy mode"
    )


@pytest.mark.parametrize("how", list(LATE_MODES))
def test_policy_mode_the_generated_policy_refuses_a_later_change(cp, hook, late, mode, namespace, how):
    mode.switch()
    proc = create(cp, _late_pod(namespace, f"vap-{how}", how))
    assert proc.returncode != 0, f"admitted: {proc.stdout[:300]}"
    assert (
        "ValidatingAdmissionPolicy 'rdma-webhook-final-state-erdma' with binding "
        "'rdma-webhook-final-state-erdma' denied request: rdma-webhook: "
    ) in proc.stderr, proc.stderr
    assert f"[{LATE_MODES[how]}]" in proc.stderr and "container 'pytorch'" in proc.stderr, proc.stderr
    assert "pods.validate" not in proc.stderr
    status, _ = cp.request("GET", pod_path(namespace, f"vap-{how}"))
    assert status == 404


def test_policy_mode_denials_are_counted_by_the_api_server(cp, hook, late, mode, namespace):
    mode.switch()
    key = ("rdma-webhook-final-state-erdma", "invalid_error")
    before = policy_denials(cp)
    assert create(cp, _late_pod(namespace, "vap-counted", "strip-device")).returncode != 0
    assert _delta(policy_denials(cp), before, key) == 1


def test_policy_mode_dry_run_warns_and_admits(cp, hook, late, mode, namespace):
    mode.switch()
    cp.apply(generate(c.ROOT / "policies", "--dry-run"))
    try:
        # the API server sees a changed binding through its informer, a moment later
        c.wait_for("the --dry-run bindings in effect", mode.warns, 60, interval=0.5)
        proc = create(cp, _late_pod(namespace, "vap-dry", "strip-device"))
        assert proc.returncode == 0, proc.stderr
        assert (
            "Warning: Validation failed for ValidatingAdmissionPolicy 'rdma-webhook-final-state-erdma'" in proc.stderr
        )
        assert "[device-missing]" in proc.stderr, proc.stderr
        got = stored(cp, pod_path(namespace, "vap-dry"))
        assert "aliyun/erdma" not in got["spec"]["containers"][0]["resources"].get("limits", {})
    finally:
        cp.apply(generate(c.ROOT / "policies"))
        c.wait_for("the denying bindings in effect again", mode.denies, 60, interval=0.5)


def test_policy_mode_pods_still_admitted_and_workloads_still_checked(cp, hook, mode, namespace):
    mode.switch()
    proc = create(cp, gpu_pod("plain", namespace))
    assert proc.returncode == 0, proc.stderr
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "bad-job", "namespace": namespace},
        "spec": {
            "template": {
                "metadata": {"labels": INJECT},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "t",
                            "image": "x",
                            "env": [{"name": "NCCL_IB_DISABLE", "value": "1"}],
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                },
            }
        },
    }
    proc = create(cp, job)
    assert proc.returncode != 0 and "workloads.validate.rdma-webhook.io" in proc.stderr, proc.stderr


# -- (c) a policy change reaches the generated objects; the run-time check notices -------------------------------


def _gauge(checker: c.Webhook, name: str) -> float | None:
    status, data = checker.get("/metrics")
    assert status == 200
    for fam in text_string_to_metric_families(data.decode()):
        for sample in fam.samples:
            if sample.name == name:
                return sample.value
    return None


def test_a_policy_change_is_noticed_and_regenerating_fixes_it(cp, hook, late, mode, workdir, namespace):
    mode.switch()
    folder = Path(workdir) / "checked-policies"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(c.ROOT / "policies", folder)
    kc = c.service_account_kubeconfig(cp, "rdma-webhook", "rdma-webhook", Path(workdir) / "checker.kubeconfig")
    checker = c.Webhook(
        workdir, kc, policies=folder, workers=1, name="checker", extra_args=["--check-admission-policy"]
    ).start()
    try:
        c.wait_for("the check in sync", lambda: _gauge(checker, "rdma_webhook_admission_policy_in_sync") == 1, 60)
        assert "warnings" not in json.loads(checker.get("/readyz")[1])

        erdma = folder / "erdma.yaml"
        erdma.write_text(
            erdma.read_text().replace(
                '  NCCL_IB_GID_INDEX: "1"\n', '  NCCL_IB_GID_INDEX: {value: "1", enforce: true}\n'
            )
        )
        c.wait_for("the mismatch noticed", lambda: _gauge(checker, "rdma_webhook_admission_policy_in_sync") == 0, 60)
        assert _gauge(checker, "rdma_webhook_admission_policy_mismatches") == 1
        status, body = checker.get("/readyz")
        assert status == 200, body  # reported, not a reason to leave the Service
        warnings = json.loads(body)["warnings"]
        assert (
            len(warnings) == 1
            and "rdma-webhook-final-state-erdma was generated from another version of policy erdma" in warnings[0]
        )
        log = (Path(workdir) / "checker.log").read_text()
        assert "do not match the policies in force" in log
        # under the objects generated from the old policy, that change still passes
        assert create(cp, _late_pod(namespace, "gid-before", "gid-index")).returncode == 0

        # the installer regenerates and applies: in sync again ...
        cp.apply(generate(folder))
        c.wait_for(
            "in sync after regenerating", lambda: _gauge(checker, "rdma_webhook_admission_policy_in_sync") == 1, 60
        )
        # ... and the API server enforces the changed policy: a later webhook's change of
        # NCCL_IB_GID_INDEX, admitted under the old objects, is now refused
        # (the API server's own informer sees the new objects a moment after the checker does)
        c.wait_for(
            "the changed policy in effect",
            lambda: create(cp, _late_pod(namespace, unique("probe"), "gid-index"), "--dry-run=server").returncode != 0,
            60,
            interval=0.5,
        )
        assert create(cp, gpu_pod("gid", namespace)).returncode == 0  # the policy's own value: fine
        proc = create(cp, _late_pod(namespace, "gid-changed", "gid-index"))
        assert proc.returncode != 0 and "NCCL_IB_GID_INDEX" in proc.stderr and "[enforced-env]" in proc.stderr, (
            proc.stderr
        )

        # a generated object deleted by hand is noticed too
        cp.kubectl("delete", "validatingadmissionpolicybinding", "rdma-webhook-final-state-efa", check=True)
        c.wait_for(
            "the missing binding noticed",
            lambda: any(
                "rdma-webhook-final-state-efa has no ValidatingAdmissionPolicyBinding" in w
                for w in json.loads(checker.get("/readyz")[1]).get("warnings", [])
            ),
            60,
        )
    finally:
        checker.stop()
        cp.apply(generate(c.ROOT / "policies"))
