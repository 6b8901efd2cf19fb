"""Cluster state: the namespaces, NetworkAttachmentDefinitions and Kubeflow Trainer runtimes
(TrainingRuntime, ClusterTrainingRuntime: what a TrainJob's pods are made of) a decision looks at.

One small interface, `ClusterState`, with in-memory lookups only: the admission path never waits
on the network. Two sources implement it: `FileClusterState` (a YAML file, as
`kubectl get ns,network-attachment-definitions -A -o yaml` prints it; used by `review` and by
`serve --cluster-state`) and `webhook.cluster.api.ApiClusterState` (list+watch against the API
server). `AssumedClusterState` stands in when `review` runs with no state at all.
"""

from __future__ import annotations

import sys

from typing import Any, Iterable, Mapping, Protocol

import yaml

from webhook.core import claims as dra
from webhook.core import keys
from webhook.core.decision import Namespace

NAD_KIND = "NetworkAttachmentDefinition"
TRAINER_GROUP = "trainer.kubeflow.org"
RUNTIME_KINDS = ("TrainingRuntime", "ClusterTrainingRuntime")


def is_runtime(obj: Any) -> bool:
    """A Kubeflow Trainer TrainingRuntime or ClusterTrainingRuntime."""
    return (
        isinstance(obj, dict)
        and obj.get("kind") in RUNTIME_KINDS
        and isinstance(obj.get("apiVersion"), str)
        and obj["apiVersion"].startswith(TRAINER_GROUP + "/")
    )


class RuntimeStore:
    """Trainer runtimes by (namespace, name) and by name: `webhook.kinds.workloads.Runtimes`."""

    def __init__(self, objects: Iterable[Mapping[str, Any]] = (), default_namespace: str = "default"):
        self.namespaced: dict[tuple[str, str], dict[str, Any]] = {}
        self.cluster: dict[str, dict[str, Any]] = {}
        for obj in objects:
            self.add(obj, default_namespace)

    def add(self, obj: Mapping[str, Any], default_namespace: str = "default") -> None:
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        name = str(meta.get("name") or "")
        if obj.get("kind") == "ClusterTrainingRuntime":
            self.cluster[name] = dict(obj)
        else:
            self.namespaced[(str(meta.get("namespace") or default_namespace), name)] = dict(obj)

    def update(self, other: "RuntimeStore") -> None:
        self.namespaced.update(other.namespaced)
        self.cluster.update(other.cluster)

    def __len__(self) -> int:
        return len(self.namespaced) + len(self.cluster)

    def training_runtime(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.namespaced.get((namespace, name))

    def cluster_training_runtime(self, name: str) -> dict[str, Any] | None:
        return self.cluster.get(name)


DRA_GROUP = "resource.k8s.io"
DRA_KINDS = ("DeviceClass", "ResourceClaimTemplate", "ResourceClaim")


def is_dra(obj: Any) -> bool:
    """A resource.k8s.io DeviceClass, ResourceClaimTemplate or ResourceClaim."""
    return (
        isinstance(obj, dict)
        and obj.get("kind") in DRA_KINDS
        and isinstance(obj.get("apiVersion"), str)
        and obj["apiVersion"].startswith(DRA_GROUP + "/")
    )


class ClaimStore:
    """DeviceClasses by name, ResourceClaimTemplates and ResourceClaims by (namespace, name), as
    the decision reads them (`webhook.core.claims.Claims`): from a file or `review`'s input."""

    def __init__(
        self, objects: Iterable[Mapping[str, Any]] = (), default_namespace: str = "default", complete: bool = True
    ):
        self.complete = complete  # all the cluster's (a file, a cluster): one not here does not exist
        self.classes: dict[str, dra.DeviceClassInfo] = {}
        self.templates: dict[tuple[str, str], tuple[dra.ClaimRequest, ...]] = {}
        self.claims: dict[tuple[str, str], tuple[dra.ClaimRequest, ...]] = {}
        for obj in objects:
            self.add(obj, default_namespace)

    def add(self, obj: Mapping[str, Any], default_namespace: str = "default") -> None:
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        name = str(meta.get("name") or "")
        key = (str(meta.get("namespace") or default_namespace), name)
        kind = obj.get("kind")
        if kind == "DeviceClass":
            self.classes[name] = dra.device_class_value(obj)
        elif kind == "ResourceClaimTemplate":
            self.templates[key] = dra.template_value(obj)
        elif kind == "ResourceClaim":
            self.claims[key] = dra.claim_value(obj)

    def update(self, other: "ClaimStore") -> None:
        self.classes.update(other.classes)
        self.templates.update(other.templates)
        self.claims.update(other.claims)

    def __len__(self) -> int:
        return len(self.classes) + len(self.templates) + len(self.claims)

    def device_class(self, name: str) -> dra.DeviceClassInfo | None:
        return self.classes.get(name)

    def claim_template(self, namespace: str, name: str) -> tuple[dra.ClaimRequest, ...] | None:
        return self.templates.get((namespace, name))

    def resource_claim(self, namespace: str, name: str) -> tuple[dra.ClaimRequest, ...] | None:
        return self.claims.get((namespace, name))

    def lists_all(self) -> bool:
        return self.complete


class ClusterStateError(Exception):
    pass


class ClusterState(Protocol):
    def ready(self) -> bool:
        """Whether the state is loaded well enough to decide on."""

    def namespace(self, name: str) -> Namespace | None:
        """The namespace's labels, None when it does not exist (as far as the state knows)."""

    def attachments(self) -> "ClusterState | None":
        """Self when NetworkAttachmentDefinitions are known, None when they are not tracked."""

    def attachment(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The NetworkAttachmentDefinition, None when it does not exist."""

    def runtimes(self) -> Any:
        """The Trainer runtimes (`webhook.kinds.workloads.Runtimes`), None when they are not known."""

    def claims(self) -> Any:
        """The DRA DeviceClasses, templates and claims (`webhook.core.claims.Claims`), None when not known."""


def _objects(doc: Any) -> Iterable[Mapping[str, Any]]:
    if doc is None:
        return
    if not isinstance(doc, dict):
        raise ClusterStateError(f"expected Kubernetes objects, found a {type(doc).__name__}")
    if doc.get("kind") == "List" or (
        isinstance(doc.get("kind"), str) and doc["kind"].endswith("List") and "items" in doc
    ):
        for item in doc.get("items") or ():
            yield from _objects(item)
        return
    yield doc


def namespace_from(obj: Mapping[str, Any]) -> Namespace:
    """A namespace as decisions read it: name and labels. The name and the label values are
    interned: a cache of thousands of namespaces repeats the same few values ("enabled", a team,
    a policy name) and each name as key and label, one string object each instead of one per use."""
    meta = obj.get("metadata") or {}
    name = sys.intern(str(meta.get("name")))
    labels = {k: sys.intern(v) if isinstance(v, str) else v for k, v in (meta.get("labels") or {}).items()}
    # The API server labels every namespace with its own name; files written by hand may not.
    return Namespace(name, {"kubernetes.io/metadata.name": name, **labels})


class FileClusterState:
    """Namespaces, NetworkAttachmentDefinitions and Trainer runtimes read once from a YAML file."""

    def __init__(
        self,
        namespaces: Iterable[Namespace],
        attachments: Iterable[Mapping[str, Any]],
        runtimes: Iterable[Mapping[str, Any]] = (),
        dra_objects: Iterable[Mapping[str, Any]] = (),
    ):
        self._runtimes = RuntimeStore(runtimes)
        self._claims = ClaimStore(dra_objects)
        self._namespaces = {ns.name: ns for ns in namespaces}
        self._nads = {}
        for nad in attachments:
            meta = nad.get("metadata") or {}
            self._nads[(str(meta.get("namespace") or "default"), str(meta.get("name")))] = nad

    @classmethod
    def from_text(cls, text: str, source: str = "cluster state") -> "FileClusterState":
        namespaces: list[Namespace] = []
        nads: list[Mapping[str, Any]] = []
        runtimes: list[Mapping[str, Any]] = []
        dra_objects: list[Mapping[str, Any]] = []
        try:
            docs = list(yaml.safe_load_all(text))
        except yaml.YAMLError as exc:
            raise ClusterStateError(f"{source}: not valid YAML: {exc}") from None
        try:
            for doc in docs:
                for obj in _objects(doc):
                    kind = obj.get("kind")
                    if not isinstance(obj.get("metadata"), dict) or not obj["metadata"].get("name"):
                        raise ClusterStateError(f"a {kind} without metadata.name")
                    if kind == "Namespace":
                        namespaces.append(namespace_from(obj))
                    elif kind == NAD_KIND:
                        nads.append(obj)
                    elif is_runtime(obj):
                        runtimes.append(obj)
                    elif is_dra(obj):
                        dra_objects.append(obj)
        except ClusterStateError as exc:
            raise ClusterStateError(f"{source}: {exc}") from None
        return cls(namespaces, nads, runtimes, dra_objects)

    @classmethod
    def from_file(cls, path: str) -> "FileClusterState":
        try:
            with open(path, encoding="utf-8") as fh:
                return cls.from_text(fh.read(), path)
        except OSError as exc:
            raise ClusterStateError(f"{path}: cannot read: {exc.strerror or exc}") from None

    def ready(self) -> bool:
        return True

    def namespace(self, name: str) -> Namespace | None:
        return self._namespaces.get(name)

    def attachments(self) -> "FileClusterState":
        return self

    def attachment(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self._nads.get((namespace, name))

    def runtimes(self) -> RuntimeStore:
        return self._runtimes

    def claims(self) -> ClaimStore:
        """The DRA objects of the file, all the cluster has: a template the file does not list
        does not exist, whether or not it lists others."""
        return self._claims


class AssumedClusterState:
    """No cluster state: every namespace is taken as opted in (labels as given), attachments as
    unknown. For `rdma-webhook review` on manifests alone."""

    def __init__(self, extra_labels: Mapping[str, str] | None = None):
        self._labels = {keys.NS_INJECTION: keys.NS_INJECTION_ENABLED, **(extra_labels or {})}

    def ready(self) -> bool:
        return True

    def namespace(self, name: str) -> Namespace:
        return Namespace(name, {"kubernetes.io/metadata.name": name, **self._labels})

    def attachments(self) -> None:
        return None

    def attachment(self, namespace: str, name: str) -> None:
        return None

    def runtimes(self) -> None:
        return None

    def claims(self) -> None:
        return None
