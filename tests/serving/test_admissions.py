"""webhook/serving/admissions.py: the one door to an admission. `Admissions.answer` returns the
document `webhook.admission.review` built as JSON bytes with its HTTP status; the API server reads
that body. A body over MAX_BODY is refused unread; an install that has chosen no policy yet
refuses a labelled pod with the words an admin needs. Through the served stack (the ASGI front,
the worker's own connection, real TLS) the same function answers: tests/serving/test_asgi.py,
test_worker_direct.py, test_server.py."""

from __future__ import annotations

import base64
import json

import jsonpatch

import kube_objects as k
from conftest import CLUSTER_STATE, POLICIES
from webhook.cluster.state import FileClusterState
from webhook.policy.store import PolicyStore
from webhook.serving.admissions import MAX_BODY, Admissions

STATE = FileClusterState.from_file(str(CLUSTER_STATE))
IB = "ib-training"  # opted in, rdma-webhook.io/policy: ib-shared (examples/cluster-state.yaml)


def admissions(folder=POLICIES, cluster=STATE) -> Admissions:
    store = PolicyStore(str(folder))
    store.reload(force=True)
    return Admissions(store, cluster)


def applied(obj, resp):
    """The object as the API server stores it after the response's patch."""
    assert resp["patchType"] == "JSONPatch"
    return jsonpatch.apply_patch(obj, json.loads(base64.b64decode(resp["patch"], validate=True)))


def test_the_answer_is_the_review_document_as_json_bytes():
    """The uid echoed, a denial's 403 in its status; a body without a uid is a 400 JSON error."""
    pod = k.pod([k.container("trainer", env=[{"name": "NCCL_IB_DISABLE", "value": "1"}])], namespace=IB)
    status, data = admissions().answer("mutate", k.body(k.admission_review(pod, uid="the-uid")))
    resp = json.loads(data)["response"]
    assert status == 200 and resp["uid"] == "the-uid" and resp["allowed"] is False and resp["status"]["code"] == 403
    status, data = admissions().answer("validate", b'{"request": {}}')
    assert (status, json.loads(data)) == (400, {"error": "AdmissionReview request has no uid"})


def test_a_huge_body_is_refused_with_413_and_a_large_pod_is_answered():
    """At most MAX_BODY (3 MiB: etcd keeps objects up to 1.5 MiB, a review carries one) is read,
    a larger body refused with a JSON 413 before parsing it; a pod near etcd's limit (a 1 MiB
    annotation) is answered as any other."""
    door = admissions()
    status, data = door.answer("mutate", b" " * (MAX_BODY + 1))
    assert (status, json.loads(data)) == (413, {"error": f"request body over {MAX_BODY} bytes"})
    status, data = door.answer("mutate", None)
    assert (status, json.loads(data)) == (413, {"error": f"request body over {MAX_BODY} bytes"})
    pod = k.pod(
        [k.container("trainer", command=["torchrun", "--nproc_per_node=8", "train.py"])],
        namespace=IB,
        annotations={"example.com/notes": "x" * (1 << 20)},
    )
    rv = k.admission_review(pod)
    status, data = door.answer("mutate", k.body(rv))
    doc = json.loads(data)
    resp = doc["response"]
    assert status == 200 and resp["allowed"] is True and resp["uid"] == rv["request"]["uid"]
    out = applied(pod, resp)
    assert out["metadata"]["annotations"]["example.com/notes"] == "x" * (1 << 20)
    assert out["metadata"]["annotations"]["rdma-webhook.io/status"] == "injected"
    assert len(resp["patch"]) < 8192  # the patch carries the changes, not the pod


def test_a_crash_in_the_decision_is_a_deny_that_says_so_never_a_500(monkeypatch):
    """Fail closed with a message, and a body without a uid gets a 400 that hides nothing."""
    from webhook.admission import review

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(review, "handle", broken)
    door = admissions()
    pod = k.pod([k.container("trainer")], namespace=IB)
    status, data = door.answer("mutate", k.body(k.admission_review(pod, uid="u-1")))
    resp = json.loads(data)["response"]
    assert status == 200 and resp["uid"] == "u-1" and resp["allowed"] is False
    assert (
        resp["status"]["message"]
        == "rdma-webhook: internal error while deciding (RuntimeError); the pod was not admitted"
    )
    for body in (b"{not json", b'{"request": {"uid": 5}}', b'{"request": {"uid": ""}}', b'{"request": []}'):
        status, data = door.answer("mutate", body)  # no uid to answer under: a 400
        assert (status, json.loads(data)) == (400, {"error": "request could not be processed"}), body
