"""webhook/serving/admissions.py: what each admission leaves besides its answer. The log line an
operator reads (one JSON line per admission on stdout: endpoint, outcome, uid, namespace, pod,
policy, the rules that denied it, why it was skipped, the error of a refused review) and the
metrics a scrape reads (admissions by endpoint, outcome and policy; responses by status; the
duration). Read here as the real writer writes them (`webhook.telemetry.logs._AdmissionWriter`
into a file) and from the real Prometheus counters, for the answers of realistic reviews."""

from __future__ import annotations

import json
import logging
import time

import pytest

import kube_objects as k
from conftest import CLUSTER_STATE, POLICIES
from webhook.cluster.state import FileClusterState
from webhook.policy.store import PolicyStore
from webhook.serving import admissions as door_module
from webhook.serving.admissions import MAX_BODY, Admissions
from webhook.telemetry import logs, metrics

STATE = FileClusterState.from_file(str(CLUSTER_STATE))
IB = "ib-training"  # opted in, rdma-webhook.io/policy: ib-shared (examples/cluster-state.yaml)
_STORE = PolicyStore(str(POLICIES))
_STORE.reload(force=True)


@pytest.fixture
def lines(tmp_path, monkeypatch):
    """The admission lines as the served process writes them on stdout (here into a file)."""
    path = tmp_path / "stdout"
    fh = open(path, "wb")
    monkeypatch.setattr(logs, "_writer", logs._AdmissionWriter(fh.fileno()))

    def read() -> list[dict]:
        return [json.loads(line) for line in path.read_bytes().splitlines()]

    yield read
    fh.close()


def door(cluster=STATE) -> Admissions:
    return Admissions(_STORE, cluster)


class Counts:
    """The admission metrics before an answer, to compare with after."""

    def __init__(self, endpoint: str, outcome: str, policy: str, status: str):
        self.keys = (endpoint, outcome, policy, status)
        self.before = self.now()

    def now(self) -> tuple[float, float, float, float]:
        endpoint, outcome, policy, status = self.keys
        duration = metrics.child(metrics.DURATION, endpoint)
        return (
            metrics.child(metrics.ADMISSIONS, endpoint, outcome, policy)._value.get(),
            metrics.child(metrics.RESPONSES, status)._value.get(),
            sum(b.get() for b in duration._buckets),
            duration._sum.get(),
        )

    def added(self) -> tuple[float, float, float, float]:
        return tuple(a - b for a, b in zip(self.now(), self.before, strict=True))  # type: ignore[return-value]


def one_line(read) -> dict:
    found = read()
    assert len(found) == 1, found
    line = found[0]
    assert (line["level"], line["logger"], line["msg"]) == ("info", "rdma_webhook.admission", "admission")
    assert isinstance(line["ms"], float) and line["ms"] >= 0
    return {key: value for key, value in line.items() if key not in ("time", "level", "logger", "msg")}


def test_a_mutated_pod_is_logged_with_its_policy_and_counted_once(lines):
    pod = k.pod([k.container("trainer", command=["torchrun", "--nproc_per_node=8", "train.py"])], namespace=IB)
    counts = Counts("mutate", "mutated", "ib-shared", "200")
    began = time.perf_counter()
    status, data = door().answer("mutate", k.body(k.admission_review(pod, uid="uid-mutated")))
    wall_ms = (time.perf_counter() - began) * 1000
    assert status == 200 and json.loads(data)["response"]["allowed"] is True
    line = one_line(lines)
    ms = line.pop("ms")
    assert line == {
        "endpoint": "mutate",
        "outcome": "mutated",
        "uid": "uid-mutated",
        "namespace": IB,
        "operation": "CREATE",
        "pod": "trainer-*",
        "policy": "ib-shared",
    }
    admitted, responses, observed, seconds = counts.added()
    assert (admitted, responses, observed) == (1, 1, 1)
    assert ms == round(seconds * 1000, 3) and 0 < ms <= wall_ms  # the observed duration, in ms to the µs


def test_a_denied_pod_names_the_rules_that_denied_it(lines):
    pod = k.pod([k.container("trainer", env=[{"name": "NCCL_IB_DISABLE", "value": "1"}])], namespace=IB)
    counts = Counts("mutate", "denied", "ib-shared", "200")
    status, data = door().answer("mutate", k.body(k.admission_review(pod, uid="uid-denied")))
    assert status == 200 and json.loads(data)["response"]["status"]["code"] == 403
    line = one_line(lines)
    del line["ms"]
    assert line == {
        "endpoint": "mutate",
        "outcome": "denied",
        "uid": "uid-denied",
        "namespace": IB,
        "operation": "CREATE",
        "pod": "trainer-*",
        "policy": "ib-shared",
        "reasons": ["env-fallback"],
    }
    assert counts.added()[:3] == (1, 1, 1)


def test_validate_is_logged_and_counted_under_its_own_endpoint(lines):
    """/validate judges the pod as it will run (the final state): the pod the mutating webhook
    would fix is denied here, with each missing part named."""
    pod = k.pod([k.container("trainer", command=["torchrun", "train.py"])], namespace=IB)
    counts = Counts("validate", "denied", "ib-shared", "200")
    mutate_counts = Counts("mutate", "denied", "ib-shared", "200")
    status, data = door().answer("validate", k.body(k.admission_review(pod, uid="uid-final")))
    assert status == 200 and json.loads(data)["response"]["allowed"] is False
    line = one_line(lines)
    assert (line["endpoint"], line["outcome"], line["uid"], line["policy"]) == (
        "validate",
        "denied",
        "uid-final",
        "ib-shared",
    )
    assert line["reasons"] == ["device-missing", "ipc-lock-missing", "enforced-env"]
    assert counts.added()[:3] == (1, 1, 1) and mutate_counts.added()[0] == 0
    assert line["ms"] == round(counts.added()[3] * 1000, 3)  # a slower decision: a 1.001 factor shows


def test_a_skipped_operation_says_why_and_counts_under_no_policy(lines):
    pod = k.pod([k.container("trainer", command=["torchrun", "train.py"])], namespace=IB)
    counts = Counts("mutate", "skipped", "", "200")
    status, data = door().answer("mutate", k.body(k.admission_review(pod, uid="uid-update", operation="UPDATE")))
    assert status == 200 and json.loads(data)["response"] == {"uid": "uid-update", "allowed": True}
    line = one_line(lines)
    del line["ms"]
    assert line == {
        "endpoint": "mutate",
        "outcome": "skipped",
        "uid": "uid-update",
        "namespace": IB,
        "operation": "UPDATE",
        "pod": "trainer-*",
        "policy": None,
        "why": "operation UPDATE: only CREATE is considered",
    }
    assert counts.added()[:3] == (1, 1, 1)


def test_an_object_that_is_not_a_pod_is_skipped_without_a_policy_or_an_error(lines):
    """A Deployment sent to /mutate (a webhook configuration that routes too much): allowed,
    logged as skipped with the object's name, no policy and no error."""
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": IB}}
    rv = k.admission_review(deployment, uid="uid-deploy", kind="Deployment", resource="deployments")
    counts = Counts("mutate", "skipped", "", "200")
    status, data = door().answer("mutate", k.body(rv))
    assert status == 200 and json.loads(data)["response"] == {"uid": "uid-deploy", "allowed": True}
    line = one_line(lines)
    del line["ms"]
    assert line == {
        "endpoint": "mutate",
        "outcome": "skipped",
        "uid": "uid-deploy",
        "namespace": IB,
        "operation": "CREATE",
        "pod": "web",
    }
    assert counts.added()[:3] == (1, 1, 1)


def test_a_review_without_a_uid_is_a_400_logged_with_its_error(lines):
    counts = Counts("validate", "error", "", "400")
    status, data = door().answer("validate", b'{"request": {}}')
    assert (status, json.loads(data)) == (400, {"error": "AdmissionReview request has no uid"})
    line = one_line(lines)
    del line["ms"]
    assert line == {"endpoint": "validate", "outcome": "error", "error": "AdmissionReview request has no uid"}
    assert counts.added()[:3] == (1, 1, 1)


def test_a_review_of_the_wrong_version_is_refused_in_its_answer_and_logged_as_an_error(lines):
    """The API server reads a refusal in the answer (HTTP 200, allowed false, status 400): the
    log line carries the same message."""
    body = b'{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"uid-old"}}'
    counts = Counts("mutate", "error", "", "200")
    status, data = door().answer("mutate", body)
    resp = json.loads(data)["response"]
    assert status == 200 and resp["uid"] == "uid-old" and resp["allowed"] is False
    message = resp["status"]["message"]
    assert message.startswith("rdma-webhook: expected apiVersion admission.k8s.io/v1 kind AdmissionReview")
    line = one_line(lines)
    del line["ms"]
    assert line == {"endpoint": "mutate", "outcome": "error", "error": message}
    assert counts.added()[:3] == (1, 1, 1)


def test_a_body_over_the_limit_is_counted_as_an_error_and_not_logged_as_an_admission(lines):
    counts = Counts("validate", "error", "", "413")
    status, _ = door().answer("validate", b" " * (MAX_BODY + 1))
    assert status == 413 and lines() == [] and counts.added()[:3] == (1, 1, 0)


def test_a_body_of_exactly_the_limit_is_read(lines):
    """MAX_BODY bytes are read and parsed (here: nothing but blanks, a 400 that says so)."""
    status, data = door().answer("mutate", b" " * MAX_BODY)
    assert (
        status == 400
        and "error" in json.loads(data)
        and json.loads(data)["error"] != (f"request body over {MAX_BODY} bytes")
    )


class _FailingCache:
    """A cluster cache whose namespace lookup fails (a bug or a broken watch): the decision
    raises inside `review`, with nothing mocked in the serving code."""

    def __init__(self, state):
        self.state = state

    def namespace(self, name):
        raise KeyError(name)

    def attachments(self):
        return self.state.attachments()

    def runtimes(self):
        return self.state.runtimes()

    def claims(self):
        return self.state.claims()


@pytest.mark.parametrize("endpoint", ["mutate", "validate"])
def test_an_internal_error_is_a_deny_that_says_so_logged_with_its_traceback(endpoint, lines, caplog):
    pod = k.pod([k.container("trainer", command=["torchrun", "train.py"])], namespace=IB)
    counts = Counts(endpoint, "error", "", "200")
    with caplog.at_level(logging.ERROR, logger="rdma_webhook.admission"):
        status, data = door(_FailingCache(STATE)).answer(endpoint, k.body(k.admission_review(pod, uid="uid-bug")))
    message = "rdma-webhook: internal error while deciding (KeyError); the pod was not admitted"
    assert status == 200 and json.loads(data)["response"] == {
        "uid": "uid-bug",
        "allowed": False,
        "status": {"code": 400, "reason": "BadRequest", "message": message},
    }
    [record] = [r for r in caplog.records if r.name == "rdma_webhook.admission" and r.levelno == logging.ERROR]
    assert record.getMessage() == "internal error while deciding" and record.exc_info[0] is KeyError
    line = one_line(lines)
    del line["ms"]
    assert line == {"endpoint": endpoint, "outcome": "error", "error": message}
    assert counts.added()[:3] == (1, 1, 1)


def test_the_namespace_decides_through_the_cluster_state(lines):
    """The pod is judged in the namespace the cluster state knows: the same pod in a namespace
    the state does not know is not injected."""
    pod = k.pod([k.container("trainer", command=["torchrun", "train.py"])], namespace="nowhere")
    status, data = door().answer("mutate", k.body(k.admission_review(pod, uid="uid-nowhere")))
    resp = json.loads(data)["response"]
    assert status == 200 and "patch" not in resp
    assert one_line(lines)["outcome"] != "mutated"


def test_claims_of_a_cluster_without_dra_lookups_is_none():
    class NoClaims:
        pass

    assert door_module.claims_of(NoClaims()) is None
    assert door_module.claims_of(STATE) is STATE.claims()


@pytest.mark.parametrize("endpoint", ["mutate", "validate"])
def test_the_clusters_dra_objects_reach_the_decision(endpoint):
    """A GPU Job's pod whose only claim names a ResourceClaimTemplate the cluster lacks
    (tests/manifests-nics/dra-unknown-template.yaml, a typo of DRANET's rdma-net-template) under
    the DRA-only roce-dranet: denied because the cluster, whose DRA objects the webhook has, does
    not have it (not because none were given)."""
    import nic_corpus as nc

    state = FileClusterState.from_text(nc.state_text("roce-dranet"))
    store = PolicyStore(str(nc.ROOT / "policies"))
    store.reload(force=True)
    [(_, pod)] = nc.controller_pods(nc.documents(nc.NICS / "dra-unknown-template.yaml")[0])
    status, data = Admissions(store, state).answer(endpoint, k.body(k.admission_review(pod, uid="uid-dra")))
    resp = json.loads(data)["response"]
    assert status == 200 and resp["allowed"] is False and resp["status"]["code"] == 403
    assert (
        "the pod claims 'rdma' (ResourceClaimTemplate ml-training/rdma-net-templat), not known here "
        "(the cluster does not have it)" in resp["status"]["message"]
    )


def test_a_trainjob_is_judged_with_the_clusters_training_runtime(lines):
    """/validate of a Kubeflow TrainJob (tests/manifests/denied/trainjob-env.yaml) that turns IB
    off through trainer.env on the ClusterTrainingRuntime the cluster state holds: the runtime is
    looked up, its node template judged, denied naming it; and logged as a denial."""
    import yaml

    from conftest import ROOT

    state = FileClusterState.from_file(str(ROOT / "tests" / "manifests" / "cluster-state.yaml"))
    docs = yaml.safe_load_all((ROOT / "tests" / "manifests" / "denied" / "trainjob-env.yaml").read_text())
    [job] = [d for d in docs if d["kind"] == "TrainJob"]
    rv = k.admission_review(job, uid="uid-trainjob", kind="TrainJob", resource="trainjobs")
    rv["request"]["kind"]["group"] = rv["request"]["resource"]["group"] = "trainer.kubeflow.org"
    status, data = door(state).answer("validate", k.body(rv))
    resp = json.loads(data)["response"]
    assert status == 200 and resp["allowed"] is False
    assert resp["status"]["message"].startswith(
        "rdma-webhook: pods of TrainJob qwen-sft would be denied or fall back to TCP: "
        "ClusterTrainingRuntime/torch-distributed replicatedJobs[node], container 'node': NCCL_IB_DISABLE='1'"
    )
    line = one_line(lines)
    assert (line["outcome"], line["pod"], line["reasons"]) == ("denied", "qwen-sft", ["env-fallback"])


@pytest.mark.parametrize("endpoint", ["mutate", "validate"])
def test_the_clusters_network_attachments_reach_the_decision(endpoint):
    """A pod in ai-training (sriov-roce) that lists a Multus network the cluster state has no
    NetworkAttachmentDefinition for is warned that Multus would fail its sandbox; the one the state
    has (rdma-network) is not."""

    def warnings_of(network: str) -> list[str]:
        pod = k.pod(
            [k.container("trainer", command=["torchrun", "train.py"])],
            namespace="ai-training",
            annotations={"k8s.v1.cni.cncf.io/networks": network},
        )
        _, data = door().answer(endpoint, k.body(k.admission_review(pod, uid="uid-nad")))
        return json.loads(data)["response"].get("warnings", [])

    assert any(
        "the pod lists the Multus network ai-training/missing-net (k8s.v1.cni.cncf.io/networks), which has "
        "no NetworkAttachmentDefinition" in w
        for w in warnings_of("missing-net")
    )
    assert not any("NetworkAttachmentDefinition" in w for w in warnings_of("rdma-network"))
