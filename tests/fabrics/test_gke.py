"""GKE: multi-networking as a second network mechanism beside Multus (webhook/fabrics/gke.py), the
gIB plugin over RDMA (A3 Ultra, A4: policy gke-gib) and GPUDirect-TCPXO (A3 Mega: policy
gke-tcpxo), each with its own fallback table (webhook/fabrics/transports.py).

The manifests of tests/manifests-gke/ are modelled on Google's public examples (written for these
tests, not copied). Each is judged as the API server sends its pods to /mutate, and through
`rdma-webhook review` as CI runs it, under every policy of the catalogue: admitted cleanly by the
policy that fits, denied naming that policy under every other, never given a second NIC.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import kube_objects as k
from core.test_decision import mutate_twice, respond
from webhook.core import keys, machines
from webhook.core.decision import Namespace, decide
from webhook.fabrics import gke
from webhook.fabrics.gke import GkeNetwork
from webhook.policy.load import load_texts

ROOT = Path(__file__).resolve().parent.parent.parent
MANIFESTS = ROOT / "tests" / "manifests-gke"
# manifest -> the policy that fits it (the machine-type cases: tests/fabrics/test_gke_machines.py)
FITS = {
    "a3ultra-gib-pods.yaml": "gke-gib",
    "a4-gib-jobset.yaml": "gke-gib",
    "a3mega-tcpxo-job.yaml": "gke-tcpxo",
    "a3high-tcpx-pods.yaml": "gke",
    "a4x-gib-jobset.yaml": "gke-gib",
}
# the other policies that admit it: `gke` has every GKE machine type
ALSO_FITS = {file: {"gke"} - {fit} for file, fit in FITS.items()}
ORIGINAL = ["a3mega-tcpxo-job.yaml", "a3ultra-gib-pods.yaml", "a4-gib-jobset.yaml"]
RDMA_NETS = [f"rdma-{i}" for i in range(8)]
TCPXO_NETS = [f"vpc{i}" for i in range(1, 9)]


def ns(policy: str | None = None) -> Namespace:
    labels = {"kubernetes.io/metadata.name": "ml-training", keys.NS_INJECTION: "enabled"}
    if policy:
        labels[keys.NS_POLICY] = policy
    return Namespace("ml-training", labels)


def _as_sent(
    template: dict,
    *,
    name: str | None = None,
    generate_name: str | None = None,
    labels: dict | None = None,
    annotations: dict | None = None,
) -> dict:
    """A manifest's pod (or pod template) as the API server sends it to /mutate: defaulted, with the
    service-account token volume, and a controller's labels and generateName."""
    meta = template.get("metadata") or {}
    spec = copy.deepcopy(template["spec"])
    lab = {**(meta.get("labels") or {}), **(labels or {})}
    lab.pop(keys.POD_INJECT, None)  # k.pod adds it
    ann = {**(meta.get("annotations") or {}), **(annotations or {})}
    containers = spec.pop("containers")
    volumes = spec.pop("volumes", None)
    init = spec.pop("initContainers", None)
    return k.pod(
        containers,
        name=name,
        generate_name=generate_name,
        labels=lab,
        annotations=ann or None,
        volumes=volumes,
        init_containers=init,
        **spec,
    )


def pods_of(file: str) -> list[dict]:
    """The pods a manifest makes, as sent: bare Pods, an indexed Job's pods, a JobSet's pods."""
    out = []
    for doc in yaml.safe_load_all((MANIFESTS / file).read_text()):
        kind = doc["kind"]
        if kind == "Pod":
            out.append(_as_sent(doc, name=doc["metadata"]["name"]))
        elif kind == "Job":
            job = doc["metadata"]["name"]
            for i in range(2):
                out.append(
                    _as_sent(
                        doc["spec"]["template"],
                        generate_name=f"{job}-{i}-",
                        labels={
                            "batch.kubernetes.io/job-name": job,
                            "job-name": job,
                            "batch.kubernetes.io/job-completion-index": str(i),
                            "batch.kubernetes.io/controller-uid": "0b5b2c7e-4a51-4d35-9d0c-2f1f6c1e6a10",
                        },
                        annotations={"batch.kubernetes.io/job-completion-index": str(i)},
                    )
                )
        elif kind == "JobSet":
            js = doc["metadata"]["name"]
            for rj in doc["spec"]["replicatedJobs"]:
                for i in range(2):
                    out.append(
                        _as_sent(
                            rj["template"]["spec"]["template"],
                            generate_name=f"{js}-{rj['name']}-0-{i}-",
                            labels={
                                "jobset.sigs.k8s.io/jobset-name": js,
                                "jobset.sigs.k8s.io/replicatedjob-name": rj["name"],
                                "jobset.sigs.k8s.io/job-index": "0",
                                "batch.kubernetes.io/job-completion-index": str(i),
                            },
                        )
                    )
    assert out
    return out


def gke_entries(pod: dict) -> list[dict]:
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(gke.INTERFACES)
    return gke.parse(value) if value else []


def env_of(container: dict) -> dict:
    return {e["name"]: e.get("value") for e in container.get("env") or ()}


def gpu_container(pod: dict) -> dict:
    return next(
        c for c in pod["spec"]["containers"] if "nvidia.com/gpu" in ((c.get("resources") or {}).get("limits") or {})
    )


def test_every_manifest_has_its_policy():
    assert sorted(p.name for p in MANIFESTS.glob("*.yaml")) == sorted(FITS)


# -- the manifests under the policy that fits --------------------------------------------------


@pytest.mark.parametrize("file", ORIGINAL)
def test_fitting_policy_admits_cleanly(file, policies):
    fit = FITS[file]
    want_nets = RDMA_NETS if fit == "gke-gib" else TCPXO_NETS
    for pod in pods_of(file):
        before = gke_entries(pod)
        resp, patched, decision = mutate_twice(pod, ns(fit), policies)
        assert decision.outcome == "mutated" and decision.policy == fit
        assert decision.warnings == [], decision.warnings
        annotations = patched["metadata"]["annotations"]
        assert annotations[keys.APPLIED_POLICY] == fit
        assert keys.MULTUS_NETWORKS not in annotations  # GKE's mechanism, not Multus
        entries = gke_entries(patched)
        assert entries[: len(before)] == before  # merged: what the pod listed stays, in its order
        names = [e["interfaceName"] for e in entries]
        networks = [e["network"] for e in entries]
        assert len(set(names)) == len(names) and len(set(networks)) == len(networks)
        assert [n for n in networks if n in want_nets] == want_nets
        assert {"interfaceName": "eth0", "network": "default"} in entries
        assert annotations[gke.DEFAULT_INTERFACE] == "eth0"
        c = gpu_container(patched)
        env = env_of(c)
        assert env["NCCL_NET"] == ("gIB" if fit == "gke-gib" else "FasTrak")
        assert "IPC_LOCK" in c["securityContext"]["capabilities"]["add"]
        by_net = {e["network"]: e["interfaceName"] for e in entries}
        if fit == "gke-tcpxo":
            assert (
                env["NCCL_FASTRAK_IFNAME"]
                == ",".join(by_net[n] for n in TCPXO_NETS)
                == "eth1,eth2,eth3,eth4,eth5,eth6,eth7,eth8"
            )
            assert env["NCCL_SOCKET_IFNAME"] == env["NCCL_FASTRAK_CTRL_DEV"] == "eth0"
        else:
            assert [by_net[n] for n in RDMA_NETS] == [f"eth{i}" for i in range(2, 10)]
        # nothing of another mechanism: no device resource beyond what the pod asked for
        original = gpu_container(pod)
        assert set(c["resources"]["limits"]) == set(original["resources"]["limits"])


def test_a4_workers_get_the_rdma_networks_added(policies):
    pod = pods_of("a4-gib-jobset.yaml")[0]
    assert gke.INTERFACES not in pod["metadata"].get("annotations", {})
    _, patched, decision = respond(pod, ns("gke-gib"), policies)
    assert gke_entries(patched) == [{"interfaceName": "eth0", "network": "default"}] + [
        {"interfaceName": f"eth{i + 2}", "network": f"rdma-{i}"} for i in range(8)
    ]
    assert any("GKE network rdma-0@eth2" in n for n in decision.notes)


def test_the_issue_symptom_gib_is_rdma_under_its_policy(policies):
    """NCCL_NET=gIB in the script (the A3 Ultra recipes) was `command-fallback` under every policy."""
    pod = pods_of("a3ultra-gib-pods.yaml")[0]
    _, _, decision = respond(pod, ns("gke-gib"), policies)
    assert decision.allowed and not decision.denials


# -- the same manifests under every other policy ------------------------------------------------

CATALOGUE = sorted(p.stem for p in (ROOT / "policies").glob("*.yaml"))


@pytest.mark.parametrize("file", sorted(FITS))
@pytest.mark.parametrize("policy", CATALOGUE)
def test_never_a_second_nic_and_denied_naming_the_fit(file, policy, policies):
    fit = FITS[file]
    for pod in pods_of(file):
        resp, patched, decision = respond(pod, ns(policy), policies)
        fitting = {fit, *ALSO_FITS[file]}
        if policy in fitting:
            assert resp["allowed"], (policy, decision)
        else:
            assert not resp["allowed"], (policy, decision)
            assert patched == pod  # a denial changes nothing
            named = [f for f in decision.denials if any(f"{keys.POD_POLICY}: {n}" in f.message for n in fitting)]
            assert named, [f.text() for f in decision.denials]
            continue
        # admitted: one attachment per network, and no Multus network or device of another fabric
        networks = [e["network"] for e in gke_entries(patched)]
        assert len(networks) == len(set(networks))
        assert keys.MULTUS_NETWORKS not in patched["metadata"]["annotations"]
        for before, after in zip(pod["spec"]["containers"], patched["spec"]["containers"]):
            assert set((after.get("resources") or {}).get("limits") or {}) == set(
                (before.get("resources") or {}).get("limits") or {}
            )
            # no claim added: the pod's own (A4X's ComputeDomain channel) only
            assert (after.get("resources") or {}).get("claims") == (before.get("resources") or {}).get("claims")
        assert patched["spec"].get("resourceClaims") == pod["spec"].get("resourceClaims")


def test_denials_say_why_under_another_fabric(policies):
    a3u = pods_of("a3ultra-gib-pods.yaml")[0]
    d = decide(a3u, ns("erdma"), policies)
    rules = sorted({f.rule for f in d.denials})
    assert rules == ["command-fallback", "fabric-mismatch"]
    cmd = next(f for f in d.denials if f.rule == "command-fallback")
    assert cmd.message.startswith(
        "NCCL_NET='gIB' names a transport that the erdma policy's erdma fabric does not provide (IB)"
    )
    assert cmd.message.endswith(
        "NCCL_NET='gIB' is the network of the gke policy's gke-rdma fabric: select that policy "
        "with the annotation rdma-webhook.io/policy: gke"
    )
    mismatch = next(f for f in d.denials if f.rule == "fabric-mismatch")
    assert "'rdma-0', 'rdma-1'" in mismatch.message and "'gvnic-1'" not in mismatch.message
    # the A3 Mega pod selects the A3 Mega accelerator, a machine type gke-gib does not have: the
    # denial names the policies that have it
    mega = pods_of("a3mega-tcpxo-job.yaml")[0]
    d = decide(mega, ns("gke-gib"), policies)
    assert [f.rule for f in d.denials] == ["machine-type"]
    assert "cloud.google.com/gke-accelerator=nvidia-h100-mega-80gb is a node of none" in d.denials[0].message
    assert "rdma-webhook.io/policy: gke or rdma-webhook.io/policy: gke-tcpxo" in d.denials[0].message
    # without its nodeSelector, its GKE networks name the policy
    del mega["spec"]["nodeSelector"]
    d = decide(mega, ns("gke-gib"), policies)
    assert [f.rule for f in d.denials] == ["fabric-mismatch"]
    assert d.denials[0].message.startswith("this pod attaches the GKE network(s) 'vpc1', 'vpc2'")
    # an A4 worker (no networks of its own) under the TCPXO policy: its machine type names the policies
    a4 = pods_of("a4-gib-jobset.yaml")[0]
    d = decide(a4, ns("gke-tcpxo"), policies)
    assert [f.rule for f in d.denials] == ["machine-type"]
    assert "rdma-webhook.io/policy: gke or rdma-webhook.io/policy: gke-gib" in d.denials[0].message
    # and without its nodeSelector (pinned to A3 Mega by the policy), its NCCL_NET names gIB's policy
    del a4["spec"]["nodeSelector"]
    d = decide(a4, ns("gke-tcpxo"), policies)
    assert [f.rule for f in d.denials] == ["env-fallback", "sidecar-missing"]
    assert "select that policy with the annotation rdma-webhook.io/policy: gke" in d.denials[0].message


# -- rdma-webhook review, as CI runs it ---------------------------------------------------------


def review(file: str, policy: str) -> subprocess.CompletedProcess:
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "ml-training", "labels": dict(ns(policy).labels)},
    }
    text = yaml.safe_dump(namespace) + "---\n" + (MANIFESTS / file).read_text()
    return subprocess.run(
        [sys.executable, "-m", "webhook", "review", "--policies", str(ROOT / "policies"), "--output", "json", "-"],
        input=text,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


@pytest.mark.parametrize("file", ORIGINAL)
def test_review_cli(file):
    fit = FITS[file]
    ok = review(file, fit)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    records = [json.loads(line) for line in ok.stdout.splitlines() if line.strip()]
    checked = [r for r in records if r["kind"] in ("Pod", "Job", "JobSet")]
    assert checked and all(r["outcome"] == "mutated" for r in checked), checked
    other = "gke-tcpxo" if fit == "gke-gib" else "sriov-roce"
    bad = review(file, other)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    records = [json.loads(line) for line in bad.stdout.splitlines() if line.strip()]
    denied = [r for r in records if r["outcome"] == "denied"]
    fitting = {fit, *ALSO_FITS[file]}
    assert denied and all(any(f"{keys.POD_POLICY}: {n}" in " ".join(r["messages"]) for n in fitting) for r in denied)


# -- the GKE annotation, merged ----------------------------------------------------------------

NETS = (GkeNetwork("rdma-0", "eth2"), GkeNetwork("rdma-1", "eth3"))


def test_plan_adds_the_pod_network_first_when_the_pod_lists_nothing():
    plan = gke.plan(None, NETS)
    assert json.loads(plan.value) == [
        {"interfaceName": "eth0", "network": "default"},
        {"interfaceName": "eth2", "network": "rdma-0"},
        {"interfaceName": "eth3", "network": "rdma-1"},
    ]
    assert plan.interfaces == ["eth2", "eth3"] and plan.pod_interfaces == ["eth2", "eth3"]
    assert plan.key == gke.INTERFACES and plan.also == {gke.DEFAULT_INTERFACE: "eth0"}


def test_plan_reuses_the_pods_own_names_and_avoids_taken_ones():
    current = json.dumps(
        [
            {"interfaceName": "eth0", "network": "default"},
            {"interfaceName": "eth2", "network": "data"},
            {"interfaceName": "rail1", "network": "rdma-1"},
        ]
    )
    plan = gke.plan(current, NETS)
    entries = json.loads(plan.value)
    assert entries[:3] == json.loads(current)  # never clobbered
    assert entries[3] == {"interfaceName": "eth1", "network": "rdma-0"}  # eth2 is taken: the lowest free ethN
    assert plan.interfaces == ["eth1", "rail1"]
    assert plan.pod_interfaces == ["eth2", "rail1", "eth1"]
    assert plan.added == ["GKE network rdma-0@eth1"]


def test_plan_keeps_a_pod_that_lists_every_network():
    current = json.dumps(
        [
            {"interfaceName": "eth0", "network": "default"},
            {"interfaceName": "eth3", "network": "rdma-1"},
            {"interfaceName": "eth2", "network": "rdma-0"},
        ]
    )
    plan = gke.plan(current, NETS)
    assert plan.value is None and plan.problem is None and plan.interfaces == ["eth2", "eth3"]


@pytest.mark.parametrize(
    "current, problem",
    [
        (
            '[{"interfaceName":"eth1","network":"a"},{"interfaceName":"eth1","network":"b"}]',
            "two entries the interface name 'eth1'",
        ),
        (
            '[{"interfaceName":"eth1","network":"a"},{"interfaceName":"eth2","network":"a"}]',
            "attaches the network 'a' twice",
        ),
        ('[{"interfaceName":"eth1"}]', "is not a JSON list"),
        ('{"interfaceName":"eth1","network":"a"}', "is not a JSON list"),
        ("eth1@rdma-0", "is not a JSON list"),
    ],
)
def test_plan_refuses_what_gke_would_not_start(current, problem):
    plan = gke.plan(current, NETS)
    assert plan.problem is not None and problem in plan.problem and plan.value is None


def test_a_conflicting_annotation_is_denied(policies):
    pod = pods_of("a4-gib-jobset.yaml")[0]
    pod["metadata"]["annotations"] = {
        gke.INTERFACES: json.dumps(
            [
                {"interfaceName": "eth0", "network": "default"},
                {"interfaceName": "eth1", "network": "gvnic-1"},
                {"interfaceName": "eth1", "network": "scratch"},
            ]
        )
    }
    d = decide(pod, ns("gke-gib"), policies)
    assert [f.rule for f in d.denials] == ["gke-annotation"]
    assert d.denials[0].message.startswith("networking.gke.io/interfaces: gives two entries the interface name 'eth1'")


def test_tcpxo_interfaces_follow_the_pods_own_names(policies):
    pod = pods_of("a3mega-tcpxo-job.yaml")[0]
    pod["metadata"]["annotations"][gke.INTERFACES] = json.dumps(
        [{"interfaceName": "eth0", "network": "default"}]
        + [{"interfaceName": f"gpu{i}", "network": f"vpc{i + 1}"} for i in range(8)]
    )
    _, patched, d = mutate_twice(pod, ns("gke-tcpxo"), policies)
    assert env_of(gpu_container(patched))["NCCL_FASTRAK_IFNAME"] == ",".join(f"gpu{i}" for i in range(8))
    assert gke.INTERFACES not in [p for p in d.notes]  # nothing added to the annotation
    assert gke_entries(patched) == gke_entries(pod)


def test_socket_ifname_is_checked_against_the_gke_interfaces(policies):
    pod = pods_of("a3ultra-gib-pods.yaml")[0]
    gpu_container(pod)["env"].append({"name": "NCCL_SOCKET_IFNAME", "value": "ens7"})
    d = decide(pod, ns("gke-gib"), policies)
    assert d.allowed
    assert any(
        "NCCL_SOCKET_IFNAME='ens7' names no interface the pod will have (eth0, eth1, eth2" in w for w in d.warnings
    )
    gpu_container(pod)["env"][-1]["value"] = "eth1"  # the second gVNIC the pod lists itself
    assert not any("NCCL_SOCKET_IFNAME" in w for w in decide(pod, ns("gke-gib"), policies).warnings)


# -- gIB's and GPUDirect-TCPXO's fallback signatures --------------------------------------------


@pytest.mark.parametrize(
    "name, value, denied",
    [
        ("NCCL_NET", "gIB", False),
        ("NCCL_NET", "GIB", False),  # NCCL compares plugin names without case
        ("NCCL_NET", "Socket", True),
        ("NCCL_NET", "IB", True),  # NCCL's internal IB, not the gIB plugin
        ("NCCL_NET_PLUGIN", "none", True),
        ("NCCL_NET_PLUGIN", "/usr/local/gib/lib64/libnccl-net_internal.so", False),
        ("NCCL_NET_PLUGIN", "ofi", True),
        ("NCCL_IB_DISABLE", "1", True),
        ("NCCL_IB_DISABLE", "0", False),
        ("NCCL_IB_HCA", "mlx5_0,mlx5_1", False),
        ("NCCL_IB_HCA", "=ib0", True),
    ],
)
def test_gib_signatures(name, value, denied, policies):
    pod = pods_of("a4-gib-jobset.yaml")[0]
    env = [e for e in gpu_container(pod)["env"] if e["name"] != name] + [{"name": name, "value": value}]
    gpu_container(pod)["env"] = env
    d = decide(pod, ns("gke-gib"), policies)
    rules = [f.rule for f in d.denials]
    assert rules == (["env-fallback"] if denied else []), d.denials
    # the same setting made by the command
    gpu_container(pod)["env"] = [e for e in env if e["name"] != name]
    gpu_container(pod)["args"] = [f"export {name}={value}; torchrun /opt/train/pretrain.py"]
    rules = [f.rule for f in decide(pod, ns("gke-gib"), policies).denials]
    assert rules == (["command-fallback"] if denied else [])


@pytest.mark.parametrize(
    "line, denied",
    [
        ("export NCCL_NET=Socket", "forces NCCL's TCP socket transport"),
        ("export NCCL_NET_PLUGIN=none", "NCCL_NET_PLUGIN='none' loads no net plugin"),
        ("export NCCL_NET_PLUGIN=gib", "loads libnccl-net-gib.so instead of the fabric's plugin"),
        ("export NCCL_NET=FasTrak NCCL_NET_PLUGIN=/usr/local/nvidia/lib64/libnccl-net.so", None),
        ("export NCCL_IB_DISABLE=1", None),  # not a variable of GPUDirect-TCPXO
    ],
)
def test_tcpxo_signatures(line, denied, policies):
    pod = pods_of("a3mega-tcpxo-job.yaml")[0]
    gpu_container(pod)["args"] = [f"{line}\n/scripts/run-allgather.sh"]
    d = decide(pod, ns("gke-tcpxo"), policies)
    if denied:
        assert [f.rule for f in d.denials] == ["command-fallback"] and denied in d.denials[0].message
    else:
        assert d.allowed and not d.denials


def test_tcpxo_ifname_of_the_pod_network_is_replaced(policies):
    pod = pods_of("a3mega-tcpxo-job.yaml")[0]
    gpu_container(pod)["env"].append({"name": "NCCL_FASTRAK_IFNAME", "value": "eth0"})
    _, patched, d = respond(pod, ns("gke-tcpxo"), policies)
    assert env_of(gpu_container(patched))["NCCL_FASTRAK_IFNAME"] == "eth1,eth2,eth3,eth4,eth5,eth6,eth7,eth8"
    assert any("NCCL_FASTRAK_IFNAME is enforced by policy gke-tcpxo: 'eth0' replaced" in w for w in d.warnings)


def test_tcpxo_needs_its_sidecar(policies):
    pod = pods_of("a3mega-tcpxo-job.yaml")[0]
    daemon = pod["spec"]["containers"].pop(0)
    d = decide(pod, ns("gke-tcpxo"), policies)
    assert [f.rule for f in d.denials] == ["sidecar-missing"]
    assert "needs the tcpxo-daemon sidecar" in d.denials[0].message
    # a native sidecar (an init container restarted Always) counts; a plain init container does not
    pod["spec"]["initContainers"] = [dict(daemon, restartPolicy="Always")]
    assert decide(pod, ns("gke-tcpxo"), policies).allowed
    pod["spec"]["initContainers"] = [daemon]
    assert [f.rule for f in decide(pod, ns("gke-tcpxo"), policies).denials] == ["sidecar-missing"]


@pytest.mark.parametrize("file", ORIGINAL)
def test_a_missing_plugin_mount_is_a_warning(file, policies):
    pod = pods_of(file)[0]
    c = gpu_container(pod)
    c["volumeMounts"] = [
        m for m in c["volumeMounts"] if not m["mountPath"].startswith(("/usr/local/gib", "/usr/local/nvidia"))
    ]
    d = decide(pod, ns(FITS[file]), policies)
    assert d.allowed
    host = "/home/kubernetes/bin/gib" if FITS[file] == "gke-gib" else "/home/kubernetes/bin/nvidia/lib64"
    assert [w for w in d.warnings if "does not mount the host's" in w] == [
        f"{c['name']}: does not mount the host's {host} at {'/usr/local/gib' if FITS[file] == 'gke-gib' else '/usr/local/nvidia/lib64'}, "
        f"where the nodes of policy {FITS[file]} install its NCCL plugin ({'gIB' if FITS[file] == 'gke-gib' else 'FasTrak'}); "
        f"unless the image brings the plugin there, NCCL cannot open it: add a hostPath volume of {host} mounted at "
        f"{'/usr/local/gib' if FITS[file] == 'gke-gib' else '/usr/local/nvidia/lib64'}"
    ]


def test_plugin_mount_of_a_folder_above_counts(policies):
    pod = pods_of("a3mega-tcpxo-job.yaml")[0]
    c = gpu_container(pod)
    pod["spec"]["volumes"].append({"name": "nvidia-root", "hostPath": {"path": "/home/kubernetes/bin/nvidia"}})
    c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] != "nvidia-libs"] + [
        {"name": "nvidia-root", "mountPath": "/usr/local/nvidia"}
    ]
    assert not any("does not mount" in w for w in decide(pod, ns("gke-tcpxo"), policies).warnings)
    c["volumeMounts"][-1]["mountPath"] = "/opt/nvidia"  # the right host folder at the wrong place
    assert any("does not mount" in w for w in decide(pod, ns("gke-tcpxo"), policies).warnings)


def test_host_network_is_refused_with_the_gke_reason(policies):
    pod = pods_of("a3ultra-gib-pods.yaml")[0]
    pod["spec"]["hostNetwork"] = True
    d = decide(pod, ns("gke-gib"), policies)
    assert [f.rule for f in d.denials] == ["host-network"]
    assert "GKE attaches no additional networks to host-network pods" in d.denials[0].message


# -- the policy format -------------------------------------------------------------------------

_BASE = """
apiVersion: rdma-webhook.io/v1alpha2
kind: RdmaPolicy
name: g
description: d
namespaceSelector: {}
fabric: {kind: gke-rdma, transport: gib, ncclNet: [gIB], hcaDevices: [mlx5_0], netPlugins: [libnccl-net_internal.so]}
shm: {sizeLimit: 1Gi}
nccl: {NCCL_NET: gIB}
"""


@pytest.mark.parametrize(
    "extra, error",
    [
        ("gkeNetworks: [{name: rdma-0, interface: eth0}]", "field gkeNetworks[0].interface: 'eth0' is taken"),
        ("gkeNetworks: [{name: default}]", "field gkeNetworks[0].name: 'default' is not the name of a GKE Network"),
        ("gkeNetworks: [{name: a}, {name: a}]", "field gkeNetworks: a network is listed twice"),
        (
            "gkeNetworks: [{name: a}]\nnetworks: [{name: b, resource: x.io/y}]",
            "field gkeNetworks: a pod is attached by Multus",
        ),
        ("gkeNetworks: [{name: a}]\nhostNetwork: Required", "Required with gkeNetworks"),
        (
            "pluginMounts: [{hostDir: relative, mountPath: /x}]\ngkeNetworks: [{name: a}]",
            "field pluginMounts[0].hostDir",
        ),
    ],
)
def test_policy_errors(extra, error):
    ps, errors = load_texts([("g.yaml", _BASE + extra)])
    assert ps is None and any(error in str(e) for e in errors), errors


def test_a_gib_policy_needs_devices_or_networks():
    ps, errors = load_texts([("g.yaml", _BASE)])
    assert ps is None and any("gives no device resource" in str(e) for e in errors)
    ps, errors = load_texts(
        [
            (
                "g.yaml",
                _BASE.replace("nccl: {NCCL_NET: gIB}", "nccl: {NCCL_NET: gIB, X_IF: '{interfaces}'}")
                + "gkeNetworks: [{name: a}]",
            )
        ]
    )
    assert ps is not None, errors
    assert ps.get("g").host_network == "Forbidden" and ps.get("g").env[1].templated


def test_the_policys_own_block_must_not_fall_back():
    ps, errors = load_texts(
        [
            (
                "g.yaml",
                _BASE.replace("nccl: {NCCL_NET: gIB}", "nccl: {NCCL_NET_PLUGIN: none}") + "gkeNetworks: [{name: a}]",
            )
        ]
    )
    assert ps is None and any("loads no net plugin" in str(e) for e in errors)


# -- the final-state check as a ValidatingAdmissionPolicy ----------------------------------------


def _validations(policies, name: str) -> list[dict]:
    from webhook.core.model import PolicySet
    from webhook.policy import admission_policy as ap

    vap = next(o for o in ap.objects(PolicySet([policies.get(name)])) if o["kind"] == ap.POLICY_KIND)
    return vap["spec"]["validations"]


def _matches_patterns(expression: str) -> list[str]:
    """The RE2 patterns of `.matches('...')` in a CEL expression, CEL string escapes undone."""
    out = []
    for literal in re.findall(r"\.matches\('((?:[^'\\]|\\.)*)'\)", expression):
        out.append(re.sub(r"\\(.)", r"\1", literal))
    return out


def _guards(expression: str, machine: str) -> bool:
    """Whether a validation of a policy with machine types applies to a pod of type `machine`
    (its guard: every type, one, or a list of them); True for a policy without types."""
    guard = re.match(
        r"(?:variables\.machine == '' \|\| |!\(variables\.machine (?:== '([^']+)'|in \[([^\]]+)\])\) \|\| )", expression
    )
    if guard is None:
        return not machine
    one, many = guard.groups()
    return (one is None and many is None) or machine == one or f"'{machine}'" in (many or "")


@pytest.mark.parametrize("file", ORIGINAL)
def test_admission_policy_keeps_the_gke_networks(file, policies):
    fit = FITS[file]
    checks = [v for v in _validations(policies, fit) if "[gke-networks]" in v.get("message", "")]
    # gke-gib's machine types: rdma-0..rdma-3 for both, rdma-4..rdma-7 for A3 Ultra/A4 alone
    # (A4X has four), each validation guarded by the types that have it
    assert len(checks) == 8
    _, patched, _ = respond(pods_of(file)[0], ns(fit), policies)
    listed = patched["metadata"]["annotations"][gke.INTERFACES]
    typed = machines.choose(patched, policies.by_name[fit], policies)[0]
    assert typed is not None
    checks = [v for v in checks if _guards(v["expression"], typed.machine)]
    assert len(checks) == len(typed.gke_networks) == 8  # these pods are A3 Ultra's and A4's
    for v in checks:
        (pattern,) = _matches_patterns(v["expression"])
        assert re.search(pattern, listed), pattern  # what the pod lists, spaced or compact
        name = re.search(r"lists the (\S+) network", v["message"]).group(1)
        assert not re.search(pattern, listed.replace(f'"{name}"', '"elsewhere"'))
    sidecar = [v for v in _validations(policies, fit) if "[sidecar-missing]" in v.get("message", "")]
    assert len(sidecar) == (fit == "gke-tcpxo")
