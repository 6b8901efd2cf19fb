"""The node of e2e/node.py: pods are scheduled onto it, started by the kubelet through containerd
and runc from images imported without a registry, wired by the CNI bridge, limited by cgroups,
and reachable with `kubectl logs` and `kubectl exec` through the API server and the kubelet.

Each test asks for the `node` fixture: if the node cannot start here, they fail (never skip).
These run after every other file of the suite (LAST in conftest.py), and their pods tolerate the
node's taint, which keeps the rest of the suite's pods (Pending by design) off it."""

from __future__ import annotations

import ipaddress
import json
import re
import urllib.request

import pytest

from e2e import cluster as c
from e2e.conftest import INJECT, create, env_of, gpu_pod, make_namespace, stored, unique
from e2e.node import SHELL_IMAGE, TOLERATION, device_path, env_name

CAP_IPC_LOCK = 14  # linux/capability.h


def shell_pod(name: str, namespace: str, script: str, **container) -> dict:
    ctr = {"name": "main", "image": SHELL_IMAGE, "imagePullPolicy": "Never", "command": ["sh", "-c", script]}
    ctr.update(container)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [ctr],
            "tolerations": [TOLERATION],
        },
    }


@pytest.fixture
def plain_namespace(cp):
    """A namespace the webhook does not touch (not opted in)."""
    return make_namespace(cp, unique("node"))


def run(cp, node, pod: dict, phases=("Running",), timeout: float = 120) -> dict:
    proc = create(cp, pod)
    assert proc.returncode == 0, proc.stderr
    return node.wait_pod(pod["metadata"]["namespace"], pod["metadata"]["name"], phases, timeout)


def exec_out(cp, namespace: str, name: str, script: str) -> str:
    proc = cp.kubectl("exec", "-n", namespace, name, "--", "sh", "-c", script)
    assert proc.returncode == 0, f"exec {script!r}: {proc.stderr}"
    return proc.stdout


def cap_eff(cp, namespace: str, name: str) -> int:
    """CapEff of the container's main process (PID 1), from /proc/1/status."""
    line = [x for x in exec_out(cp, namespace, name, "cat /proc/1/status").splitlines() if x.startswith("CapEff:")]
    return int(line[0].split()[1], 16)


def test_node_reports_the_built_kubelet_and_containerd(cp, node):
    n = node.node()
    info = n["status"]["nodeInfo"]
    version = json.loads(cp.get("/version"))["gitVersion"]
    assert info["kubeletVersion"] == version, info
    pinned = re.search(
        r"^require github.com/containerd/containerd/v2 v(\S+)$",
        (c.ROOT / "e2e" / "containerd" / "go.mod").read_text(),
        re.M,
    )
    assert pinned and info["containerRuntimeVersion"] == f"containerd://{pinned[1]}", info
    assert {"type": "InternalIP", "address": node.ip} in n["status"]["addresses"], n["status"]["addresses"]
    ready = [x for x in n["status"]["conditions"] if x["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True", n["status"]["conditions"]


def test_plain_pod_runs_and_answers_logs_and_exec(cp, node, plain_namespace):
    name = unique("shell")
    pod = run(cp, node, shell_pod(name, plain_namespace, "echo hello from $(hostname); exec sleep 3600"))
    assert pod["spec"]["nodeName"] == node.name
    assert ipaddress.ip_address(pod["status"]["podIP"]) in node.subnet, pod["status"]
    logs = c.wait_for(
        "the container's first line in kubectl logs", lambda: cp.kubectl("logs", "-n", plain_namespace, name).stdout, 30
    )
    assert logs == f"hello from {name}\n"
    proc = cp.kubectl(
        "exec",
        "-n",
        plain_namespace,
        name,
        "--",
        "sh",
        "-c",
        "echo $((6 * 7)); tr '\\0' ' ' < /proc/1/cmdline; echo; cat /etc/hostname",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["42", "sleep 3600 ", name], proc.stdout
    # the runtime's default capabilities, without IPC_LOCK (what the labelled pod's test relies on)
    assert not cap_eff(cp, plain_namespace, name) & (1 << CAP_IPC_LOCK)


def test_exit_code_and_output_of_a_finished_container(cp, node, plain_namespace):
    name = unique("exit")
    pod = run(cp, node, shell_pod(name, plain_namespace, "echo going; exit 3"), phases=("Failed",))
    state = pod["status"]["containerStatuses"][0]["state"]
    assert state["terminated"]["exitCode"] == 3, state
    assert cp.kubectl("logs", "-n", plain_namespace, name).stdout == "going\n"


def test_memory_limit_is_the_containers_cgroup_limit(cp, node, plain_namespace):
    name = unique("limits")
    run(
        cp,
        node,
        shell_pod(name, plain_namespace, "exec sleep 3600", resources={"limits": {"memory": "48Mi", "cpu": "250m"}}),
    )
    proc = cp.kubectl(
        "exec",
        "-n",
        plain_namespace,
        name,
        "--",
        "cat",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
        "/sys/fs/cgroup/cpu/cpu.cfs_quota_us",
        "/sys/fs/cgroup/cpu/cpu.cfs_period_us",
    )
    assert proc.returncode == 0, proc.stderr
    limit, quota, period = (int(x) for x in proc.stdout.split())
    assert limit == 48 * 1024 * 1024
    assert quota * 4 == period, (quota, period)  # 250m of one CPU


def test_pods_are_reachable_from_the_host_and_from_each_other(cp, node, plain_namespace):
    """What the API server needs to call a webhook's pod, and what Open MPI's ranks need between pods."""
    server, client = unique("httpd"), unique("wget")
    pod = run(
        cp,
        node,
        shell_pod(
            server,
            plain_namespace,
            "mkdir /tmp/www && echo served by $(hostname) > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www",
            readinessProbe={"tcpSocket": {"port": 8080}, "periodSeconds": 1},
        ),
    )
    ip = pod["status"]["podIP"]
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a proxy
    with direct.open(f"http://{ip}:8080/index.html", timeout=10) as resp:
        assert resp.read().decode() == f"served by {server}\n"
    done = run(
        cp, node, shell_pod(client, plain_namespace, f"wget -q -O - http://{ip}:8080/index.html"), phases=("Succeeded",)
    )
    assert done["status"]["podIP"] != ip
    assert cp.kubectl("logs", "-n", plain_namespace, client).stdout == f"served by {server}\n"


def test_labelled_training_pod_starts_with_what_the_webhook_injected(cp, hook, node, namespace):
    """A labelled 2-GPU pod in an opted-in namespace, admitted by the session's webhook (the
    shipped policies: erdma wins), scheduled on the fake devices and started: inside it, the
    NCCL block in the main process's environment, /dev/shm a tmpfs of the policy's size,
    CAP_IPC_LOCK in CapEff, and the devices the device plugin allocated."""
    name = unique("trainer")
    pod = gpu_pod(
        name,
        namespace,
        labels=INJECT,
        gpus=2,
        image=SHELL_IMAGE,
        imagePullPolicy="Never",
        command=["sh", "-c", "exec sleep 3600"],
    )
    pod["spec"].update(terminationGracePeriodSeconds=1, tolerations=[TOLERATION])
    run(cp, node, pod)
    got = stored(cp, f"/api/v1/namespaces/{namespace}/pods/{name}")
    assert got["metadata"]["annotations"]["rdma-webhook.io/status"] == "injected"
    ctr = got["spec"]["containers"][0]
    injected = {k: v for k, v in env_of(ctr).items() if k.startswith("NCCL_")}
    assert injected["NCCL_NET"] == "IB" and injected["NCCL_IB_HCA"] == "erdma,rocep", injected

    # the environment of the container's main process, as it started
    environ = exec_out(cp, namespace, name, "tr '\\0' '\\n' < /proc/1/environ")
    seen = dict(line.split("=", 1) for line in environ.splitlines() if "=" in line)
    assert {k: seen.get(k) for k in injected} == injected

    # /dev/shm: the policy's emptyDir (medium Memory, 8Gi per GPU) mounted as a tmpfs of that size
    volume = next(
        v
        for v in got["spec"]["volumes"]
        if v["name"] == next(m["name"] for m in ctr["volumeMounts"] if m["mountPath"] == "/dev/shm")
    )
    assert volume["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
    mounts = [x.split() for x in exec_out(cp, namespace, name, "cat /proc/mounts").splitlines()]
    shm = [m for m in mounts if m[1] == "/dev/shm"]
    assert len(shm) == 1 and shm[0][2] == "tmpfs", shm
    assert f"size={16 * 1024 * 1024}k" in shm[0][3].split(","), shm

    assert cap_eff(cp, namespace, name) & (1 << CAP_IPC_LOCK), "CAP_IPC_LOCK not in CapEff"

    # what the fake device plugin allocated: 2 GPUs, 1 aliyun/erdma, as env and device nodes
    gpus = seen["NVIDIA_VISIBLE_DEVICES"].split(",")
    assert len(gpus) == 2 and len(set(gpus)) == 2, seen["NVIDIA_VISIBLE_DEVICES"]
    rdma = seen[env_name("aliyun/erdma")].split(",")
    assert len(rdma) == 1, rdma
    expected = sorted(
        [f"/dev/nvidia{g.rsplit('-', 1)[1]}" for g in gpus]
        + [device_path("aliyun/erdma") % int(rdma[0].rsplit("-", 1)[1])]
    )
    listed = exec_out(cp, namespace, name, "ls /dev/nvidia* /dev/infiniband/*").split()
    assert sorted(listed) == expected, listed
    # each a character device 1:3 (the host's /dev/null stands in for the hardware)
    devs = exec_out(cp, namespace, name, "stat -c '%F %t:%T' " + " ".join(expected)).splitlines()
    assert devs == ["character special file 1:3"] * len(expected), devs
