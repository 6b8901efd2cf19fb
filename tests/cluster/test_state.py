"""webhook.cluster.state: the cluster state read from a file (`review --cluster-state`, `serve
--cluster-state`), the stores of Trainer runtimes and DRA objects, and the state `review` assumes
with none. What a decision asks of them: is this namespace opted in, does this NAD exist, which
runtime or claim template does a workload name. Objects are shaped as `kubectl get -o yaml` prints
them (sources in each object's comment)."""

from __future__ import annotations

import locale
import sys

import pytest
import yaml

import kube_objects as k
from webhook.core import keys
from webhook.core.decision import Namespace
from webhook.cluster.state import (
    AssumedClusterState,
    ClaimStore,
    ClusterStateError,
    FileClusterState,
    RuntimeStore,
    is_dra,
    is_runtime,
    namespace_from,
)

# `kubectl get namespace ml-training -o yaml` on Kubernetes 1.33 (the API server adds the
# kubernetes.io/metadata.name label, a finalizer and the phase).
NAMESPACE = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {
        "creationTimestamp": "2026-11-20T09:12:44Z",
        "labels": {
            "kubernetes.io/metadata.name": "ml-training",
            keys.NS_INJECTION: keys.NS_INJECTION_ENABLED,
            keys.NS_POLICY: "sriov-roce",
        },
        "name": "ml-training",
        "resourceVersion": "1187",
        "uid": "a3f1c0de-5b7e-4c43-9d7a-2f6a3c1b9e10",
    },
    "spec": {"finalizers": ["kubernetes"]},
    "status": {"phase": "Active"},
}

# An SR-IOV NetworkAttachmentDefinition as the SR-IOV Network Operator renders it
# (k8snetworkplumbingwg/sriov-network-operator, doc/quickstart.md: the resourceName annotation
# names the device plugin's resource).
NAD = {
    "apiVersion": "k8s.cni.cncf.io/v1",
    "kind": "NetworkAttachmentDefinition",
    "metadata": {
        "annotations": {keys.NAD_RESOURCE_NAME: "openshift.io/mlxnics"},
        "name": "sriov-rdma",
        "namespace": "ml-training",
    },
    "spec": {"config": '{"cniVersion":"1.0.0","name":"sriov-rdma","type":"sriov","ipam":{"type":"whereabouts"}}'},
}

# Kubeflow Trainer's runtimes (kubeflow/trainer, manifests/base/runtimes/torch_distributed.yaml:
# a ClusterTrainingRuntime; a TrainingRuntime is the same in a namespace), trimmed to the
# replicated job a TrainJob's pods are made of.
CLUSTER_RUNTIME = k.cluster_training_runtime(
    {"name": "node", "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"}, name="torch-distributed", num_nodes=1
)
NS_RUNTIME = {
    **CLUSTER_RUNTIME,
    "kind": "TrainingRuntime",
    "metadata": {"name": "torch-rdma", "namespace": "ml-training"},
}

# DRA objects of resource.k8s.io/v1 as in the Kubernetes docs ("Allocate Devices to Workloads with
# DRA", https://kubernetes.io/docs/tasks/configure-pod-container/assign-resources/allocate-devices-dra/),
# with the class GKE managed DRANET installs for RDMA NICs (Google Cloud, "Allocate network
# resources using GKE managed DRANET").
DEVICE_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "mrdma.google.com"},
    "spec": {"selectors": [{"cel": {"expression": "device.driver == 'dra.net'"}}]},
}
CLAIM_TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "all-mrdma", "namespace": "ml-training"},
    "spec": {
        "spec": {
            "devices": {
                "requests": [
                    {"name": "req-mrdma", "exactly": {"deviceClassName": "mrdma.google.com", "allocationMode": "All"}}
                ]
            }
        }
    },
}
CLAIM = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "shared-nic", "namespace": "ml-training"},
    "spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": "mrdma.google.com"}}]}},
}


def _without_namespace(obj: dict) -> dict:
    meta = {k: v for k, v in obj["metadata"].items() if k != "namespace"}
    return {**obj, "metadata": meta}


# -- which objects are Trainer runtimes, which are DRA objects ---------------------------------------


def test_trainer_runtimes_are_the_two_kinds_of_the_trainer_group_only():
    assert is_runtime(CLUSTER_RUNTIME) and is_runtime(NS_RUNTIME)
    assert is_runtime({**NS_RUNTIME, "apiVersion": "trainer.kubeflow.org/v2"})
    # a TrainJob is of the group but not a runtime; the group's name must be the whole group
    assert not is_runtime({**NS_RUNTIME, "kind": "TrainJob"})
    for api_version in ("kubeflow.org/v1", "trainer.kubeflow.org", "xtrainer.kubeflow.org/v1alpha1", None, 1):
        assert not is_runtime({**NS_RUNTIME, "apiVersion": api_version}), api_version
    assert not is_runtime({k: v for k, v in NS_RUNTIME.items() if k != "apiVersion"})
    assert not is_runtime([CLUSTER_RUNTIME]) and not is_runtime(None)


def test_dra_objects_are_the_three_kinds_of_resource_k8s_io_only():
    for obj in (DEVICE_CLASS, CLAIM_TEMPLATE, CLAIM, {**CLAIM, "apiVersion": "resource.k8s.io/v1beta1"}):
        assert is_dra(obj), obj["kind"]
    assert not is_dra({**CLAIM, "kind": "ResourceSlice"})
    for api_version in ("resource.k8s.io", "v1", "noresource.k8s.io/v1", None):
        assert not is_dra({**CLAIM, "apiVersion": api_version}), api_version
    assert not is_dra({k: v for k, v in CLAIM.items() if k != "apiVersion"})
    assert not is_dra("ResourceClaim")


# -- the stores ----------------------------------------------------------------------------------


def test_runtime_store_keys_namespaced_runtimes_by_namespace_and_cluster_runtimes_by_name():
    store = RuntimeStore([CLUSTER_RUNTIME, NS_RUNTIME, _without_namespace({**NS_RUNTIME, "metadata": {"name": "x"}})])
    assert store.cluster_training_runtime("torch-distributed") == CLUSTER_RUNTIME
    assert store.training_runtime("ml-training", "torch-rdma") == NS_RUNTIME
    assert store.training_runtime("default", "x") is not None  # no namespace: the default one
    # a cluster runtime is not a namespaced one and the other way round
    assert store.training_runtime("ml-training", "torch-distributed") is None
    assert store.cluster_training_runtime("torch-rdma") is None
    assert store.training_runtime("other", "torch-rdma") is None
    assert len(store) == 3


def test_runtime_store_default_namespace_and_objects_without_metadata():
    store = RuntimeStore([_without_namespace(NS_RUNTIME)], default_namespace="team-b")
    assert store.training_runtime("team-b", "torch-rdma") is not None
    assert store.training_runtime("default", "torch-rdma") is None
    bare = RuntimeStore()
    assert len(bare) == 0
    bare.add({"kind": "TrainingRuntime", "metadata": "not a map"})
    bare.add({"kind": "ClusterTrainingRuntime"})
    assert bare.training_runtime("default", "") == {"kind": "TrainingRuntime", "metadata": "not a map"}
    assert bare.cluster_training_runtime("") == {"kind": "ClusterTrainingRuntime"}


def test_runtime_store_update_adds_the_other_stores_runtimes_over_its_own():
    base = RuntimeStore([CLUSTER_RUNTIME, NS_RUNTIME])
    newer = {**NS_RUNTIME, "spec": {"mlPolicy": {"numNodes": 4}}}
    other = RuntimeStore([newer, {**CLUSTER_RUNTIME, "metadata": {"name": "mpi-distributed"}}])
    base.update(other)
    assert base.training_runtime("ml-training", "torch-rdma") == newer
    assert base.cluster_training_runtime("mpi-distributed") is not None
    assert base.cluster_training_runtime("torch-distributed") == CLUSTER_RUNTIME
    assert len(base) == 3


def test_claim_store_reads_classes_templates_and_claims_as_the_decision_does():
    store = ClaimStore([DEVICE_CLASS, CLAIM_TEMPLATE, CLAIM, NAD])
    cls = store.device_class("mrdma.google.com")
    assert cls is not None and cls.name == "mrdma.google.com" and "dra.net" in cls.cel
    (request,) = store.claim_template("ml-training", "all-mrdma")
    assert request.device_class == "mrdma.google.com"
    (request,) = store.resource_claim("ml-training", "shared-nic")
    assert request.device_class == "mrdma.google.com"
    # a template is not a claim, nor the other way round; another namespace has neither
    assert store.resource_claim("ml-training", "all-mrdma") is None
    assert store.claim_template("ml-training", "shared-nic") is None
    assert store.claim_template("default", "all-mrdma") is None
    assert store.device_class("efa.networking.k8s.aws") is None
    assert len(store) == 3  # the NAD is none of them
    assert store.lists_all()  # a file's or a cluster's objects are all there are


def test_claim_store_default_namespace_completeness_and_update():
    store = ClaimStore([_without_namespace(CLAIM_TEMPLATE), _without_namespace(CLAIM)])
    assert store.claim_template("default", "all-mrdma") and store.resource_claim("default", "shared-nic")
    elsewhere = ClaimStore([_without_namespace(CLAIM)], default_namespace="team-b", complete=False)
    assert elsewhere.resource_claim("team-b", "shared-nic") and not elsewhere.resource_claim("default", "shared-nic")
    assert not elsewhere.lists_all()  # only the objects given: one not here is only not known
    assert len(ClaimStore()) == 0
    store.add({"kind": "ResourceClaim", "metadata": None})
    assert store.resource_claim("default", "") == ()
    base = ClaimStore([DEVICE_CLASS])
    base.update(store)
    base.update(ClaimStore([CLAIM]))
    assert base.device_class("mrdma.google.com") and base.claim_template("default", "all-mrdma")
    assert base.resource_claim("ml-training", "shared-nic") and base.resource_claim("default", "shared-nic")
    assert len(base) == 5


# -- namespaces ----------------------------------------------------------------------------------


def test_namespace_from_keeps_name_and_labels_and_adds_the_name_label_the_api_server_sets():
    ns = namespace_from(NAMESPACE)
    assert ns == Namespace("ml-training", NAMESPACE["metadata"]["labels"])
    written = namespace_from({"kind": "Namespace", "metadata": {"name": "hand-written", "labels": {"team": "a"}}})
    assert written.labels == {"kubernetes.io/metadata.name": "hand-written", "team": "a"}
    assert namespace_from({"metadata": {"name": "bare", "labels": None}}).labels == {
        "kubernetes.io/metadata.name": "bare"
    }
    # a label the file sets wins over the one added
    assert namespace_from({"metadata": {"name": "a", "labels": {"kubernetes.io/metadata.name": "b"}}}).labels == {
        "kubernetes.io/metadata.name": "b"
    }
    assert namespace_from({"metadata": {"name": "n", "labels": {"count": 3}}}).labels["count"] == 3


def test_namespace_names_and_label_values_are_one_string_object_each():
    def fresh(text: str) -> str:
        return "".join(list(text))  # equal, but not the same object

    a = namespace_from({"metadata": {"name": fresh("team-a"), "labels": {"tier": fresh("gold")}}})
    b = namespace_from({"metadata": {"name": fresh("team-b"), "labels": {"tier": fresh("gold")}}})
    assert a.labels["tier"] is b.labels["tier"] is sys.intern("gold")
    assert a.name is sys.intern("team-a") and a.labels["kubernetes.io/metadata.name"] is a.name


# -- the state from a file -----------------------------------------------------------------------


def _kubectl_list(*objects: dict) -> str:
    return yaml.safe_dump(
        {"apiVersion": "v1", "kind": "List", "items": list(objects), "metadata": {}}, allow_unicode=True
    )


def test_a_kubectl_list_gives_every_kind_a_decision_reads():
    text = _kubectl_list(NAMESPACE, NAD, CLUSTER_RUNTIME, NS_RUNTIME, DEVICE_CLASS, CLAIM_TEMPLATE, CLAIM)
    state = FileClusterState.from_text(text)
    assert state.ready()
    assert state.namespace("ml-training") == namespace_from(NAMESPACE)
    assert state.namespace("default") is None  # not in the file: does not exist
    assert state.attachments() is state
    assert state.attachment("ml-training", "sriov-rdma") == NAD
    assert state.attachment("default", "sriov-rdma") is None
    assert state.runtimes().cluster_training_runtime("torch-distributed") == CLUSTER_RUNTIME
    assert state.runtimes().training_runtime("ml-training", "torch-rdma") == NS_RUNTIME
    assert len(state.runtimes()) == 2
    claims = state.claims()
    assert claims.lists_all() and len(claims) == 3
    assert claims.device_class("mrdma.google.com") is not None
    assert claims.claim_template("ml-training", "all-mrdma") and claims.resource_claim("ml-training", "shared-nic")


def test_documents_typed_lists_and_empty_documents_are_all_read():
    nad_default = _without_namespace({**NAD, "metadata": {**NAD["metadata"], "name": "plain"}})
    text = "\n---\n".join(
        [
            yaml.safe_dump(NAMESPACE),
            "",  # an empty document
            yaml.safe_dump(
                {"apiVersion": "v1", "kind": "NamespaceList", "items": [{**NAMESPACE, "metadata": {"name": "b"}}]}
            ),
            yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": None}),
            yaml.safe_dump(
                {"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "v1", "kind": "List", "items": [NAD]}]}
            ),
            yaml.safe_dump(nad_default),
        ]
    )
    state = FileClusterState.from_text(text)
    assert state.namespace("ml-training") is not None and state.namespace("b") is not None
    assert state.attachment("ml-training", "sriov-rdma") == NAD
    assert state.attachment("default", "plain") == nad_default  # no namespace: the default one
    # a kind whose name ends in List but has no items is an object, not a list
    with pytest.raises(ClusterStateError, match="^cluster state: a ConfigMapList without metadata.name$"):
        FileClusterState.from_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMapList"}))
    # a List written without items (kubectl prints `items: []`) is an empty list, not an object
    empty = FileClusterState.from_text("apiVersion: v1\nkind: List\n")
    assert empty.namespace("default") is None and len(empty.runtimes()) == 0
    other = FileClusterState.from_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "SecretList", "metadata": {"name": "x"}})
    )
    assert other.namespace("x") is None and len(other.runtimes()) == 0 and len(other.claims()) == 0


def test_objects_of_other_kinds_are_skipped_and_look_alikes_are_not_taken():
    look_alike_runtime = {**NS_RUNTIME, "apiVersion": "kubeflow.org/v1"}
    look_alike_claim = {**CLAIM, "apiVersion": "example.com/v1"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml-training"}}
    state = FileClusterState.from_text(_kubectl_list(pod, look_alike_runtime, look_alike_claim))
    assert len(state.runtimes()) == 0 and len(state.claims()) == 0
    assert state.namespace("p") is None and state.attachment("ml-training", "p") is None


@pytest.mark.parametrize(
    "text, message",
    [
        ("items: [\n", "^cluster state: not valid YAML: "),
        ("- a\n- b\n", "^cluster state: expected Kubernetes objects, found a list$"),
        ("kind: List\nitems: [7]\n", "^cluster state: expected Kubernetes objects, found a int$"),
        ("kind: Namespace\nmetadata: {}\n", "^cluster state: a Namespace without metadata.name$"),
        ("kind: NetworkAttachmentDefinition\nmetadata: x\n", "^cluster state: a NetworkAttachmentDefinition without"),
        ("kind: Namespace\n", "^cluster state: a Namespace without metadata.name$"),
    ],
)
def test_bad_files_are_a_clear_error_that_names_the_source(text, message):
    with pytest.raises(ClusterStateError, match=message):
        FileClusterState.from_text(text)


def test_a_file_error_names_the_file(tmp_path):
    path = tmp_path / "state.yaml"
    path.write_text("kind: Namespace\nmetadata:\n  labels: {}\n", encoding="utf-8")
    with pytest.raises(ClusterStateError, match=f"^{path}: a Namespace without metadata.name$"):
        FileClusterState.from_file(str(path))
    path.write_text(_kubectl_list(NAMESPACE, NAD), encoding="utf-8")
    assert FileClusterState.from_file(str(path)).attachment("ml-training", "sriov-rdma") == NAD
    missing = tmp_path / "missing.yaml"
    with pytest.raises(ClusterStateError, match=f"^{missing}: cannot read: No such file or directory$"):
        FileClusterState.from_file(str(missing))
    with pytest.raises(ClusterStateError, match=f"^{tmp_path}: cannot read: Is a directory$"):
        FileClusterState.from_file(str(tmp_path))


@pytest.fixture
def ascii_locale():
    """A process whose locale is plain C without UTF-8 mode (a container with LC_ALL=C and an
    older Python, or a Latin-1 locale): what `open` decodes with when no encoding is named."""
    before = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        yield
    finally:
        locale.setlocale(locale.LC_CTYPE, before)


def test_a_file_is_read_as_utf8_whatever_the_locale(tmp_path, ascii_locale):
    path = tmp_path / "state.yaml"
    path.write_bytes(
        _kubectl_list({**NAMESPACE, "metadata": {"name": "équipe", "labels": {"owner": "zoë"}}}).encode("utf-8")
    )
    assert FileClusterState.from_file(str(path)).namespace("équipe").labels["owner"] == "zoë"


def test_state_built_from_objects_keys_nads_by_namespace_and_name():
    nads = [NAD, _without_namespace({**NAD, "metadata": {"name": "plain"}})]
    state = FileClusterState([namespace_from(NAMESPACE)], nads)
    assert state.namespace("ml-training").name == "ml-training"
    assert state.attachment("ml-training", "sriov-rdma") is NAD
    assert state.attachment("default", "plain") is nads[1]
    assert len(state.runtimes()) == 0 and len(state.claims()) == 0 and state.claims().lists_all()


# -- no state at all -----------------------------------------------------------------------------


def test_assumed_state_opts_every_namespace_in_and_knows_no_objects():
    state = AssumedClusterState()
    assert state.ready()
    assert state.namespace("anything") == Namespace(
        "anything", {"kubernetes.io/metadata.name": "anything", keys.NS_INJECTION: keys.NS_INJECTION_ENABLED}
    )
    assert state.attachments() is None and state.attachment("anything", "sriov-rdma") is None
    assert state.runtimes() is None and state.claims() is None
    chosen = AssumedClusterState({keys.NS_POLICY: "ib-shared"}).namespace("ib")
    assert chosen.labels == {
        "kubernetes.io/metadata.name": "ib",
        keys.NS_INJECTION: keys.NS_INJECTION_ENABLED,
        keys.NS_POLICY: "ib-shared",
    }
    # labels given win over the assumed opt-in
    off = AssumedClusterState({keys.NS_INJECTION: "disabled"}).namespace("x")
    assert off.labels[keys.NS_INJECTION] == "disabled"
