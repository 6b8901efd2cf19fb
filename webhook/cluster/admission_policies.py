"""Whether the cluster's generated ValidatingAdmissionPolicies still match the policies in force.

In the policy mode (README, "Final-state check as a ValidatingAdmissionPolicy") the pods'
final-state check is run by the API server from objects generated at install time
(`webhook.policy.admission_policy`). A policy changed without regenerating them, an object
deleted or edited by hand, and the check no longer says what the webhook's policies say. The
webhook notices it without any write access to admission objects: a list+watch (read-only:
get, list, watch) of ValidatingAdmissionPolicies and their bindings that carry our label, into
the same kind of cache as namespaces (`webhook.cluster.informer.Informer`), compared every few
seconds with what the policies in force make. Nothing of this is on the admission path.

Reported as metrics, `rdma_webhook_admission_policy_in_sync` (1 or 0) and
`rdma_webhook_admission_policy_mismatches`, with a log line naming each difference when they
change, and listed on /readyz's JSON under "warnings". Not as readiness: a replica that is not
ready is taken out of the webhook Service, and with failurePolicy Fail every labelled pod of the
cluster would then be refused, for a drift that the mutating webhook itself does not suffer
from (it still mutates right; it is the API server's second opinion that is out of date). An
alert on the metric (deploy/monitoring, the chart's PrometheusRule) pages whoever can run the
generator again.
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any, Callable, Mapping

from kubernetes import client

from webhook.cluster.informer import Informer, Owner
from webhook.core.model import PolicySet
from webhook.policy.admission_policy import NAME_PREFIX, mismatches
from webhook.telemetry import metrics

log = logging.getLogger("rdma_webhook.admission_policies")

SELECTOR = "app.kubernetes.io/part-of=rdma-webhook"


def _key(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"]["name"])


def _value(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What the comparison reads: name, annotations and spec (no status, no managed fields)."""
    meta = obj.get("metadata") or {}
    return {
        "metadata": {"name": meta.get("name"), "annotations": meta.get("annotations") or {}},
        "spec": obj.get("spec") or {},
    }


class AdmissionPolicyCheck:
    """Two informers (policies, bindings) of `owner`'s kind and a thread that compares."""

    def __init__(
        self,
        owner: Owner,
        api_client: client.ApiClient,
        policies: Callable[[], PolicySet | None],
        interval: float = 5.0,
    ):
        api = client.AdmissionregistrationV1Api(api_client)
        self.policies = policies
        self.interval = interval
        self.owner = owner
        self.informers: tuple[Informer, Informer] = (
            Informer(
                owner,
                "validatingadmissionpolicies",
                functools.partial(api.list_validating_admission_policy, label_selector=SELECTOR),
                (),
                _key,
                _value,
            ),
            Informer(
                owner,
                "validatingadmissionpolicybindings",
                functools.partial(api.list_validating_admission_policy_binding, label_selector=SELECTOR),
                (),
                _key,
                _value,
            ),
        )
        self.problems: list[str] | None = None  # None until both kinds are listed and policies loaded
        self.thread: threading.Thread | None = None

    def start(self) -> list[threading.Thread]:
        threads = []
        for informer in self.informers:
            informer.start()
            threads.append(informer.thread)
        self.thread = threading.Thread(target=self._loop, name="check-admission-policies", daemon=True)
        self.thread.start()
        return [t for t in (*threads, self.thread) if t is not None]

    def _loop(self) -> None:
        while True:
            self.check()
            if self.owner._stopping.wait(self.interval):
                return

    def check(self) -> list[str] | None:
        """Compare now; sets the metrics and logs when the differences change."""
        policies = self.policies()
        vaps, bindings = self.informers
        if policies is None or not (vaps.synced and bindings.synced):
            return None
        ours = [v for k, v in vaps.items.items() if str(k).startswith(NAME_PREFIX)]
        found = mismatches(policies, ours, list(bindings.items.values()))
        if found != self.problems:
            if found:
                log.warning(
                    "the generated ValidatingAdmissionPolicies do not match the policies in force: %s", "; ".join(found)
                )
            elif self.problems:
                log.info("the generated ValidatingAdmissionPolicies match the policies in force again")
            else:
                log.info("the generated ValidatingAdmissionPolicies match the %d policies in force", len(policies))
        self.problems = found
        metrics.ADMISSION_POLICY_IN_SYNC.set(0 if found else 1)
        metrics.ADMISSION_POLICY_MISMATCHES.set(len(found))
        return found
