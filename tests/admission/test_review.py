"""In-process tests of webhook/admission/review.py (issue 28, the admission.review part of the mutation
run, mutation/MUTATION.md): the AdmissionReview envelope around a decision, for /mutate and /validate.

The contract is Kubernetes' (extensible-admission-controllers, admission.k8s.io/v1): the API server
POSTs an AdmissionReview whose `request` carries a `uid`, the `kind`/`resource` (and `subResource`)
of the object, its `namespace`, the `operation`, `userInfo`, `dryRun`, `options` and the `object`;
the webhook answers an AdmissionReview of the same apiVersion whose `response` echoes that `uid`,
says `allowed`, and, to deny, a `status` with `code` and `message` (shown to the user), optionally
`warnings` (each shown by kubectl; the API server truncates one over 256 characters) and, only from
a mutating webhook, a base64 JSON Patch with `patchType: JSONPatch`. A validating webhook never
patches. The tests read what `review.handle` / `review.handle_validate` return (HTTP status, the
document, the decision and the parsed request, which `webhook.serving.admissions.Admissions.answer` turns
into the HTTP answer and the log line) and, for /mutate, apply the patch to the object as sent with
`jsonpatch` and check the pod that results.

Pods are the API server's (kube_objects: defaulted, the service-account token volume, generateName
and no name for controller-made pods); bad input is what a caller may send (not JSON, no uid, the
wrong apiVersion, a request or object that is not an object): a clear answer, never an exception.
Nothing here is cached by input in review.py; the decision's caches below it hold answers of code
this part does not mutate, so no fixture empties them.
"""

from __future__ import annotations

import base64
import copy
import json
import re

import jsonpatch
import pytest
import yaml

import kube_objects as k
from conftest import CLUSTER_STATE, POLICIES, ROOT
from webhook.admission import review
from webhook.cluster.state import FileClusterState
from webhook.core import scripts
from webhook.core.decision import Namespace
from webhook.policy.load import load_dir

PS, _errors = load_dir(str(POLICIES))
assert PS is not None, _errors
STATE = FileClusterState.from_file(str(CLUSTER_STATE))
V1 = "admission.k8s.io/v1"
IB = "ib-training"  # opted in, rdma-webhook.io/policy: ib-shared (examples/cluster-state.yaml)
ML = "ml-training"  # opted in, no policy label
SCRIPTS = ROOT / "tests" / "manifests-scripts"


def mutate(rv, policies=PS, namespace_of=STATE.namespace, attachments="state", config_maps=None, claims=None):
    body = rv if isinstance(rv, bytes) else k.body(rv)
    att = STATE.attachments() if attachments == "state" else attachments
    return review.handle(body, policies, namespace_of, att, config_maps, claims)


def validate(
    rv, policies=PS, namespace_of=STATE.namespace, attachments="state", runtimes=None, config_maps=None, claims=None
):
    body = rv if isinstance(rv, bytes) else k.body(rv)
    att = STATE.attachments() if attachments == "state" else attachments
    return review.handle_validate(body, policies, namespace_of, att, runtimes, config_maps, claims)


def applied(obj, resp):
    """The object as the API server stores it after the response's patch."""
    assert resp["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(resp["patch"], validate=True))
    assert isinstance(ops, list) and ops
    return jsonpatch.apply_patch(obj, ops)


def trainer_pod(namespace=IB, **kw):
    """A PyTorchJob-style worker as the API server sends it: generateName, no name, 8 GPUs."""
    return k.pod(
        [k.container("trainer", command=["torchrun", "--nproc_per_node=8", "train.py"])], namespace=namespace, **kw
    )


def ib_disabled_pod(namespace=IB, **kw):
    env = [{"name": "NCCL_IB_DISABLE", "value": "1"}]
    return k.pod([k.container("trainer", env=env)], namespace=namespace, **kw)


def envelope(doc):
    assert set(doc) == {"apiVersion", "kind", "response"}, doc
    assert doc["apiVersion"] == V1 and doc["kind"] == "AdmissionReview", doc
    return doc["response"]


# -- bodies that cannot be answered with an AdmissionReview: HTTP 400 ------------------------------

NOT_AN_OBJECT = "request body is not a JSON object (expected an AdmissionReview)"
NO_REQUEST = "AdmissionReview has no request object"
NO_UID = "AdmissionReview request has no uid"


@pytest.mark.parametrize(
    "body, error",
    [
        (b"[]", NOT_AN_OBJECT),
        (b"null", NOT_AN_OBJECT),
        (b'"AdmissionReview"', NOT_AN_OBJECT),
        (b"42", NOT_AN_OBJECT),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', NO_REQUEST),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": null}', NO_REQUEST),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": ["uid", "x"]}', NO_REQUEST),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": "x"}', NO_REQUEST),
        (
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "x", "allowed": true}}',
            NO_REQUEST,
        ),
        (
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"operation": "CREATE"}}',
            NO_UID,
        ),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": ""}}', NO_UID),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": null}}', NO_UID),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 705}}', NO_UID),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": ["a"]}}', NO_UID),
        (
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"UID": "a", "Uid": "b"}}',
            NO_UID,
        ),
    ],
)
@pytest.mark.parametrize("route", [mutate, validate])
def test_a_body_without_a_usable_uid_is_a_400_saying_what_is_missing(route, body, error):
    """Without a uid there is no AdmissionReview answer the API server could match to its request:
    HTTP 400 with a JSON error naming what is missing, no decision, no request."""
    assert route(body) == (400, {"error": error}, None, None)


@pytest.mark.parametrize(
    "body", [b"", b"{", b"{not json}", b'{"request": {"uid": "x"}', b"\xff\xfe", b"apiVersion: v1"]
)
def test_a_body_that_is_not_json_is_a_400_with_the_parser_s_reason(body):
    status, doc, decision, req = mutate(body)
    assert (status, decision, req) == (400, None, None) and set(doc) == {"error"}
    prefix = "request body is not valid JSON: "
    assert doc["error"].startswith(prefix) and len(doc["error"]) > len(prefix), doc


def test_a_review_holding_a_pod_s_uid_under_another_key_is_still_a_400():
    pod = trainer_pod()
    rv = k.admission_review(pod)
    uid = rv["request"].pop("uid")
    rv["request"]["object"]["metadata"]["uid"] = uid  # the pod's own uid is not the request's
    assert mutate(rv) == (400, {"error": NO_UID}, None, None)


# -- a review with a uid that is still wrong: a deny naming what is wrong ------------------------------


@pytest.mark.parametrize(
    "api_version, kind",
    [
        ("admission.k8s.io/v1beta1", "AdmissionReview"),  # a webhook configuration that still lists v1beta1
        (V1, "ConversionReview"),
        (V1, None),
        (None, "AdmissionReview"),
        ("admission.k8s.io/V1", "admissionreview"),
    ],
)
@pytest.mark.parametrize("route", [mutate, validate])
def test_a_wrong_envelope_with_a_uid_is_denied_with_code_400_and_what_was_expected(route, api_version, kind):
    rv = k.admission_review(trainer_pod(), uid="705ab4f5-6393-11e8-b7cc-42010a800002")
    for key, value in (("apiVersion", api_version), ("kind", kind)):
        if value is None:
            del rv[key]
        else:
            rv[key] = value
    status, doc, decision, req = route(rv)
    assert (status, decision, req) == (200, None, None)
    assert doc == {
        "apiVersion": V1,
        "kind": "AdmissionReview",
        "response": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "allowed": False,
            "status": {
                "code": 400,
                "reason": "BadRequest",
                "message": f"rdma-webhook: expected apiVersion {V1} kind AdmissionReview, got apiVersion {api_version!r} kind {kind!r}",
            },
        },
    }


def test_the_envelope_error_keeps_its_uid_and_message():
    err = review.EnvelopeError("uid-1", "what is wrong")
    assert (err.uid, err.message, str(err)) == ("uid-1", "what is wrong", "what is wrong")


# -- the request's fields ------------------------------------------------------------------------------


def test_parse_reads_every_field_the_api_server_sends():
    pod = trainer_pod()
    rv = k.admission_review(pod, uid="e911857d-c318-11e8-bbad-025000000001")
    rv["request"]["dryRun"] = True
    req = review.parse(k.body(rv))
    assert (
        req.uid,
        req.operation,
        req.namespace,
        req.obj,
        req.kind,
        req.group,
        req.resource,
        req.sub_resource,
        req.dry_run,
    ) == ("e911857d-c318-11e8-bbad-025000000001", "CREATE", IB, pod, "Pod", "", "pods", "", True)
    rv = k.admission_review(
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": ML}},
        kind="Job",
        resource="jobs",
    )
    rv["request"]["kind"]["group"] = rv["request"]["resource"]["group"] = "batch"
    rv["request"]["subResource"] = "status"
    req = review.parse(k.body(rv))
    assert (req.kind, req.group, req.resource, req.sub_resource, req.dry_run) == (
        "Job",
        "batch",
        "jobs",
        "status",
        False,
    )


@pytest.mark.parametrize("dry_run", [False, None, "true", 1])
def test_dry_run_is_true_only_for_json_true(dry_run):
    rv = k.admission_review(trainer_pod())
    rv["request"]["dryRun"] = dry_run
    assert review.parse(k.body(rv)).dry_run is False


def test_a_minimal_review_without_kind_or_resource_is_read_as_a_pod():
    """A review written by hand (or by a tool) may carry only uid, operation, namespace and object:
    the object is taken as a pod, and mutated as the API server's would be."""
    pod = trainer_pod()
    rv = {
        "apiVersion": V1,
        "kind": "AdmissionReview",
        "request": {"uid": "u-1", "operation": "CREATE", "namespace": IB, "object": pod},
    }
    req = review.parse(k.body(rv))
    assert (req.kind, req.group, req.resource, req.sub_resource, req.dry_run) == ("", "", "", "", False)
    status, doc, decision, req = mutate(rv)
    resp = envelope(doc)
    assert status == 200 and resp["uid"] == "u-1" and resp["allowed"] is True and decision.outcome == "mutated"
    assert applied(pod, resp)["spec"]["containers"][0]["resources"]["limits"]["rdma/rdma_shared_device_a"] == "1"


@pytest.mark.parametrize("field", ["kind", "resource"])
@pytest.mark.parametrize("value", ["Pod", ["pods"], 7, None])
def test_a_kind_or_resource_that_is_not_an_object_is_read_as_absent(field, value):
    pod = trainer_pod()
    rv = k.admission_review(pod)
    rv["request"][field] = value
    status, doc, decision, _ = mutate(rv)
    assert status == 200 and envelope(doc)["allowed"] is True and decision.outcome == "mutated", doc
    status, doc, decision, _ = validate(rv)
    assert status == 200 and envelope(doc)["allowed"] is False and decision.outcome == "denied", doc


@pytest.mark.parametrize("field", ["operation", "namespace", "subResource"])
def test_null_string_fields_read_as_absent(field):
    pod = trainer_pod()
    rv = k.admission_review(pod)
    rv["request"][field] = None
    req = review.parse(k.body(rv))
    assert {"operation": req.operation, "namespace": req.namespace, "subResource": req.sub_resource}[field] == ""


# -- which requests are about a pod ---------------------------------------------------------------------


def _binding(pod_name="llama-0"):
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod_name, "namespace": IB},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-node-7"},
    }


@pytest.mark.parametrize("with_kind", [True, False])
def test_a_create_on_a_pod_subresource_is_allowed_untouched(with_kind):
    """pods/binding (the scheduler's Binding) and pods/eviction are CREATEs on `pods` with a
    subResource: a webhook whose rules say `pods/*` gets them; they create no pod. A hand-written
    review may leave out `kind`: the subResource alone says it is no pod."""
    for obj, sub, kind in (
        (_binding(), "binding", "Binding"),
        (
            {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "llama-0", "namespace": IB}},
            "eviction",
            "Eviction",
        ),
    ):
        rv = k.admission_review(obj, kind=kind)
        rv["request"]["subResource"] = sub
        if not with_kind:
            del rv["request"]["kind"]
        for route, reason in ((mutate, "not a pod"), (validate, "not a pod or workload")):
            status, doc, decision, req = route(rv)
            assert (status, decision) == (200, None) and req.sub_resource == sub
            assert envelope(doc) == {"uid": rv["request"]["uid"], "allowed": True}


def test_a_pod_body_sent_with_a_pod_subresource_is_not_judged_as_a_pod():
    """Even a pod object under a subResource (a caller replaying a pods/status body) is no pod
    creation: allowed untouched, where the same pod without the subResource is mutated or denied."""
    pod = ib_disabled_pod()
    rv = k.admission_review(pod)
    rv["request"]["subResource"] = "status"
    assert envelope(mutate(rv)[1]) == {"uid": rv["request"]["uid"], "allowed": True}
    assert envelope(validate(rv)[1]) == {"uid": rv["request"]["uid"], "allowed": True}
    del rv["request"]["kind"]
    assert envelope(mutate(rv)[1]) == {"uid": rv["request"]["uid"], "allowed": True}
    del rv["request"]["subResource"]
    assert envelope(mutate(rv)[1])["allowed"] is False


@pytest.mark.parametrize("kind, resource", [("Pod", "pods"), ("Pod", ""), ("", "pods"), ("", "")])
def test_kind_pod_and_resource_pods_are_a_pod_each_alone(kind, resource):
    pod = ib_disabled_pod()
    rv = k.admission_review(pod)
    rv["request"]["kind"]["kind"] = kind
    rv["request"]["resource"]["resource"] = resource
    status, doc, decision, _ = mutate(rv)
    assert envelope(doc)["allowed"] is False and decision.outcome == "denied", doc


@pytest.mark.parametrize(
    "kind, resource",
    [
        ("ConfigMap", "configmaps"),
        ("Pod", "configmaps"),
        ("ConfigMap", "pods"),
        ("PodTemplate", "podtemplates"),
        ("pod", "pods"),
        ("Pod", "Pods"),
        ("", "configmaps"),
        ("ConfigMap", ""),
    ],
)
def test_anything_but_a_pod_is_allowed_untouched_at_mutate(kind, resource):
    obj = {
        "apiVersion": "v1",
        "kind": kind or "ConfigMap",
        "metadata": {"name": "nccl-env", "namespace": IB},
        "data": {"NCCL_IB_DISABLE": "1"},
    }
    rv = k.admission_review(obj, kind=kind, resource=resource)
    status, doc, decision, req = mutate(rv)
    assert (status, decision) == (200, None) and req.uid == rv["request"]["uid"]
    assert envelope(doc) == {"uid": rv["request"]["uid"], "allowed": True}


# -- operations other than CREATE -------------------------------------------------------------------------


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE", "CONNECT", "create", "Create"])
@pytest.mark.parametrize("route", [mutate, validate])
def test_every_operation_but_create_is_allowed_untouched(route, operation):
    """A webhook registered for CREATE gets only CREATE; one routed UPDATE or DELETE by mistake must
    never block a pod's update or deletion. The operation is compared as the API server spells it."""
    pod = ib_disabled_pod()  # denied on CREATE
    rv = k.admission_review(pod, operation=operation)
    if operation == "DELETE":  # a DELETE carries the pod as oldObject and a null object
        rv["request"]["oldObject"], rv["request"]["object"] = pod, None
        rv["request"]["options"] = {"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions"}
    status, doc, decision, req = route(rv)
    assert status == 200 and envelope(doc) == {"uid": rv["request"]["uid"], "allowed": True}
    assert decision.outcome == "skipped" and decision.reason == f"operation {operation}: only CREATE is considered"
    assert decision.pod is rv["request"]["object"] or decision.pod == rv["request"]["object"]
    assert decision.policy is None and not decision.denials and not decision.warnings
    assert req.operation == operation and req.uid == rv["request"]["uid"]


@pytest.mark.parametrize("route", [mutate, validate])
def test_a_review_without_an_operation_is_allowed_and_says_none(route):
    rv = k.admission_review(ib_disabled_pod())
    del rv["request"]["operation"]
    status, doc, decision, req = route(rv)
    assert status == 200 and envelope(doc) == {"uid": rv["request"]["uid"], "allowed": True}
    assert decision.outcome == "skipped" and decision.reason == "operation (none): only CREATE is considered"
    assert req.operation == ""


# -- the namespace --------------------------------------------------------------------------------------


def test_the_request_s_namespace_decides_and_the_object_s_is_read_only_without_it():
    pod = trainer_pod(namespace=IB)
    del pod["metadata"]["namespace"]  # a pod created with `kubectl create -n ib-training` from a file naming none
    rv = k.admission_review(pod, namespace=IB)
    _, doc, decision, _ = mutate(rv)
    assert decision.outcome == "mutated" and decision.policy == "ib-shared", doc
    # no namespace in the request: the object's
    pod = trainer_pod(namespace=IB)
    rv = k.admission_review(pod)
    rv["request"]["namespace"] = ""
    _, doc, decision, _ = mutate(rv)
    assert decision.outcome == "mutated" and decision.policy == "ib-shared", doc
    del rv["request"]["namespace"]
    _, doc, decision, _ = mutate(rv)
    assert decision.outcome == "mutated" and decision.policy == "ib-shared", doc
    # the same through /validate: the final-state guard of the stored pod
    stored = applied(pod, envelope(doc))
    rv = k.admission_review(stored)
    del rv["request"]["namespace"]
    _, doc, decision, _ = validate(rv)
    assert envelope(doc) == {"uid": rv["request"]["uid"], "allowed": True} and decision.policy == "ib-shared"


def test_the_request_s_namespace_is_used_when_the_object_names_another():
    """A hand-written review may disagree with its object (the API server refuses the mismatch
    before admission): the request's namespace is the one judged."""
    pod = trainer_pod(namespace="default")  # not opted in
    rv = k.admission_review(pod, namespace=IB)
    _, doc, decision, _ = mutate(rv)
    assert decision.outcome == "mutated" and decision.policy == "ib-shared", doc


@pytest.mark.parametrize(
    "metadata",
    [
        {"generateName": "trainer-", "labels": {"rdma-webhook.io/inject": "true"}},
        {"generateName": "trainer-", "namespace": "", "labels": {"rdma-webhook.io/inject": "true"}},
        {"generateName": "trainer-", "namespace": None, "labels": {"rdma-webhook.io/inject": "true"}},
    ],
)
def test_a_labelled_pod_with_no_namespace_anywhere_is_denied_as_namespace_unknown(metadata):
    pod = trainer_pod()
    pod["metadata"] = metadata
    rv = k.admission_review(pod)
    del rv["request"]["namespace"]
    looked_up = []

    def namespace_of(name):
        looked_up.append(name)
        return STATE.namespace(name)

    status, doc, decision, _ = mutate(rv, namespace_of=namespace_of)
    # no name: nothing to look up (the served lookup, ApiClusterState.namespace, reads a namespace
    # it has not cached from the API server and waits for the answer)
    assert looked_up == []
    assert envelope(doc) == {
        "uid": rv["request"]["uid"],
        "allowed": False,
        "status": {
            "code": 403,
            "reason": "Forbidden",
            "message": "rdma-webhook denied pod trainer-*: the pod's namespace is unknown to the webhook, so its opt-in cannot "
            "be checked; retry in a moment [namespace-unknown]",
        },
    }


def test_the_namespace_is_looked_up_by_its_name():
    looked_up = []

    def namespace_of(name):
        looked_up.append(name)
        return STATE.namespace(name)

    rv = k.admission_review(trainer_pod())
    mutate(rv, namespace_of=namespace_of)
    validate(rv, namespace_of=namespace_of)
    assert looked_up == [IB, IB]


# -- /mutate answers ------------------------------------------------------------------------------------


def test_a_mutated_pod_gets_a_base64_json_patch_that_applies_to_the_pod_as_sent():
    pod = trainer_pod()
    sent = copy.deepcopy(pod)
    rv = k.admission_review(pod, uid="a-mutated-pod")
    status, doc, decision, req = mutate(rv)
    resp = envelope(doc)
    assert status == 200 and set(resp) == {"uid", "allowed", "patchType", "patch"}, resp
    assert resp["uid"] == "a-mutated-pod" and resp["allowed"] is True and resp["patchType"] == "JSONPatch"
    assert pod == sent  # the object as sent is not modified
    out = applied(pod, resp)
    assert out == decision.pod  # the patch makes exactly the decision's pod
    c = out["spec"]["containers"][0]
    assert (
        c["resources"]["limits"]["rdma/rdma_shared_device_a"]
        == c["resources"]["requests"]["rdma/rdma_shared_device_a"]
        == "1"
    )
    assert "IPC_LOCK" in c["securityContext"]["capabilities"]["add"]
    assert {"name": "NCCL_NET", "value": "IB"} in c["env"]
    assert out["metadata"]["annotations"]["rdma-webhook.io/status"] == "injected"
    assert out["metadata"]["generateName"] == "trainer-" and "name" not in out["metadata"]
    assert (decision.outcome, decision.policy, req.uid) == ("mutated", "ib-shared", "a-mutated-pod")


def test_the_patch_changes_fields_and_never_replaces_the_whole_pod():
    """The API server applies the patch with evanphx/json-patch v4, whose operations need a path
    below the document root (a `replace` of "" fails there, and so would the admission); each
    operation names what it changes, and what the webhook leaves alone is in no operation."""
    pod = trainer_pod()
    resp = envelope(mutate(k.admission_review(pod))[1])
    ops = json.loads(base64.b64decode(resp["patch"]))
    paths = [op["path"] for op in ops]
    assert all(p.startswith("/") and p != "/" for p in paths), paths
    assert not any(p in ("/spec", "/metadata", "/spec/containers", "/spec/tolerations") for p in paths), paths
    assert all(
        p.startswith(("/metadata/labels/", "/metadata/annotations", "/spec/volumes/", "/spec/containers/0/"))
        for p in paths
    ), paths


def test_a_pod_sent_again_after_its_patch_is_allowed_without_a_patch():
    """reinvocationPolicy IfNeeded: the API server may call the webhook again with the patched pod."""
    pod = trainer_pod()
    out = applied(pod, envelope(mutate(k.admission_review(pod))[1]))
    rv = k.admission_review(out)
    status, doc, decision, _ = mutate(rv)
    assert envelope(doc) == {"uid": rv["request"]["uid"], "allowed": True} and decision.outcome == "unchanged"


def test_a_denied_pod_gets_403_forbidden_naming_the_pod_the_policy_and_the_reason():
    rv = k.admission_review(ib_disabled_pod())
    status, doc, decision, _ = mutate(rv)
    resp = envelope(doc)
    assert status == 200 and set(resp) == {"uid", "allowed", "status"}, resp
    assert resp["uid"] == rv["request"]["uid"] and resp["allowed"] is False
    status_ = resp["status"]
    assert set(status_) == {"code", "reason", "message"} and (status_["code"], status_["reason"]) == (403, "Forbidden")
    prefix = "rdma-webhook denied pod trainer-* (policy ib-shared): container 'trainer': NCCL_IB_DISABLE='1' "
    assert status_["message"].startswith(prefix) and status_["message"].endswith(" [env-fallback]"), status_
    assert status_["message"].count("[") == 1 and decision.outcome == "denied"


def test_a_named_pod_is_named_and_several_reasons_are_joined_with_semicolons():
    env = [{"name": "NCCL_IB_DISABLE", "value": "1"}, {"name": "NCCL_NET", "value": "Socket"}]
    pod = k.pod([k.container("trainer", env=env)], namespace=IB, name="llama-0", generate_name=None)
    rv = k.admission_review(pod)
    _, doc, decision, _ = mutate(rv)
    message = envelope(doc)["status"]["message"]
    head = "rdma-webhook denied pod llama-0 (policy ib-shared): "
    assert message.startswith(head), message
    reasons = message[len(head) :].split(" [env-fallback]; ")  # each reason ends with its rule
    assert len(reasons) == len(decision.denials) == 2 and message.endswith(" [env-fallback]"), message
    assert reasons[0].startswith("container 'trainer': NCCL_IB_DISABLE='1' ") and reasons[1].startswith(
        "container 'trainer': NCCL_NET='Socket' "
    ), reasons


def test_a_pod_without_metadata_is_denied_as_unnamed():
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": "llama-0", "spec": {"containers": []}}
    rv = k.admission_review(pod, namespace=IB)
    message = envelope(mutate(rv)[1])["status"]["message"]
    assert message.startswith("rdma-webhook denied pod (unnamed): the request's pod is malformed: "), message
    assert message.endswith(" [malformed-pod]") and "(policy" not in message


def test_without_policies_the_deny_names_no_policy():
    rv = k.admission_review(trainer_pod())
    _, doc, decision, _ = mutate(rv, policies=None)
    assert envelope(doc)["status"] == {
        "code": 403,
        "reason": "Forbidden",
        "message": "rdma-webhook denied pod trainer-*: the webhook has no valid policies loaded; ask the platform team to "
        "check `rdma-webhook policy lint` [no-policy]",
    }
    assert decision.policy is None


def test_a_pod_that_is_not_opted_in_is_allowed_untouched_with_no_warnings():
    pod = trainer_pod(inject=False)
    rv = k.admission_review(pod)
    status, doc, decision, req = mutate(rv)
    assert envelope(doc) == {"uid": rv["request"]["uid"], "allowed": True} and decision.outcome == "skipped"
    assert req.obj == pod


def test_the_warnings_of_an_allowed_pod_are_in_the_answer_as_the_decision_gives_them():
    env = [{"name": "NCCL_SOCKET_IFNAME", "value": "ens5"}]
    pod = k.pod([k.container("trainer", env=env)], namespace=IB)
    rv = k.admission_review(pod)
    _, doc, decision, _ = mutate(rv)
    resp = envelope(doc)
    assert set(resp) == {"uid", "allowed", "patchType", "patch", "warnings"} and resp["allowed"] is True
    assert resp["warnings"] == decision.warnings and len(resp["warnings"]) == 1
    assert resp["warnings"][0].startswith(
        "trainer: NCCL_SOCKET_IFNAME='ens5' names no interface the pod will have (eth0)"
    )


def test_the_warnings_of_a_denied_pod_come_with_the_deny():
    env = [{"name": "NCCL_SOCKET_IFNAME", "value": "ens5"}, {"name": "NCCL_IB_DISABLE", "value": "1"}]
    pod = k.pod([k.container("trainer", env=env)], namespace=IB)
    _, doc, decision, _ = mutate(k.admission_review(pod))
    resp = envelope(doc)
    assert resp["allowed"] is False and resp["status"]["code"] == 403
    assert resp["warnings"] == decision.warnings and len(resp["warnings"]) == 1


def test_a_long_warning_is_cut_at_a_word_and_many_warnings_are_counted():
    """kubectl prints each warning on a line and the API server truncates one over 256 characters:
    each is cut at the last space that fits, with " ..."; past 20 the rest are counted."""
    ifname = ",".join(f"ens{i}" for i in range(30))  # one long word, then the warning's own words
    containers = [
        k.container(f"w{i}", gpus=1, env=[{"name": "NCCL_SOCKET_IFNAME", "value": ifname if i == 0 else f"ib{i}"}])
        for i in range(23)
    ]
    pod = k.pod(containers, namespace=IB)
    _, doc, decision, _ = mutate(k.admission_review(pod))
    resp = envelope(doc)
    assert len(decision.warnings) == 23 and len(resp["warnings"]) == 21
    first = resp["warnings"][0]
    assert len(decision.warnings[0]) > 256 and len(first) <= 256 and first.endswith(" ...")
    assert decision.warnings[0].startswith(first[: -len(" ...")])
    assert decision.warnings[0][len(first) - len(" ...")] == " "  # cut where a word ends
    assert resp["warnings"][1:20] == decision.warnings[1:20]
    assert resp["warnings"][20] == "... and 3 more warnings"
    assert applied(pod, resp) == decision.pod


# -- the warning bounds (the API server's 256 characters, 20 warnings) ------------------------------------


def test_a_warning_of_256_characters_is_kept_whole_and_one_more_is_cut():
    w256 = ("NCCL_SOCKET_IFNAME " * 14)[:255] + "x"
    assert len(w256) == 256
    assert review._warnings([w256]) == [w256]
    w257 = w256 + "y"
    (cut,) = review._warnings([w257])
    assert cut != w257 and len(cut) <= 256 and cut.endswith(" ...")


def test_short_warnings_are_kept_as_they_are():
    items = ["a", "trainer: runs as non-root", "x" * 255, " spaced , ", ""]
    assert review._warnings(items) == items


@pytest.mark.parametrize("count", [19, 20])
def test_up_to_twenty_warnings_are_all_kept(count):
    items = [f"w{i}: something" for i in range(count)]
    assert review._warnings(items) == items


@pytest.mark.parametrize("count, more", [(21, 1), (22, 2), (45, 25)])
def test_past_twenty_warnings_the_rest_are_counted(count, more):
    items = [f"w{i}: something" for i in range(count)]
    assert review._warnings(items) == items[:20] + [f"... and {more} more warnings"]


def test_a_long_warning_without_a_space_is_cut_to_exactly_256_characters():
    word = "x" * 400
    assert review._cut(word) == "x" * 252 + " ..."
    assert len(review._cut(word)) == 256


def test_a_long_warning_is_cut_at_its_last_space_that_fits():
    words = " ".join(f"word{i:03d}" for i in range(60))  # 7-character words and spaces: 479 characters
    cut = review._cut(words)
    assert cut.endswith(" ...") and len(cut) <= 256
    kept = cut[: -len(" ...")]
    assert words.startswith(kept + " ") and kept.split(" ")[-1] == "word030"  # the last whole word in 252 characters


def test_a_cut_drops_the_punctuation_before_it():
    text = "trainer: mounts " + ", ".join(f"/data/volume-{i:02d}" for i in range(30))
    cut = review._cut(text)
    kept = cut[: -len(" ...")]
    assert not kept.endswith((",", " ", ";", ":")) and kept.endswith(tuple("0123456789"))
    assert text.startswith(kept + ", ") and cut == kept + " ..."
    semis = "; ".join(["the ranks fall back to UCX"] * 20)
    cut = review._cut(semis)
    assert cut.endswith("UCX ...") and semis.startswith(cut[: -len(" ...")] + "; ")
    # nothing is stripped from the front
    lead = ", " + "x" * 300
    assert review._cut(lead) == lead[:252] + " ..."


@pytest.mark.parametrize("at, cut_there", [(100, False), (128, False), (129, True), (200, True), (251, True)])
def test_a_space_in_the_first_half_is_no_place_to_cut(at, cut_there):
    """Cutting at a space near the start would drop most of the warning: only a space past the
    first 128 characters is used, else the text is cut mid-word at 252 characters."""
    text = "a" * at + " " + "b" * 400
    cut = review._cut(text)
    assert cut == ("a" * at + " ..." if cut_there else text[:252] + " ...")


# -- scripts, NetworkAttachmentDefinitions and DRA claims reach the decision --------------------------------


def _script_job():
    cm, job = [d for d in yaml.safe_load_all((SCRIPTS / "job-script-ib-disable.yaml").read_text()) if d]
    return cm, job


def _script_pod(namespace=ML):
    _, job = _script_job()
    tmpl = job["spec"]["template"]
    return k.pod(
        tmpl["spec"]["containers"],
        namespace=namespace,
        annotations=tmpl["metadata"]["annotations"],
        volumes=tmpl["spec"]["volumes"],
        generate_name="llama-finetune-",
    )


def test_a_script_from_a_configmap_given_to_mutate_is_read():
    """`rdma-webhook review` hands the ConfigMaps of its input to `handle`: the script a pod runs
    from one is read (here it exports NCCL_IB_DISABLE=1: denied); without it, a warning names it."""
    cm, _ = _script_job()
    store = scripts.ConfigMapStore()
    store.add(cm, ML)
    pod = _script_pod()
    rv = k.admission_review(pod)
    _, doc, decision, _ = mutate(rv, attachments=None, config_maps=store)
    resp = envelope(doc)
    assert resp["allowed"] is False and "[command-fallback]" in resp["status"]["message"], resp
    assert "/scripts/train.sh (ConfigMap 'llama-train-scripts')" in resp["status"]["message"]
    _, doc, decision, _ = mutate(rv, attachments=None)
    resp = envelope(doc)
    assert resp["allowed"] is True and decision.outcome == "mutated"
    assert resp["warnings"] == [
        "trainer: the script /scripts/train.sh comes from ConfigMap 'llama-train-scripts', which is "
        "not at hand here, so its NCCL settings were not read; check it with `rdma-webhook review` "
        "given the ConfigMap and the workload"
    ]
    # the final-state guard reads it the same way
    stored = applied(pod, resp)
    _, doc, decision, _ = validate(k.admission_review(stored), attachments=None, config_maps=store)
    assert envelope(doc)["allowed"] is False and "[command-fallback]" in envelope(doc)["status"]["message"]
    _, doc, decision, _ = validate(k.admission_review(stored), attachments=None)
    assert envelope(doc)["allowed"] is True and decision.outcome == "unchanged"


def test_the_network_attachment_s_resource_name_decides_the_device():
    """sriov-roce takes its VF resource from the NetworkAttachmentDefinition's resourceName
    annotation when the cluster state has it, else from the policy."""
    ns = Namespace("ai-training", {"rdma-webhook.io/injection": "enabled", "rdma-webhook.io/policy": "sriov-roce"})
    nad = {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {
            "name": "rdma-network",
            "namespace": "ai-training",
            "annotations": {"k8s.v1.cni.cncf.io/resourceName": "openshift.io/cx7_vf"},
        },
        "spec": {"config": '{"cniVersion":"0.3.1","name":"rdma-network","type":"sriov"}'},
    }
    state = FileClusterState([ns], [nad])
    pod = trainer_pod(namespace="ai-training")
    rv = k.admission_review(pod)
    _, doc, decision, _ = mutate(rv, namespace_of=state.namespace, attachments=state.attachments())
    limits = applied(pod, envelope(doc))["spec"]["containers"][0]["resources"]["limits"]
    assert limits["openshift.io/cx7_vf"] == "1" and "openshift.io/mellanoxrdma" not in limits
    _, doc, decision, _ = mutate(rv, namespace_of=state.namespace, attachments=None)
    limits = applied(pod, envelope(doc))["spec"]["containers"][0]["resources"]["limits"]
    assert limits["openshift.io/mellanoxrdma"] == "1" and "openshift.io/cx7_vf" not in limits
    # a cluster state without the NetworkAttachmentDefinition: Multus could not attach it
    empty = FileClusterState([ns], [])
    _, doc, decision, _ = mutate(rv, namespace_of=state.namespace, attachments=empty.attachments())
    assert envelope(doc)["allowed"] is False and "[network-attachment]" in envelope(doc)["status"]["message"]


def test_the_final_state_guard_reads_the_network_attachments():
    ns = Namespace("ai-training", {"rdma-webhook.io/injection": "enabled", "rdma-webhook.io/policy": "sriov-roce"})
    pod = trainer_pod(namespace="ai-training")
    stored = applied(pod, envelope(mutate(k.admission_review(pod), attachments=None)[1]))
    rv = k.admission_review(stored)
    empty = FileClusterState([ns], [])
    _, doc, decision, _ = validate(rv, namespace_of=empty.namespace, attachments=empty.attachments())
    assert envelope(doc)["allowed"] is False and "[network-attachment]" in envelope(doc)["status"]["message"]
    _, doc, decision, _ = validate(rv, namespace_of=empty.namespace, attachments=None)
    assert envelope(doc) == {"uid": rv["request"]["uid"], "allowed": True}


DRANET_STATE = FileClusterState(
    [Namespace(ML, {"kubernetes.io/metadata.name": ML, "rdma-webhook.io/injection": "enabled"})],
    [],
    [],
    [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "dranet"},
            "spec": {"selectors": [{"cel": {"expression": 'device.driver == "dra.net"'}}]},
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "rdma-nics", "namespace": ML},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "nic",
                                "exactly": {
                                    "deviceClassName": "dranet",
                                    "count": 2,
                                    "selectors": [{"cel": {"expression": 'device.attributes["dra.net"].rdma == true'}}],
                                },
                            }
                        ]
                    }
                }
            },
        },
    ],
)


def _dranet_pod():
    """kubernetes-sigs/dranet's example: a worker claiming two RDMA NICs by template, under a
    policy of another fabric (ib-shared's device plugin)."""
    c = k.container("trainer")
    c["resources"]["claims"] = [{"name": "rdma"}]
    return k.pod(
        [c],
        namespace=ML,
        annotations={"rdma-webhook.io/policy": "ib-shared"},
        generate_name="llama-worker-",
        resourceClaims=[{"name": "rdma", "resourceClaimTemplateName": "rdma-nics"}],
    )


def test_the_dra_claims_known_reach_mutate_and_validate():
    """With the DRA objects known, a pod claiming another fabric's NIC is denied (fabric-mismatch)
    rather than given a second NIC; without them the claim cannot be read."""
    pod = _dranet_pod()
    rv = k.admission_review(pod)
    for route in (mutate, validate):
        _, doc, decision, _ = route(rv, namespace_of=DRANET_STATE.namespace, claims=DRANET_STATE.claims())
        resp = envelope(doc)
        assert resp["allowed"] is False and "[fabric-mismatch]" in resp["status"]["message"], resp
    _, doc, decision, _ = mutate(rv, namespace_of=DRANET_STATE.namespace)
    stored = applied(pod, envelope(doc))
    assert stored["spec"]["containers"][0]["resources"]["limits"]["rdma/rdma_shared_device_a"] == "1"
    _, doc, decision, _ = validate(
        k.admission_review(stored), namespace_of=DRANET_STATE.namespace, claims=DRANET_STATE.claims()
    )
    assert envelope(doc)["allowed"] is False and "[fabric-mismatch]" in envelope(doc)["status"]["message"]
    _, doc, decision, _ = validate(k.admission_review(stored), namespace_of=DRANET_STATE.namespace)
    assert envelope(doc)["allowed"] is True


# -- /validate: the final-state guard for pods ---------------------------------------------------------


def test_validate_never_patches_and_denies_a_pod_stored_without_its_rdma_pieces():
    """/validate runs after every mutating webhook: a labelled pod that reaches it without the
    device, IPC_LOCK and pinned NCCL_NET (a later webhook removed them) is denied with each reason."""
    pod = trainer_pod()
    rv = k.admission_review(pod)
    status, doc, decision, req = validate(rv)
    resp = envelope(doc)
    assert status == 200 and set(resp) == {"uid", "allowed", "status"} and resp["allowed"] is False
    message = resp["status"]["message"]
    assert (resp["status"]["code"], resp["status"]["reason"]) == (403, "Forbidden")
    head = "rdma-webhook denied pod trainer-* (policy ib-shared): "
    assert message.startswith(head), message
    assert re.findall(r" \[([a-z-]+)\](?:; |$)", message) == ["device-missing", "ipc-lock-missing", "enforced-env"], (
        message
    )
    assert message.count("; container 'trainer': ") == 2, message
    stored = applied(pod, envelope(mutate(rv)[1]))
    rv = k.admission_review(stored)
    status, doc, decision, _ = validate(rv)
    assert envelope(doc) == {"uid": rv["request"]["uid"], "allowed": True}
    assert (decision.outcome, decision.policy, decision.reason) == ("unchanged", "ib-shared", "final state keeps RDMA")


def test_validate_of_a_pod_keeps_the_warnings_of_its_final_state():
    env = [{"name": "NCCL_SOCKET_IFNAME", "value": "ens5"}]
    pod = k.pod([k.container("trainer", env=env)], namespace=IB)
    stored = applied(pod, envelope(mutate(k.admission_review(pod))[1]))
    rv = k.admission_review(stored)
    _, doc, decision, _ = validate(rv)
    resp = envelope(doc)
    assert set(resp) == {"uid", "allowed", "warnings"} and resp["allowed"] is True
    assert resp["warnings"] == decision.warnings and resp["warnings"][0].startswith(
        "trainer: NCCL_SOCKET_IFNAME='ens5'"
    )


def test_validate_without_policies_denies_a_labelled_pod():
    rv = k.admission_review(trainer_pod())
    _, doc, decision, _ = validate(rv, policies=None)
    assert envelope(doc)["allowed"] is False and envelope(doc)["status"]["message"].endswith("[no-policy]")


# -- /validate: workloads --------------------------------------------------------------------------------


def job(name="llama-finetune", namespace=ML, env=None, command=None, inject=True, **meta):
    labels = {"rdma-webhook.io/inject": "true"} if inject else {}
    c = k.container("trainer", env=env, command=command)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, **meta},
        "spec": {
            "completions": 2,
            "parallelism": 2,
            "completionMode": "Indexed",
            "template": {"metadata": {"labels": labels}, "spec": {"restartPolicy": "Never", "containers": [c]}},
        },
    }


def job_review(obj, namespace=None):
    rv = k.admission_review(obj, namespace=namespace, kind="Job", resource="jobs")
    rv["request"]["kind"]["group"] = rv["request"]["resource"]["group"] = "batch"
    rv["request"]["requestKind"]["group"] = rv["request"]["requestResource"]["group"] = "batch"
    return rv


IB_OFF = [{"name": "NCCL_IB_DISABLE", "value": "1"}]


def test_a_job_whose_pods_will_be_mutated_is_allowed_with_what_they_will_get_as_a_warning():
    rv = job_review(job(namespace=IB))
    status, doc, decision, req = validate(rv)
    resp = envelope(doc)
    assert status == 200 and set(resp) == {"uid", "allowed", "warnings"} and resp["allowed"] is True, resp
    assert resp["uid"] == rv["request"]["uid"] and resp["warnings"] == decision.warnings
    assert (decision.outcome, decision.reason, decision.policy) == ("unchanged", "pods will be mutated", "ib-shared")
    # the templates judged: what `rdma-webhook review --output json` prints for the workload
    assert [(t.path, t.decision.outcome) for t in decision.templates] == [("spec.template", "mutated")]
    assert decision.pod == rv["request"]["object"]


def test_a_job_whose_template_is_denied_is_denied_with_the_workload_s_message():
    rv = job_review(job(namespace=IB, env=IB_OFF))
    status, doc, decision, _ = validate(rv)
    resp = envelope(doc)
    assert set(resp) == {"uid", "allowed", "status"} and resp["allowed"] is False, resp
    assert (resp["status"]["code"], resp["status"]["reason"]) == (403, "Forbidden")
    message = resp["status"]["message"]
    assert message.startswith(
        "rdma-webhook: pods of Job llama-finetune would be denied or fall back to TCP: spec.template, "
        "container 'trainer': NCCL_IB_DISABLE='1' "
    ), message
    assert message.endswith(" [env-fallback]"), message
    assert not message.startswith("rdma-webhook denied pod"), message
    assert decision.outcome == "denied" and [f.rule for f in decision.denials] == ["env-fallback"]
    assert decision.reason == ""  # the log line's `why` is for answers without findings


def test_a_job_whose_template_gets_no_rdma_is_allowed_with_no_reason_given():
    """A labelled template without a GPU container is judged (unchanged): there is a result, so
    no reason is given (the reasons are for a workload none of whose templates was judged)."""
    obj = job(namespace=IB)
    obj["spec"]["template"]["spec"]["containers"] = [k.container("tokenizer", gpus=None)]
    rv = job_review(obj)
    _, doc, decision, _ = validate(rv)
    assert envelope(doc)["allowed"] is True
    assert (decision.outcome, decision.reason) == ("unchanged", ""), (decision.outcome, decision.reason)
    assert [(t.path, t.decision.outcome) for t in decision.templates] == [("spec.template", "unchanged")]


def test_a_job_without_a_labelled_template_is_allowed_and_says_why():
    rv = job_review(job(namespace=IB, inject=False))
    status, doc, decision, _ = validate(rv)
    assert envelope(doc) == {"uid": rv["request"]["uid"], "allowed": True}
    assert (decision.outcome, decision.reason, decision.templates) == (
        "skipped",
        "no template carries the pod opt-in label",
        [],
    )


def test_a_trainjob_whose_runtime_is_unknown_says_so():
    tj = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "llama", "namespace": IB},
        "spec": {"runtimeRef": {"name": "torch-distributed-rdma"}},
    }
    rv = k.admission_review(tj, kind="TrainJob", resource="trainjobs")
    rv["request"]["kind"]["group"] = "trainer.kubeflow.org"
    status, doc, decision, _ = validate(rv)
    assert decision.reason and decision.reason != "no template carries the pod opt-in label", decision.reason
    assert "torch-distributed-rdma" in decision.reason and decision.templates == []


def test_without_a_request_kind_the_object_s_apiversion_and_kind_say_what_it_is():
    """A hand-written review (or a tool's) may leave out request.kind: the object's apiVersion
    (its group) and kind are read instead."""
    rv = job_review(job(namespace=IB, env=IB_OFF))
    del rv["request"]["kind"]  # the resource (jobs) says it is no pod
    _, doc, decision, _ = validate(rv)
    assert envelope(doc)["allowed"] is False and "[env-fallback]" in envelope(doc)["status"]["message"]
    # a kind of the core group is no Job
    rv["request"]["object"]["apiVersion"] = "v1"
    _, doc, decision, _ = validate(rv)
    assert envelope(doc) == {"uid": rv["request"]["uid"], "allowed": True} and decision is None


def test_the_request_s_kind_wins_over_the_object_s():
    obj = job(namespace=IB, env=IB_OFF)
    obj.pop("apiVersion"), obj.pop("kind")  # as a tool may send it: the request says what it is
    _, doc, decision, _ = validate(job_review(obj))
    assert envelope(doc)["allowed"] is False and "[env-fallback]" in envelope(doc)["status"]["message"]
    # the request says ConfigMap: whatever the object claims, no workload
    obj = job(namespace=IB, env=IB_OFF)
    rv = k.admission_review(obj, kind="ConfigMap", resource="configmaps")
    _, doc, decision, _ = validate(rv)
    assert envelope(doc) == {"uid": rv["request"]["uid"], "allowed": True} and decision is None


def test_a_workload_subresource_is_not_a_workload():
    rv = job_review(job(namespace=IB, env=IB_OFF))
    rv["request"]["subResource"] = "status"
    status, doc, decision, req = validate(rv)
    assert (status, decision) == (200, None) and envelope(doc) == {"uid": rv["request"]["uid"], "allowed": True}


@pytest.mark.parametrize("obj", [None, "a Job", ["a", "Job"]])
def test_a_workload_object_that_is_not_an_object_is_answered_without_a_traceback(obj):
    rv = job_review({"apiVersion": "batch/v1", "kind": "Job"})
    rv["request"]["object"] = obj
    status, doc, decision, _ = validate(rv)
    assert status == 200 and envelope(doc)["uid"] == rv["request"]["uid"]
    del rv["request"]["kind"]
    status, doc, decision, _ = validate(rv)
    assert status == 200 and envelope(doc)["uid"] == rv["request"]["uid"]


def test_a_workload_in_a_namespace_not_opted_in_is_allowed():
    rv = job_review(job(namespace="default", env=IB_OFF))
    _, doc, decision, _ = validate(rv)
    assert envelope(doc)["allowed"] is True


def test_a_workload_s_namespace_is_the_request_s_else_its_own():
    obj = job(namespace=IB, env=IB_OFF)
    rv = job_review(obj)
    del rv["request"]["namespace"]
    _, doc, decision, _ = validate(rv)
    assert envelope(doc)["allowed"] is False
    del obj["metadata"]["namespace"]
    rv = job_review(obj, namespace=IB)
    _, doc, decision, _ = validate(rv)
    assert envelope(doc)["allowed"] is False


# -- /validate: a v1 List (sent by a caller: `kubectl kustomize`, `kubectl get -o yaml`) ---------------------


def list_review(items, namespace=ML, **kw):
    obj = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}
    rv = k.admission_review(obj, namespace=namespace, kind="List", resource="lists", **kw)
    if namespace is None:
        del rv["request"]["namespace"]
    return rv


def test_a_list_with_a_configmap_script_and_its_job_is_denied_naming_the_job():
    cm, jb = _script_job()
    rv = list_review([cm, jb])
    status, doc, decision, _ = validate(rv)
    resp = envelope(doc)
    assert status == 200 and set(resp) == {"uid", "allowed", "status"} and resp["allowed"] is False, resp
    message = resp["status"]["message"]
    assert (resp["status"]["code"], resp["status"]["reason"]) == (403, "Forbidden")
    assert message.startswith("rdma-webhook: Job llama-finetune: ") and message.endswith("[command-fallback]"), message
    assert "/scripts/train.sh (ConfigMap 'llama-train-scripts')" in message and message.count("Job llama-finetune") == 1
    assert decision.outcome == "denied" and decision.policy == "ib-shared" and decision.reason == ""
    assert [f.rule for f in decision.denials] == ["command-fallback"]
    assert all(f.message.startswith("Job llama-finetune: ") for f in decision.denials)
    assert [t.path for t in decision.templates] == ["spec.template"]
    # the same Job without its ConfigMap: the script is named in a warning, the list allowed
    status, doc, decision, _ = validate(list_review([jb]))
    resp = envelope(doc)
    assert resp["allowed"] is True and set(resp) == {"uid", "allowed", "warnings"}
    assert any(
        w.startswith("Job llama-finetune: ") and "ConfigMap 'llama-train-scripts'" in w for w in resp["warnings"]
    )
    assert all(w.startswith("Job llama-finetune: ") for w in resp["warnings"]) and resp["warnings"] == decision.warnings
    assert (decision.outcome, decision.reason, decision.policy) == (
        "unchanged",
        "every object of the list passes",
        "ib-shared",
    )


def test_a_list_s_configmaps_given_by_the_caller_are_read_too():
    cm, jb = _script_job()
    store = scripts.ConfigMapStore()
    store.add(cm, ML)
    _, doc, _, _ = validate(list_review([jb]), config_maps=store)
    assert envelope(doc)["allowed"] is False and "[command-fallback]" in envelope(doc)["status"]["message"]


def test_a_list_s_configmap_without_a_namespace_is_in_the_request_s_or_default():
    cm, jb = _script_job()
    del cm["metadata"]["namespace"]
    _, doc, _, _ = validate(list_review([cm, jb]))
    assert envelope(doc)["allowed"] is False, doc
    # no namespace in the request: a ConfigMap and a Job naming none are in "default"
    del jb["metadata"]["namespace"]
    opted_in = {"default": Namespace("default", {"rdma-webhook.io/injection": "enabled"})}
    _, doc, _, _ = validate(list_review([cm, jb], namespace=None), namespace_of=opted_in.get)
    # the Job names no namespace and the request none: judged nowhere (namespace unknown)
    assert envelope(doc)["allowed"] is False and "namespace" in envelope(doc)["status"]["message"]
    jb["metadata"]["namespace"] = "default"
    _, doc, _, _ = validate(list_review([cm, jb], namespace=None), namespace_of=opted_in.get)
    assert envelope(doc)["allowed"] is False and "[command-fallback]" in envelope(doc)["status"]["message"], doc
    # a ConfigMap in another namespace is not the Job's
    cm["metadata"]["namespace"] = "elsewhere"
    _, doc, _, _ = validate(list_review([cm, jb], namespace=None), namespace_of=opted_in.get)
    assert envelope(doc)["allowed"] is True, doc


def test_a_list_reads_every_item_past_those_it_skips():
    _, jb = _script_job()
    jb = job(namespace=IB, env=IB_OFF)
    items = [
        "a string",
        None,
        7,
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}},
        {"kind": "Job", "metadata": {"name": "no-api"}},
        jb,
    ]
    _, doc, decision, _ = validate(list_review(items))
    resp = envelope(doc)
    assert resp["allowed"] is False and resp["status"]["message"].startswith("rdma-webhook: Job llama-finetune: "), resp
    assert decision.policy == "ib-shared"


def test_a_list_of_nothing_to_check_is_allowed_untouched():
    items = [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"}},
        "x",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"NCCL_IB_DISABLE": "1"}},
        {"kind": "Job", "metadata": {"name": "no-api-version"}},
    ]
    rv = list_review(items)
    status, doc, decision, req = validate(rv)
    assert (status, decision) == (200, None) and envelope(doc) == {"uid": rv["request"]["uid"], "allowed": True}
    rv = list_review([])
    assert validate(rv)[2] is None and envelope(validate(rv)[1]) == {"uid": rv["request"]["uid"], "allowed": True}


def test_a_list_names_each_denied_object_and_joins_their_messages():
    first = job(name="alpha", namespace=IB, env=IB_OFF)
    second = job(name=None, namespace=IB, env=IB_OFF)
    del second["metadata"]["name"]
    second["metadata"]["generateName"] = "beta-"
    third = job(namespace=IB, env=IB_OFF)
    del third["metadata"]["name"]
    _, doc, decision, _ = validate(list_review([first, second, third]))
    message = envelope(doc)["status"]["message"]
    assert (
        message.startswith("rdma-webhook: Job alpha: ")
        and "; Job beta-: " in message
        and "; Job (unnamed): " in message
    )
    parts = message[len("rdma-webhook: ") :].split("; Job ")
    assert len(parts) == 3 and all(p.endswith("[env-fallback]") for p in parts), message
    assert [f.message.split(":")[0] for f in decision.denials] == ["Job alpha", "Job beta-", "Job (unnamed)"]
    assert decision.policy == "ib-shared"  # named once


def test_a_list_item_whose_metadata_is_not_an_object_is_judged_in_the_request_s_namespace():
    jb = job(namespace=IB, env=IB_OFF)
    jb["metadata"] = "llama"
    _, doc, decision, _ = validate(list_review([jb], namespace=IB))
    assert envelope(doc)["status"]["message"].startswith("rdma-webhook: Job (unnamed): "), doc


def test_each_list_item_is_judged_in_its_own_namespace_under_its_own_policy():
    ok_ml = job(name="erdma-job", namespace=ML)
    bad_ib = job(name="ib-job", namespace=IB, env=IB_OFF)
    rv = list_review([ok_ml, bad_ib], namespace=ML)
    _, doc, decision, _ = validate(rv)
    message = envelope(doc)["status"]["message"]
    assert message.startswith("rdma-webhook: Job ib-job: ") and "erdma-job" not in message, message
    ml_policy = validate(list_review([ok_ml]))[2].policy
    assert ml_policy and ml_policy != "ib-shared"
    assert decision.policy == f"{ml_policy},ib-shared"
    # an item without a namespace is in the request's
    del bad_ib["metadata"]["namespace"]
    _, doc, decision, _ = validate(list_review([bad_ib], namespace=IB))
    assert envelope(doc)["allowed"] is False and decision.policy == "ib-shared"
    _, doc, decision, _ = validate(list_review([bad_ib], namespace="default"))
    assert envelope(doc)["allowed"] is True


def test_a_list_item_namespace_is_looked_up_by_its_name():
    looked_up = []

    def namespace_of(name):
        looked_up.append(name)
        return STATE.namespace(name)

    items = [job(name="a", namespace=IB), job(name="b", namespace=ML)]
    del items[1]["metadata"]["namespace"]
    validate(list_review(items, namespace="default"), namespace_of=namespace_of)
    assert looked_up == [IB, "default"]
    # an item naming no namespace in a request naming none: nothing to look up (the served
    # lookup would ask the API server)
    looked_up.clear()
    _, doc, decision, _ = validate(list_review(items, namespace=None), namespace_of=namespace_of)
    assert looked_up == [IB]
    assert envelope(doc)["allowed"] is False and "Job b: " in envelope(doc)["status"]["message"]
    assert "[namespace-unknown]" in envelope(doc)["status"]["message"]


def test_a_pod_in_a_list_is_judged_and_named():
    """A Pod in the List is judged with the rest (here: a pod as `kubectl get pods -o yaml` prints
    it after admission passes; one that sets NCCL_IB_DISABLE=1 and NCCL_NET=Socket is denied),
    labelled `Pod <name or generateName>`, its reasons joined by "; "."""
    pod = trainer_pod()
    stored = applied(pod, envelope(mutate(k.admission_review(pod))[1]))
    stored["metadata"]["name"] = "llama-0"
    _, doc, decision, _ = validate(list_review([stored]))
    assert envelope(doc)["allowed"] is True and decision.outcome == "unchanged" and decision.policy == "ib-shared", doc
    env = [{"name": "NCCL_IB_DISABLE", "value": "1"}, {"name": "NCCL_NET", "value": "Socket"}]
    bad = k.pod([k.container("trainer", env=env)], namespace=IB)
    rv = list_review([bad])
    _, doc, decision, _ = validate(rv)
    message = envelope(doc)["status"]["message"]
    assert message.startswith("rdma-webhook: Pod trainer-: container 'trainer': "), message
    rules = re.findall(r" \[([a-z-]+)\](?:; |$)", message)  # one object's reasons joined by "; "
    assert rules == [f.rule for f in decision.denials] and rules.count("env-fallback") == 2, message
    assert message.count("; container 'trainer': ") == len(rules) - 1, message
    assert {f.container for f in decision.denials} == {"trainer"}
    assert all(f.message.startswith("Pod trainer-: ") for f in decision.denials)
    assert decision.pod == rv["request"]["object"]  # the List as sent
    # a pod naming no namespace is in the request's
    del stored["metadata"]["namespace"]
    _, doc, decision, _ = validate(list_review([stored], namespace=IB))
    assert envelope(doc)["allowed"] is True and decision.policy == "ib-shared"


def test_a_pod_in_a_list_keeps_its_warnings_and_its_claims_are_read():
    env = [{"name": "NCCL_SOCKET_IFNAME", "value": "ens5"}]
    pod = k.pod([k.container("trainer", env=env)], namespace=IB, name="llama-0", generate_name=None)
    stored = applied(pod, envelope(mutate(k.admission_review(pod))[1]))
    _, doc, decision, _ = validate(list_review([stored]))
    resp = envelope(doc)
    assert resp["allowed"] is True and len(resp["warnings"]) == 1
    assert resp["warnings"][0].startswith("Pod llama-0: trainer: NCCL_SOCKET_IFNAME='ens5'")
    # a pod claiming another fabric's NIC: denied when the claims are known
    dra = _dranet_pod()
    stored = applied(dra, envelope(mutate(k.admission_review(dra), namespace_of=DRANET_STATE.namespace)[1]))
    rv = list_review([stored])
    _, doc, _, _ = validate(rv, namespace_of=DRANET_STATE.namespace, claims=DRANET_STATE.claims())
    assert envelope(doc)["allowed"] is False and "[fabric-mismatch]" in envelope(doc)["status"]["message"]
    _, doc, _, _ = validate(rv, namespace_of=DRANET_STATE.namespace)
    assert envelope(doc)["allowed"] is True


def test_a_pod_in_a_list_reads_the_lists_configmaps_and_the_attachments():
    cm, _ = _script_job()
    pod = _script_pod()
    store = scripts.ConfigMapStore()
    store.add(cm, ML)
    stored = applied(pod, envelope(mutate(k.admission_review(pod), attachments=None, config_maps=None)[1]))
    _, doc, _, _ = validate(list_review([cm, stored]))
    assert envelope(doc)["allowed"] is False and "[command-fallback]" in envelope(doc)["status"]["message"]
    _, doc, _, _ = validate(list_review([stored]))
    assert envelope(doc)["allowed"] is True
    # sriov-roce: the final state needs its NetworkAttachmentDefinition
    ns = Namespace("ai-training", {"rdma-webhook.io/injection": "enabled", "rdma-webhook.io/policy": "sriov-roce"})
    pod = trainer_pod(namespace="ai-training")
    stored = applied(pod, envelope(mutate(k.admission_review(pod), attachments=None)[1]))
    empty = FileClusterState([ns], [])
    _, doc, _, _ = validate(list_review([stored]), namespace_of=empty.namespace, attachments=empty.attachments())
    assert envelope(doc)["allowed"] is False and "[network-attachment]" in envelope(doc)["status"]["message"]
    _, doc, _, _ = validate(list_review([stored]), namespace_of=empty.namespace, attachments=None)
    assert envelope(doc)["allowed"] is True


def test_a_list_with_a_pod_and_a_job_both_denied_names_both():
    pod = ib_disabled_pod(namespace=IB)
    jb = job(name="ib-job", namespace=IB, env=IB_OFF)
    _, doc, decision, _ = validate(list_review([pod, jb]))
    message = envelope(doc)["status"]["message"]
    assert message.startswith("rdma-webhook: Pod trainer-: ") and "; Job ib-job: " in message, message
    assert decision.policy == "ib-shared" and decision.outcome == "denied"
    assert {f.message.split(":")[0] for f in decision.denials} == {"Pod trainer-", "Job ib-job"}


def test_a_list_under_a_subresource_or_without_items_is_no_list():
    jb = job(namespace=IB, env=IB_OFF)
    for change in ("subResource", "items"):
        rv = list_review([jb])
        if change == "subResource":
            rv["request"]["subResource"] = "status"
        else:
            rv["request"]["object"]["items"] = {"0": jb}
        status, doc, decision, _ = validate(rv)
        assert (status, decision) == (200, None) and envelope(doc) == {"uid": rv["request"]["uid"], "allowed": True}


def test_a_list_of_another_group_is_no_list():
    jb = job(namespace=IB, env=IB_OFF)
    rv = list_review([jb])
    rv["request"]["kind"]["group"] = "example.com"
    status, doc, decision, _ = validate(rv)
    assert decision is None and envelope(doc) == {"uid": rv["request"]["uid"], "allowed": True}
    # without request.kind, the List's own apiVersion says it is the core group's
    rv = list_review([jb])
    del rv["request"]["kind"]
    _, doc, decision, _ = validate(rv)
    assert envelope(doc)["allowed"] is False
    rv["request"]["object"]["apiVersion"] = "example.com/v1"
    _, doc, decision, _ = validate(rv)
    assert decision is None


# -- what a workload's check reads: runtimes, NetworkAttachmentDefinitions, DRA claims, ConfigMaps ---------

TRAINER = "trainer.kubeflow.org"


def cluster_runtime(env=None):
    """A Kubeflow Trainer ClusterTrainingRuntime (torch-distributed shape), its `node` job's pods
    opted in; `env` for the node container."""
    node = k.container("node", env=env, command=["torchrun", "/workspace/train.py"])
    return k.cluster_training_runtime(node, pod_labels={"rdma-webhook.io/inject": "true"})


def trainjob(namespace=IB):
    return {
        "apiVersion": f"{TRAINER}/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "llama", "namespace": namespace},
        "spec": {"runtimeRef": {"name": "torch-ib", "apiGroup": TRAINER, "kind": "ClusterTrainingRuntime"}},
    }


def trainjob_review(obj):
    rv = k.admission_review(obj, kind="TrainJob", resource="trainjobs")
    for key in ("kind", "resource", "requestKind", "requestResource"):
        rv["request"][key]["group"], rv["request"][key]["version"] = TRAINER, "v1alpha1"
    return rv


@pytest.fixture()
def _trainer_release(monkeypatch):
    from webhook.kinds import trainer

    monkeypatch.delenv(trainer.TRAINER_RELEASE_ENV, raising=False)


@pytest.mark.usefixtures("_trainer_release")
def test_a_trainjob_is_judged_by_the_runtime_it_names_when_the_runtimes_are_known():
    from webhook.cluster.state import RuntimeStore

    runtimes = RuntimeStore([cluster_runtime(env=IB_OFF)])
    rv = trainjob_review(trainjob())
    _, doc, decision, _ = validate(rv, runtimes=runtimes)
    resp = envelope(doc)
    assert resp["allowed"] is False and resp["status"]["message"].startswith("rdma-webhook: pods of TrainJob llama "), (
        resp
    )
    assert "[env-fallback]" in resp["status"]["message"]
    # runtimes not tracked: the TrainJob cannot be judged, and says so
    _, doc, decision, _ = validate(rv)
    resp = envelope(doc)
    assert resp["allowed"] is True and decision.templates == [] and decision.reason == resp["warnings"][0], resp
    assert "torch-ib" in decision.reason
    # the same in a List
    _, doc, _, _ = validate(list_review([trainjob()], namespace=IB), runtimes=runtimes)
    assert envelope(doc)["status"]["message"].startswith("rdma-webhook: TrainJob llama: "), doc
    _, doc, _, _ = validate(list_review([trainjob()], namespace=IB))
    assert envelope(doc)["allowed"] is True


def _sriov_job():
    obj = job(name="vf-job", namespace="ai-training")
    return obj


def test_a_workload_s_templates_meet_the_network_attachments_of_the_cluster_state():
    ns = Namespace("ai-training", {"rdma-webhook.io/injection": "enabled", "rdma-webhook.io/policy": "sriov-roce"})
    empty = FileClusterState([ns], [])
    for rv in (job_review(_sriov_job()), list_review([_sriov_job()], namespace="ai-training")):
        _, doc, _, _ = validate(rv, namespace_of=empty.namespace, attachments=empty.attachments())
        assert envelope(doc)["allowed"] is False and "[network-attachment]" in envelope(doc)["status"]["message"], doc
        _, doc, _, _ = validate(rv, namespace_of=empty.namespace, attachments=None)
        assert envelope(doc)["allowed"] is True, doc


def test_a_workload_s_templates_meet_the_dra_claims_known():
    pod = _dranet_pod()
    obj = job(name="dranet-job", namespace=ML)
    obj["spec"]["template"] = {
        "metadata": {"labels": pod["metadata"]["labels"], "annotations": pod["metadata"]["annotations"]},
        "spec": {
            "restartPolicy": "Never",
            "containers": pod["spec"]["containers"],
            "resourceClaims": pod["spec"]["resourceClaims"],
        },
    }
    for rv in (job_review(obj), list_review([obj])):
        _, doc, _, _ = validate(rv, namespace_of=DRANET_STATE.namespace, claims=DRANET_STATE.claims())
        assert envelope(doc)["allowed"] is False and "[fabric-mismatch]" in envelope(doc)["status"]["message"], doc
        _, doc, _, _ = validate(rv, namespace_of=DRANET_STATE.namespace)
        assert envelope(doc)["allowed"] is True, doc


def test_a_workload_reads_the_configmaps_given_to_validate():
    """`rdma-webhook review` hands the ConfigMaps of its input to `handle_validate` with each
    workload: the Job's script is read from them."""
    cm, jb = _script_job()
    store = scripts.ConfigMapStore()
    store.add(cm, ML)
    rv = job_review(jb)
    _, doc, _, _ = validate(rv, config_maps=store)
    assert envelope(doc)["allowed"] is False and "[command-fallback]" in envelope(doc)["status"]["message"]
    _, doc, _, _ = validate(rv)
    assert envelope(doc)["allowed"] is True


# -- fixed after the part's run (mutation/MUTATION.md, admission.review, "found on the way") ---------------------


def test_a_review_naming_neither_kind_nor_resource_is_read_by_its_object_kind():
    """A hand-written review without request.kind and request.resource: a Job is judged as a Job at
    /validate (allowed with the summary, as with `kind` or `resource: jobs`), not refused as a
    malformed pod; a Pod object, or one that names no kind, is still judged as a pod."""
    jb = job(namespace=IB)
    rv = job_review(jb, namespace=IB)
    _, doc, with_kind, _ = validate(rv)
    del rv["request"]["kind"], rv["request"]["resource"]
    status, doc2, decision, _ = validate(rv)
    assert status == 200 and envelope(doc2)["allowed"] is True, doc2
    assert envelope(doc2).get("warnings") == envelope(doc).get("warnings") and envelope(doc2)["warnings"]
    assert decision.outcome == with_kind.outcome == "unchanged" and decision.reason == "pods will be mutated"
    # at /mutate the same review is about no pod: skipped, no patch
    status, doc3, decision, _ = mutate(rv)
    assert (status, decision) == (200, None) and envelope(doc3) == {"uid": rv["request"]["uid"], "allowed": True}
    # a Pod object, or an object without kind (or with an empty one), in such a review is a pod
    pod = trainer_pod()
    empty_kind = k.admission_review(dict(pod, kind=""))
    del empty_kind["request"]["kind"], empty_kind["request"]["resource"]
    _, doc5, decision, _ = mutate(empty_kind)  # judged as a pod, whose kind the decision then refuses
    assert decision.outcome == "denied" and [f.rule for f in decision.denials] == ["malformed-pod"], doc5
    for obj in (pod, {x: v for x, v in pod.items() if x not in ("kind", "apiVersion")}):
        prv = k.admission_review(obj)
        del prv["request"]["kind"], prv["request"]["resource"]
        _, doc4, decision, _ = mutate(prv)
        assert decision is not None and decision.outcome == "mutated" and envelope(doc4)["patchType"] == "JSONPatch"


def test_a_review_naming_the_pods_resource_is_about_a_pod_whatever_its_object_says():
    """`resource: pods` without `kind` is a pod request: a Job object there is a malformed pod, not
    a Job (the object's own kind is read only when the review names neither)."""
    rv = job_review(job(namespace=IB), namespace=IB)
    del rv["request"]["kind"]
    rv["request"]["resource"] = {"group": "", "version": "v1", "resource": "pods"}
    _, doc, decision, _ = validate(rv)
    assert envelope(doc)["allowed"] is False and "[malformed-pod]" in envelope(doc)["status"]["message"], doc
    _, doc, decision, _ = mutate(rv)
    assert envelope(doc)["allowed"] is False and "[malformed-pod]" in envelope(doc)["status"]["message"], doc


def test_a_pod_in_a_list_is_judged_as_its_create_would_be():
    """`kubectl kustomize | curl /validate`: a Pod in a List has not been mutated yet, so it is
    judged as the API server would judge its CREATE (the mutation, then the final state that
    mutation makes), as a Job's template in the same List is, not as a stored pod missing its
    device, IPC_LOCK and pinned variables."""
    pod = k.pod([k.container("trainer")], namespace=IB)
    _, doc, decision, _ = validate(list_review([pod]))
    resp = envelope(doc)
    assert resp["allowed"] is True and decision.outcome == "unchanged" and decision.policy == "ib-shared", resp
    assert decision.denials == [] and decision.reason == "every object of the list passes"
    # the same containers as a Job's template in the List: the same answer
    jb = job(namespace=IB)
    _, doc2, decision2, _ = validate(list_review([jb]))
    assert envelope(doc2)["allowed"] is True and decision2.policy == decision.policy
    # what the mutation cannot mend is still denied, named by the pod
    bad = k.pod([k.container("trainer", env=[{"name": "NCCL_IB_DISABLE", "value": "1"}])], namespace=IB)
    _, doc3, decision3, _ = validate(list_review([pod, bad]))
    message = envelope(doc3)["status"]["message"]
    assert message.startswith("rdma-webhook: Pod trainer-: container 'trainer': ") and "[env-fallback]" in message
    assert [f.rule for f in decision3.denials] == ["env-fallback"] and decision3.outcome == "denied"
