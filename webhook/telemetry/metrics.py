"""Prometheus metrics. Under the multi-process server (PROMETHEUS_MULTIPROC_DIR set before this
module is imported) every worker writes its own files and `/metrics` aggregates them."""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

MULTIPROCESS = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))

ADMISSIONS = Counter(
    "rdma_webhook_admissions", "Admission answers by endpoint, outcome and policy.", ["endpoint", "outcome", "policy"]
)
DURATION = Histogram(
    "rdma_webhook_admission_duration_seconds",
    "Time to answer one admission request.",
    ["endpoint"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 8, 10),
)
RESPONSES = Counter("rdma_webhook_http_responses", "HTTP responses by status code.", ["code"])
RELOADS = Counter("rdma_webhook_policy_reloads", "Policy reload attempts by result.", ["result"])
POLICIES = Gauge("rdma_webhook_policies_loaded", "Policies in force.", multiprocess_mode="livemin")
RELOAD_OK = Gauge(
    "rdma_webhook_policy_last_reload_success",
    "1 if the last policy reload succeeded, else 0.",
    multiprocess_mode="livemin",
)
CERT_EXPIRY = Gauge(
    "rdma_webhook_certificate_expiry_timestamp_seconds",
    "Unix time the serving certificate expires.",
    multiprocess_mode="livemin",
)
CACHE_READY = Gauge(
    "rdma_webhook_cluster_cache_ready", "1 once the cluster state cache is ready.", multiprocess_mode="livemin"
)
# The policy mode's run-time check (webhook.cluster.admission_policies): whether the generated
# ValidatingAdmissionPolicies the cluster holds match the policies in force. Meaningful only
# with `serve --check-admission-policy`. `livemostrecent`: the value a worker's check set last
# (each worker checks on its own, every few seconds); the gunicorn master, which imports this
# module and so holds a 0 it never sets, does not pull a `livemin` down to 0.
ADMISSION_POLICY_IN_SYNC = Gauge(
    "rdma_webhook_admission_policy_in_sync",
    "1 if the cluster's generated ValidatingAdmissionPolicies match the policies in force, else 0.",
    multiprocess_mode="livemostrecent",
)
ADMISSION_POLICY_MISMATCHES = Gauge(
    "rdma_webhook_admission_policy_mismatches",
    "Differences between the generated ValidatingAdmissionPolicies and the policies in force.",
    multiprocess_mode="livemostrecent",
)
EXPORTED_METRIC_NAMES = frozenset(
    {
        "rdma_webhook_admissions_total",
        "rdma_webhook_admission_duration_seconds_bucket",
        "rdma_webhook_admission_duration_seconds_sum",
        "rdma_webhook_admission_duration_seconds_count",
        "rdma_webhook_http_responses_total",
        "rdma_webhook_policy_reloads_total",
        "rdma_webhook_policies_loaded",
        "rdma_webhook_policy_last_reload_success",
        "rdma_webhook_certificate_expiry_timestamp_seconds",
        "rdma_webhook_cluster_cache_ready",
        "rdma_webhook_admission_policy_in_sync",
        "rdma_webhook_admission_policy_mismatches",
    }
)


_children: dict[tuple[object, ...], object] = {}


def child(metric, *labels: str):
    """`metric.labels(*labels)`, remembered: `labels()` checks and locks on every call, and the
    label sets here are few (endpoints, outcomes, policies, status codes)."""
    key = (metric, *labels)
    found = _children.get(key)
    if found is None:
        found = _children[key] = metric.labels(*labels)
    return found


def exposition() -> tuple[bytes, str]:
    """The metrics page: aggregated over workers in multi-process mode."""
    if MULTIPROCESS:
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
