"""webhook.cluster.admission_policies: the read-only check that the cluster's generated
ValidatingAdmissionPolicies and bindings still match the policies in force. In process: the two
informers list through a client that answers without a server (what they ask for is recorded),
the loop waits on a stop event the test sets; objects are those `rdma-webhook admission-policy`
generates (webhook.policy.admission_policy), as the API server returns them with its defaults."""

from __future__ import annotations

import copy
import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.stand_ins import Answering, Owner
from webhook.cluster import admission_policies as apc
from webhook.policy import admission_policy as ap
from webhook.policy.load import load_texts
from webhook.telemetry import metrics

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def erdma():
    policies, errors = load_texts([("erdma.yaml", (ROOT / "policies" / "erdma.yaml").read_text())])
    assert policies is not None, errors
    return policies


def served(obj: dict) -> dict:
    """An object as the API server returns it: uid, managed fields, a defaulted field, status."""
    out = copy.deepcopy(obj)
    out["metadata"].update({"uid": "0b6c", "resourceVersion": "412", "managedFields": [{"manager": "kubectl"}]})
    if out["kind"] == ap.POLICY_KIND:
        out["spec"]["matchConstraints"]["matchPolicy"] = "Equivalent"
        out["status"] = {"observedGeneration": 1, "typeChecking": {}}
    return out


VAP_PATH = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
BINDING_PATH = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"


def check_of(
    erdma, vaps: list[dict], bindings: list[dict], policies: Any = None
) -> tuple[apc.AdmissionPolicyCheck, Answering]:
    api = Answering({VAP_PATH: vaps, BINDING_PATH: bindings})
    check = apc.AdmissionPolicyCheck(Owner(), api, (lambda: erdma) if policies is None else policies)
    return check, api


def generated(erdma) -> tuple[list[dict], list[dict]]:
    docs = ap.objects(erdma)
    return [served(d) for d in docs if d["kind"] == ap.POLICY_KIND], [
        served(d) for d in docs if d["kind"] == ap.BINDING_KIND
    ]


def messages(caplog) -> list[str]:
    """The log lines as written, each whole (a mutant's "XX...XX" text contains the original)."""
    return [r.getMessage() for r in caplog.records]


def test_the_lists_ask_for_our_labelled_objects_only(erdma):
    vaps, bindings = generated(erdma)
    check, api = check_of(erdma, vaps, bindings)
    for i in check.informers:
        i.relist()
    assert [(m, p, q.get("labelSelector")) for m, p, q in api.asked] == [
        ("GET", VAP_PATH, "app.kubernetes.io/part-of=rdma-webhook"),
        ("GET", BINDING_PATH, "app.kubernetes.io/part-of=rdma-webhook"),
    ]
    assert [i.kind for i in check.informers] == ["validatingadmissionpolicies", "validatingadmissionpolicybindings"]
    # the generated objects carry the label the lists select on
    assert all(o["metadata"]["labels"]["app.kubernetes.io/part-of"] == "rdma-webhook" for o in vaps + bindings)


def test_each_object_is_kept_as_name_annotations_and_spec(erdma):
    vaps, bindings = generated(erdma)
    check, _ = check_of(erdma, vaps, bindings)
    for i in check.informers:
        i.relist()
    name = vaps[0]["metadata"]["name"]
    assert check.informers[0].items[name] == {
        "metadata": {"name": name, "annotations": vaps[0]["metadata"]["annotations"]},
        "spec": vaps[0]["spec"],
    }
    assert apc._value({"metadata": {"name": "bare"}}) == {"metadata": {"name": "bare", "annotations": {}}, "spec": {}}
    assert apc._value({}) == {"metadata": {"name": None, "annotations": {}}, "spec": {}}


def test_nothing_is_compared_until_both_kinds_are_listed_and_policies_loaded(erdma):
    vaps, bindings = generated(erdma)
    check, _ = check_of(erdma, vaps, bindings)
    assert check.check() is None
    check.informers[0].relist()
    assert check.check() is None  # bindings not listed yet
    check.informers[1].relist()
    unloaded, _ = check_of(erdma, vaps, bindings, policies=lambda: None)
    for i in unloaded.informers:
        i.relist()
    assert unloaded.check() is None and unloaded.problems is None
    assert check.check() == []


def test_a_drift_is_reported_in_the_metrics_and_logged_when_it_changes(erdma, caplog):
    vaps, bindings = generated(erdma)
    # a policy of another tool that carries the same part-of label (an umbrella chart labels all its parts)
    other = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": ap.POLICY_KIND,
        "metadata": {"name": "gpu-quota-check", "labels": {"app.kubernetes.io/part-of": "rdma-webhook"}},
        "spec": {"validations": [{"expression": "true"}]},
    }
    check, _ = check_of(erdma, [*vaps, other], bindings)
    for i in check.informers:
        i.relist()
    caplog.set_level(logging.INFO, "rdma_webhook.admission_policies")
    assert check.check() == []  # an object whose name is not ours is not compared
    assert metrics.ADMISSION_POLICY_IN_SYNC._value.get() == 1 and metrics.ADMISSION_POLICY_MISMATCHES._value.get() == 0
    assert messages(caplog) == ["the generated ValidatingAdmissionPolicies match the 1 policies in force"]
    caplog.clear()
    assert check.check() == [] and caplog.text == ""  # unchanged: not logged again
    check.informers[1].items.clear()
    found = check.check()
    assert found == [
        "ValidatingAdmissionPolicy rdma-webhook-final-state-erdma has no ValidatingAdmissionPolicyBinding, so it checks nothing"
    ]
    assert metrics.ADMISSION_POLICY_IN_SYNC._value.get() == 0 and metrics.ADMISSION_POLICY_MISMATCHES._value.get() == 1
    assert (
        "the generated ValidatingAdmissionPolicies do not match the policies in force: ValidatingAdmissionPolicy "
        "rdma-webhook-final-state-erdma has no ValidatingAdmissionPolicyBinding, so it checks nothing"
    ) in messages(caplog)
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    caplog.clear()
    check.informers[0].items.clear()
    assert len(check.check()) == 2 and metrics.ADMISSION_POLICY_MISMATCHES._value.get() == 2
    assert messages(caplog)[0].endswith(
        "ValidatingAdmissionPolicy rdma-webhook-final-state-erdma for policy erdma is not installed; "
        "ValidatingAdmissionPolicy rdma-webhook-final-state-erdma has no ValidatingAdmissionPolicyBinding, so it checks nothing"
    )
    caplog.clear()
    for i in check.informers:
        i.relist()
    assert check.check() == [] and metrics.ADMISSION_POLICY_IN_SYNC._value.get() == 1
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "the generated ValidatingAdmissionPolicies match the policies in force again")
    ]


def test_the_loop_compares_at_once_then_every_interval_until_stopped(erdma):
    calls: list[int] = []

    def policies():
        calls.append(1)
        return erdma

    check = apc.AdmissionPolicyCheck(Owner(waits=3), Answering({}), policies)
    check._loop()
    assert len(calls) == 3 and check.owner._stopping.waited == [5.0, 5.0, 5.0]
    quick = apc.AdmissionPolicyCheck(Owner(waits=1), Answering({}), lambda: None, interval=0.5)
    quick._loop()
    assert quick.owner._stopping.waited == [0.5]


def test_start_runs_both_informers_and_the_comparison_in_daemon_threads(erdma):
    vaps, bindings = generated(erdma)
    check, _ = check_of(erdma, vaps, bindings)
    check.owner._stopping.set()  # every loop ends at once
    threads = check.start()
    for t in threads:
        t.join(5)
    assert [t.name for t in threads] == [
        "watch-validatingadmissionpolicies",
        "watch-validatingadmissionpolicybindings",
        "check-admission-policies",
    ]
    assert all(t.daemon and not t.is_alive() for t in threads)
    assert check.thread is threads[-1]
    assert check.problems is None  # policies in force, nothing listed: compared to nothing


def test_the_started_thread_compares_what_is_listed(erdma):
    vaps, bindings = generated(erdma)
    check, _ = check_of(erdma, vaps, bindings[:0])
    for i in check.informers:
        i.relist()
    check.owner._stopping.set()  # one comparison, then the loop ends
    for t in check.start():
        t.join(5)
    assert check.problems == [
        "ValidatingAdmissionPolicy rdma-webhook-final-state-erdma has no ValidatingAdmissionPolicyBinding, so it checks nothing"
    ]


def test_start_does_not_hand_back_a_thread_an_informer_did_not_make(erdma):
    check, _ = check_of(erdma, [], [])
    check.owner._stopping.set()
    first = check.informers[0]
    first.start = lambda: None  # an informer that made no thread (thread stays None)
    threads = check.start()
    for t in threads:
        t.join(5)
    assert [t.name for t in threads] == ["watch-validatingadmissionpolicybindings", "check-admission-policies"]
    assert isinstance(threads[0], threading.Thread)
