"""webhook.cluster.listing: the keys and values the cache keeps of a namespace and of a
NetworkAttachmentDefinition, and the decoders that read the API server's metadata-only lists.
List bodies are shaped as kube-apiserver answers `Accept: application/json;as=PartialObjectMetadataList;
g=meta.k8s.io;v=v1` (kubernetes/apimachinery, pkg/apis/meta/v1/types.go: PartialObjectMetadataList)."""

from __future__ import annotations

import sys

import orjson
import pytest

from webhook.core.keys import NAD_RESOURCE_NAME
from webhook.cluster import listing


def _fresh(text: str) -> str:
    return "".join(list(text))  # equal to text, another object


def test_a_namespace_is_cached_under_its_name_as_one_string_object():
    key = listing.ns_key({"metadata": {"name": _fresh("team-a"), "labels": {}}})
    assert key == "team-a" and key is sys.intern("team-a")


def test_a_nad_is_cached_under_namespace_and_name_and_a_nad_without_namespace_is_in_default():
    key = listing.nad_key({"metadata": {"name": _fresh("rdma-net"), "namespace": _fresh("team-a")}})
    assert key == ("team-a", "rdma-net")
    assert key[0] is sys.intern("team-a") and key[1] is sys.intern("rdma-net")
    assert listing.nad_key({"metadata": {"name": "rdma-net"}}) == ("default", "rdma-net")
    assert listing.nad_key({"metadata": {"name": "rdma-net", "namespace": None}}) == ("default", "rdma-net")


def test_a_nad_value_is_its_resource_name_alone_shared_by_nads_naming_the_same_resource(monkeypatch):
    monkeypatch.setattr(listing, "_NAD_VALUES", {})  # as in a fresh worker: no value made before

    def nad(name: str, annotations: object) -> dict:
        return {"metadata": {"name": name, "namespace": "team-a", "annotations": annotations}}

    a = listing.nad_value(nad("a", {NAD_RESOURCE_NAME: "openshift.io/mlxnics", "other": "x"}))
    b = listing.nad_value(nad("b", {NAD_RESOURCE_NAME: _fresh("openshift.io/mlxnics")}))
    assert a == {"metadata": {"annotations": {NAD_RESOURCE_NAME: "openshift.io/mlxnics"}}}
    assert a is b
    plain = listing.nad_value(nad("c", None))
    assert plain == {"metadata": {"annotations": {}}}
    # an annotation that is not a string, annotations that are not a map, no metadata: no resource
    for odd in (nad("d", {NAD_RESOURCE_NAME: 7}), nad("e", ["x"]), {"metadata": None}, {}):
        assert listing.nad_value(odd) is plain, odd


def test_the_shared_values_are_bounded(monkeypatch):
    """A cluster with more distinct resource names than the bound gets a value per NAD beyond it
    (equal, not shared); the table never grows past 1024."""
    monkeypatch.setattr(listing, "_NAD_VALUES", {})
    values = [
        listing.nad_value({"metadata": {"annotations": {NAD_RESOURCE_NAME: f"vendor.io/r{i}"}}}) for i in range(1030)
    ]
    assert len(listing._NAD_VALUES) == 1024
    assert listing.nad_value({"metadata": {"annotations": {NAD_RESOURCE_NAME: "vendor.io/r1023"}}}) is values[1023]
    again = listing.nad_value({"metadata": {"annotations": {NAD_RESOURCE_NAME: "vendor.io/r1024"}}})
    assert again == values[1024] and again is not values[1024]


def test_the_list_header_asks_for_metadata_with_plain_json_as_the_fallback():
    kinds = [part.strip() for part in listing.METADATA_LIST.split(",")]
    assert kinds == ["application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1", "application/json"]


def test_a_paged_namespace_list_keeps_the_version_and_the_continue_token():
    body = {
        "kind": "PartialObjectMetadataList",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": "81644", "continue": "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ", "remainingItemCount": 3},
        "items": [{"metadata": {"name": "kube-system", "labels": {"kubernetes.io/metadata.name": "kube-system"}}}],
    }
    doc = listing.METADATA_DECODERS["namespaces"](orjson.dumps(body))
    assert doc["metadata"] == {"resourceVersion": "81644", "continue": "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ"}
    assert doc["items"] == body["items"] and doc["kind"] == "PartialObjectMetadataList"


def test_a_nad_list_keeps_the_resource_name_annotation_and_no_other():
    body = {
        "kind": "PartialObjectMetadataList",
        "metadata": {"resourceVersion": "9", "continue": ""},
        "items": [
            {
                "metadata": {
                    "name": "sriov-rdma",
                    "namespace": "ml-training",
                    "labels": {"app": "x"},
                    "annotations": {NAD_RESOURCE_NAME: "openshift.io/mlxnics", "owner": "sriov-network-operator"},
                }
            }
        ],
    }
    doc = listing.METADATA_DECODERS["network-attachment-definitions"](orjson.dumps(body))
    assert doc["metadata"] == {"resourceVersion": "9", "continue": ""}
    assert doc["items"] == [
        {
            "metadata": {
                "name": "sriov-rdma",
                "namespace": "ml-training",
                "annotations": {NAD_RESOURCE_NAME: "openshift.io/mlxnics"},
            }
        }
    ]


@pytest.mark.parametrize("kind", sorted(listing.METADATA_DECODERS))
def test_an_empty_list_and_null_fields_decode(kind):
    doc = listing.METADATA_DECODERS[kind](b'{"kind":"PartialObjectMetadataList","metadata":null,"items":null}')
    assert doc == {"kind": "PartialObjectMetadataList", "metadata": None, "items": None}
