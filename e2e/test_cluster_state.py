"""The webhook's cluster state against the real API: RBAC of deploy/, /readyz after the cache sync,
live NetworkAttachmentDefinition and namespace changes, a relist after etcd compaction and an
apiserver restart.

Changes are observed through decisions (server-side dry-run pod creations), with generous
bounds: the point is that they arrive, not how fast on a loaded machine (the time taken is
printed; benchmarks/ measures it).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from e2e import cluster as c
from e2e.conftest import OPT_IN, create, env_of, gpu_pod, make_namespace, pod_path, stored, unique

SRIOV = {**OPT_IN, "rdma-webhook.io/policy": "sriov-roce"}
RESOURCE = "k8s.v1.cni.cncf.io/resourceName"
BOUND = 60.0  # seconds: far above what a healthy watch takes, even on a loaded machine


def nad(namespace: str, name: str = "rdma-network", resource: str | None = "openshift.io/mellanoxrdma") -> dict:
    meta: dict = {"name": name, "namespace": namespace}
    if resource is not None:
        meta["annotations"] = {RESOURCE: resource}
    return {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": meta,
        "spec": {"config": json.dumps({"cniVersion": "0.3.1", "type": "sriov", "name": name})},
    }


def probe(cp, namespace: str) -> tuple[bool, str, dict | None]:
    """One decision: a labelled GPU pod created with dryRun=server."""
    proc = create(cp, gpu_pod(unique("probe"), namespace), "--dry-run=server")
    return proc.returncode == 0, proc.stderr, (json.loads(proc.stdout) if proc.returncode == 0 else None)


def device_of(pod: dict) -> set[str]:
    return {k for k in pod["spec"]["containers"][0]["resources"]["limits"] if k != "nvidia.com/gpu"}


def until(what: str, check, bound: float = BOUND) -> float:
    started = time.monotonic()
    c.wait_for(what, check, bound, interval=0.1)
    took = time.monotonic() - started
    print(f"{what}: {took:.2f}s")
    return took


# --- NADs and namespaces change decisions -------------------------------------------------------------


def _dra_probe(cp, namespace: str, template: str) -> tuple[bool, str, dict | None]:
    """A labelled GPU pod that claims its NIC through `template` (dryRun=server)."""
    pod = gpu_pod(unique("probe"), namespace)
    pod["spec"]["resourceClaims"] = [{"name": "nic", "resourceClaimTemplateName": template}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "nic"}]
    proc = create(cp, pod, "--dry-run=server")
    return proc.returncode == 0, proc.stderr, (json.loads(proc.stdout) if proc.returncode == 0 else None)


def test_device_class_created_after_start_reaches_decisions(cp, hook):
    """A ResourceClaimTemplate of a DeviceClass that does not exist yet: the claim is no NIC, so
    roce-dranet (NICs only through DRA) denies the pod for claiming none. Once the class exists
    (the dra.net driver, RDMA devices) the same pod is admitted with no device added, and under
    ib-shared it is another fabric's NIC, roce-dranet named; deleting the class undoes it."""
    cls = unique("e2e-rdma")
    dranet = make_namespace(cp, unique("e2e-dranet"), {**OPT_IN, "rdma-webhook.io/policy": "roce-dranet"})
    shared = make_namespace(cp, unique("e2e-ib"), {**OPT_IN, "rdma-webhook.io/policy": "ib-shared"})
    for ns in (dranet, shared):
        cp.apply(
            [
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaimTemplate",
                    "metadata": {"name": "rdma-nic", "namespace": ns},
                    "spec": {"spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": cls}}]}}},
                }
            ]
        )
    until("templates reach decisions", lambda: "claims no NIC" in _dra_probe(cp, dranet, "rdma-nic")[1])
    allowed, _, out = _dra_probe(cp, shared, "rdma-nic")
    assert allowed and "rdma/rdma_shared_device_a" in device_of(out)  # not a NIC: the policy's device

    cp.apply(
        [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": cls},
                "spec": {
                    "selectors": [
                        {"cel": {"expression": 'device.driver == "dra.net"'}},
                        {"cel": {"expression": 'device.attributes["dra.net"].rdma'}},
                    ]
                },
            }
        ]
    )
    until("DeviceClass created -> the claim is roce-dranet's NIC", lambda: _dra_probe(cp, dranet, "rdma-nic")[0])
    allowed, _, out = _dra_probe(cp, dranet, "rdma-nic")
    assert allowed and device_of(out) == set(), device_of(out)
    assert out["spec"]["resourceClaims"] == [{"name": "nic", "resourceClaimTemplateName": "rdma-nic"}]
    allowed, err, _ = _dra_probe(cp, shared, "rdma-nic")
    assert not allowed and "another fabric's RDMA NIC" in err and "select policy roce-dranet" in err, err

    cp.kubectl("delete", "deviceclasses.resource.k8s.io", cls, check=True)
    until("DeviceClass deleted -> no NIC again", lambda: "claims no NIC" in _dra_probe(cp, dranet, "rdma-nic")[1])


def test_an_aligned_claim_is_made_from_the_generated_template_and_stored_as_defaulted(cp, hook):
    """roce-dranet-aligned: the template `rdma-webhook policy claim-template` writes is accepted
    by the API server (resource.k8s.io/v1 validation of its requests and pcieRoot constraints);
    once the webhook has it, a labelled pod asking nvidia.com/gpu: 8 is stored with the claim of
    gpu-nic-aligned-8 instead of the device-plugin GPUs, with the API server's defaults; a pod of
    4 GPUs, whose template is missing, is refused naming the command that writes it."""
    ns = make_namespace(cp, unique("e2e-aligned"), {**OPT_IN, "rdma-webhook.io/policy": "roce-dranet-aligned"})
    nic_class = unique("e2e-dranet-rdma")
    cp.apply(
        [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": nic_class},
                "spec": {
                    "selectors": [
                        {"cel": {"expression": 'device.driver == "dra.net"'}},
                        {"cel": {"expression": 'device.attributes["dra.net"].rdma'}},
                    ]
                },
            }
        ]
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook",
            "policy",
            "claim-template",
            "roce-dranet-aligned",
            "--gpus",
            "8",
            "--nic-class",
            nic_class,
            "--namespace",
            ns,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=c.ROOT,
    )
    assert out.returncode == 0, out.stderr
    cp.apply([yaml.safe_load(out.stdout)])
    kept = stored(cp, f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaimtemplates/gpu-nic-aligned-8")
    assert len(kept["spec"]["spec"]["devices"]["constraints"]) == 8

    def admitted() -> bool:
        return create(cp, gpu_pod(unique("probe"), ns, gpus=8), "--dry-run=server").returncode == 0

    until("the template reaches decisions", admitted)
    pod = gpu_pod("", ns, gpus=8)
    del pod["metadata"]["name"]
    pod["metadata"]["generateName"] = "llama-worker-"
    made = create(cp, pod)
    assert made.returncode == 0, made.stderr
    got = stored(cp, pod_path(ns, json.loads(made.stdout)["metadata"]["name"]))
    assert got["spec"]["resourceClaims"] == [
        {"name": "gpus-and-nics", "resourceClaimTemplateName": "gpu-nic-aligned-8"}
    ]
    ctr = got["spec"]["containers"][0]
    assert ctr["resources"] == {"claims": [{"name": "gpus-and-nics"}]}, ctr["resources"]
    assert env_of(ctr)["NCCL_NET"] == "IB" and "IPC_LOCK" in ctr["securityContext"]["capabilities"]["add"]
    # the API server's defaults around what the webhook wrote
    assert ctr["terminationMessagePath"] == "/dev/termination-log" and got["spec"]["restartPolicy"] == "Always"
    assert got["metadata"]["annotations"]["rdma-webhook.io/applied-policy"] == "roce-dranet-aligned"

    refused = create(cp, gpu_pod(unique("four"), ns, gpus=4), "--dry-run=server")
    assert (
        refused.returncode != 0
        and f"ResourceClaimTemplate {ns}/gpu-nic-aligned-4, which does not exist" in refused.stderr
    )
    assert "rdma-webhook policy claim-template roce-dranet-aligned --gpus 4" in refused.stderr
    cp.kubectl("delete", "deviceclasses.resource.k8s.io", nic_class, check=True)


def test_nad_create_change_delete_reach_decisions(cp, hook):
    ns = make_namespace(cp, unique("e2e-sriov"), SRIOV)
    allowed, err, _ = probe(cp, ns)
    assert not allowed and "rdma-network" in err, err  # no NetworkAttachmentDefinition yet

    cp.apply([nad(ns)])
    until("NAD created -> pods admitted", lambda: probe(cp, ns)[0])
    _, _, pod = probe(cp, ns)
    assert device_of(pod) == {"openshift.io/mellanoxrdma"}
    networks = pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"]
    assert "rdma-network" in networks

    cp.apply([nad(ns, resource="openshift.io/mlnx_rdma_vf")])
    until(
        "NAD resourceName changed -> new device",
        lambda: (
            device_of(probe(cp, ns)[2] or {"spec": {"containers": [{"resources": {"limits": {}}}]}})
            == {"openshift.io/mlnx_rdma_vf"}
        ),
    )

    cp.kubectl("delete", "network-attachment-definitions.k8s.cni.cncf.io", "-n", ns, "rdma-network", check=True)
    until("NAD deleted -> pods denied", lambda: not probe(cp, ns)[0])
    assert "rdma-network" in probe(cp, ns)[1]


def test_nad_without_resource_name_falls_back_to_the_policy_device(cp, hook):
    """sriov-roce names a device resource itself: a NAD without the resourceName annotation
    admits the pod with the policy's resource (decision.resolve_network)."""
    ns = make_namespace(cp, unique("e2e-sriov"), SRIOV)
    assert not probe(cp, ns)[0]
    cp.apply([nad(ns, resource=None)])
    until("NAD without resourceName -> admitted", lambda: probe(cp, ns)[0])
    assert device_of(probe(cp, ns)[2]) == {"openshift.io/mellanoxrdma"}


def test_namespace_label_change_reaches_decisions(cp, hook):
    ns = make_namespace(cp, unique("e2e-relabel"), OPT_IN)
    cp.apply([nad(ns)])
    allowed, err, pod = probe(cp, ns)
    assert allowed, err
    assert device_of(pod) == {"aliyun/erdma"}
    cp.kubectl("label", "namespace", ns, "rdma-webhook.io/policy=sriov-roce", check=True)
    until(
        "namespace policy label -> sriov-roce",
        lambda: (lambda r: r[0] and device_of(r[2]) == {"openshift.io/mellanoxrdma"})(probe(cp, ns)),
    )
    cp.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=baseline", check=True)
    until("namespace enforcing baseline -> denied", lambda: not probe(cp, ns)[0])
    assert "baseline" in probe(cp, ns)[1]
    cp.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce-", check=True)
    until("label removed -> admitted again", lambda: probe(cp, ns)[0])


def test_watch_survives_compaction_and_apiserver_restart(cp, hook):
    ns = make_namespace(cp, unique("e2e-restart"), SRIOV)
    cp.apply([nad(ns)])
    until("NAD seen before the restart", lambda: probe(cp, ns)[0])
    log_before = len(hook.proc.log.read_text(errors="replace"))

    # churn, so that the resourceVersions the webhook holds are behind, then compact them away
    for i in range(5):
        cp.apply([nad(ns, name=f"churn-{i}")])
    compacted = {}
    cp.restart_apiserver(before_start=lambda: compacted.setdefault("rev", cp.etcd_compact()))
    print(f"etcd compacted at revision {compacted['rev']} while kube-apiserver was down")

    # a change made after the restart must reach decisions: the watch came back
    cp.apply([nad(ns, resource="openshift.io/after_restart")])
    until(
        "NAD change after restart+compaction",
        lambda: (lambda r: r[0] and device_of(r[2]) == {"openshift.io/after_restart"})(probe(cp, ns)),
        120,
    )
    cp.kubectl("delete", "network-attachment-definitions.k8s.cni.cncf.io", "-n", ns, "rdma-network", check=True)
    until("NAD deletion after restart", lambda: not probe(cp, ns)[0], 120)
    after = hook.proc.log.read_text(errors="replace")[log_before:]
    assert "list/watch failed" in after  # it did see the outage
    # its resourceVersions were compacted away: the watch got 410 Gone and the informer relisted
    assert "expired; listing again" in after, after[-2000:]
    assert hook.proc.alive()


# --- RBAC and readiness ------------------------------------------------------------------------------


def _role_without(deploy_docs, resource: str, verb: str, name: str) -> dict:
    role = json.loads(json.dumps(c.pick(deploy_docs, "ClusterRole", "rdma-webhook")))
    role["metadata"] = {"name": name}
    for rule in role["rules"]:
        if resource in rule["resources"]:
            rule["verbs"] = [v for v in rule["verbs"] if v != verb]
    return role


def _sa_with_role(cp, role: dict, sa: str) -> None:
    cp.apply(
        [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa, "namespace": "rdma-webhook"}},
            role,
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": role["metadata"]["name"]},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role["metadata"]["name"],
                },
                "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": "rdma-webhook"}],
            },
        ]
    )


def test_service_account_has_only_what_deploy_grants(cp, hook):
    who = "system:serviceaccount:rdma-webhook:rdma-webhook"
    for verb, resource, want in [
        ("list", "namespaces", "yes"),
        ("watch", "namespaces", "yes"),
        ("get", "namespaces", "yes"),
        ("watch", "network-attachment-definitions.k8s.cni.cncf.io", "yes"),
        ("watch", "deviceclasses.resource.k8s.io", "yes"),
        ("list", "resourceclaimtemplates.resource.k8s.io", "yes"),
        ("create", "resourceclaims.resource.k8s.io", "no"),
        ("list", "secrets", "no"),
        ("list", "configmaps", "no"),
        ("list", "pods", "no"),
        ("update", "namespaces", "no"),
    ]:
        proc = cp.kubectl("auth", "can-i", verb, resource, "--all-namespaces", "--as", who)
        assert proc.stdout.strip() == want, (verb, resource, proc.stdout, proc.stderr)


@pytest.mark.parametrize("resource", ["namespaces", "network-attachment-definitions"])
def test_missing_list_verb_keeps_webhook_unready(cp, hook, deploy_docs, workdir, resource):
    """deploy/'s ClusterRole minus `list` on one resource: the cache never syncs, /readyz stays
    503 (so a Deployment would never route to it), and granting the verb makes it ready."""
    name = unique("e2e-nolist")
    role = _role_without(deploy_docs, resource, "list", name)
    _sa_with_role(cp, role, name)
    kc = c.service_account_kubeconfig(cp, "rdma-webhook", name, Path(workdir) / f"{name}.kubeconfig")
    wh = c.Webhook(workdir, kc, workers=1, name=name).start(wait_ready=False)
    try:
        c.wait_for("the webhook answering /healthz", lambda: wh.get("/healthz")[0] == 200, 60, proc=wh.proc)
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            status, body = wh.get("/readyz")
            assert status == 503, body
            time.sleep(0.5)
        assert "cluster state not synced" in body.decode()
        c.wait_for("a 403 in the webhook log", lambda: "403" in wh.proc.log.read_text(errors="replace"), 60)
        cp.apply([c.pick(deploy_docs, "ClusterRole", "rdma-webhook") | {"metadata": {"name": name}}])
        wh.wait_ready(90)  # retried with backoff (at most 30 s apart)
    finally:
        wh.stop()


def test_missing_watch_verb_is_reported(cp, hook, deploy_docs, workdir):
    """Without `watch` the list succeeds but every watch is refused: the log says so, and once the
    watch has failed for a minute /readyz says the cache is stale (it no longer follows the
    cluster), so the replica leaves the Service instead of deciding on old namespaces."""
    name = unique("e2e-nowatch")
    _sa_with_role(cp, _role_without(deploy_docs, "namespaces", "watch", name), name)
    kc = c.service_account_kubeconfig(cp, "rdma-webhook", name, Path(workdir) / f"{name}.kubeconfig")
    wh = c.Webhook(workdir, kc, workers=1, name=name).start(wait_ready=False)
    try:
        c.wait_for(
            "a refused watch in the log",
            lambda: "namespaces: list/watch failed (HTTP 403" in wh.proc.log.read_text(errors="replace"),
            90,
            proc=wh.proc,
        )

        def stale() -> bool:
            status, body = wh.get("/readyz")
            return status == 503 and b"cluster state stale: namespaces list/watch failing" in body

        until("refused watches -> /readyz stale", stale, 180)
    finally:
        wh.stop()


def test_the_replica_lists_once_before_the_fork(cp, hook):
    """The master lists namespaces and NADs once for the replica (ApiClusterState.prime) and the
    workers start synced, watching from that list: the start's log has one "cache synced" line
    per kind, where workers listing for themselves log one each. The workers' watches follow
    changes (the tests above); here a namespace created after the start reaches a decision."""
    section = hook.proc.log.read_text(errors="replace").split("\n==== ")[1]  # this start's log
    for kind in ("namespaces", "network-attachment-definitions"):
        assert section.count(f'"msg":"{kind}: cache synced') == 1, (kind, section[:3000])
    assert hook.workers == 2
    ns = make_namespace(cp, unique("e2e-after-fork"), OPT_IN)
    until("a namespace created after the fork -> pods mutated", lambda: probe(cp, ns)[0])


def test_readyz_only_after_nad_cache_synced(cp, hook, workdir):
    """A shipped policy uses a Multus network, so the NAD cache must sync before /readyz says
    ready: with the NetworkAttachmentDefinition CRD absent the list fails (404) and a freshly
    started webhook stays unready until the CRD appears (RBAC refusing the list is covered above)."""
    crd = "network-attachment-definitions.k8s.cni.cncf.io"
    saved = json.loads(cp.kubectl("get", "crd", crd, "-o", "json", check=True).stdout)
    # Deleting the CRD deletes every NAD in the cluster: this test runs on its own namespace's
    # objects only and puts the CRD back.
    cp.kubectl("delete", "crd", crd, "--wait=true", check=True)
    name = unique("e2e-nocrd")
    kc = c.service_account_kubeconfig(cp, "rdma-webhook", "rdma-webhook", Path(workdir) / f"{name}.kubeconfig")
    wh = c.Webhook(workdir, kc, workers=1, name=name).start(wait_ready=False)
    try:
        c.wait_for("the webhook answering /healthz", lambda: wh.get("/healthz")[0] == 200, 60, proc=wh.proc)
        time.sleep(6)
        status, body = wh.get("/readyz")
        assert status == 503 and "not synced" in body.decode(), body
        for key in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"):
            saved["metadata"].pop(key, None)
        saved.pop("status", None)
        cp.apply([saved])
        cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd}", check=True)
        wh.wait_ready(90)
    finally:
        wh.stop()
        cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd}")


@pytest.mark.parametrize("from_cache", [True, False], ids=["watch-cache", "etcd-pages"])
def test_lists_come_whole_from_the_watch_cache_or_in_pages_and_keep_what_decisions_read(cp, workdir, from_cache):
    """As shipped, a list asks for resourceVersion=0 and the real server answers it from its watch
    cache in one response, whatever the limit (pages of 2 here); with `list_from_cache=False` it is
    a consistent read in pages (`limit` + `continue`), as many requests as pages. Either way every
    namespace and NAD arrives, the lists hold metadata only (PartialObjectMetadataList), and of a
    NAD only its resourceName is kept (webhook/cluster/listing.py)."""
    from kubernetes import client, config

    from webhook.cluster.api import ApiClusterState

    tag = unique("e2e-pages")
    names = [make_namespace(cp, f"{tag}-{i}", {**OPT_IN, "page-test": tag}) for i in range(5)]
    cp.apply([nad(ns, resource="openshift.io/mellanoxrdma") for ns in names[:3]] + [nad(names[3], resource=None)])
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(cp.admin_kubeconfig), client_configuration=configuration)
    total_ns = len(json.loads(cp.kubectl("get", "namespaces", "-o", "json", check=True).stdout)["items"])
    state = ApiClusterState(
        client.ApiClient(configuration), lambda: True, page_size=2, watch_runtimes=False, list_from_cache=from_cache
    )
    state.start()
    try:
        c.wait_for("the lists to sync", state.ready, 60)
        for ns in names:
            got = state.namespace(ns)
            assert got is not None and got.labels.get("page-test") == tag, (ns, got)
        if from_cache:
            assert (state._ns.pages, state._nads.pages) == (1, 1), (state._ns.pages, state._nads.pages)
            assert len(state._ns.items) >= total_ns > 2 and len(state._nads.items) >= 4
        else:
            assert state._ns.pages >= (total_ns + 1) // 2 > 1, (state._ns.pages, total_ns)
            assert state._nads.pages >= 2, state._nads.pages
        # metadata only: the server sent PartialObjectMetadataList pages (no spec, no status)
        assert (state._ns.list_kind, state._nads.list_kind) == ("PartialObjectMetadataList",) * 2, (
            state._ns.list_kind,
            state._nads.list_kind,
        )
        with_resource = state.attachment(names[0], "rdma-network")
        assert with_resource == {"metadata": {"annotations": {RESOURCE: "openshift.io/mellanoxrdma"}}}, with_resource
        assert state.attachment(names[1], "rdma-network") is with_resource  # one value object per resource name
        assert state.attachment(names[3], "rdma-network") == {"metadata": {"annotations": {}}}
        assert state.attachment(names[4], "rdma-network") is None
    finally:
        state.stop()
