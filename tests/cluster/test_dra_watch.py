"""webhook.cluster.dra_watch: the three DRA informers (DeviceClasses, ResourceClaimTemplates,
ResourceClaims of resource.k8s.io/v1), what each keeps of an object, when they are started, and the
lookups the decision makes (`webhook.core.claims.Claims`). In process: the informers list from a
stand-in list call and are started by a stand-in; no server, no thread, no sleep.
Objects as the Kubernetes docs show them ("Allocate Devices to Workloads with DRA",
https://kubernetes.io/docs/tasks/configure-pod-container/assign-resources/allocate-devices-dra/),
and a claim the control plane made from a pod's template as kube-controller-manager's resourceclaim
controller annotates it (kubernetes/kubernetes, pkg/controller/resourceclaim/controller.go)."""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any


from tests.cluster.stand_ins import Owner, Resp
from webhook.cluster import dra_watch
from webhook.cluster.informer import Informer

DEVICE_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "mrdma.google.com", "resourceVersion": "5"},
    "spec": {"selectors": [{"cel": {"expression": "device.driver == 'dra.net'"}}]},
}
TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "all-mrdma", "namespace": "ml-training"},
    "spec": {"spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": "mrdma.google.com"}}]}}},
}
CLAIM = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "shared-nic", "namespace": "ml-training"},
    "spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": "mrdma.google.com"}}]}},
}
POD_CLAIM = {
    **CLAIM,
    "metadata": {
        "name": "trainer-0-nic-x7k2p",
        "namespace": "ml-training",
        "annotations": {"resource.kubernetes.io/pod-claim-name": "nic"},
        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "trainer-0", "controller": True}],
    },
}


class Custom:
    """CustomObjectsApi's list call: the listed objects by plural, and every call made."""

    def __init__(self, **objects: list[dict]):
        self.objects, self.calls = objects, []

    def list_cluster_custom_object(self, group: str, version: str, plural: str, **kwargs: Any) -> Resp:
        self.calls.append((group, version, plural))
        body = {"kind": "List", "metadata": {"resourceVersion": "10"}, "items": self.objects.get(plural, [])}
        return Resp(body)


def listed(**objects: list[dict]) -> tuple[tuple[Any, Any, Any], Custom]:
    custom = Custom(**objects)
    informers = dra_watch.dra_informers(Owner(), custom, Informer)
    for i in informers:
        i.relist()
    return informers, custom


def messages(caplog) -> list[str]:
    """The log lines as written, each whole (a mutant's "XX...XX" text contains the original)."""
    return [r.getMessage() for r in caplog.records]


def test_the_three_kinds_are_listed_from_resource_k8s_io_v1_as_optional_kinds():
    informers, custom = listed()
    assert [i.kind for i in informers] == ["deviceclasses", "resourceclaimtemplates", "resourceclaims"]
    assert custom.calls == [
        ("resource.k8s.io", "v1", "deviceclasses"),
        ("resource.k8s.io", "v1", "resourceclaimtemplates"),
        ("resource.k8s.io", "v1", "resourceclaims"),
    ]
    assert all(i.optional for i in informers)  # a cluster before 1.34 serves none of them


def test_each_object_is_kept_as_the_decision_reads_it():
    informers, _ = listed(
        deviceclasses=[DEVICE_CLASS],
        resourceclaimtemplates=[TEMPLATE, {**TEMPLATE, "metadata": {"name": "bare"}}],
        resourceclaims=[CLAIM, POD_CLAIM],
    )
    classes, templates, claims = informers
    info = classes.items["mrdma.google.com"]
    assert info.name == "mrdma.google.com" and "dra.net" in info.cel
    (request,) = templates.items[("ml-training", "all-mrdma")]
    assert request.device_class == "mrdma.google.com"
    assert ("default", "bare") in templates.items  # no namespace: the default one
    (request,) = claims.items[("ml-training", "shared-nic")]
    assert request.device_class == "mrdma.google.com"
    # a claim made from a pod's template is never looked up by name: nothing of it is kept
    assert claims.items[("ml-training", "trainer-0-nic-x7k2p")] == ()


def test_a_claim_with_other_annotations_keeps_its_requests():
    annotated = {**CLAIM, "metadata": {**CLAIM["metadata"], "annotations": {"owner": "team-a"}}}
    odd = {**CLAIM, "metadata": {**CLAIM["metadata"], "name": "odd", "annotations": ["not", "a", "map"]}}
    informers, _ = listed(resourceclaims=[annotated, odd])
    claims = informers[2].items
    assert len(claims[("ml-training", "shared-nic")]) == 1 and len(claims[("ml-training", "odd")]) == 1


def test_keys_are_one_string_object_each():
    def fresh(text: str) -> str:
        return "".join(list(text))

    dc = {**DEVICE_CLASS, "metadata": {"name": fresh("efa.networking.k8s.aws")}}
    tmpl = {**TEMPLATE, "metadata": {"name": fresh("efa-nic"), "namespace": fresh("team-b")}}
    informers, _ = listed(deviceclasses=[dc], resourceclaimtemplates=[tmpl])
    (dc_key,) = informers[0].items
    ((ns, name),) = informers[1].items
    assert dc_key is sys.intern("efa.networking.k8s.aws")
    assert ns is sys.intern("team-b") and name is sys.intern("efa-nic")


class State(dra_watch.DraLookups):
    """What ApiClusterState gives the mixin, with informers that list from `Custom` and whose
    start is recorded instead of starting a thread."""

    def __init__(self, uses_dra: Any, **objects: list[dict]) -> None:
        self.uses_dra = uses_dra
        self._stopping = threading.Event()
        self._threads: list[Any] = []
        self._tracking_dra = False
        self.recorded = 0
        self.started: list[str] = []
        self._dra_informers = dra_watch.dra_informers(Owner(), Custom(**objects), Informer)
        for i in self._dra_informers:
            i.start = lambda i=i: (self.started.append(i.kind), setattr(i, "thread", f"thread-{i.kind}"))

    def _record_ready(self) -> None:
        self.recorded += 1


def test_nothing_is_watched_until_a_policy_is_loaded_and_then_once(caplog):
    loaded = [False]
    state = State(lambda: loaded[0])
    assert not state._maybe_track_dra() and state.started == [] and state.claims() is None
    loaded[0] = True
    caplog.set_level(logging.INFO, "rdma_webhook.cluster")
    assert state._maybe_track_dra()
    assert state.started == ["deviceclasses", "resourceclaimtemplates", "resourceclaims"]
    assert state._threads == ["thread-deviceclasses", "thread-resourceclaimtemplates", "thread-resourceclaims"]
    assert state.recorded == 1
    assert messages(caplog) == ["policies loaded: watching deviceclasses, resourceclaimtemplates and resourceclaims"]
    assert state._maybe_track_dra() and len(state.started) == 3 and state.recorded == 1


def test_once_stopping_nothing_more_is_started():
    state = State(lambda: True)
    state._stopping.set()
    assert not state._maybe_track_dra() and state.started == [] and not state._tracking_dra


def test_a_failing_uses_dra_is_logged_and_taken_as_no(caplog):
    def broken() -> bool:
        raise RuntimeError("policy store not loaded")

    state = State(broken)
    caplog.set_level(logging.ERROR, "rdma_webhook.cluster")
    assert not state._maybe_track_dra() and state.started == []
    assert messages(caplog) == ["uses_dra() failed"] and "policy store not loaded" in caplog.text  # with the traceback
    assert State(lambda: 1)._uses_dra() is True  # any true answer counts


def test_claims_are_known_once_every_kind_is_listed_or_not_served():
    state = State(lambda: True, deviceclasses=[DEVICE_CLASS], resourceclaimtemplates=[TEMPLATE], resourceclaims=[CLAIM])
    state._maybe_track_dra()
    classes, templates, claims = state._dra_informers
    assert state.claims() is None  # tracked, nothing listed yet
    classes.relist()
    templates.relist()
    assert state.claims() is None
    claims.absent = True  # resourceclaims not served: holds nothing up
    assert state.claims() is state
    claims.absent = False
    claims.relist()
    found = state.claims()
    assert found is state and found.lists_all()
    assert found.device_class("mrdma.google.com").name == "mrdma.google.com"
    assert found.claim_template("ml-training", "all-mrdma")[0].device_class == "mrdma.google.com"
    assert found.resource_claim("ml-training", "shared-nic")[0].device_class == "mrdma.google.com"
    assert found.device_class("other") is None and found.claim_template("default", "all-mrdma") is None
    assert found.resource_claim("ml-training", "all-mrdma") is None
