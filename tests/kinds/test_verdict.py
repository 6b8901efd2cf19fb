"""In-process tests of webhook/kinds/verdict.py (issue 28, the kinds.verdict part of the mutation
run, mutation/MUTATION.md): what `/validate` and `rdma-webhook review` say about a workload, template
by template.

tests/kinds/test_verdict_manifests.py drives `check_workload` over every manifest under tests/manifests/, but
through the CLI and a server in other processes, which a mutation run cannot see. The first tests
here are its twin in this process: the same files, the same expectations, through
`webhook.cli.main.main` and through `check_workload` itself. The others pin what those manifests
do not reach: the workload's name in the deny message, a namespace that is unknown or not opted
in, a TrainJob whose runtime lives in the request's namespace, MPI launcher templates, policies
with `workloadValidation: Warn`, and cluster-scoped runtimes judged under every policy an opted-in
namespace could use (with namespace selectors of every operator).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
from pathlib import Path

import pytest
import yaml

from kube_objects import container
from kinds.test_verdict_manifests import ALLOWED, DENIED, DENIED_RULES, STATE
from webhook.cluster.state import ClaimStore, FileClusterState, RuntimeStore, is_dra, is_runtime
from webhook.core import keys
from webhook.core.decision import Namespace
from webhook.core.model import PolicySet
from webhook.core.scripts import ConfigMapStore, is_config_map
from webhook.kinds import trainer, workloads
from webhook.kinds.verdict import check_workload
from webhook.policy.load import load_dir, load_texts

ROOT = Path(__file__).resolve().parent.parent.parent
POLICIES = ROOT / "policies"
EXAMPLE_STATE = ROOT / "examples" / "cluster-state.yaml"
SCRIPTS = ROOT / "tests" / "manifests-scripts"
INJECT = {keys.POD_INJECT: keys.POD_INJECT_TRUE}
TRAINER = "trainer.kubeflow.org"
CTR = "ClusterTrainingRuntime"
NODE = "spec.template.spec.replicatedJobs[node].template.spec.template"
LAUNCHER = "spec.template.spec.replicatedJobs[launcher].template.spec.template"
DENY_PREFIX = "rdma-webhook: pods of {} would be denied or fall back to TCP: "


@pytest.fixture(autouse=True)
def _trainer_release(monkeypatch):
    # `review` sets the Trainer release in the environment; put it back after each test
    monkeypatch.delenv(trainer.TRAINER_RELEASE_ENV, raising=False)


def catalogue() -> PolicySet:
    ps, errors = load_dir(POLICIES)
    assert ps is not None, errors
    return ps


def policy_doc(base: str, name: str, **changes) -> dict:
    """A shipped policy under another name, with some of its fields changed."""
    doc = yaml.safe_load((POLICIES / f"{base}.yaml").read_text())
    doc.update(name=name, **changes)
    return doc


def policy_set(*docs: dict) -> PolicySet:
    ps, errors = load_texts([(f"{d['name']}.yaml", yaml.safe_dump(d)) for d in docs])
    assert ps is not None, errors
    return ps


def documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def review(*args: str) -> tuple[int, str, str]:
    """`rdma-webhook review ARGS` in this process: (exit status, stdout, stderr)."""
    from webhook.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["review", *args])
    return code, out.getvalue(), err.getvalue()


def job(
    *containers: dict,
    name: str | None = "train",
    generate_name: str | None = None,
    namespace: str | None = "ml-training",
    labels: dict | None = None,
    annotations: dict | None = None,
    **spec,
) -> dict:
    """A batch/v1 Job whose pod template carries the opt-in label."""
    meta: dict = {}
    if name:
        meta["name"] = name
    if generate_name:
        meta["generateName"] = generate_name
    if namespace:
        meta["namespace"] = namespace
    tmeta: dict = {"labels": dict(INJECT) if labels is None else labels}
    if annotations:
        tmeta["annotations"] = annotations
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "completions": 2,
            "parallelism": 2,
            "completionMode": "Indexed",
            "template": {"metadata": tmeta, "spec": {"restartPolicy": "Never", "containers": list(containers), **spec}},
        },
    }


def runtime(*containers: dict, name: str = "torch-ib", launcher: dict | None = None) -> dict:
    """A Kubeflow Trainer ClusterTrainingRuntime (torch-distributed shape), its `node` job labelled;
    `launcher`: the container of an MPI launcher job (labelled too)."""

    def replicated(job_name: str, cs: list) -> dict:
        return {
            "name": job_name,
            "template": {
                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                "spec": {"template": {"metadata": {"labels": dict(INJECT)}, "spec": {"containers": cs}}},
            },
        }

    jobs = ([replicated("launcher", [launcher])] if launcher else []) + [replicated("node", list(containers))]
    return {
        "apiVersion": f"{TRAINER}/v1alpha1",
        "kind": CTR,
        "metadata": {"name": name, "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {
            "mlPolicy": {"numNodes": 2, "torch": {"numProcPerNode": "auto"}},
            "template": {"spec": {"replicatedJobs": jobs}},
        },
    }


def ib_node(env: list | None = None) -> dict:
    return container(
        "node",
        gpus=None,
        env=env,
        command=["torchrun", "/workspace/train.py"],
        resources={"limits": {"nvidia.com/gpu": "8", "rdma/rdma_shared_device_a": "1"}},
    )


IB_DISABLE = [{"name": "NCCL_IB_DISABLE", "value": "1"}]


def opted_in(name: str, policy: str | None = None) -> Namespace:
    labels = {keys.NS_INJECTION: keys.NS_INJECTION_ENABLED}
    if policy:
        labels[keys.NS_POLICY] = policy
    return Namespace(name, labels)


# -- the twin of tests/kinds/test_verdict_manifests.py, in this process -------------------------------------------


def records(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


@pytest.mark.parametrize("path", ALLOWED + DENIED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_manifest_gets_the_answer_test_manifests_expects_in_process(path):
    code, out, err = review("--policies", str(POLICIES), "--cluster-state", STATE, "--output", "json", str(path))
    recs = records(out)
    assert [r["document"] for r in recs] == list(range(1, len(documents(path)) + 1))
    checked = [r for r in recs if r["outcome"] != "not-checked"]
    assert checked and all(r["templates"] for r in checked), recs
    if path in ALLOWED:
        assert code == 0, err + out
        assert all(r["allowed"] for r in recs)
        return
    assert code == 1, err + out
    kind, rules = DENIED_RULES[path.name]
    denied = [r for r in recs if r["outcome"] == "denied"]
    assert any(r["kind"] == kind and r["rules"] == rules for r in denied), denied
    for r in denied:
        bad = [t for t in r["templates"] if t["deniesWorkload"]]
        assert bad and all(t["path"] and t["rules"] for t in bad), r
        # each deny message names the template (and the container) it comes from, once
        assert r["messages"] and all(
            any(m.startswith(f"{t['path']}: ") or m.startswith(f"{t['path']}, container ") for t in bad)
            for m in r["messages"]
        ), r
        assert not any(m in w for m in r["messages"] for w in r["warnings"]), r


def _inputs(path: Path) -> tuple[RuntimeStore, ConfigMapStore, ClaimStore]:
    state = FileClusterState.from_file(STATE)
    runtimes = RuntimeStore()
    runtimes.update(state.runtimes())
    maps = ConfigMapStore()
    dra = []
    for doc in documents(path):
        if is_runtime(doc):
            runtimes.add(doc)
        elif is_config_map(doc):
            maps.add(doc, "default")
        elif is_dra(doc):
            dra.append(doc)
    return runtimes, maps, ClaimStore(dra)


@pytest.mark.parametrize("path", ALLOWED + DENIED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_check_workload_on_every_manifest_as_the_review_calls_it(path):
    """check_workload itself on each workload document, in the namespace the cluster state gives
    it, with the runtimes, ConfigMaps and DRA objects of the file: allowed files allowed, each
    checked workload judged on a template; in a denied file the workload test_manifests names is
    denied with its rules, the message naming kind, name, template."""
    policies = catalogue()
    state = FileClusterState.from_file(STATE)
    runtimes, maps, claims = _inputs(path)
    judged = 0
    for doc in documents(path):
        group, kind = workloads.group_of(doc["apiVersion"]), doc["kind"]
        if not workloads.is_workload(group, kind):
            continue
        meta = doc["metadata"]
        ns = None if (group, kind) in workloads.CLUSTER_SCOPED else state.namespace(meta["namespace"])
        v = check_workload(
            doc, group, kind, ns, policies, state.attachments(), runtimes, config_maps=maps, claims=claims
        )
        judged += 1
        assert v.kind == kind and v.name == (meta.get("name") or f"{meta.get('generateName')}*")
        assert v.results and not v.unresolved, (path.name, kind, v.notes, v.unresolved)
        expect_denied = path in DENIED and (kind == DENIED_RULES[path.name][0] or kind == "TrainingRuntime")
        assert v.allowed is (not expect_denied), (path.name, kind, v.message())
        if not expect_denied:
            assert v.outcome in ("mutated", "unchanged")
            continue
        assert v.outcome == "denied"
        assert sorted({f.rule for f in v.denials()}) == DENIED_RULES[path.name][1]
        first = next(r for r in v.results if r.deny)
        assert v.message().startswith(DENY_PREFIX.format(f"{kind} {v.name}") + f"{first.path}, container "), v.message()
        assert [f.message.split(": ")[0] for f in v.denials()] == [
            f"{r.path}, container {f.container!r}" for r in v.results if r.deny for f in r.decision.denials
        ]
    assert judged


# -- the workload's name, and objects that are not what they should be ----------------------------


@pytest.mark.parametrize(
    "meta, shown",
    [
        ({"name": "llama-finetune", "generateName": "ignored-"}, "llama-finetune"),
        ({"generateName": "llama-finetune-"}, "llama-finetune-*"),
        ({}, "(unnamed)"),
    ],
)
def test_the_deny_message_names_kind_and_name_or_generate_name(meta, shown):
    doc = job(container("trainer", env=IB_DISABLE), name=None)
    doc["metadata"] = {**meta, "namespace": "ml-training"}
    v = check_workload(doc, "batch", "Job", opted_in("ml-training", "ib-shared"), catalogue(), None)
    assert (v.kind, v.name, v.outcome) == ("Job", shown, "denied")
    reason = (
        "NCCL_IB_DISABLE='1' turns NCCL's IB/RoCE transport off, so NCCL runs on TCP sockets (NET/Socket); "
        "remove it or set it to 0 in env"
    )
    assert (
        v.message()
        == DENY_PREFIX.format(f"Job {shown}") + f"spec.template, container 'trainer': {reason} [env-fallback]"
    )
    # the pods a controller makes from it are named after it
    assert v.results[0].pod["metadata"]["generateName"] == f"{shown}-"


@pytest.mark.parametrize(
    "obj",
    [
        ["not", "an", "object"],
        "text",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": "not an object",
            "spec": {"template": {"metadata": {"labels": dict(INJECT)}, "spec": {"containers": [container("t")]}}},
        },
    ],
)
def test_an_object_or_metadata_that_is_no_mapping_is_judged_unnamed_without_raising(obj):
    v = check_workload(obj, "batch", "Job", opted_in("ml-training", "ib-shared"), catalogue(), None)
    assert v.name == "(unnamed)" and v.allowed
    if isinstance(obj, dict):  # its template is still judged
        assert v.outcome == "mutated" and v.results[0].pod["metadata"]["generateName"] == "(unnamed)-"
    else:
        assert v.outcome == "skipped" and v.results == []


# -- namespaces ------------------------------------------------------------------------------------


def test_a_namespaced_workload_in_an_unknown_namespace_is_denied_not_judged_as_cluster_scoped():
    v = check_workload(job(container("trainer")), "batch", "Job", None, catalogue(), None)
    assert v.outcome == "denied" and not v.allowed and v.notes == []
    assert [(f.rule, f.container) for f in v.denials()] == [("namespace-unknown", None)]
    # a finding without a container is named by its template alone
    text = "the pod's namespace is unknown to the webhook, so its opt-in cannot be checked; retry in a moment"
    assert v.denials()[0].message == f"spec.template: {text}"
    assert v.message() == DENY_PREFIX.format("Job train") + f"spec.template: {text} [namespace-unknown]"
    assert v.results[0].pod["metadata"]["namespace"] == "ml-training"  # the object's own


def test_a_namespace_that_is_not_opted_in_leaves_the_workload_skipped_with_no_template_result():
    ns = Namespace("default", {"kubernetes.io/metadata.name": "default"})
    doc = job(container("trainer", env=IB_DISABLE), container("sidecar", gpus=None), namespace="default")
    v = check_workload(doc, "batch", "Job", ns, catalogue(), None)
    assert (v.outcome, v.results, v.allowed, v.policy) == ("skipped", [], True, None)


def runtime_and_trainjob() -> tuple[dict, dict]:
    """denied/trainingruntime-socket.yaml: a namespaced TrainingRuntime and its TrainJob."""
    docs = documents(ROOT / "tests" / "manifests" / "denied" / "trainingruntime-socket.yaml")
    rt = copy.deepcopy(next(d for d in docs if d["kind"] == "TrainingRuntime"))
    tj = copy.deepcopy(next(d for d in docs if d["kind"] == "TrainJob"))
    return rt, tj


def test_a_trainjob_finds_its_training_runtime_in_the_namespace_of_the_request():
    rt, tj = runtime_and_trainjob()
    runtimes = RuntimeStore([rt])
    ns_name = rt["metadata"]["namespace"]
    del tj["metadata"]["namespace"]  # `kubectl apply -n ml-training`: the request names it, the object does not
    v = check_workload(tj, TRAINER, "TrainJob", opted_in(ns_name), catalogue(), None, runtimes)
    assert v.unresolved == [] and v.outcome == "denied", (v.unresolved, v.notes)
    assert [r.pod["metadata"]["namespace"] for r in v.results] == [ns_name]
    # without a namespace object (not in the webhook's cache yet) the object's own namespace finds
    # the runtime, and the pods are denied for the unknown namespace, not left unresolved
    tj["metadata"]["namespace"] = ns_name
    v = check_workload(tj, TRAINER, "TrainJob", None, catalogue(), None, runtimes)
    assert v.unresolved == [] and v.outcome == "denied"
    assert {f.rule for f in v.denials()} == {"namespace-unknown"}
    assert [r.pod["metadata"]["namespace"] for r in v.results] == [ns_name]


def test_a_trainjob_in_a_list_naming_no_namespace_is_said_to_have_its_runtime_in_none():
    """A v1 List posted to /validate (`kubectl kustomize` output sent by a CI job): neither the
    request nor the TrainJob names a namespace, so there is none to find its TrainingRuntime in."""
    from webhook.admission import review as admission

    rt, tj = runtime_and_trainjob()
    del tj["metadata"]["namespace"]
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "list-1",
            "operation": "CREATE",
            "namespace": "",
            "kind": {"group": "", "version": "v1", "kind": "List"},
            "resource": {"group": "", "version": "v1", "resource": "lists"},
            "object": {"apiVersion": "v1", "kind": "List", "items": [tj]},
        },
    }
    state = FileClusterState.from_file(STATE)
    code, resp, _, _ = admission.handle_validate(
        json.dumps(body).encode(), catalogue(), state.namespace, None, RuntimeStore([rt])
    )
    assert code == 200 and resp["response"]["allowed"] is True
    assert resp["response"]["warnings"] == [
        "TrainJob mnist-ddp: runtime TrainingRuntime 'torch-tcp' in namespace '' is not "
        "known, so the pods of this TrainJob cannot be checked"
    ]


def test_the_trainer_release_given_decides_whether_resources_per_node_drops_the_gpu():
    """The TrainJob of allowed/trainjob.yaml asking for memory only per node: v2.3 merges it into
    the runtime's 8 GPUs (RDMA injected), v2.2 replaces the resources (no GPU left)."""
    tj = next(
        d for d in documents(ROOT / "tests" / "manifests" / "allowed" / "trainjob.yaml") if d["kind"] == "TrainJob"
    )
    tj["spec"]["trainer"]["resourcesPerNode"] = {"limits": {"memory": "800Gi"}}
    state = FileClusterState.from_file(STATE)
    outcomes = {}
    for release in ("v2.3", "v2.2"):
        v = check_workload(
            tj,
            TRAINER,
            "TrainJob",
            state.namespace("ml-training"),
            catalogue(),
            None,
            state.runtimes(),
            release=release,
        )
        outcomes[release] = [r.decision.outcome for r in v.results]
    assert outcomes == {"v2.3": ["mutated"], "v2.2": ["unchanged"]}


def test_the_namespaces_network_attachments_config_maps_and_claims_reach_the_decision():
    policies = catalogue()
    # sriov-roce takes its device from the NetworkAttachmentDefinition: in a cluster whose state
    # lacks it, Multus could not attach the network
    no_nads = FileClusterState.from_file(STATE).attachments()
    v = check_workload(
        job(container("trainer"), namespace="ai-training"),
        "batch",
        "Job",
        opted_in("ai-training", "sriov-roce"),
        policies,
        no_nads,
    )
    assert v.outcome == "denied" and [f.rule for f in v.denials()] == ["network-attachment"]
    assert "NetworkAttachmentDefinition ai-training/rdma-network does not exist" in v.message()
    # a script run from a ConfigMap volume is read when the ConfigMap is at hand
    cm, script_job = documents(SCRIPTS / "job-script-ib-disable.yaml")
    maps = ConfigMapStore()
    maps.add(cm, "default")
    v = check_workload(script_job, "batch", "Job", opted_in("ml-training"), policies, None, config_maps=maps)
    assert v.outcome == "denied" and [f.rule for f in v.denials()] == ["command-fallback"]
    # a DRA claim of EFA NICs (efa-dra's DeviceClass) in an ib-shared namespace: the claim
    # template, when known, says which fabric the claim brings
    claim_template = {
        "apiVersion": "resource.k8s.io/v1beta1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "efa-nic", "namespace": "ml-training"},
        "spec": {"spec": {"devices": {"requests": [{"name": "nic", "deviceClassName": "efa.networking.k8s.aws"}]}}},
    }
    doc = job(
        container("trainer", resources={"limits": {"nvidia.com/gpu": "8"}, "claims": [{"name": "nic"}]}),
        resourceClaims=[{"name": "nic", "resourceClaimTemplateName": "efa-nic"}],
    )
    ns = opted_in("ml-training", "ib-shared")
    v = check_workload(doc, "batch", "Job", ns, policies, None, claims=ClaimStore([claim_template]))
    assert v.outcome == "denied" and [f.rule for f in v.denials()] == ["fabric-mismatch"]
    assert "select policy efa-dra with the annotation rdma-webhook.io/policy: efa-dra" in v.message()
    assert check_workload(doc, "batch", "Job", ns, policies, None).outcome == "mutated"  # the claim unknown


# -- MPI launchers ---------------------------------------------------------------------------------


def mpijob(path: str = "allowed/mpijob-nccl-tests-ib.yaml") -> dict:
    return copy.deepcopy(next(d for d in documents(ROOT / "tests" / "manifests" / path) if d["kind"] == "MPIJob"))


LAUNCHER_T = "spec.mpiReplicaSpecs.Launcher.template"
WORKER_T = "spec.mpiReplicaSpecs.Worker.template"


def test_the_summary_warning_lists_each_injected_template_with_all_its_notes_in_order():
    v = check_workload(mpijob(), "kubeflow.org", "MPIJob", opted_in("ml-training"), catalogue(), None)
    assert v.outcome == "mutated" and v.policy == "ib-shared"
    assert v.warnings()[0] == (
        f"rdma-webhook will inject {LAUNCHER_T} (ib-shared): launcher: 4 NCCL variables + -x NCCL_NET -x NCCL_IB_HCA "
        f"-x NCCL_DEBUG -x NCCL_DEBUG_SUBSYS; {WORKER_T} (ib-shared): worker: rdma/rdma_shared_device_a: 1, 4 NCCL variables, IPC_LOCK, "
        f"/dev/shm: memory-backed emptyDir 64Gi"
    )


def test_a_launcher_template_without_the_label_is_named_in_a_note():
    doc = mpijob()
    del doc["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["metadata"]["labels"]
    v = check_workload(doc, "kubeflow.org", "MPIJob", opted_in("ml-training"), catalogue(), None)
    assert [r.path for r in v.results] == [WORKER_T]
    assert v.notes == [
        f"{LAUNCHER_T}: the MPI launcher template does not carry rdma-webhook.io/inject=true, so the ranks "
        f"it starts (through ssh, from a fresh environment) get none of the policy's NCCL block; label it"
    ]


def test_a_launcher_whose_command_is_not_read_is_known_by_the_operators_label():
    """`bash /opt/launch.sh`: no launcher in the command, but the pod the MPI Operator makes from
    the Launcher template carries its launcher label, so the block is forwarded to the ranks
    (both families: the script may run either)."""
    doc = mpijob()
    c = doc["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    c["command"] = ["/bin/bash", "/opt/launch.sh"]
    c.pop("args", None)
    v = check_workload(doc, "kubeflow.org", "MPIJob", opted_in("ml-training"), catalogue(), None)
    launcher = v.results[0]
    assert launcher.path == LAUNCHER_T and launcher.decision.outcome == "mutated"
    assert launcher.decision.notes == ["launcher: 4 NCCL variables + OMPI_MCA_mca_base_env_list"]
    assert launcher.pod["metadata"] == {
        "labels": {**INJECT, keys.MPI_JOB_ROLE: keys.MPI_LAUNCHER},
        "annotations": {keys.POD_POLICY: "ib-shared"},
        "namespace": "ml-training",
        "generateName": "nccl-allreduce-ib-",
    }
    assert keys.MPI_JOB_ROLE not in v.results[1].pod["metadata"]["labels"]  # the workers' pods: no launcher label


def test_a_launcher_denial_denies_the_workload_even_when_no_template_gets_rdma():
    """denied/mpijob-amd.yaml: AMD workers under a policy for nvidia.com/gpu. The launcher's pod
    is labelled and refused at creation (the webhook sees no worker then), so /validate refuses
    the workload too instead of warning (issue 42: one answer at apply and create time), and
    says why and how to run such a job."""
    v = check_workload(
        mpijob("denied/mpijob-amd.yaml"), "kubeflow.org", "MPIJob", opted_in("ml-training"), catalogue(), None
    )
    launcher = v.results[0]
    assert (launcher.path, launcher.decision.outcome, launcher.deny, launcher.why_not) == (
        LAUNCHER_T,
        "denied",
        True,
        "",
    )
    assert not v.allowed and v.outcome == "denied" and [f.rule for f in v.denials()] == ["command-fallback"]
    assert "NCCL_IB_HCA='eth0' selects none" in v.denials()[0].message
    said = [w for w in v.warnings() if w.startswith(LAUNCHER_T)]
    assert said == [
        f"{LAUNCHER_T}: no template of this workload gets RDMA, but its pods carry {keys.POD_INJECT}=true and are "
        f"judged when they are made, without sight of the others: they would be refused as said; for a job without "
        f"RDMA remove the label"
    ]
    # with a GPU of the policy on the workers, the same launcher denies the workload
    doc = mpijob("denied/mpijob-amd.yaml")
    doc["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpu": 8}
    }
    v = check_workload(doc, "kubeflow.org", "MPIJob", opted_in("ml-training"), catalogue(), None)
    assert v.outcome == "denied" and v.results[0].deny and v.results[0].why_not == ""
    assert not any(w.startswith(LAUNCHER_T) for w in v.warnings())  # a denial is in the message, not a warning too


# -- policies that only warn, pod-level findings ------------------------------------------------------

HOST_NETWORK = (
    "the {0} policy's roce fabric is reached through the host's interfaces, and without hostNetwork: true "
    "the pod sees only its own eth0, so NCCL finds no RDMA device and uses TCP; set hostNetwork: true "
    "(and dnsPolicy: ClusterFirstWithHostNet)"
)
HOST_DEVICES = (
    "the {0} policy's RDMA devices come from the host without a device plugin, and this container neither "
    "mounts /dev/infiniband nor runs privileged, so NCCL finds no RDMA device and uses TCP; mount the host's "
    "/dev/infiniband (hostPath) into it"
)


def test_a_pod_level_finding_is_named_by_its_template_a_container_finding_by_template_and_container():
    v = check_workload(
        job(container("trainer")), "batch", "Job", opted_in("oke-training", "oke-roce-host"), catalogue(), None
    )
    assert v.outcome == "denied"
    assert [(f.rule, f.container, f.message) for f in v.denials()] == [
        ("host-network", None, "spec.template: " + HOST_NETWORK.format("oke-roce-host")),
        ("host-rdma-devices", None, "spec.template, container 'trainer': " + HOST_DEVICES.format("oke-roce-host")),
    ]
    assert v.message() == (
        DENY_PREFIX.format("Job train")
        + "spec.template: "
        + HOST_NETWORK.format("oke-roce-host")
        + " [host-network]; spec.template, container 'trainer': "
        + HOST_DEVICES.format("oke-roce-host")
        + " [host-rdma-devices]"
    )
    assert v.warnings() == []


def test_under_workload_validation_warn_a_denied_template_is_allowed_and_its_findings_are_warnings():
    warn = policy_set(policy_doc("oke-roce-host", "oke-warn", workloadValidation="Warn"))
    v = check_workload(job(container("trainer")), "batch", "Job", opted_in("ml-training", "oke-warn"), warn, None)
    assert v.allowed and v.outcome == "unchanged" and v.policy == "oke-warn" and v.denials() == []
    [r] = v.results
    assert (r.decision.outcome, r.deny, r.why_not) == ("denied", False, "workloadValidation Warn")
    assert v.warnings() == [
        "spec.template: " + HOST_NETWORK.format("oke-warn") + " [host-network]",
        "spec.template, container 'trainer': " + HOST_DEVICES.format("oke-warn") + " [host-rdma-devices]",
    ]
    # the same pod under the policy that denies
    v = check_workload(
        job(container("trainer")), "batch", "Job", opted_in("ml-training", "oke-roce-host"), catalogue(), None
    )
    assert not v.allowed and v.results[0].why_not == ""


def test_a_template_placeholder_makes_a_malformed_pod_a_warning_saying_why():
    wf = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "nccl-", "namespace": "ml-training"},
        "spec": {
            "entrypoint": "run",
            "templates": [
                {
                    "name": "run",
                    "metadata": {"labels": dict(INJECT)},
                    "container": {
                        "image": "nvcr.io/nvidia/pytorch:25.11-py3",
                        "command": ["python", "train.py"],
                        "resources": {"limits": {"nvidia.com/gpu": "{{inputs.parameters.gpus}}"}},
                    },
                }
            ],
        },
    }
    v = check_workload(wf, "argoproj.io", "Workflow", opted_in("ml-training"), catalogue(), None)
    [r] = v.results
    assert (r.decision.outcome, r.deny) == ("denied", False) and [f.rule for f in r.decision.denials] == [
        "malformed-pod"
    ]
    assert r.why_not == "a template placeholder is filled in only when the pod is made"


# -- what `review --explain` shows of a template: its pod before and after, why it only warns --------


def test_explain_shows_the_pod_a_template_makes_with_its_namespace_and_generate_name():
    code, out, err = review(
        "--policies",
        str(POLICIES),
        "--cluster-state",
        STATE,
        "--explain",
        str(ROOT / "tests" / "manifests" / "allowed" / "jobset.yaml"),
    )
    assert code == 0, err
    lines = out.splitlines()
    # diff context: lines of the pod the template makes that the mutation left alone
    assert "         namespace: ml-training" in lines and "         generateName: pretrain-7b-" in lines, out
    assert "      +    rdma-webhook.io/applied-policy: erdma" in lines
    assert not any(line.startswith("      -") and not line.startswith("      ---") for line in lines), out


def test_explain_says_why_a_denied_template_only_warns(tmp_path):
    warn = policy_doc("ib-shared", "ib-warn", workloadValidation="Warn")
    ns = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": "ml-training",
            "labels": {keys.NS_INJECTION: keys.NS_INJECTION_ENABLED, keys.NS_POLICY: "ib-warn"},
        },
    }
    f = tmp_path / "in.yaml"
    f.write_text(yaml.safe_dump_all([warn, ns, job(container("trainer", env=IB_DISABLE))]))
    code, out, err = review("--explain", str(f))
    assert code == 0, err + out
    assert (
        "  spec.template: its pods would be DENIED by policy ib-warn (a warning only: workloadValidation Warn)" in out
    ), out
    amd = ROOT / "tests" / "manifests" / "denied" / "mpijob-amd.yaml"
    code, out, err = review("--policies", str(POLICIES), "--cluster-state", STATE, "--explain", str(amd))
    assert code == 1, err  # its launcher pods are refused at creation: the workload is refused too
    assert "a warning only" not in out and "no template of this workload gets RDMA, but its pods carry" in out, out


# -- cluster-scoped runtimes: judged under every policy an opted-in namespace could use -------------


def under(policy: str) -> str:
    return f"(a namespace using policy {policy})"


def test_a_cluster_runtime_right_for_ib_is_shown_under_the_first_policy_that_injects_with_the_others_named():
    policies = catalogue()
    v = check_workload(runtime(ib_node()), TRAINER, CTR, None, policies, None)
    assert (v.outcome, v.policy, v.allowed) == ("mutated", "coreweave-ib", True)
    [r] = v.results
    assert (r.path, r.deny, r.decision.outcome, r.why_not) == (
        NODE,
        False,
        "mutated",
        "",
    )  # why_not: only for a denial that warns
    assert r.pod["metadata"] == {"labels": INJECT, "namespace": under("coreweave-ib"), "generateName": "torch-ib-"}
    # one note per policy under which its pods would be denied, by name, with all its reasons
    said = [n.split(": its pods would be denied in namespaces that use policy ")[1].split(":")[0] for n in v.notes]
    assert said == [
        "efa",
        "efa-dra",
        "erdma",
        "gb200-roce",
        "gke",
        "gke-gib",
        "gke-tcpxo",
        "oke-roce-host",
        "roce-dranet",
        "roce-dranet-aligned",
        "sriov-roce",
        "sriov-roce-8rail",
    ], v.notes
    assert all(n.startswith(f"{NODE}: ") for n in v.notes)
    efa_dra = v.notes[1]
    assert efa_dra.startswith(
        f"{NODE}: its pods would be denied in namespaces that use policy efa-dra: container 'node': "
        f"this pod requests rdma/rdma_shared_device_a, another fabric's RDMA device; "
    )
    assert (
        "select policy ib-shared with the annotation rdma-webhook.io/policy: ib-shared [fabric-mismatch]; the pod claims "
        "no NIC of the efa fabric"
        in efa_dra
        and efa_dra.endswith(" [device-missing]")
    )


def test_a_cluster_runtime_is_shown_under_a_policy_that_still_changes_its_pods():
    """Its template is the pod coreweave-ib made (kubectl get pod -o yaml): nothing left to add under
    coreweave-ib; ib-shared, later by name, still changes the pods, so it is the one shown."""
    policies = catalogue()
    template = runtime(ib_node())["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    made = check_workload(runtime(ib_node()), TRAINER, CTR, None, policies, None).results[0].decision.pod
    template["metadata"] = {k: v for k, v in made["metadata"].items() if k not in ("namespace", "generateName")}
    template["spec"] = made["spec"]
    rt = runtime(ib_node())
    rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"] = template
    v = check_workload(rt, TRAINER, CTR, None, policies, None)
    assert (v.outcome, v.policy) == ("mutated", "ib-shared")
    assert v.results[0].pod["metadata"]["namespace"] == under("ib-shared")


def test_a_cluster_runtime_denied_under_every_policy_shows_the_reasons_of_one_its_devices_fit():
    v = check_workload(runtime(ib_node(IB_DISABLE)), TRAINER, CTR, None, catalogue(), None)
    assert (v.outcome, v.policy) == ("denied", "coreweave-ib")
    assert v.notes == [
        f"{NODE}: its pods would be denied under every policy that could apply (coreweave-ib, ib-shared, "
        f"nd-infiniband, efa, efa-dra, erdma, gb200-roce, gke, gke-gib, gke-tcpxo, oke-roce-host, roce-dranet, "
        f"roce-dranet-aligned, sriov-roce, sriov-roce-8rail); the reasons under policy coreweave-ib follow"
    ]
    assert [f.rule for f in v.denials()] == ["env-fallback"]
    [r] = v.results
    assert r.deny and r.why_not == "" and r.pod["metadata"]["namespace"] == under("coreweave-ib")


def test_denied_under_the_only_policy_or_under_both_of_two():
    one = policy_set(policy_doc("ib-shared", "ib-a"))
    v = check_workload(runtime(ib_node(IB_DISABLE)), TRAINER, CTR, None, one, None)
    assert (v.outcome, v.policy, v.notes) == ("denied", "ib-a", [])
    two = policy_set(policy_doc("ib-shared", "ib-a"), policy_doc("ib-shared", "ib-b"))
    v = check_workload(runtime(ib_node(IB_DISABLE)), TRAINER, CTR, None, two, None)
    assert (v.outcome, v.policy) == ("denied", "ib-a")
    assert v.notes == [
        f"{NODE}: its pods would be denied under every policy that could apply (ib-a, ib-b); "
        f"the reasons under policy ib-a follow"
    ]


def test_a_cluster_runtime_denied_only_under_policies_that_warn_is_allowed_with_a_warning():
    warn = policy_set(policy_doc("ib-shared", "ib-warn", workloadValidation="Warn"))
    v = check_workload(runtime(ib_node(IB_DISABLE)), TRAINER, CTR, None, warn, None)
    assert v.allowed and v.outcome == "unchanged" and v.policy == "ib-warn" and v.denials() == []
    [r] = v.results
    assert (r.decision.outcome, r.deny, r.why_not) == ("denied", False, "workloadValidation Warn")
    assert [w for w in v.warnings() if "NCCL_IB_DISABLE" in w] == [
        f"{NODE}, container 'node': NCCL_IB_DISABLE='1' turns NCCL's IB/RoCE transport off, so NCCL runs on TCP sockets "
        f"(NET/Socket); remove it or set it to 0 in env [env-fallback]"
    ]


@pytest.mark.parametrize(
    "policies, why",
    [
        (None, "the webhook has no valid policies loaded; ask the platform team to check `rdma-webhook policy lint`"),
        (
            PolicySet([]),
            "no RDMA policy is in force on this cluster: the platform team chooses one from the catalogue "
            "(Helm: --set policies.enabled={NAME}; kustomize: the component deploy/catalogue/NAME) or mounts "
            "its own; until then pods that ask for RDMA are refused",
        ),
    ],
)
def test_a_cluster_runtime_without_policies_gets_a_note_per_template_not_a_denial(policies, why):
    rt = runtime(
        ib_node(), launcher=container("launcher", gpus=None, command=["mpirun", "python", "/workspace/train.py"])
    )
    v = check_workload(rt, TRAINER, CTR, None, policies, None)
    assert (v.outcome, v.allowed, v.results) == ("skipped", True, [])
    assert v.notes == [f"{LAUNCHER}: checked without a namespace: {why}", f"{NODE}: checked without a namespace: {why}"]


def test_a_runtimes_launcher_template_makes_pods_with_the_launcher_label():
    """A Trainer MPI runtime whose launcher runs a script: the pods of its `launcher` job carry
    the launcher label, so the block goes to the ranks."""
    rt = runtime(ib_node(), launcher=container("launcher", gpus=None, command=["/bin/bash", "/opt/launch.sh"]))
    v = check_workload(rt, TRAINER, CTR, None, policy_set(policy_doc("ib-shared", "ib-shared")), None)
    launcher = v.results[0]
    assert (
        launcher.path == LAUNCHER and launcher.decision.outcome == "mutated" and launcher.decision.policy == "ib-shared"
    )
    assert launcher.decision.notes == ["launcher: 4 NCCL variables + OMPI_MCA_mca_base_env_list"]
    assert launcher.pod["metadata"] == {
        "labels": {**INJECT, keys.MPI_JOB_ROLE: keys.MPI_LAUNCHER},
        "namespace": under("ib-shared"),
        "generateName": "torch-ib-",
    }
    assert keys.MPI_JOB_ROLE not in v.results[1].pod["metadata"]["labels"]


def test_explain_shows_a_cluster_runtimes_pod_in_the_example_namespace_of_its_policy():
    rt = ROOT / "tests" / "manifests" / "allowed" / "trainer-mpi-runtime.yaml"
    code, out, err = review("--policies", str(POLICIES), "--cluster-state", STATE, "--explain", str(rt))
    assert code == 0, err
    lines = out.splitlines()
    assert "           training.kubeflow.org/job-role: launcher" in lines, out
    assert "         generateName: mpi-nccl-ib-" in lines, out
    assert any(line.startswith("         namespace: (a namespace using policy ") for line in lines), out


# -- which policies an opted-in namespace could use: their namespace selectors ------------------------


def sel(*exprs: dict, **labels: str) -> dict:
    out: dict = {}
    if labels:
        out["matchLabels"] = labels
    if exprs:
        out["matchExpressions"] = list(exprs)
    return out


def expr(key: str, operator: str, *values: str) -> dict:
    return {"key": key, "operator": operator, **({"values": list(values)} if values else {})}


SELECTORS = {
    # each is met by a namespace with the right labels: the runtime is judged under it
    "p-absent": sel(expr("gpu-class", "DoesNotExist")),
    "p-dne": sel(expr(keys.NS_POLICY, "DoesNotExist")),  # namespaces that name no policy
    "p-exists": sel(expr("gpu", "Exists")),
    "p-in": sel(expr("zone", "In", "a", "b")),
    "p-in1": sel(expr("zone", "In", "a")),
    "p-keep": sel(expr("team", "In", "x", "ml"), team="ml"),
    "p-keep-notin": sel(expr("team", "NotIn", "x"), team="ml"),
    "p-labels": sel(team="ml"),
    "p-notin": sel(expr("tier", "NotIn", "batch")),
    "p-own": sel(expr(keys.NS_POLICY, "NotIn", "p-own")),  # namespaces that name another policy or none
    # none is: never judged
    "p-never": sel(expr("team", "NotIn", "ml"), team="ml"),
    "p-never-in": sel(expr("zone", "In", "a"), expr("zone", "DoesNotExist")),
}


def test_a_cluster_runtime_is_judged_under_each_policy_whose_selector_an_opted_in_namespace_meets():
    policies = policy_set(*(policy_doc("ib-shared", name, namespaceSelector=s) for name, s in SELECTORS.items()))
    v = check_workload(runtime(ib_node(IB_DISABLE)), TRAINER, CTR, None, policies, None)
    met = sorted(n for n in SELECTORS if "never" not in n)
    assert v.notes == [
        f"{NODE}: its pods would be denied under every policy that could apply ({', '.join(met)}); "
        f"the reasons under policy p-absent follow"
    ]
    assert (v.outcome, v.policy) == ("denied", "p-absent")


def test_a_policy_whose_selector_admits_no_opted_in_namespace_is_left_out():
    """A namespace whose labels turn injection off is not opted in: the runtime is judged under
    the other policy alone (denied, with no note naming the first)."""
    off = policy_doc("ib-shared", "a-off", namespaceSelector=sel(**{keys.NS_INJECTION: "disabled"}))
    policies = policy_set(off, policy_doc("ib-shared", "ib-b"))
    v = check_workload(runtime(ib_node(IB_DISABLE)), TRAINER, CTR, None, policies, None)
    assert (v.outcome, v.policy, v.notes) == ("denied", "ib-b", [])
    v = check_workload(runtime(ib_node(IB_DISABLE)), TRAINER, CTR, None, policy_set(off), None)
    assert (v.outcome, v.results, v.notes) == ("skipped", [], [])


def test_the_example_namespace_carries_the_labels_other_policies_select_on():
    """EFA namespaces carry `gpu-team` (any value), InfiniBand ones `gpu-team: "true"`: a runtime
    that brings the IB device is denied in EFA namespaces, and the fix named is the IB policy,
    which a namespace labelled as the EFA policy asks (gpu-team present: "true") may use too."""
    efa = policy_doc("efa", "efa-team", namespaceSelector=sel(expr("gpu-team", "Exists")))
    ib = policy_doc("ib-shared", "ib-team", namespaceSelector=sel(**{"gpu-team": "true"}))
    v = check_workload(runtime(ib_node()), TRAINER, CTR, None, policy_set(efa, ib), None)
    assert (v.outcome, v.policy) == ("mutated", "ib-team")
    assert v.results[0].pod["metadata"]["namespace"] == under("ib-team")
    assert v.notes == [
        f"{NODE}: its pods would be denied in namespaces that use policy efa-team: container 'node': this pod "
        f"requests rdma/rdma_shared_device_a, another fabric's RDMA device; policy efa-team provides "
        f"vpc.amazonaws.com/efa; select policy ib-team with the annotation rdma-webhook.io/policy: ib-team "
        f"[fabric-mismatch]"
    ]


# -- a template that is skipped does not stop the ones after it ----------------------------------------


def test_each_template_is_judged_on_its_own_whatever_the_one_before_gave():
    """The verdict of a workload is that of its templates one by one: a template skipped (here: in a
    namespace that is not opted in) changes nothing for the next one, which gets the verdict it
    gets alone."""
    prep = {
        "name": "prep",
        "metadata": {"labels": dict(INJECT)},
        "container": {"image": "busybox", "command": ["true"]},
    }
    run = {
        "name": "run",
        "metadata": {"labels": dict(INJECT)},
        "container": {
            "image": "nvcr.io/nvidia/pytorch:25.11-py3",
            "command": ["python", "train.py"],
            "env": {"NCCL_DEBUG": "INFO"},
            "resources": {"limits": {"nvidia.com/gpu": "8"}},
        },
    }

    def workflow(*templates: dict) -> dict:
        return {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"name": "nccl", "namespace": "default"},
            "spec": {"entrypoint": "run", "templates": list(templates)},
        }

    ns = Namespace("default", {"kubernetes.io/metadata.name": "default"})

    def seen(v) -> tuple:
        return v.outcome, [(r.path, r.decision.outcome, r.deny) for r in v.results], v.notes, v.warnings()

    both = check_workload(workflow(prep, run), "argoproj.io", "Workflow", ns, catalogue(), None)
    alone = seen(check_workload(workflow(run), "argoproj.io", "Workflow", ns, catalogue(), None))
    # the labelled template left alone is said (issue 42), and nothing else differs
    skipped = (
        "spec.templates[prep] carries rdma-webhook.io/inject=true, but namespace 'default' does not carry "
        "rdma-webhook.io/injection=enabled: their pods get no RDMA"
    )
    assert seen(both) == (*alone[:3], [skipped, *alone[3]])
    # the same for a cluster-scoped runtime, under a policy whose example namespace is not opted in
    off = policy_set(policy_doc("ib-shared", "a-off", namespaceSelector=sel(**{keys.NS_INJECTION: "disabled"})))
    bad = ib_node()
    bad["env"] = {"NCCL_DEBUG": "INFO"}
    launcher = container("launcher", gpus=None, command=["mpirun", "python", "/workspace/train.py"])
    both = check_workload(runtime(bad, launcher=launcher), TRAINER, CTR, None, off, None)
    assert seen(both) == seen(check_workload(runtime(bad), TRAINER, CTR, None, off, None))


# -- a cluster-scoped workload's pods share one namespace, so one policy ------------------------------


def erdma_node() -> dict:
    return container(
        "node",
        gpus=None,
        command=["torchrun", "/workspace/train.py"],
        resources={"limits": {"nvidia.com/gpu": "8", "aliyun/erdma": "1"}},
    )


def hca_launcher(hca: str = "mlx5") -> dict:
    return container(
        "launcher", gpus=None, command=["mpirun", "-x", f"NCCL_IB_HCA={hca}", "python", "/workspace/train.py"]
    )


def test_a_runtime_whose_launcher_fits_one_policy_and_nodes_another_is_denied_under_the_one_the_nodes_fit():
    """The launcher forwards NCCL_IB_HCA=mlx5 (an InfiniBand HCA) to ranks that run on eRDMA nodes:
    in a namespace of erdma the launcher is denied, in one of any other policy the nodes are. Judged
    template by template each found a policy, and the runtime was allowed as "efa,erdma"."""
    v = check_workload(runtime(erdma_node(), launcher=hca_launcher()), TRAINER, CTR, None, catalogue(), None)
    assert (v.outcome, v.allowed, v.policy) == ("denied", False, "erdma")
    assert [(r.path, r.decision.outcome, r.deny) for r in v.results] == [
        (LAUNCHER, "denied", True),
        (NODE, "mutated", False),
    ]
    assert {r.pod["metadata"]["namespace"] for r in v.results} == {under("erdma")}
    assert [f.rule for f in v.denials()] == ["command-fallback"] and "NCCL_IB_HCA='mlx5'" in v.message()
    others = sorted(set(catalogue().by_name) - {"erdma"})
    others.sort(key=lambda n: n not in ("gke-tcpxo", "oke-roce-host"))  # denied without a fabric mismatch: shown first
    [note] = v.notes
    assert note.startswith(
        f"{LAUNCHER}: its pods would be denied under policy erdma, and under every other policy that could apply ("
    ), note
    assert sorted(note.split("apply (")[1].split(")")[0].split(", ")) == sorted(others)
    assert note.endswith(
        "those of another template would be: no one policy admits all the pods; the reasons under policy erdma follow"
    )
    # as a namespaced TrainingRuntime in a namespace of either policy: denied the same way
    for policy in ("erdma", "ib-shared"):
        rt = runtime(erdma_node(), launcher=hca_launcher())
        rt.update(kind="TrainingRuntime", metadata={**rt["metadata"], "namespace": "ml"})
        n = check_workload(rt, TRAINER, "TrainingRuntime", opted_in("ml", policy), catalogue(), None)
        assert (n.outcome, n.policy) == ("denied", policy)


def test_a_runtime_is_allowed_under_the_one_policy_that_admits_all_its_pods_with_each_other_policys_denials_named():
    """Three policies: under erdma the launcher is denied, under ib-shared the node; erdma-any
    (erdma that leaves NCCL_IB_HCA to the user) admits both, so it is the one shown, and the
    warnings say which template each other policy would deny."""
    any_hca = policy_doc("erdma", "erdma-any")
    any_hca["nccl"] = {k: v for k, v in any_hca["nccl"].items() if k != "NCCL_IB_HCA"}
    any_hca["fabric"] = {**any_hca["fabric"], "hcaDevices": ["erdma_[0-3]", "mlx5_[0-9]"]}
    policies = policy_set(policy_doc("erdma", "erdma"), any_hca, policy_doc("ib-shared", "ib-shared"))
    v = check_workload(runtime(erdma_node(), launcher=hca_launcher()), TRAINER, CTR, None, policies, None)
    assert (v.outcome, v.allowed, v.policy) == ("mutated", True, "erdma-any"), (
        v.notes,
        [r.decision.denials for r in v.results],
    )
    assert [(r.path, r.decision.outcome, r.deny) for r in v.results] == [
        (LAUNCHER, "mutated", False),
        (NODE, "mutated", False),
    ]
    said = [
        (
            n.split(": its pods would be denied in namespaces that use policy ")[0],
            n.split(": its pods would be denied in namespaces that use policy ")[1].split(":")[0],
        )
        for n in v.notes
    ]
    assert said == [(LAUNCHER, "erdma"), (NODE, "ib-shared")], v.notes


def test_a_policy_that_selects_namespaces_with_injection_off_is_no_policy_a_runtime_could_meet():
    """Its example namespace would not be opted in: the runtime is judged under the other policy
    alone, and a malformed template (env as a mapping) is denied there with no note naming the first."""
    off = policy_doc("ib-shared", "a-off", namespaceSelector=sel(**{keys.NS_INJECTION: "disabled"}))
    bad = ib_node()
    bad["env"] = {"NCCL_DEBUG": "INFO"}
    v = check_workload(runtime(bad), TRAINER, CTR, None, policy_set(off, policy_doc("ib-shared", "ib-b")), None)
    assert (v.outcome, v.notes) == ("denied", [])  # not "denied under every policy that could apply (a-off, ib-b)"
    assert [f.rule for f in v.denials()] == ["malformed-pod"]
    assert [r.pod["metadata"]["namespace"] for r in v.results] == [under("ib-b")]
    v = check_workload(runtime(bad), TRAINER, CTR, None, policy_set(off), None)
    assert (v.outcome, v.results, v.notes) == ("skipped", [], [])
