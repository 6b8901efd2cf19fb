"""The warnings of an admitted pod (webhook/core/pod_warnings.py): here, whether a GPU container
sees the host folder where the fabric's nodes install its NCCL plugin (GKE's TCPXO plugin under
/home/kubernetes/bin/nvidia/lib64, mounted at /usr/local/nvidia/lib64, as in GoogleCloudPlatform
/cluster-toolkit's a3-megagpu examples and tests/manifests-gke/a3mega-tcpxo-job.yaml), however the
pod mounts it: the folder itself, a folder above it, a subPath, trailing slashes, the whole root.
Pods as the API server sends them (tests/kube_objects.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

import kube_objects as k
from conftest import POLICIES
from webhook.core.model import PluginMount
from webhook.core.pod_warnings import warnings_for
from webhook.core.subject import Subject
from webhook.core.targets import find_targets
from webhook.policy.load import load_dir

PS, _errors = load_dir(POLICIES)
assert PS is not None, _errors
TCPXO = PS.by_name["gke-tcpxo"]
HOST, AT = "/home/kubernetes/bin/nvidia/lib64", "/usr/local/nvidia/lib64"
MISSING = (
    f"trainer: does not mount the host's {HOST} at {AT}, where the nodes of policy gke-tcpxo install its NCCL "
    f"plugin (FasTrak); unless the image brings the plugin there, NCCL cannot open it: add a hostPath volume of "
    f"{HOST} mounted at {AT}"
)


def plugin_warnings(mounts: list, volumes: list, policy=TCPXO) -> list[str]:
    trainer = k.container("trainer", volumeMounts=mounts)
    pod = k.pod([trainer], generate_name="pytorch-worker-", volumes=volumes)
    subject = Subject(pod, policy, {}, find_targets(pod, policy))
    return [w for w in warnings_for(pod, subject) if "does not mount the host's" in w]


def host_path(name: str, path) -> dict:
    return {"name": name, "hostPath": {"path": path}}


@pytest.mark.parametrize(
    "mount,volume",
    [
        ({"name": "libs", "mountPath": AT}, host_path("libs", HOST)),
        ({"name": "libs", "mountPath": AT + "/"}, host_path("libs", HOST + "/")),
        ({"name": "libs", "mountPath": "/usr/local/nvidia"}, host_path("libs", "/home/kubernetes/bin/nvidia")),
        ({"name": "libs", "mountPath": "/usr/local/nvidia/"}, host_path("libs", "/home/kubernetes/bin/nvidia/")),
        ({"name": "libs", "mountPath": AT, "subPath": "nvidia/lib64"}, host_path("libs", "/home/kubernetes/bin")),
        ({"name": "libs", "mountPath": AT, "subPath": "/nvidia/lib64/"}, host_path("libs", "/home/kubernetes/bin/")),
    ],
)
def test_the_plugin_folder_mounted_there_is_seen(mount, volume):
    assert plugin_warnings([mount], [volume]) == []


@pytest.mark.parametrize(
    "mounts,volumes",
    [
        ([], []),
        ([{"name": "libs", "mountPath": "/opt/nvidia/lib64"}], [host_path("libs", HOST)]),  # elsewhere
        ([{"name": "libs", "mountPath": "/usr/local/nvidia-x"}], [host_path("libs", "/home/kubernetes/bin/nvidia")]),
        ([{"name": "libs", "mountPath": AT}], [host_path("libs", "/home/kubernetes/bin/nvidia")]),  # another folder
        ([{"name": "libs", "mountPath": AT}], [host_path("other", HOST)]),  # another volume's name
        ([{"name": "libs", "mountPath": AT}], [{"name": "libs", "emptyDir": {}}]),
        ([{"name": "libs", "mountPath": AT}], [{"name": "libs", "hostPath": "bad"}]),
        ([{"name": "libs", "mountPath": AT}], [host_path("libs", 7)]),
        ([{"name": "libs", "mountPath": AT, "subPath": "lib64"}], [host_path("libs", HOST)]),
        ([{"name": "libs", "mountPath": AT, "subPath": ""}], [host_path("libs", "/home/kubernetes/bin")]),
        ([{"name": "libs", "mountPath": "/"}], [host_path("libs", "/")]),  # the node's root at the pod's root
        ([{"name": "libs", "mountPath": "/"}], [host_path("libs", HOST)]),
        # a letter more than the right path, on either side
        ([{"name": "libs", "mountPath": AT + "X"}], [host_path("libs", HOST)]),
        ([{"name": "libs", "mountPath": "/usr/local/nvidiaX"}], [host_path("libs", "/home/kubernetes/bin/nvidia")]),
        ([{"name": "libs", "mountPath": AT}], [host_path("libs", HOST + "X")]),
        ([{"name": "libs", "mountPath": "/usr/local/nvidia"}], [host_path("libs", "/home/kubernetes/bin/nvidiaX")]),
        ([{"name": "libs", "mountPath": AT, "subPath": "lib64"}], [host_path("libs", "/home/kubernetes/bin/nvidiaX")]),
        ([{"name": "libs", "mountPath": AT, "subPath": "lib64X"}], [host_path("libs", "/home/kubernetes/bin/nvidia")]),
        ([{"name": "libs", "mountPath": AT, "subPath": "Xlib64"}], [host_path("libs", "/home/kubernetes/bin/nvidia")]),
    ],
)
def test_anything_else_is_a_missing_plugin_mount(mounts, volumes):
    assert plugin_warnings(mounts, volumes) == [MISSING]


def test_entries_the_api_server_would_refuse_are_passed_over():
    """A mount or volume that is no mapping, or names its path or volume with no string, is
    skipped, and the good entries after it still count."""
    good_mount, good_volume = {"name": "libs", "mountPath": AT}, host_path("libs", HOST)
    bad_mounts = ["junk", {"name": "libs", "mountPath": 7}, {"name": None, "mountPath": AT}]
    assert plugin_warnings([*bad_mounts, good_mount], ["junk", good_volume]) == []
    assert plugin_warnings(bad_mounts, [good_volume]) == [MISSING]
    assert plugin_warnings([dict(good_mount, subPath=7)], [good_volume]) == []  # no subPath


def test_the_plugin_mount_counts_wherever_it_is_among_the_others():
    """A training container mounts more than the plugin (/dev/shm, its data, the service-account
    token the API server adds), and the pod has more volumes: order does not matter."""
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "data", "mountPath": "/data"}]
    volumes = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}, host_path("data", "/mnt/data")]
    libs_mount, libs = {"name": "libs", "mountPath": AT}, host_path("libs", HOST)
    assert plugin_warnings([*mounts, libs_mount], [*volumes, libs]) == []
    assert plugin_warnings([libs_mount, *mounts], [libs, *volumes]) == []


def test_a_plugin_at_the_nodes_root_is_seen_through_a_root_mount():
    """A fabric whose plugin sits where the image looks for it (hostDir = mountPath): the node's
    root mounted at the pod's root shows it, as would /usr mounted at /usr."""
    policy = replace(TCPXO, plugin_mounts=(PluginMount("/usr/local/nccl", "/usr/local/nccl"),))
    assert plugin_warnings([{"name": "root", "mountPath": "/"}], [host_path("root", "/")], policy) == []
    assert plugin_warnings([{"name": "usr", "mountPath": "/usr"}], [host_path("usr", "/usr")], policy) == []
    assert plugin_warnings([{"name": "usr", "mountPath": "/usr"}], [host_path("usr", "/opt")], policy) != []
    # the node's /host at the pod's root shows /host/usr/local/nccl at /usr/local/nccl
    policy = replace(TCPXO, plugin_mounts=(PluginMount("/host/usr/local/nccl", "/usr/local/nccl"),))
    root = [{"name": "root", "mountPath": "/"}]
    assert plugin_warnings(root, [host_path("root", "/host")], policy) == []
    assert plugin_warnings(root, [host_path("root", "/host/")], policy) == []
    assert plugin_warnings(root, [host_path("root", "/hostX")], policy) != []


def target_warnings(policy, env=None, own_claim=False) -> list[str]:
    trainer = k.container("trainer", env=env)
    pod = k.pod([trainer], generate_name="pytorch-worker-")
    subject = Subject(pod, policy, {}, find_targets(pod, policy), claim_entry="rdma" if own_claim else None)
    subject.own_claim = own_claim
    return warnings_for(pod, subject)


def test_verbose_nccl_debug_is_a_warning_unless_its_subsystems_keep_it_to_init_lines():
    erdma = PS.by_name["erdma"]
    verbose = "trainer: NCCL_DEBUG=INFO logs heavily; use WARN outside debugging"
    assert verbose in target_warnings(erdma, [{"name": "NCCL_DEBUG", "value": "INFO"}])
    light = [{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "NCCL_DEBUG_SUBSYS", "value": "INIT,NET"}]
    assert verbose not in target_warnings(erdma, light)


def test_an_own_nic_claim_under_an_aligned_policy_is_told_it_is_not_aligned():
    aligned = PS.by_name["roce-dranet-aligned"]
    said = (
        "policy roce-dranet-aligned claims each GPU with a NIC on its PCIe root, but this pod brings its own NIC "
        "claim 'rdma' and device-plugin GPUs: not aligned; leave out the claim to get the policy's"
    )
    assert said in target_warnings(aligned, own_claim=True)
    assert not any("not aligned" in w for w in target_warnings(aligned, own_claim=False))
    assert not any("not aligned" in w for w in target_warnings(PS.by_name["roce-dranet"], own_claim=True))
