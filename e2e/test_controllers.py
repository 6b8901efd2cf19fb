"""Pods made by kube-controller-manager (Jobs), and the apply-time check of workloads (/validate)
on a PyTorchJob and a JobSet through their (minimal) CRDs."""

from __future__ import annotations

import json

import pytest

from e2e import cluster as c
from e2e.conftest import INJECT, env_of

pytestmark = pytest.mark.usefixtures("hook")


def template(labels: dict[str, str], env: dict[str, str] | None = None) -> dict:
    ctr: dict = {
        "name": "pytorch",
        "image": "registry.example/trainer:1",
        "command": ["torchrun", "train.py"],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    if env:
        ctr["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return {"metadata": {"labels": labels}, "spec": {"restartPolicy": "Never", "containers": [ctr]}}


def job(name: str, namespace: str, labels: dict[str, str], env: dict[str, str] | None = None) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"backoffLimit": 0, "template": template(labels, env)},
    }


def pods_of(cp, namespace: str, job_name: str) -> list[dict]:
    status, data = cp.request("GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector=job-name%3D{job_name}")
    assert status == 200
    return json.loads(data)["items"]


def events_of(cp, namespace: str, name: str) -> list[dict]:
    status, data = cp.request(
        "GET", f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name%3D{name}"
    )
    assert status == 200
    return json.loads(data)["items"]


def test_good_job_pods_come_out_mutated(cp, namespace):
    cp.apply([job("good", namespace, INJECT)])
    pods = c.wait_for("the Job's pod", lambda: pods_of(cp, namespace, "good"), 120)
    pod = pods[0]
    assert pod["metadata"]["annotations"]["rdma-webhook.io/status"] == "injected"
    ctr = pod["spec"]["containers"][0]
    assert ctr["resources"]["limits"]["aliyun/erdma"] == "1"
    assert env_of(ctr)["NCCL_NET"] == "IB"
    cp.kubectl("delete", "job", "-n", namespace, "good", "--wait=false")


def test_denied_job_pods_show_the_denial_in_failed_create(cp, second, namespace):
    """The Job's template is clean (it passes /validate at apply time); another webhook breaks its
    pods, so the controller's pod creations are denied and the Job's events carry our message."""
    labels = {**INJECT, "e2e.rdma-webhook.io/second": "disable-ib"}
    proc = cp.kubectl("apply", "-f", "-", input=json.dumps(job("broken", namespace, labels)))
    assert proc.returncode == 0, proc.stderr
    events = c.wait_for(
        "a FailedCreate event",
        lambda: [e for e in events_of(cp, namespace, "broken") if e["reason"] == "FailedCreate"],
        120,
    )
    message = events[0]["message"]
    assert 'admission webhook "pods.mutate.rdma-webhook.io" denied the request' in message, message
    assert "NCCL_IB_DISABLE" in message and "[env-fallback]" in message, message
    assert pods_of(cp, namespace, "broken") == []
    described = cp.kubectl("describe", "job", "-n", namespace, "broken").stdout
    assert "FailedCreate" in described
    cp.kubectl("delete", "job", "-n", namespace, "broken", "--wait=false")


def test_bad_job_denied_at_apply_time(cp, namespace):
    proc = cp.kubectl("apply", "-f", "-", input=json.dumps(job("badjob", namespace, INJECT, {"NCCL_NET": "Socket"})))
    assert proc.returncode != 0
    assert 'admission webhook "workloads.validate.rdma-webhook.io" denied the request' in proc.stderr, proc.stderr
    assert "spec.template" in proc.stderr and "NCCL_NET='Socket'" in proc.stderr


def pytorchjob(name: str, namespace: str, env: dict[str, str] | None) -> dict:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template(INJECT)},
                "Worker": {"replicas": 2, "template": template(INJECT, env)},
            }
        },
    }


def test_bad_pytorchjob_denied_at_create(cp, namespace):
    proc = cp.kubectl("create", "-f", "-", input=json.dumps(pytorchjob("bad", namespace, {"NCCL_NET": "Socket"})))
    assert proc.returncode != 0
    assert 'admission webhook "workloads.validate.rdma-webhook.io" denied the request' in proc.stderr, proc.stderr
    assert "spec.pytorchReplicaSpecs.Worker.template" in proc.stderr and "NCCL_NET='Socket'" in proc.stderr


def test_good_pytorchjob_created_with_a_warning(cp, namespace):
    proc = cp.kubectl("create", "-f", "-", input=json.dumps(pytorchjob("good", namespace, None)))
    assert proc.returncode == 0, proc.stderr
    assert "Warning:" in proc.stderr, proc.stderr


def test_bad_jobset_denied_at_create(cp, namespace):
    js = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "bad", "namespace": namespace},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 1,
                    "template": {"spec": {"template": template(INJECT, {"NCCL_IB_DISABLE": "1"})}},
                }
            ]
        },
    }
    proc = cp.kubectl("create", "-f", "-", input=json.dumps(js))
    assert proc.returncode != 0
    assert "workloads.validate.rdma-webhook.io" in proc.stderr and "NCCL_IB_DISABLE" in proc.stderr, proc.stderr
