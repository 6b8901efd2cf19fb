"""Issue 42, every NIC a pod already has (webhook.core.families, webhook.core.claims): the "Why"
examples of the issue on the manifests of tests/manifests-nics/ (each names its public source),
through /mutate (the served handler, the patch applied to the pod as the controller sends it),
/validate of the workload, and `rdma-webhook review`.

- A DRA claim of an RDMA NIC class (GKE managed DRANET, DRANET's rdma devices) is the pod's NIC
  under every policy, whichever policies are loaded: no policy adds a network, device or claim on
  top; gke-gib takes it as its NICs (DRANET with gIB is one fabric); DRA-only policies do not call
  it "no NIC".
- Host networking with the host's /dev/infiniband is the pod's NICs: no device added.
- A pod's own SR-IOV VFs count without their NADs in the state; the missing NADs are said.
- Under a DRA-only policy, a claim whose template is not known is said, not taken for a NIC.
- Messages: a zero GPU request, a labelled template in a namespace not opted in.
"""

from __future__ import annotations

import contextlib
import io
import json
import re

import pytest

from nic_corpus import (
    GKE_INTERFACES,
    NICS,
    cluster,
    controller_pods,
    documents,
    env_of,
    mutate,
    nics,
    shipped,
    state_text,
    validate,
)
from webhook.core import keys
from webhook.core.model import PolicySet

PS = shipped()


def only(*names: str) -> PolicySet:
    """A cluster that installed only these shipped policies."""
    return PolicySet(PS.by_name[n] for n in names)


def workload(file: str) -> tuple[dict, list[dict]]:
    """The file's workload and its companions (templates, classes)."""
    docs = documents(NICS / file)
    [obj] = [d for d in docs if d["kind"] not in ("ResourceClaimTemplate", "DeviceClass")]
    return obj, docs


def judged(file: str, policy: str, policies: PolicySet = PS):
    """[(template path, /mutate response, pod after the patch, pod as sent, decision)] of each
    labelled template's pod, and the /validate (response, decision) of the workload."""
    obj, docs = workload(file)
    state, claims = cluster(policy, docs)
    pods = []
    for path, pod in controller_pods(obj):
        resp, out, d = mutate(pod, policies, state, claims)
        if d.outcome != "skipped":
            pods.append((path, resp, out, pod, d))
    return pods, validate(obj, policies, state, claims)


def review(tmp_path, file: str, policy: str, *extra: str) -> list[dict]:
    """`rdma-webhook review --policies policies/ --cluster-state STATE(policy) FILE -o json`."""
    from webhook.cli.main import main

    state = tmp_path / f"state-{policy}.yaml"
    state.write_text(state_text(policy))
    out, err = io.StringIO(), io.StringIO()
    args = ["review", "--policies", str(NICS.parent.parent / "policies"), "--cluster-state", str(state)]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        main([*args, "--output", "json", *extra, str(NICS / file)])
    return [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]


def workload_record(records: list[dict]) -> dict:
    [rec] = [r for r in records if r["kind"] not in ("ResourceClaimTemplate", "DeviceClass")]
    return rec


def agree(pods, validated) -> None:
    """/validate's answer for each template is /mutate's for its pods."""
    resp, decision = validated
    by_path = {t.path: t for t in decision.templates}
    for path, mresp, _, _, d in pods:
        assert by_path[path].decision.outcome == d.outcome, (path, by_path[path].decision.denials, d.denials)
    assert resp["allowed"] == all(p[1]["allowed"] for p in pods), (resp, [p[4].denials for p in pods])


# -- a DRA claim of any RDMA NIC class is the pod's NIC --------------------------------------------


@pytest.mark.parametrize("policy", sorted(PS.by_name))
def test_gke_managed_dranet_claim_gets_no_second_nic_under_any_policy(policy):
    """mrdma-gib-pod.yaml claims all eight RDMA NICs (mrdma.google.com). Under every shipped
    policy: admitted without a network, device or claim added, or denied as another fabric's NIC;
    never "claims no NIC"; /validate says the same of the template."""
    pods, validated = judged("mrdma-gib-pod.yaml", policy)
    [(path, resp, out, sent, d)] = pods
    if resp["allowed"]:
        assert nics(out) == nics(sent), (policy, d.notes)
    assert "device-missing" not in [f.rule for f in d.denials]
    agree(pods, validated)


def test_gke_gib_takes_the_managed_dranet_claim_as_its_nics_instead_of_its_networks(tmp_path):
    pods, (vresp, _) = judged("mrdma-gib-pod.yaml", "gke-gib")
    [(_, resp, out, sent, d)] = pods
    assert resp["allowed"] and d.outcome == "mutated", d.denials
    assert GKE_INTERFACES not in (out["metadata"].get("annotations") or {})
    assert nics(out) == nics(sent) and env_of(out)["NCCL_NET"] == "gIB"
    assert vresp["allowed"]
    rec = workload_record(review(tmp_path, "mrdma-gib-pod.yaml", "gke-gib"))
    assert rec["allowed"] and rec["outcome"] == "mutated", rec
    assert not any("rdma-0" in w or "GKE network" in w for w in rec["warnings"]), rec["warnings"]


# The pod's node selection for each machine type of `gke` (policies/gke.yaml's nodeLabels).
GKE_SELECTIONS = {
    "none": None,
    "a3-ultra-a4": "nvidia-b200",
    "a4x": "nvidia-gb200",
    "a3-high": "nvidia-h100-80gb",
    "a3-mega": "nvidia-h100-mega-80gb",
}


def selecting(file: str, accelerator: str | None) -> tuple[list, tuple]:
    """judged(file, "gke") with the workload's pod template selecting `accelerator` (or nothing)."""
    obj, docs = workload(file)
    if accelerator is not None:
        obj["spec"]["template"]["spec"]["nodeSelector"] = {"cloud.google.com/gke-accelerator": accelerator}
    state, claims = cluster("gke", docs)
    pods = [(path, *mutate(pod, PS, state, claims), pod) for path, pod in controller_pods(obj)]
    return [(path, resp, out, sent, d) for path, resp, out, d, sent in pods], validate(obj, PS, state, claims)


@pytest.mark.parametrize("selection", sorted(GKE_SELECTIONS))
def test_gke_takes_the_managed_dranet_claim_as_the_rdma_nics_of_its_gib_types_only(selection):
    """Under the one `gke` policy, the GKE managed DRANET claim is the pod's RDMA NICs on the gIB
    machine types (A3 Ultra and A4, the default when none is selected, and A4X): admitted with no
    GKE network on top and gIB pinned. The TCPX types' nodes have no RDMA NICs: a pod selecting
    one with that claim is another fabric's NIC there, never given vpc networks beside it."""
    pods, (vresp, _) = selecting("mrdma-gib-pod.yaml", GKE_SELECTIONS[selection])
    [(_, resp, out, sent, d)] = pods
    assert nics(out if resp["allowed"] else sent) == nics(sent)
    if selection in ("none", "a3-ultra-a4", "a4x"):
        assert resp["allowed"] and d.outcome == "mutated", d.denials
        assert GKE_INTERFACES not in (out["metadata"].get("annotations") or {})
        assert env_of(out)["NCCL_NET"] == "gIB"
    else:
        assert not resp["allowed"] and "fabric-mismatch" in [f.rule for f in d.denials], d.denials
        assert "(DeviceClass mrdma.google.com), another fabric's RDMA NIC" in " ".join(f.message for f in d.denials)
    assert vresp["allowed"] == resp["allowed"]


@pytest.mark.parametrize("policy", ["roce-dranet", "efa-dra", "ib-shared", "sriov-roce"])
def test_another_fabric_names_the_managed_dranet_claim_as_a_nic_and_gke_gib_as_the_fit(tmp_path, policy):
    """Not "claims no NIC", not a device added: another fabric's RDMA NIC, and the policy the
    advice names (gke or gke-gib, both take the claim as their NICs) admits the pod."""
    pods, (vresp, _) = judged("mrdma-gib-pod.yaml", policy)
    [(_, resp, _, _, d)] = pods
    assert not resp["allowed"] and [f.rule for f in d.denials if f.rule != "gib-plugin"][:1] == ["fabric-mismatch"]
    assert "(DeviceClass mrdma.google.com), another fabric's RDMA NIC" in d.denials[0].message
    [advised] = re.findall(r"select policy (\S+) with", d.denials[0].message)
    assert advised in ("gke", "gke-gib")
    [(_, advised_resp, _, _, advised_d)] = judged("mrdma-gib-pod.yaml", advised)[0]
    assert advised_resp["allowed"], advised_d.denials
    rec = workload_record(review(tmp_path, "mrdma-gib-pod.yaml", policy))
    assert not vresp["allowed"] and not rec["allowed"] and "fabric-mismatch" in rec["rules"]


@pytest.mark.parametrize(
    "installed", [("ib-shared",), ("sriov-roce",), ("efa",), ("gke-gib",), tuple(sorted(PS.by_name))]
)
def test_whether_a_claim_is_a_nic_does_not_depend_on_the_other_policies_loaded(installed):
    """The same pod under the same policy with only it, or all of the catalogue, installed: the
    claim is a NIC either way (no second NIC; only the advice names what is installed)."""
    policy = installed[0]
    alone, _ = judged("mrdma-gib-pod.yaml", policy, only(*installed))
    every, _ = judged("mrdma-gib-pod.yaml", policy, PS)
    [(_, r1, out1, sent, d1)], [(_, r2, out2, _, d2)] = alone, every
    assert r1["allowed"] == r2["allowed"] and [f.rule for f in d1.denials] == [f.rule for f in d2.denials]
    if r1["allowed"]:
        assert nics(out1) == nics(sent) == nics(out2)
    if not r1["allowed"] and len(installed) == 1:
        assert "no policy of this namespace provides it" in d1.denials[0].message


def test_dranet_nics_with_gib_are_one_fabric_of_gke_gib_with_no_circular_advice(tmp_path):
    """dranet-kuberay-gib.yaml (DRANET's KubeRay guide): the worker claims DRANET's RDMA NICs and
    runs NCCL through gIB. gke-gib admits it with its claim as its NICs (no GKE network, gIB
    pinned), with only gke-gib installed too (no duplicate networks); roce-dranet also takes the
    claim as its NIC. Neither tells the pod to select the other."""
    for installed in (PS, only("gke-gib")):
        pods, (vresp, _) = judged("dranet-kuberay-gib.yaml", "gke-gib", installed)
        [(path, resp, out, sent, d)] = pods
        assert resp["allowed"] and d.outcome == "mutated" and vresp["allowed"], d.denials
        assert nics(out) == nics(sent) and env_of(out)["NCCL_NET"] == "gIB"
    pods, _ = judged("dranet-kuberay-gib.yaml", "roce-dranet")
    [(_, resp, out, sent, d)] = pods
    assert resp["allowed"] and nics(out) == nics(sent), d.denials
    for policy in ("gke-gib", "roce-dranet"):
        rec = workload_record(review(tmp_path, "dranet-kuberay-gib.yaml", policy))
        assert rec["allowed"] and not any("select policy" in m for m in rec["messages"] + rec["warnings"]), rec


# -- host networking with the host's RDMA devices ---------------------------------------------------


@pytest.mark.parametrize("policy", ["erdma", "ib-shared", "nd-infiniband", "efa", "oke-roce-host"])
def test_sglang_host_network_pods_with_the_hosts_devices_get_no_device(tmp_path, policy):
    """sglang-roce-decode-lws.yaml: hostNetwork and /dev/infiniband from the host. Under every
    policy that allows host networking: admitted, no aliyun/erdma, rdma/* or EFA device added;
    /validate and review say the same."""
    pods, validated = judged("sglang-roce-decode-lws.yaml", policy)
    assert len(pods) == 2
    for path, resp, out, sent, d in pods:
        assert resp["allowed"] and d.outcome == "mutated", (policy, path, d.denials)
        assert nics(out) == nics(sent), (policy, path, d.notes)
    agree(pods, validated)
    rec = workload_record(review(tmp_path, "sglang-roce-decode-lws.yaml", policy))
    assert rec["allowed"] and not any("aliyun/erdma" in w or "rdma/" in w or "efa x" in w for w in rec["warnings"])


def test_a_host_network_pod_without_the_hosts_devices_still_gets_the_policys():
    obj, docs = workload("sglang-roce-decode-lws.yaml")
    state, claims = cluster("erdma", docs)
    _, pod = controller_pods(obj)[0]
    pod["spec"]["volumes"] = [v for v in pod["spec"]["volumes"] if v["name"] != "ib"]
    for c in pod["spec"]["containers"]:
        c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] != "ib"]
    resp, out, d = mutate(pod, PS, state, claims)
    assert resp["allowed"] and out["spec"]["containers"][0]["resources"]["limits"]["aliyun/erdma"] == "1", d.notes


# -- a pod's own SR-IOV VFs, with or without their NADs -------------------------------------------

MISSING = "which has no NetworkAttachmentDefinition: Multus would fail the pod's sandbox and it would not start"


def test_own_vfs_without_their_nads_get_no_third_vf_and_the_missing_nads_are_said(tmp_path):
    pods, (vresp, vdecision) = judged("sriov-own-vfs.yaml", "sriov-roce")
    [(path, resp, out, sent, d)] = pods
    assert resp["allowed"] and nics(out) == nics(sent), d.notes
    said = [w for w in d.warnings if MISSING in w]
    assert [w.split(" (")[0] for w in said] == [
        "the pod lists the Multus network ml-training/sriov-net1",
        "the pod lists the Multus network ml-training/sriov-net2",
    ]
    assert any(MISSING in w for w in resp.get("warnings", []))
    assert vresp["allowed"] and sum(MISSING in w for w in vdecision.warnings) == 2
    rec = workload_record(review(tmp_path, "sriov-own-vfs.yaml", "sriov-roce"))
    assert rec["allowed"] and sum(MISSING in w for w in rec["warnings"]) == 2


def test_own_vfs_under_an_ib_policy_are_another_fabrics_device_not_a_second_nic():
    pods, (vresp, _) = judged("sriov-own-vfs.yaml", "ib-shared")
    [(_, resp, _, _, d)] = pods
    assert not resp["allowed"] and [f.rule for f in d.denials] == ["fabric-mismatch"]
    assert "intel.com/intel_sriov_netdevice" in d.denials[0].message and not vresp["allowed"]


# -- what is not known is said ---------------------------------------------------------------------


def test_a_gpu_pods_unknown_claim_template_is_said_under_a_dra_only_policy(tmp_path):
    pods, (vresp, _) = judged("dra-unknown-template.yaml", "roce-dranet")
    [(_, resp, out, _, d)] = pods
    assert not resp["allowed"] and [f.rule for f in d.denials] == ["claim-unknown"], d.denials
    assert "'rdma' (ResourceClaimTemplate ml-training/rdma-net-templat), not known here" in d.denials[0].message
    assert not vresp["allowed"]
    rec = workload_record(review(tmp_path, "dra-unknown-template.yaml", "roce-dranet"))
    assert not rec["allowed"] and rec["rules"] == ["claim-unknown"]


def aligned_review(tmp_path, *docs: dict, state: bool) -> list[str]:
    from webhook.cli.main import main

    f = tmp_path / "in.yaml"
    import yaml

    f.write_text(yaml.safe_dump_all(list(docs)))
    args = ["review", "--policy", "roce-dranet-aligned", "--output", "json"]
    if state:
        s = tmp_path / "state.yaml"
        s.write_text(state_text("roce-dranet-aligned"))
        args += ["--cluster-state", str(s)]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        main([*args, str(f)])
    recs = [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]
    return [rule for r in recs if r["kind"] == "Job" for rule in r["rules"]]


@pytest.mark.parametrize("state", [False, True])
def test_the_aligned_template_check_does_not_depend_on_an_unrelated_template_in_the_input(tmp_path, state):
    """roce-dranet-aligned adds a claim of gpu-nic-aligned-8: whether its absence is said depends
    on whether a cluster state is given (then it lists them all), never on an unrelated
    ResourceClaimTemplate beside the job in the input."""
    job, _ = workload("gpu-zero.yaml")
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 8
    unrelated = documents(NICS / "mrdma-gib-pod.yaml")[0]
    without = aligned_review(tmp_path, job, state=state)
    beside = aligned_review(tmp_path, unrelated, job, state=state)
    assert without == beside == (["claim-template"] if state else [])


# -- messages that describe the pod as it is -------------------------------------------------------


def test_a_zero_gpu_request_is_no_gpu(tmp_path):
    pods, (vresp, vdecision) = judged("gpu-zero.yaml", "ib-shared")
    [(_, resp, _, _, d)] = pods
    assert resp["allowed"] and d.outcome == "unchanged"
    assert d.reason.startswith("container 'prep' requests nvidia.com/gpu: 0, which is no GPU"), d.reason
    assert "not a GPU of policy" not in d.reason
    rec = workload_record(review(tmp_path, "gpu-zero.yaml", "ib-shared"))
    assert any("nvidia.com/gpu: 0, which is no GPU" in m for m in rec["messages"]), rec


def test_a_labelled_template_in_a_namespace_not_opted_in_says_so(tmp_path):
    obj, docs = workload("sriov-own-vfs.yaml")
    obj["metadata"]["namespace"] = "batch"
    state, claims = cluster(None, docs)
    vresp, decision = validate(obj, PS, state, claims)
    assert vresp["allowed"] and decision.outcome == "skipped"
    assert decision.reason == (
        "spec.template carries rdma-webhook.io/inject=true, but namespace 'batch' does not carry "
        f"{keys.NS_INJECTION}=enabled: their pods get no RDMA"
    )


# -- the catalogue: no admitted pod gets a NIC beside one it already has ---------------------------


def _route_pods() -> dict[str, tuple[dict, list[dict]]]:
    """A GPU pod bringing its NICs by each route the issue names, and the objects it needs:
    DRA claims (GKE managed DRANET, DRANET's rdma devices, EFA's class, the SR-IOV DRA driver),
    host networking with the host's devices, its own VFs with and without their NADs, a device
    plugin's RDMA resource, and GKE networks listed by the pod."""
    import kube_objects as k

    def claim_pod(template: str) -> dict:
        c = k.container("trainer", gpus=8)
        c["resources"]["claims"] = [{"name": "nic"}]
        return k.pod([c], resourceClaims=[{"name": "nic", "resourceClaimTemplateName": template}])

    def rct(name: str, cls: str, cel: str | None = None) -> dict:
        exactly: dict = {"deviceClassName": cls}
        if cel:
            exactly["selectors"] = [{"cel": {"expression": cel}}]
        spec = {"spec": {"devices": {"requests": [{"name": "nic", "exactly": exactly}]}}}
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "ml-training"},
            "spec": spec,
        }

    mrdma = documents(NICS / "mrdma-gib-pod.yaml")[0]
    dranet = documents(NICS / "dranet-kuberay-gib.yaml")[0]
    host = controller_pods(workload("sglang-roce-decode-lws.yaml")[0])[1][1]
    vfs = controller_pods(workload("sriov-own-vfs.yaml")[0])[0][1]
    gke_listed = k.pod(
        [k.container("trainer", gpus=8)],
        annotations={
            GKE_INTERFACES: json.dumps(
                [{"interfaceName": "eth0", "network": "default"}]
                + [{"interfaceName": f"eth{i + 2}", "network": f"rdma-{i}"} for i in range(8)]
            )
        },
    )
    return {
        "gke-managed-dranet": (claim_pod("all-mrdma"), [mrdma]),
        "dranet-rdma": (claim_pod("all-nic"), [dranet]),
        "efa-dra-class": (claim_pod("efa-32"), [rct("efa-32", "efa.networking.k8s.aws")]),
        "sriov-dra": (claim_pod("vf"), [rct("vf", "sriovnetwork.k8snetworkplumbingwg.io")]),
        "host-network-dev-infiniband": (host, []),
        "own-vfs-without-nads": (vfs, []),
        "rdma-shared-device": (k.pod([k.container("trainer", gpus=8, limits={"rdma/shared_ib": "1"})]), []),
        "efa-device": (k.pod([k.container("trainer", gpus=8, limits={"vpc.amazonaws.com/efa": "4"})]), []),
        "erdma-device": (k.pod([k.container("trainer", gpus=8, limits={"aliyun/erdma": "1"})]), []),
        "gke-rdma-networks": (gke_listed, []),
    }


ROUTES = _route_pods()


@pytest.mark.parametrize("route", sorted(ROUTES))
@pytest.mark.parametrize("policy", sorted(PS.by_name))
def test_no_shipped_policy_admits_a_pod_with_a_nic_beside_the_one_it_has(route, policy):
    pod, objects = ROUTES[route]
    state, claims = cluster(policy, objects)
    resp, out, d = mutate(pod, PS, state, claims)
    if resp["allowed"]:
        assert nics(out) == nics(pod), (route, policy, d.notes)


def test_a_class_the_cluster_lists_with_an_rdma_nic_driver_is_a_nic_by_its_own_cel():
    """A DeviceClass of any name whose CEL selects DRANET's RDMA devices (as the cluster state
    lists it; kubernetes-sigs/dranet examples/: class `rdma`) makes its claims NICs, with only
    ib-shared installed too; without the class in the state the claim's request says nothing,
    and ib-shared's device is added as to any pod."""
    import kube_objects as k

    cls = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "site-rdma"},
        "spec": {
            "selectors": [
                {"cel": {"expression": 'device.driver == "dra.net"'}},
                {"cel": {"expression": 'device.attributes["dra.net"].rdma'}},
            ]
        },
    }
    rct = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "nics", "namespace": "ml-training"},
        "spec": {"spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": "site-rdma"}}]}}},
    }
    c = k.container("trainer", gpus=8)
    c["resources"]["claims"] = [{"name": "nic"}]
    pod = k.pod([c], resourceClaims=[{"name": "nic", "resourceClaimTemplateName": "nics"}])
    for installed in (PS, only("ib-shared")):
        state, claims = cluster("ib-shared", [cls, rct])
        resp, _, d = mutate(pod, installed, state, claims)
        assert not resp["allowed"] and [f.rule for f in d.denials] == ["fabric-mismatch"], d.denials
        assert "(DeviceClass site-rdma), another fabric's RDMA NIC" in d.denials[0].message
    state, claims = cluster("ib-shared", [rct])
    resp, out, d = mutate(pod, PS, state, claims)
    assert resp["allowed"] and out["spec"]["containers"][0]["resources"]["limits"]["rdma/rdma_shared_device_a"] == "1"
