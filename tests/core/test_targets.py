"""Who gets RDMA and who is only checked (webhook/core/targets.py): the targets of a policy, the
containers that see GPUs another way, and the words a labelled pod without a target is told.
Pods as the API server sends them (tests/kube_objects.py: defaulted, with the service-account
token volume); the workers' shape follows the Kubeflow PyTorchJob examples (kubeflow/trainer
examples/pytorch), the privileged benchmark's NVIDIA_VISIBLE_DEVICES the NVIDIA container
toolkit's documented values (all, a list, void, none)."""

from __future__ import annotations

from dataclasses import replace

import pytest

import kube_objects as k
from conftest import POLICIES
from webhook.core.targets import find_checked, find_targets, why_no_target
from webhook.policy.load import load_dir

PS, _errors = load_dir(POLICIES)
assert PS is not None, _errors
ERDMA = PS.by_name["erdma"]  # GPUs: nvidia.com/gpu
ALIGNED = PS.by_name["roce-dranet-aligned"]  # claim gpu-nic-aligned-{gpus}


def visible(value: str | None) -> list[dict]:
    return [{"name": "NVIDIA_VISIBLE_DEVICES", **({"value": value} if value is not None else {})}]


def pod(*containers: dict, **kw) -> dict:
    return k.pod(list(containers), generate_name="pytorch-worker-", **kw)


# -- why_no_target ---------------------------------------------------------------------------


def test_a_container_that_sees_gpus_by_claim_or_runtime_is_named_with_how():
    claimed = k.container("trainer", gpus=None)
    claimed["resources"]["claims"] = [{"name": "gpus"}]
    runtime = k.container("bench", gpus=None, env=visible("all"))
    p = pod(k.container("sidecar", gpus=None), claimed, runtime, resourceClaims=[{"name": "gpus"}])
    others = find_checked(p, [])
    assert [(t.index, t.name, t.gpus) for t in others] == [(1, "trainer", 0), (2, "bench", 0)]
    assert why_no_target(p, ERDMA, others) == (
        "container 'trainer' sees GPUs through a DRA claim (resources.claims), not by requesting nvidia.com/gpu, "
        "so policy erdma adds nothing to it (its NCCL settings are still checked)"
    )
    assert why_no_target(p, ERDMA, others[1:]) == (
        "container 'bench' sees GPUs through NVIDIA_VISIBLE_DEVICES, not by requesting nvidia.com/gpu, "
        "so policy erdma adds nothing to it (its NCCL settings are still checked)"
    )
    runtime["resources"] = {"claims": []}  # an empty claims list is no claim
    assert "through NVIDIA_VISIBLE_DEVICES" in why_no_target(p, ERDMA, others[1:])


@pytest.mark.parametrize(
    "section,resource",
    [
        ("limits", "amd.com/gpu"),
        ("requests", "amd.com/gpu"),
        ("limits", "gpu.intel.com/i915"),
        ("limits", "example.com/gpus"),
        # NVIDIA's device plugin: time-sliced GPUs under renameByDefault, and a MIG slice of the mixed
        # strategy (NVIDIA GPU Operator, "Time-Slicing GPUs in Kubernetes"; NVIDIA/k8s-device-plugin README)
        ("limits", "nvidia.com/gpu.shared"),
        ("requests", "nvidia.com/mig-1g.10gb"),
    ],
)
def test_another_vendors_gpu_is_named(section, resource):
    cpu = k.container("init-data", gpus=None, limits={"cpu": "4", "memory": "8Gi"})
    other = k.container("pytorch", gpus=None, **{"resources": {section: {"cpu": "16", resource: "8"}}})
    assert why_no_target(pod(cpu, other), ERDMA, []) == (
        f"container 'pytorch' requests {resource}, not a GPU of policy erdma (nvidia.com/gpu), so it gets no RDMA device"
    )


def test_a_zero_gpu_request_is_no_gpu_and_the_first_one_is_named():
    first = k.container("a", gpus=None, limits={"nvidia.com/gpu": "0"})
    second = k.container("b", gpus=None, requests={"amd.com/gpu": "0"})
    assert why_no_target(pod(first, second), ERDMA, []) == (
        "container 'a' requests nvidia.com/gpu: '0', which is no GPU, and no container runs an MPI launcher, so "
        "none gets RDMA (a pod without GPUs)"
    )
    # a zero request does not hide another container's GPU of another vendor, wherever it comes
    amd = k.container("c", gpus=None, requests={"amd.com/gpu": "2"})
    assert why_no_target(pod(first, amd), ERDMA, []).startswith("container 'c' requests amd.com/gpu, not a GPU")
    both = k.container("d", gpus=None, limits={"nvidia.com/gpu": "0", "amd.com/gpu": "1"})
    assert why_no_target(pod(both), ERDMA, []).startswith("container 'd' requests amd.com/gpu, not a GPU")
    nameless = {"image": "busybox", "resources": {"limits": {"nvidia.com/gpu": 0}}}
    assert why_no_target(pod(nameless), ERDMA, []).startswith("container 'None' requests nvidia.com/gpu: 0, which")


def test_a_cpu_pod_is_told_it_has_no_gpu():
    p = pod(k.container("app", gpus=None, limits={"cpu": "2", "memory": "4Gi"}))
    expect = (
        "no container requests a GPU (nvidia.com/gpu) or runs an MPI launcher, so none gets RDMA (a pod without GPUs)"
    )
    assert why_no_target(p, ERDMA, []) == expect
    bare = pod({"name": "app", "image": "busybox"})
    assert why_no_target(bare, ERDMA, []) == expect
    assert why_no_target(pod(), replace(ERDMA, gpu_resources=("nvidia.com/gpu", "amd.com/gpu")), []) == (
        "no container requests a GPU (nvidia.com/gpu/amd.com/gpu) or runs an MPI launcher, so none gets RDMA (a pod "
        "without GPUs)"
    )


# -- find_checked and find_targets -----------------------------------------------------------


@pytest.mark.parametrize(
    "env,checked",
    [
        (visible("all"), True),
        (visible("0,1,2,3"), True),
        (visible("GPU-5ba3f2a1-0000-0000-0000-000000000000"), True),
        (visible(" VOID "), False),
        (visible("None"), False),
        (visible(""), False),
        (visible(None), False),  # valueFrom: not known here
        ([{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}], False),
        ([{"name": "OTHER", "value": "all"}], False),
        ([*visible("void"), *visible("all")], False),  # the first entry is the one read
    ],
)
def test_which_containers_see_gpus_through_the_container_runtime(env, checked):
    p = pod(k.container("trainer"), k.container("bench", gpus=None, env=env))
    targets = find_targets(p, ERDMA)
    assert [t.name for t in targets] == ["trainer"]
    assert [t.name for t in find_checked(p, targets)] == (["bench"] if checked else [])


def test_a_checked_container_keeps_its_env_and_envfrom():
    bench = k.container("bench", gpus=None, env=[*visible("all"), {"name": "NCCL_NET", "value": "Socket"}])
    bench["envFrom"] = [{"configMapRef": {"name": "nccl-env"}}]
    p = pod(bench, k.container("trainer"))
    (t,) = find_checked(p, find_targets(p, ERDMA))
    assert (t.index, t.name, t.gpus, t.env.get("NCCL_NET"), t.has_env_from) == (0, "bench", 0, "Socket", True)
    # a target is not checked again, whatever it sees
    trainer = k.container("trainer", env=visible("all"))
    assert find_checked(pod(trainer), find_targets(pod(trainer), ERDMA)) == []


def test_a_target_gets_the_gpus_of_every_aligned_claim_it_references():
    """Two references of one container (4 GPUs each, gpu-nic-aligned-4) are 8 GPUs; an entry that
    is no mapping, or names its template with no string, brings none."""
    c = k.container("trainer", gpus=None)
    c["resources"]["claims"] = [{"name": "half-a"}, {"name": "half-b"}, {"name": "odd"}, "junk"]
    entries = [
        {"name": "half-a", "resourceClaimTemplateName": "gpu-nic-aligned-4"},
        {"name": "half-b", "resourceClaimTemplateName": "gpu-nic-aligned-4"},
        {"name": "odd", "resourceClaimTemplateName": 8},
        "junk",
    ]
    p = pod(c, resourceClaims=entries)
    assert [(t.name, t.gpus) for t in find_targets(p, ALIGNED)] == [("trainer", 8)]


@pytest.mark.parametrize(
    "value,problem",
    [
        ("many", "spec.containers[1].resources.limits['nvidia.com/gpu'] is not a quantity: 'many'"),
        ("$(GPUS)", "spec.containers[1].resources.limits['nvidia.com/gpu'] is not a quantity: '$(GPUS)'"),
        ("inf", "spec.containers[1].resources.limits['nvidia.com/gpu'] is not a quantity: 'inf'"),
    ],
)
def test_a_gpu_value_that_is_no_quantity_makes_no_target_and_is_named(value, problem):
    p = pod(k.container("init", gpus=None), k.container("trainer", gpus=None, limits={"nvidia.com/gpu": value}))
    malformed: list[str] = []
    assert find_targets(p, ERDMA, malformed) == [] and malformed == [problem]
    assert find_targets(p, ERDMA) == []  # without a list to report in, still no target


@pytest.mark.parametrize(
    "resources,gpus",
    [
        ({"limits": {"nvidia.com/gpu": "8"}}, 8),
        ({"limits": {"nvidia.com/gpu": 4}}, 4),
        ({"requests": {"nvidia.com/gpu": "2"}}, 2),
        ({"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "4"}}, 4),
        ({"limits": {"nvidia.com/gpu": "1k"}}, 1000),
        ({"limits": {"nvidia.com/gpu": "-1"}}, 0),
        ({"limits": {"nvidia.com/gpu": "0"}}, 0),
    ],
)
def test_the_gpus_of_a_target(resources, gpus):
    c = {"name": "trainer", "image": "nvcr.io/nvidia/pytorch:25.11-py3", "resources": resources}
    assert [t.gpus for t in find_targets(pod(c), ERDMA)] == ([gpus] if gpus else [])


def test_a_manifest_read_by_review_is_told_about_its_gpu_limits():
    """`rdma-webhook review` reads pods as written in a file, before the API server copies limits
    into requests: a GPU only in limits is still seen."""
    written = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "rocm-bench"},
        "spec": {
            "containers": [{"name": "bench", "image": "rocm/pytorch", "resources": {"limits": {"amd.com/gpu": "8"}}}]
        },
    }
    assert why_no_target(written, ERDMA, []).startswith("container 'bench' requests amd.com/gpu, not a GPU")
    written["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "0"}}
    assert why_no_target(written, ERDMA, []).startswith(
        "container 'bench' requests nvidia.com/gpu: '0', which is no GPU"
    )
