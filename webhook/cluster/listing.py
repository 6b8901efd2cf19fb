"""How the cache's lists are asked for and read: what of each object is kept, and from which of
the API server's stores the list is served.

**From the watch cache.** A list's first request carries `resourceVersion=0`, as client-go's
reflector makes its first list: the API server answers it from its watch cache, in memory,
where a list without it is a consistent read that pages through etcd and decodes every object
again on each page (a custom resource's pages cost the most). The figures, with 20,000
namespaces and 20,000 NetworkAttachmentDefinitions behind kube-apiserver 1.37, are in
benchmarks/README.md ("Cluster-state scale"). The cache does not page: it answers the whole
list whatever `limit` says, so a list's body is the whole list, which is why the kinds with many
objects are decoded as below and never built as JSON trees. A server without a watch cache for
the kind pages as asked; the continue requests then carry no resourceVersion (the token holds it).

**Only the fields kept.** Namespaces and NetworkAttachmentDefinitions are listed as metadata
(PartialObjectMetadataList, METADATA_LIST) and decoded by msgspec into typed dicts that name the
few fields a decision reads (a namespace's name and labels; a NAD's namespace, name and
resourceName annotation). Every other field (managedFields, a NAD's last-applied configuration)
is skipped by the decoder in C and never allocated. The decoded list is still held whole while
the cache is made from it, which is what a list from the cache costs in memory against pages:
at 20,000 namespaces + 20,000 NADs about 8 MB more PSS per worker and 22 MB more RSS in the
master (benchmarks/README.md, same section), against readiness that no longer depends on how fast
etcd pages.
"""

from __future__ import annotations

import sys
from typing import Any, Mapping, TypedDict

import msgspec

from webhook.core.keys import NAD_RESOURCE_NAME

# Lists of the kinds whose metadata is all a decision reads ask for metadata only, as client-go's
# metadata informers do: the server leaves out spec and status (a NAD's CNI config, a namespace's
# finalizers and phase), so it encodes less. A server that cannot answer so picks the plain JSON
# that follows, which the decoders below read the same way.
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, application/json"

_NadAnnotations = TypedDict("_NadAnnotations", {NAD_RESOURCE_NAME: Any}, total=False)


class _NamespaceMeta(TypedDict, total=False):
    name: Any
    labels: dict[str, Any] | None


class _NadMeta(TypedDict, total=False):
    name: Any
    namespace: Any
    annotations: _NadAnnotations | None


class _NamespaceItem(TypedDict):
    metadata: _NamespaceMeta


class _NadItem(TypedDict):
    metadata: _NadMeta


_ListMeta = TypedDict("_ListMeta", {"resourceVersion": Any, "continue": Any}, total=False)


class _NamespaceList(TypedDict, total=False):
    kind: Any
    metadata: _ListMeta | None
    items: list[_NamespaceItem] | None


class _NadList(TypedDict, total=False):
    kind: Any
    metadata: _ListMeta | None
    items: list[_NadItem] | None


# kind (plural) -> bytes -> the list as a dict holding only the fields above
METADATA_DECODERS = {
    "namespaces": msgspec.json.Decoder(_NamespaceList).decode,
    "network-attachment-definitions": msgspec.json.Decoder(_NadList).decode,
}


# Cached names are interned (sys.intern): a namespace's name is its cache key, its
# kubernetes.io/metadata.name label and the first half of its NADs' keys, and NADs across
# namespaces share a few names ("rdma-network"); one string object each instead of one per use.


def ns_key(obj: Mapping[str, Any]) -> str:
    return sys.intern(str(obj["metadata"]["name"]))


def nad_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj["metadata"]
    return sys.intern(str(meta.get("namespace") or "default")), sys.intern(str(meta["name"]))


_NAD_VALUES: dict[str | None, dict[str, Any]] = {}  # resourceName -> the one value object for it


def nad_value(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What the decision reads of a NetworkAttachmentDefinition: the resourceName annotation, nothing
    else (its CNI config, other annotations and managed fields are never read). NADs naming the
    same resource share one value object: a cluster has thousands of NADs and a handful of
    resource names, so a NAD costs its key in the cache and nothing more."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    found = annotations.get(NAD_RESOURCE_NAME) if isinstance(annotations, dict) else None
    resource = found if isinstance(found, str) else None
    value = _NAD_VALUES.get(resource)
    if value is None:
        value = {"metadata": {"annotations": {NAD_RESOURCE_NAME: resource} if resource is not None else {}}}
        if len(_NAD_VALUES) < 1024:  # a cluster with more distinct resource names gets a value each
            _NAD_VALUES[resource] = value
    return value
