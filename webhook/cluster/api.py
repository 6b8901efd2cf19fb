"""Cluster state from the API server: list+watch of Namespaces, NetworkAttachmentDefinitions and
Kubeflow Trainer runtimes (TrainingRuntime, ClusterTrainingRuntime).

Why a cache: an admission webhook sits in the API server's request path with a hard timeout, and
every pod creation in the cluster goes through it. Asking the API server about the pod's
namespace (and the Multus network) on every admission would add a round trip to each pod create,
load the API server with reads proportional to pod churn, and turn an API server hiccup into
denied or timed-out pods. So each gunicorn worker keeps an in-memory copy, filled by one list (made
once by the master for all its workers, see `prime`) and kept current by a watch (an informer, as
client-go does it), and the admission path only reads dicts. The single exception: a namespace not in the cache (created a moment ago, its watch event
not here yet) is fetched once, with a 2-second timeout, and the answer cached; a miss is
remembered for a few seconds so a storm of pods in a missing namespace is not a storm of GETs.

Each resource kind is followed by a `webhook.cluster.informer.Informer` (list, then watch, as
client-go does it, in a daemon thread started by `start()`, never before the fork). The master
makes the first list itself (`prime()`, no thread, its connections closed before the fork), so
the workers start synced and go straight to the watch.

NetworkAttachmentDefinitions are watched only once `uses_networks()` says a loaded policy uses a
Multus network (re-checked every few seconds, so a policy reload that adds one starts the NAD
informer). Until they are tracked and listed, `attachments()` is None: the decision then takes
the device resource from the policy instead of denying for a network it cannot see.

Trainer runtimes are watched from the start, for `/validate` to check a TrainJob's pods (made
from the runtime it references). They never hold up readiness: until both are listed, or while
the Trainer CRDs are not installed (404, looked for again every `backoff_max` seconds, logged
once), `runtimes()` is None and a TrainJob gets a warning instead of a check.

Lists, the direct read and watch events are handled as plain JSON (`_preload_content=False`,
orjson; watches with `return_type="object"`): building the client's models and converting them
back to dicts costs about 25 times more than parsing (3000 namespaces: ~300 ms against ~12 ms)
for objects of which we keep the labels alone. Namespace and NAD lists ask for metadata only, and
every list starts from the API server's watch cache (`resourceVersion=0`): see
webhook.cluster.listing for both.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Mapping

import orjson
from kubernetes import client, config
from kubernetes.client import rest
from kubernetes.client.exceptions import ApiException

from webhook.telemetry import metrics
from webhook.cluster.state import namespace_from
from webhook.cluster.dra_watch import DraLookups, dra_informers
from webhook.cluster.informer import NOT_FOUND, Informer, describe
from webhook.cluster.listing import nad_key, nad_value, ns_key
from webhook.core.decision import Namespace

log = logging.getLogger("rdma_webhook.cluster")

NAD_GROUP, NAD_VERSION, NAD_PLURAL = "k8s.cni.cncf.io", "v1", "network-attachment-definitions"
TRAINER_GROUP, TRAINER_VERSION = "trainer.kubeflow.org", "v1alpha1"
TR_PLURAL, CTR_PLURAL = "trainingruntimes", "clustertrainingruntimes"


def _tr_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj["metadata"]
    return str(meta.get("namespace") or ""), str(meta["name"])


def _runtime_value(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What a TrainJob's check reads of a runtime: kind, name and spec (no status, no managed fields)."""
    meta = obj.get("metadata") or {}
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
        "spec": obj.get("spec"),
    }


def _without_retries(api_client: client.ApiClient) -> None:
    """urllib3's default retries GETs 3 times, read timeouts included: the 2 s direct read could
    take 8 s. The informer loops do their own retrying, with backoff. (A client configured with
    retries of its own keeps them.)"""
    if api_client.configuration.retries is None:
        api_client.configuration.retries = False
        api_client.rest_client = rest.RESTClientObject(api_client.configuration)


class ApiClusterState(DraLookups):
    """`ClusterState` backed by list+watch against the API server (see the module docstring)."""

    def __init__(
        self,
        api_client: client.ApiClient,
        uses_networks: Callable[[], bool] = lambda: False,
        *,
        watch_timeout: int = 300,
        backoff_min: float = 0.5,
        backoff_max: float = 30.0,
        networks_check_interval: float = 5.0,
        fetch_timeout: float = 2.0,
        miss_ttl: float = 5.0,
        connect_timeout: float = 5.0,
        watch_runtimes: bool = True,
        page_size: int = 500,
        stale_after: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        admission_policies: Callable[[], Any] | None = None,
        uses_dra: Callable[[], bool] = lambda: False,
        list_from_cache: bool = True,
    ):
        self.uses_networks = uses_networks
        self.uses_dra = uses_dra
        self.watch_runtimes = watch_runtimes
        self.watch_timeout, self.backoff_min, self.backoff_max = int(watch_timeout), backoff_min, backoff_max
        self.networks_check_interval, self.fetch_timeout, self.miss_ttl = (
            networks_check_interval,
            fetch_timeout,
            miss_ttl,
        )
        self.connect_timeout = connect_timeout
        self.page_size = page_size  # objects per list request (client-go's reflector: 500)
        self.list_from_cache = list_from_cache  # resourceVersion=0 on a list's first request (see relist)
        self.stale_after = stale_after  # seconds of failing lists/watches before `ready()` says no
        self.clock = clock  # what the stale rule reads the time from (tests pass one they move)
        _without_retries(api_client)
        self._make_informers(api_client)
        # The policy mode's read-only check of the generated ValidatingAdmissionPolicies, when
        # `admission_policies` gives the policies in force (webhook.cluster.admission_policies).
        self.admission_policy_check: Any = None
        if admission_policies is not None:
            from webhook.cluster.admission_policies import AdmissionPolicyCheck

            self.admission_policy_check = AdmissionPolicyCheck(self, api_client, admission_policies)
        self._tracking_nads = False
        self._tracking_dra = False
        self._started = False
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._misses: dict[str, float] = {}  # namespace name -> monotonic time the miss expires
        self._inflight: dict[str, list[Any]] = {}  # namespace name -> [Event, result] of a direct read

    def _make_informers(self, api_client: client.ApiClient) -> None:
        """One informer per kind followed, none started: namespaces and NADs (metadata only), the
        Trainer runtimes and the DRA kinds (optional CRDs)."""
        self._core = client.CoreV1Api(api_client)
        custom = client.CustomObjectsApi(api_client)
        self._ns = Informer(
            self, "namespaces", self._core.list_namespace, (), ns_key, namespace_from, metadata_only=True
        )
        self._nads = Informer(
            self,
            NAD_PLURAL,
            custom.list_cluster_custom_object,
            (NAD_GROUP, NAD_VERSION, NAD_PLURAL),
            nad_key,
            nad_value,
            metadata_only=True,
        )
        self._runtime_informers = (
            Informer(
                self,
                TR_PLURAL,
                custom.list_cluster_custom_object,
                (TRAINER_GROUP, TRAINER_VERSION, TR_PLURAL),
                _tr_key,
                _runtime_value,
                optional=True,
            ),
            Informer(
                self,
                CTR_PLURAL,
                custom.list_cluster_custom_object,
                (TRAINER_GROUP, TRAINER_VERSION, CTR_PLURAL),
                lambda obj: str(obj["metadata"]["name"]),
                _runtime_value,
                optional=True,
            ),
        )
        self._dra_informers = dra_informers(self, custom, Informer)

    @classmethod
    def from_environment(cls, uses_networks: Callable[[], bool], **kw: Any) -> "ApiClusterState":  # uses_dra= in kw
        """In-cluster service account, else the kubeconfig. Reads files only: no connection is
        made before `start()`."""
        configuration = client.Configuration()
        configuration.retries = False
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            config.load_kube_config(client_configuration=configuration)
        return cls(client.ApiClient(configuration), uses_networks, **kw)

    # --- lifecycle ------------------------------------------------------------------------------

    def prime(self, budget: float = 15.0) -> bool:
        """The first list of namespaces (and of NADs, when a policy uses a Multus network), made
        once in the gunicorn master before it forks its workers. Each worker is forked with the
        synced cache and its resourceVersion and starts by watching from there, as a list would
        have left it: the API server encodes, and the replica parses, one list instead of one per
        worker, and the cache's pages are shared by the forks until they change. (A worker forked
        later, to replace one that died, gets the cache as listed at start; its watch from that
        resourceVersion catches up, or the API server answers 410 and the worker lists anew.)

        Bounded by `budget` seconds, so a slow or unreachable API server cannot hold up the start
        past the startup probe: what is not listed by then is listed by each worker, as without
        priming. Its threads end and every connection is closed before it returns (neither may
        cross the fork). Returns whether everything needed for readiness was listed."""
        if self._started:
            return False
        deadline = (began := time.monotonic()) + budget
        informers = [self._ns, self._nads] if self._uses_networks() else [self._ns]
        if self._uses_dra():
            informers.extend(self._dra_informers)
        errors: list[str] = []

        def relist(informer: Informer) -> None:
            try:
                informer.relist(deadline)
            except ApiException as exc:
                if exc.status == NOT_FOUND and informer.optional:
                    informer.absent = True  # not served: each worker looks again
                else:
                    errors.append(f"{informer.kind}: {describe(exc)}")
            except Exception as exc:
                errors.append(f"{informer.kind}: {describe(exc)}")

        # The kinds are listed at once, each on its connection: while the API server encodes
        # one list's page, this process parses the other's.
        threads = [threading.Thread(target=relist, args=(i,), name=f"prime-{i.kind}") for i in informers]
        for thread in threads:
            thread.start()
        # Each request is bounded by the deadline and the connect timeout; one bound for all joins.
        give_up = deadline + self.connect_timeout + 5.0
        for thread in threads:
            thread.join(max(0.0, give_up - time.monotonic()))
        self._core.api_client.rest_client.pool_manager.clear()
        if any(thread.is_alive() for thread in threads):  # never seen: urllib3's timeouts bound them
            log.error("listing before the fork outlived its budget; forking anyway")
            return False
        if errors:
            log.warning("listing before the fork failed (%s); each worker lists what is missing", "; ".join(errors))
        log.info(
            "listed before the fork in %.3fs: %s",
            time.monotonic() - began,
            ", ".join(  # where a slow start went
                f"{i.kind} {len(i.items)} in {i.list_seconds:.3f}s ({i.pages} pages)"
                if i.synced
                else f"{i.kind} not listed"
                for i in informers
            ),
        )
        return not errors

    def start(self) -> None:
        """Start the watch threads (in each worker, after the fork). Once: `stop()` is final."""
        if self._started:
            return
        self._started = True
        self._record_ready()
        self._ns.start()
        self._threads.append(self._ns.thread)  # type: ignore[arg-type]
        for informer in self._runtime_informers if self.watch_runtimes else ():
            informer.start()
            self._threads.append(informer.thread)  # type: ignore[arg-type]
        if self.admission_policy_check is not None:
            self._threads.extend(self.admission_policy_check.start())
        tracking = self._maybe_track_networks()
        tracking = self._maybe_track_dra() and tracking
        if not tracking:
            checker = threading.Thread(target=self._check_networks, name="watch-policy-networks", daemon=True)
            checker.start()
            self._threads.append(checker)

    def stop(self, timeout: float = 2.0) -> None:
        """Make the threads exit; returns within about `timeout` seconds."""
        self._stopping.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            while thread.is_alive() and time.monotonic() < deadline:
                checked = self.admission_policy_check.informers if self.admission_policy_check is not None else ()
                for informer in (self._ns, self._nads, *self._runtime_informers, *self._dra_informers, *checked):
                    if informer.watch is not None:  # shuts an open watch's socket; repeated in case one was opening
                        informer.watch.stop()
                thread.join(0.05)
            if thread.is_alive():
                log.warning("%s did not stop within %.1fs", thread.name, timeout)
        self._threads = [t for t in self._threads if t.is_alive()]

    def _uses_networks(self) -> bool:
        try:
            return bool(self.uses_networks())
        except Exception:
            log.exception("uses_networks() failed")
            return False

    def _maybe_track_networks(self) -> bool:
        if self._tracking_nads:
            return True
        if self._stopping.is_set() or not self._uses_networks():
            return False
        log.info("a policy uses a Multus network: watching %s", NAD_PLURAL)
        self._tracking_nads = True
        self._record_ready()
        self._nads.start()
        self._threads.append(self._nads.thread)  # type: ignore[arg-type]
        return True

    def _check_networks(self) -> None:
        """Start the NAD and DRA informers once a (reloaded) policy needs them."""
        while not self._stopping.wait(self.networks_check_interval):
            tracking = self._maybe_track_networks()
            if self._maybe_track_dra() and tracking:
                return

    def _record_ready(self) -> None:
        if self._started:  # not in the master (`prime`): the gauge is the workers'
            metrics.CACHE_READY.set(1 if self.ready() else 0)

    # --- ClusterState -----------------------------------------------------------------------------

    def _needed(self) -> list[Informer]:
        """The informers readiness waits for (Trainer runtimes never hold it up; a DRA kind the
        server does not serve neither)."""
        needed = [self._ns, self._nads] if self._tracking_nads else [self._ns]
        if self._tracking_dra:
            needed.extend(i for i in self._dra_informers if not i.absent)
        return needed

    def ready(self) -> bool:
        now = self.clock()
        return all(i.synced and i.stale_for(now) <= self.stale_after for i in self._needed())

    def not_ready_reason(self) -> str | None:
        """Why `ready()` is False, for /readyz (None when ready)."""
        now = self.clock()
        for informer in self._needed():
            if not informer.synced:
                return f"cluster state not synced yet ({informer.kind})"
            stale = informer.stale_for(now)
            if stale > self.stale_after:
                return (
                    f"cluster state stale: {informer.kind} list/watch failing for {stale:.0f}s "
                    f"({informer.failures} attempts, last: {informer.last_error})"
                )
        return None

    def namespace(self, name: str) -> Namespace | None:
        ns = self._ns.items.get(name)
        if ns is not None:
            return ns
        return self._fetch(name)

    def attachments(self) -> "ApiClusterState | None":
        return self if self._tracking_nads and self._nads.synced else None

    def attachment(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self._nads.items.get((namespace, name))

    def runtimes(self) -> "ApiClusterState | None":
        """Self (as `webhook.kinds.workloads.Runtimes`) once both runtime kinds are listed, else None."""
        return self if self.watch_runtimes and all(i.synced for i in self._runtime_informers) else None

    def training_runtime(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._runtime_informers[0].items.get((namespace, name))

    def cluster_training_runtime(self, name: str) -> dict[str, Any] | None:
        return self._runtime_informers[1].items.get(name)

    # --- the one read on the admission path ---------------------------------------------------------

    def _fetch(self, name: str) -> Namespace | None:
        """Read a namespace the cache does not have, once: concurrent callers for the same name
        wait for the first one's answer, and a miss (or a failure) is remembered for `miss_ttl`."""
        now = time.monotonic()
        expiry = self._misses.get(name)
        if expiry is not None and expiry > now:
            return None
        with self._lock:
            pending = self._inflight.get(name)
            mine = pending is None
            if mine:
                pending = self._inflight[name] = [threading.Event(), None]
        if not mine:
            pending[0].wait(self.fetch_timeout + 0.5)
            return pending[1]
        try:
            pending[1] = self._read(name)
            return pending[1]
        finally:
            with self._lock:
                del self._inflight[name]
            pending[0].set()

    def _read(self, name: str) -> Namespace | None:
        removals = self._ns.removals
        try:
            resp = self._core.read_namespace(name, _preload_content=False, _request_timeout=self.fetch_timeout)
            try:
                obj = orjson.loads(resp.data)
            finally:
                resp.release_conn()
        except ApiException as exc:
            if exc.status != 404:
                log.warning("namespace %r: direct read failed (%s)", name, describe(exc))
            self._remember_miss(name)
            return None
        except Exception as exc:  # timeout, connection refused, bad JSON
            log.warning("namespace %r: direct read failed (%s)", name, describe(exc))
            self._remember_miss(name)
            return None
        ns = namespace_from(obj)
        if self._ns.removals == removals:  # no deletion or relist meanwhile that this read may predate
            self._ns.items[ns.name] = ns
        return ns

    def _remember_miss(self, name: str) -> None:
        now = time.monotonic()
        if len(self._misses) > 1000:
            self._misses = {k: v for k, v in self._misses.items() if v > now}
        self._misses[name] = now + self.miss_ttl
