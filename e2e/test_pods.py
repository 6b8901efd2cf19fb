"""Pods created for real through kube-apiserver, with the webhook configurations of deploy/.

What the API server stores is the proof: it applied our JSON patch, ran the other admission
plugins (Pod Security among them) after us, and kubectl printed what a user sees.
"""

from __future__ import annotations

import json

import pytest

from e2e.conftest import INJECT, OPT_IN, create, env_of, gpu_pod, make_namespace, pod_path, stored, unique

pytestmark = pytest.mark.usefixtures("hook")


def offline_decision(pod: dict, namespace_labels: dict[str, str]) -> dict:
    """The pod as the decision core mutates it, offline (what `rdma-webhook review` prints)."""
    from webhook.core.decision import Namespace, decide
    from webhook.policy.load import load_dir
    from e2e.cluster import ROOT

    policies, errors = load_dir(ROOT / "policies")
    assert policies is not None, errors
    ns = Namespace(name=pod["metadata"]["namespace"], labels=namespace_labels)
    decision = decide(json.loads(json.dumps(pod)), ns, policies, None, "CREATE")
    assert decision.outcome == "mutated", decision
    return decision.pod


def test_labelled_pod_is_stored_mutated(cp, namespace):
    pod = gpu_pod("trainer", namespace, env={"NCCL_DEBUG": "WARN"})
    proc = create(cp, pod)
    assert proc.returncode == 0, proc.stderr
    got = stored(cp, pod_path(namespace, "trainer"))
    ann = got["metadata"]["annotations"]
    assert ann["rdma-webhook.io/status"] == "injected"
    assert ann["rdma-webhook.io/applied-policy"] == "erdma"  # priority 10 beats sriov-roce
    ctr = got["spec"]["containers"][0]
    assert ctr["resources"]["limits"]["aliyun/erdma"] == "1"
    assert ctr["resources"]["requests"]["aliyun/erdma"] == "1"
    assert "IPC_LOCK" in ctr["securityContext"]["capabilities"]["add"]
    env = env_of(ctr)
    assert env["NCCL_NET"] == "IB" and env["NCCL_IB_HCA"] == "erdma,rocep" and env["NCCL_DEBUG"] == "WARN"
    shm = [m for m in ctr["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    assert len(shm) == 1
    vol = next(v for v in got["spec"]["volumes"] if v["name"] == shm[0]["name"])
    assert vol["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}  # 8Gi per GPU, 2 GPUs

    # exactly what the decision core computes offline, after the API server's own defaulting
    want = offline_decision(pod, OPT_IN)
    want_ctr = want["spec"]["containers"][0]
    assert env == env_of(want_ctr)
    assert {k: str(v) for k, v in want_ctr["resources"]["limits"].items()} == ctr["resources"]["limits"]
    want_requests = {k: str(v) for k, v in want_ctr["resources"]["requests"].items()}
    assert want_requests.items() <= ctr["resources"]["requests"].items()
    assert set(ctr["resources"]["requests"]) - set(want_requests) <= {"nvidia.com/gpu"}  # defaulted from limits
    assert want["metadata"]["annotations"].items() <= ann.items()


def test_denial_reaches_kubectl(cp, namespace):
    pod = gpu_pod("bad", namespace, env={"NCCL_IB_DISABLE": "1"})
    proc = create(cp, pod)
    assert proc.returncode != 0
    assert 'admission webhook "pods.mutate.rdma-webhook.io" denied the request' in proc.stderr
    assert "NCCL_IB_DISABLE='1'" in proc.stderr and "[env-fallback]" in proc.stderr
    status, _ = cp.request("GET", pod_path(namespace, "bad"))
    assert status == 404


def test_every_reason_reported(cp, namespace):
    pod = gpu_pod(
        "worse",
        namespace,
        env={"NCCL_IB_DISABLE": "1", "NCCL_NET": "Socket"},
        securityContext={"capabilities": {"drop": ["IPC_LOCK"]}},
    )
    proc = create(cp, pod)
    assert proc.returncode != 0
    for rule in ("[env-fallback]", "NCCL_NET='Socket'", "IPC_LOCK"):
        assert rule in proc.stderr, proc.stderr


def test_warnings_printed_by_kubectl(cp, namespace):
    pod = gpu_pod("chatty", namespace, env={"NCCL_DEBUG": "INFO"})
    proc = create(cp, pod)
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("Warning:")]
    assert any("NCCL_DEBUG" in w for w in warnings), proc.stderr


def test_launcher_without_gpu_allowed_with_warning(cp, namespace):
    pod = gpu_pod("launcher", namespace, gpus=0)
    pod["spec"]["containers"][0]["resources"] = {}
    proc = create(cp, pod)
    assert proc.returncode == 0, proc.stderr
    assert "Warning:" in proc.stderr
    got = stored(cp, pod_path(namespace, "launcher"))
    assert "aliyun/erdma" not in json.dumps(got["spec"])


def test_unlabelled_namespace_pod_untouched_and_webhook_not_called(cp, hook):
    ns = make_namespace(cp, unique("e2e-plain"))
    pod = gpu_pod("plain", ns, env={"NCCL_IB_DISABLE": "1"})  # would be denied if we were asked
    proc = create(cp, pod)
    assert proc.returncode == 0, proc.stderr
    got = stored(cp, pod_path(ns, "plain"))
    assert "rdma-webhook.io/status" not in (got["metadata"].get("annotations") or {})
    assert "aliyun/erdma" not in json.dumps(got["spec"])
    assert hook.admissions(ns) == []  # the namespaceSelector kept the API server from calling us


def test_unlabelled_pod_untouched_and_webhook_not_called(cp, hook, namespace):
    pod = gpu_pod("nolabel", namespace, labels={"app": "x"}, env={"NCCL_IB_DISABLE": "1"})
    proc = create(cp, pod)
    assert proc.returncode == 0, proc.stderr
    got = stored(cp, pod_path(namespace, "nolabel"))
    assert "rdma-webhook.io/status" not in (got["metadata"].get("annotations") or {})
    assert hook.admissions(namespace) == []  # objectSelector and the CEL matchCondition


def test_label_value_other_than_true_not_sent(cp, hook, namespace):
    pod = gpu_pod("nottrue", namespace, labels={"rdma-webhook.io/inject": "false"}, env={"NCCL_IB_DISABLE": "1"})
    proc = create(cp, pod)
    assert proc.returncode == 0, proc.stderr
    assert hook.admissions(namespace) == []


def test_webhook_namespace_excluded_even_if_labelled(cp, hook):
    # kube-system is excluded by the namespaceSelector and by the CEL matchCondition
    pod = gpu_pod(unique("sys"), "kube-system", env={"NCCL_IB_DISABLE": "1"})
    cp.kubectl("label", "namespace", "kube-system", "rdma-webhook.io/injection=enabled", "--overwrite", check=True)
    try:
        proc = create(cp, pod)
        assert proc.returncode == 0, proc.stderr
        assert hook.admissions("kube-system") == []
    finally:
        cp.kubectl("label", "namespace", "kube-system", "rdma-webhook.io/injection-")
        cp.kubectl("delete", "pod", "-n", "kube-system", pod["metadata"]["name"], "--wait=false")


def test_dry_run_is_mutated_and_not_stored(cp, namespace):
    pod = gpu_pod("dry", namespace)
    proc = create(cp, pod, "--dry-run=server")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["metadata"]["annotations"]["rdma-webhook.io/status"] == "injected"
    assert out["spec"]["containers"][0]["resources"]["limits"]["aliyun/erdma"] == "1"
    status, _ = cp.request("GET", pod_path(namespace, "dry"))
    assert status == 404


def test_dry_run_denial(cp, namespace):
    proc = create(cp, gpu_pod("drybad", namespace, env={"NCCL_NET": "Socket"}), "--dry-run=server")
    assert proc.returncode != 0 and "denied the request" in proc.stderr


def test_delete_of_labelled_pod(cp, hook, namespace):
    assert create(cp, gpu_pod("gone", namespace)).returncode == 0
    before = len(hook.admissions(namespace))
    proc = cp.kubectl("delete", "pod", "-n", namespace, "gone", "--wait=false")
    assert proc.returncode == 0, proc.stderr
    # no kubelet: a pod that never ran is removed at once (no grace period to wait out)
    from e2e.cluster import wait_for

    wait_for("the pod deleted", lambda: cp.request("GET", pod_path(namespace, "gone"))[0] == 404, 60)
    assert len(hook.admissions(namespace)) == before  # only CREATE is sent to us


def test_reinvocation_injects_the_second_webhooks_container_once(cp, hook, second, namespace):
    pod = gpu_pod("reinvoked", namespace, labels={**INJECT, "e2e.rdma-webhook.io/second": "sidecar"})
    proc = create(cp, pod)
    assert proc.returncode == 0, proc.stderr
    got = stored(cp, pod_path(namespace, "reinvoked"))
    names = [c["name"] for c in got["spec"]["containers"]]
    assert names == ["pytorch", "sidecar"]
    for ctr in got["spec"]["containers"]:  # the sidecar was only injected by the reinvocation
        env = env_of(ctr)  # (fails on a duplicated variable)
        assert env["NCCL_NET"] == "IB", ctr["name"]
        assert ctr["resources"]["limits"]["aliyun/erdma"] == "1"
        assert ctr["securityContext"]["capabilities"]["add"].count("IPC_LOCK") == 1
        assert [m["mountPath"] for m in ctr["volumeMounts"]].count("/dev/shm") == 1
    shm = [v for v in got["spec"]["volumes"] if (v.get("emptyDir") or {}).get("medium") == "Memory"]
    assert len(shm) == 1
    calls = [a for a in hook.admissions(namespace) if a.get("pod") == "reinvoked" and a["endpoint"] == "mutate"]
    assert len(calls) == 2, calls  # first call, then the reinvocation after the second webhook


def test_misbehaving_later_webhook_is_refused(cp, hook, second, namespace):
    pod = gpu_pod("undone", namespace, labels={**INJECT, "e2e.rdma-webhook.io/second": "disable-ib"})
    proc = create(cp, pod)
    assert proc.returncode != 0
    assert "rdma-webhook.io\" denied the request" in proc.stderr and "NCCL_IB_DISABLE" in proc.stderr


@pytest.mark.parametrize("level", ["baseline", "restricted"])
def test_pod_security_enforcing_namespace_denied_by_us(cp, hook, level):
    ns = make_namespace(cp, unique(f"e2e-pss-{level}"), {**OPT_IN, "pod-security.kubernetes.io/enforce": level})
    proc = create(cp, gpu_pod("pss", ns))
    assert proc.returncode != 0
    assert 'admission webhook "pods.mutate.rdma-webhook.io" denied the request' in proc.stderr, proc.stderr
    assert level in proc.stderr


def test_pod_security_runs_after_us_and_sees_ipc_lock(cp, hook):
    """A namespace that only warns: Pod Security admission evaluates the pod as we mutated it."""
    ns = make_namespace(cp, unique("e2e-pss-warn"), {**OPT_IN, "pod-security.kubernetes.io/warn": "baseline"})
    proc = create(cp, gpu_pod("warned", ns))
    assert proc.returncode == 0, proc.stderr
    assert "would violate PodSecurity" in proc.stderr and "IPC_LOCK" in proc.stderr, proc.stderr


def test_pods_go_through_the_kubectl_user_path(cp, namespace):
    """`kubectl run`-style apply of a manifest file, as the README's walkthrough does it."""
    pod = gpu_pod("applied", namespace)
    proc = cp.kubectl("apply", "-f", "-", input=json.dumps(pod))
    assert proc.returncode == 0, proc.stderr
    proc = cp.kubectl(
        "get", "pod", "-n", namespace, "applied", "-o", "jsonpath={.metadata.annotations.rdma-webhook\\.io/status}"
    )
    assert proc.stdout == "injected", proc.stderr
