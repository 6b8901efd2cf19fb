"""The Dynamic Resource Allocation part of `webhook.cluster.api.ApiClusterState`: DeviceClasses,
ResourceClaimTemplates and ResourceClaims listed and watched (resource.k8s.io/v1, served from
Kubernetes 1.34 on) once a policy is loaded (`uses_dra`), and looked up by the
decision as `webhook.core.claims.Claims`. Each object is kept as the few fields the decision reads
(`webhook.core.claims.device_class_value`, `template_value`, `claim_value`). A kind the server
does not serve (404) is looked for again every `backoff_max` seconds and holds up nothing.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Callable, Mapping

from webhook.core import claims as dra

log = logging.getLogger("rdma_webhook.cluster")

# Dynamic Resource Allocation (resource.k8s.io/v1, served from Kubernetes 1.34): which DeviceClass
# each claim template and claim requests, and which drivers each class selects
# (webhook.core.claims). Listed and watched once a policy is loaded (`uses_dra`).
DRA_GROUP, DRA_VERSION = "resource.k8s.io", "v1"
DC_PLURAL, RCT_PLURAL, RC_PLURAL = "deviceclasses", "resourceclaimtemplates", "resourceclaims"
_NO_REQUESTS: tuple[dra.ClaimRequest, ...] = ()
_POD_CLAIM = "resource.kubernetes.io/pod-claim-name"  # on the claims the control plane makes from templates


def _dc_key(obj: Mapping[str, Any]) -> str:
    return sys.intern(str(obj["metadata"]["name"]))


def _claim_value(obj: Mapping[str, Any]) -> tuple[dra.ClaimRequest, ...]:
    """A ResourceClaim's requests; none kept for the claims made from a pod's template (a pod
    names those by template, never by claim name), one per pod in a busy cluster."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    if isinstance(annotations, dict) and _POD_CLAIM in annotations:
        return _NO_REQUESTS
    return dra.claim_value(obj)


def _ns_name_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj["metadata"]
    return sys.intern(str(meta.get("namespace") or "default")), sys.intern(str(meta["name"]))


def dra_informers(owner: Any, custom: Any, informer: Callable[..., Any]) -> tuple[Any, Any, Any]:
    """The three informers (`webhook.cluster.informer.Informer`), not started."""
    return (
        informer(
            owner,
            DC_PLURAL,
            custom.list_cluster_custom_object,
            (DRA_GROUP, DRA_VERSION, DC_PLURAL),
            _dc_key,
            dra.device_class_value,
            optional=True,
        ),
        informer(
            owner,
            RCT_PLURAL,
            custom.list_cluster_custom_object,
            (DRA_GROUP, DRA_VERSION, RCT_PLURAL),
            _ns_name_key,
            dra.template_value,
            optional=True,
        ),
        informer(
            owner,
            RC_PLURAL,
            custom.list_cluster_custom_object,
            (DRA_GROUP, DRA_VERSION, RC_PLURAL),
            _ns_name_key,
            _claim_value,
            optional=True,
        ),
    )


class DraLookups:
    """Mixed into ApiClusterState, which sets `uses_dra`, `_dra_informers`, `_tracking_dra`,
    `_threads`, `_stopping` and `_record_ready`."""

    uses_dra: Callable[[], bool]
    _dra_informers: tuple[Any, Any, Any]
    _tracking_dra: bool
    _threads: list[Any]
    _stopping: Any
    _record_ready: Callable[[], None]

    def _uses_dra(self) -> bool:
        try:
            return bool(self.uses_dra())
        except Exception:
            log.exception("uses_dra() failed")
            return False

    def _maybe_track_dra(self) -> bool:
        if self._tracking_dra:
            return True
        if self._stopping.is_set() or not self._uses_dra():
            return False
        log.info("policies loaded: watching %s, %s and %s", DC_PLURAL, RCT_PLURAL, RC_PLURAL)
        self._tracking_dra = True
        self._record_ready()
        for informer in self._dra_informers:
            informer.start()
            self._threads.append(informer.thread)  # type: ignore[arg-type]
        return True

    def claims(self) -> "DraLookups | None":
        """Self (as `webhook.core.claims.Claims`) once the DRA kinds are listed (or not served)."""
        if not self._tracking_dra:
            return None
        for informer in self._dra_informers:
            if not informer.synced and not informer.absent:
                return None
        return self

    def device_class(self, name: str) -> dra.DeviceClassInfo | None:
        return self._dra_informers[0].items.get(name)

    def claim_template(self, namespace: str, name: str) -> tuple[dra.ClaimRequest, ...] | None:
        return self._dra_informers[1].items.get((namespace, name))

    def resource_claim(self, namespace: str, name: str) -> tuple[dra.ClaimRequest, ...] | None:
        return self._dra_informers[2].items.get((namespace, name))

    def lists_all(self) -> bool:
        return True  # listed and watched
