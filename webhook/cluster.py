"""Cluster state: the namespaces and NetworkAttachmentDefinitions a decision looks at.

One small interface, `ClusterState`, with in-memory lookups only: the admission path never waits
on the network. Two sources implement it: `FileClusterState` (a YAML file, as
`kubectl get ns,network-attachment-definitions -A -o yaml` prints it; used by `review` and by
`serve --cluster-state`) and `webhook.cluster_api.ApiClusterState` (list+watch against the API
server). `AssumedClusterState` stands in when `review` runs with no state at all.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Protocol

import yaml

from webhook import keys
from webhook.decision import Namespace

NAD_KIND = "NetworkAttachmentDefinition"


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


def _objects(doc: Any) -> Iterable[Mapping[str, Any]]:
    if doc is None:
        return
    if not isinstance(doc, dict):
        raise ClusterStateError(f"expected Kubernetes objects, found a {type(doc).__name__}")
    if doc.get("kind") == "List" or (isinstance(doc.get("kind"), str) and doc["kind"].endswith("List") and "items" in doc):
        for item in doc.get("items") or ():
            yield from _objects(item)
        return
    yield doc


def namespace_from(obj: Mapping[str, Any]) -> Namespace:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    # The API server labels every namespace with its own name; files written by hand may not.
    return Namespace(str(meta.get("name")), {"kubernetes.io/metadata.name": str(meta.get("name")), **labels})


class FileClusterState:
    """Namespaces and NetworkAttachmentDefinitions read once from a YAML file."""

    def __init__(self, namespaces: Iterable[Namespace], attachments: Iterable[Mapping[str, Any]]):
        self._namespaces = {ns.name: ns for ns in namespaces}
        self._nads = {}
        for nad in attachments:
            meta = nad.get("metadata") or {}
            self._nads[(str(meta.get("namespace") or "default"), str(meta.get("name")))] = nad

    @classmethod
    def from_text(cls, text: str, source: str = "cluster state") -> "FileClusterState":
        namespaces: list[Namespace] = []
        nads: list[Mapping[str, Any]] = []
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
        except ClusterStateError as exc:
            raise ClusterStateError(f"{source}: {exc}") from None
        return cls(namespaces, nads)

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
