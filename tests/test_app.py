"""webhook/serving/app.py in process, through Flask's test client (werkzeug builds the WSGI environ): the
routing and sessions of `WebhookFlask`, which replace two of Flask's defaults. Over TLS the same
app serves every test in test_server.py and test_hostile.py."""

from __future__ import annotations

import json

import flask
import pytest

from kube_objects import admission_review, pytorchjob_worker
from webhook.serving.app import WebhookFlask, create_app
from webhook.policy.store import PolicyStore

from conftest import POLICIES


@pytest.fixture()
def client(cluster):
    store = PolicyStore(str(POLICIES))
    store.reload(force=True)
    return create_app(store, cluster).test_client()


@pytest.mark.parametrize("host", ["webhook.rdma-webhook.svc:443", "WebHook.Example:8443", "10.0.0.7", "[::1]:8443", "bücher.example"])
def test_routes_match_whatever_the_host_header_says(client, host):
    r = client.get("/healthz", headers={"Host": host})
    assert r.status_code == 200 and r.get_json() == {"status": "ok"}
    r = client.post("/mutate", data=json.dumps(admission_review(pytorchjob_worker())), headers={"Host": host},
                    content_type="application/json")
    assert r.status_code == 200 and r.get_json()["response"]["allowed"] is True


def test_no_host_header_at_all(client):
    r = client.get("/healthz", environ_overrides={"HTTP_HOST": ""})
    assert r.status_code == 200


@pytest.mark.parametrize("path, code", [("/mutate/", 404), ("/m%C3%BCtate", 404), ("/müt", 404), ("/", 404),
                                        ("/healthz?verbose=1", 200), ("//healthz", 404)])
def test_unknown_paths_are_json_404s(client, path, code):
    r = client.get(path)
    assert r.status_code == code and r.is_json


def test_wrong_method_is_a_json_405(client):
    r = client.get("/mutate")
    assert r.status_code == 405 and "error" in r.get_json()


def test_every_request_gets_the_same_read_only_null_session(cluster):
    store = PolicyStore(str(POLICIES))
    store.reload(force=True)
    app = create_app(store, cluster)
    seen = []

    @app.get("/probe")
    def probe():
        seen.append(flask.session._get_current_object())
        with pytest.raises(RuntimeError):
            flask.session["x"] = 1  # no secret key: Flask's NullSession refuses writes
        return "ok"

    client = app.test_client()
    assert client.get("/probe").status_code == 200 and client.get("/probe").status_code == 200
    assert len(seen) == 2 and seen[0] is seen[1] and isinstance(seen[0], flask.sessions.NullSession)
    assert "Set-Cookie" not in client.get("/probe").headers
    assert isinstance(app, WebhookFlask)


def test_answers_are_one_bytes_body_and_head_gets_none(client):
    get, head = client.get("/healthz"), client.head("/healthz")
    assert get.data == b'{"status":"ok"}' and get.headers["Content-Length"] == str(len(get.data))
    assert head.status_code == 200 and head.data == b"" and head.headers["Content-Length"] == str(len(get.data))
    assert get.headers["Content-Type"] == "application/json"
