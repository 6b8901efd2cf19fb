"""Bad input at the AdmissionReview envelope: a clear answer, never a traceback or a 500."""

from __future__ import annotations

import json

import pytest

import kube_objects as k
from webhook.admission import review
from webhook.core.decision import Namespace

NS = {"ml-training": Namespace("ml-training", {"rdma-webhook.io/injection": "enabled"})}


def handle(body: bytes, policies):
    return review.handle(body, policies, NS.get, None)


@pytest.mark.parametrize(
    "body,fragment",
    [
        (b"", "not valid JSON"),
        (b"{not json", "not valid JSON"),
        (
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "x", ',
            "not valid JSON",
        ),
        (b"[1, 2, 3]", "not a JSON object"),
        (b'"AdmissionReview"', "not a JSON object"),
        (b"{}", "no request object"),
        (b'{"request": null}', "no request object"),
        (b'{"request": {"uid": ""}}', "no uid"),
        (b'{"request": {"uid": 42}}', "no uid"),
        ("{\"request\": {\"uid\": \"\u0000\"".encode(), "not valid JSON"),
        (b"\xff\xfe\x00garbage", "not valid JSON"),
    ],
)
def test_unanswerable_bodies_get_400(policies, body, fragment):
    code, doc, decision, req = handle(body, policies)
    assert code == 400 and fragment in doc["error"]


def test_deeply_nested_body_is_a_clear_400(policies):
    body = b'{"request": ' + b"[" * 100000 + b"]" * 100000 + b"}"
    code, doc, _, _ = handle(body, policies)
    assert code == 400


def test_wrong_envelope_with_uid_is_denied_with_reason(policies):
    rv = k.admission_review(k.pod([k.container("t")]))
    rv["apiVersion"] = "admission.k8s.io/v1beta1"
    code, doc, _, _ = handle(json.dumps(rv).encode(), policies)
    assert code == 200
    r = doc["response"]
    assert r["uid"] == rv["request"]["uid"] and r["allowed"] is False and r["status"]["code"] == 400
    assert "expected apiVersion admission.k8s.io/v1" in r["status"]["message"]


@pytest.mark.parametrize(
    "obj,fragment",
    [
        (None, "not a JSON object"),
        ("a pod", "not a JSON object"),
        (
            {"kind": "Deployment", "metadata": {"labels": {"rdma-webhook.io/inject": "true"}}},
            "is a 'Deployment', not a Pod",
        ),
        ({"kind": "Pod", "metadata": "x"}, "metadata must be an object"),
        ({"kind": "Pod", "metadata": {"labels": {"rdma-webhook.io/inject": True}}}, "metadata.labels must map strings"),
        (
            {
                "kind": "Pod",
                "metadata": {"labels": {"rdma-webhook.io/inject": "true"}},
                "spec": {"containers": "trainer"},
            },
            "spec.containers must be a list",
        ),
        (
            {
                "kind": "Pod",
                "metadata": {"labels": {"rdma-webhook.io/inject": "true"}},
                "spec": {"containers": [{"name": "t", "env": {"A": "1"}}]},
            },
            "spec.containers[0].env must be a list",
        ),
        (
            {
                "kind": "Pod",
                "metadata": {"labels": {"rdma-webhook.io/inject": "true"}},
                "spec": {"containers": [{"name": "t", "resources": {"limits": ["x"]}}]},
            },
            "resources.limits must be an object",
        ),
        (
            {
                "kind": "Pod",
                "metadata": {"labels": {"rdma-webhook.io/inject": "true"}},
                "spec": {"containers": [{"name": "t", "securityContext": {"capabilities": {"add": "IPC_LOCK"}}}]},
            },
            "capabilities must hold add/drop lists",
        ),
    ],
)
def test_malformed_pods_are_denied_with_reason(policies, obj, fragment):
    rv = k.admission_review(obj, namespace="ml-training")
    code, doc, decision, _ = handle(json.dumps(rv).encode(), policies)
    assert code == 200
    r = doc["response"]
    assert r["allowed"] is False and r["status"]["code"] == 403 and fragment in r["status"]["message"]


NO_GPU = "no container requests a GPU"


@pytest.mark.parametrize(
    "pod",
    [
        {"kind": "Pod", "metadata": {"labels": {"rdma-webhook.io/inject": "true"}}},
        {"kind": "Pod", "metadata": {"labels": {"rdma-webhook.io/inject": "true"}}, "spec": None},
        {
            "kind": "Pod",
            "metadata": {"labels": {"rdma-webhook.io/inject": "true"}, "annotations": None},
            "spec": {"containers": None},
        },
        {
            "metadata": {"labels": {"rdma-webhook.io/inject": "true"}},
            "spec": {"containers": [{"name": None, "resources": None, "env": None}]},
        },
    ],
)
def test_missing_or_null_fields_read_as_absent(policies, pod):
    """A null or missing field is what the API server sends for "not set": no container asks
    for a GPU, so the labelled pod is allowed unchanged with the launcher warning, never a crash."""
    rv = k.admission_review(pod, namespace="ml-training")
    code, doc, decision, _ = handle(json.dumps(rv).encode(), policies)
    r = doc["response"]
    assert code == 200 and r["uid"] == rv["request"]["uid"] and r["allowed"] is True and "patch" not in r
    assert decision.outcome == "unchanged" and r["warnings"][0].startswith(NO_GPU), r


@pytest.mark.parametrize("value", ["many", "", "8 GPUs", "NaN", "inf", "²", "٣", "$GPU_PER_NODE", True, None, [8]])
@pytest.mark.parametrize("section", ["limits", "requests"])
def test_a_gpu_count_that_is_not_a_quantity_is_denied_as_malformed(policies, section, value):
    """Read as "no GPU", a labelled pod asking for "many" GPUs would be allowed without RDMA;
    the API server would reject it later anyway. It is denied here, naming the field."""
    pod = {
        "kind": "Pod",
        "metadata": {"labels": {"rdma-webhook.io/inject": "true"}},
        "spec": {"containers": [{"name": "t", "resources": {section: {"nvidia.com/gpu": value}}}]},
    }
    rv = k.admission_review(pod, namespace="ml-training")
    code, doc, decision, _ = handle(json.dumps(rv).encode(), policies)
    r = doc["response"]
    assert code == 200 and r["allowed"] is False and r["status"]["code"] == 403, r
    assert f"spec.containers[0].resources.{section}['nvidia.com/gpu'] is not a quantity" in r["status"]["message"], r


@pytest.mark.parametrize("value", ["²", "lots", "inf"])
def test_a_value_the_decision_does_not_read_is_left_to_the_api_server(policies, value):
    """Only GPU values decide who gets RDMA; the API server refuses any other non-quantity before
    admission. A superscript digit once reached Decimal() through str.isdigit and raised."""
    pod = k.pod([k.container("t")])
    pod["spec"]["containers"][0]["resources"]["limits"]["cpu"] = value
    code, doc, decision, _ = handle(json.dumps(k.admission_review(pod)).encode(), policies)
    assert code == 200 and doc["response"]["allowed"] is True and decision.outcome == "mutated", doc


def test_gpu_counts_in_every_quantity_form_make_a_target(policies):
    for value in ("8", 8, "8.0", "1e1", "8000m"):
        pod = k.pod([k.container("t", gpus=0)])
        pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": value}}
        code, doc, decision, _ = handle(json.dumps(k.admission_review(pod)).encode(), policies)
        assert decision.outcome == "mutated", (value, doc)


def test_null_annotations_and_volumes_are_replaced_by_a_valid_patch(policies):
    import base64

    import jsonpatch

    pod = k.pod([k.container("t")], automount=False)
    pod["metadata"]["annotations"] = None
    pod["spec"]["volumes"] = None
    pod["spec"]["containers"][0]["env"] = None
    rv = k.admission_review(pod)
    code, doc, decision, _ = handle(json.dumps(rv).encode(), policies)
    ops = json.loads(base64.b64decode(doc["response"]["patch"]))
    out = jsonpatch.apply_patch(pod, ops)
    assert out["metadata"]["annotations"]["rdma-webhook.io/status"] == "injected"
    assert out["spec"]["volumes"][0]["emptyDir"]["medium"] == "Memory"


def test_non_pod_resources_are_allowed_untouched(policies):
    rv = k.admission_review({"kind": "ConfigMap"}, kind="ConfigMap", resource="configmaps")
    code, doc, decision, _ = handle(json.dumps(rv).encode(), policies)
    assert doc["response"] == {"uid": rv["request"]["uid"], "allowed": True}


def test_unicode_and_control_characters(policies):
    c = k.container(
        "trainer",
        env=[{"name": "NOTE", "value": "\u2603\u0007\u202e evil \x00"}],
        command=[
            "bash",
            "-c",
            "echo \u00e9t\u00e9 NCCL_NET=Socket\u2028; export NCCL_NET=Socket # \u202e\ntorchrun t.py",
        ],
    )
    pod = k.pod([c], labels={"team": "\u00e9quipe-\u2603"}, annotations={"note": "\u65e5\u672c\u8a9e \U0001f600"})
    rv = k.admission_review(pod)
    code, doc, decision, _ = handle(json.dumps(rv).encode(), policies)
    assert code == 200 and doc["response"]["allowed"] is False
    assert "[command-fallback]" in doc["response"]["status"]["message"]
    json.dumps(doc)  # serialisable
    # without the fallback, the pod is mutated and every non-ASCII value comes through the patch intact
    import base64

    import jsonpatch

    pod["spec"]["containers"][0]["command"] = ["bash", "-c", "echo \u00e9t\u00e9\u2028"]
    code, doc, decision, _ = handle(json.dumps(k.admission_review(pod)).encode(), policies)
    assert doc["response"]["allowed"] is True, doc
    out = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(doc["response"]["patch"])))
    assert out["metadata"]["labels"]["team"] == "\u00e9quipe-\u2603"
    assert out["metadata"]["annotations"]["note"] == "\u65e5\u672c\u8a9e \U0001f600"
    assert out["metadata"]["annotations"]["rdma-webhook.io/status"] == "injected"
    assert out["spec"]["containers"][0]["env"][0] == {"name": "NOTE", "value": "\u2603\u0007\u202e evil \x00"}


def test_no_policies_loaded_denies_labelled_pods(policies):
    rv = k.admission_review(k.pod([k.container("t")]))
    code, doc, _, _ = review.handle(json.dumps(rv).encode(), None, NS.get, None)
    assert doc["response"]["allowed"] is False and "no valid policies" in doc["response"]["status"]["message"]
