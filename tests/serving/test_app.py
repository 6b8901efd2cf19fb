"""webhook/serving/app.py in process, through Flask's test client (werkzeug builds the WSGI environ): the
probes, /metrics and errors, the routing and sessions of `WebhookFlask`, which replace two of
Flask's defaults. The admissions never reach Flask (tests/serving/test_asgi.py); over TLS the same
app serves every test in test_server.py and test_server_hostile.py."""

from __future__ import annotations

import json

import flask
import pytest

import kube_objects as k
from kube_objects import admission_review, pytorchjob_worker
from webhook.serving.app import WebhookFlask, create_app
from webhook.policy.store import PolicyStore

from conftest import POLICIES


@pytest.fixture()
def client(cluster):
    store = PolicyStore(str(POLICIES))
    store.reload(force=True)
    return create_app(store, cluster).test_client()


@pytest.mark.parametrize(
    "host", ["webhook.rdma-webhook.svc:443", "WebHook.Example:8443", "10.0.0.7", "[::1]:8443", "bücher.example"]
)
def test_routes_match_whatever_the_host_header_says(client, host):
    r = client.get("/healthz", headers={"Host": host})
    assert r.status_code == 200 and r.get_json() == {"status": "ok"}
    r = client.get("/readyz", headers={"Host": host})
    assert r.status_code == 200 and r.get_json()["status"] == "ready"


def test_no_host_header_at_all(client):
    r = client.get("/healthz", environ_overrides={"HTTP_HOST": ""})
    assert r.status_code == 200


@pytest.mark.parametrize(
    "path, code",
    [
        ("/mutate/", 404),
        ("/m%C3%BCtate", 404),
        ("/müt", 404),
        ("/", 404),
        ("/healthz?verbose=1", 200),
        ("//healthz", 404),
    ],
)
def test_unknown_paths_are_json_404s(client, path, code):
    r = client.get(path)
    assert r.status_code == code and r.is_json


def test_wrong_method_is_a_json_405(client):
    r = client.post("/healthz")
    assert r.status_code == 405 and "error" in r.get_json()


def test_flask_has_no_admission_route(client):
    """The admissions have one door (webhook.serving.admissions through the front): Flask has none."""
    for path in ("/mutate", "/validate"):
        assert client.post(path, data=b"{}", content_type="application/json").status_code == 404


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


def test_an_install_with_no_policy_chosen_is_ready_and_refuses_labelled_pods_saying_how_to_choose(cluster, tmp_path):
    """The shipped policies are a catalogue (issue 26): a fresh install mounts an empty folder.
    That is a configuration, not a broken one: /readyz answers 200 (a Deployment that never
    becomes ready would leave the fail-closed webhook unreachable and every labelled pod refused
    with "failed calling webhook"), and a labelled pod is denied by the webhook itself, [no-policy],
    with the words an admin needs. Unlabelled pods are never sent (selectors), and the same empty
    folder stays an error for `policy lint`."""
    from webhook.core.decision import NO_POLICY_CHOSEN
    from webhook.policy.load import load_dir

    empty = tmp_path / "policies"
    empty.mkdir()
    store = PolicyStore(str(empty))
    assert store.reload(force=True) and store.current is not None and len(store.current) == 0
    app = create_app(store, cluster)
    r = app.test_client().get("/readyz")
    assert r.status_code == 200 and r.get_json() == {"status": "ready", "policies": []}
    status, data = app.extensions["rdma_webhook.admissions"].answer(
        "mutate", k.body(admission_review(pytorchjob_worker()))
    )
    resp = json.loads(data)["response"]
    assert status == 200 and resp["allowed"] is False
    assert resp["status"]["message"].endswith(f"{NO_POLICY_CHOSEN} [no-policy]"), resp["status"]["message"]
    assert "policies.enabled" in NO_POLICY_CHOSEN and "deploy/catalogue/" in NO_POLICY_CHOSEN
    policies, errors = load_dir(empty)
    assert policies is None and [e.message for e in errors] == ["no *.yaml policy files in the folder"]


def test_an_invalid_policy_folder_is_still_not_ready(cluster, tmp_path):
    """Only the empty folder is ready without a policy: a folder whose files do not load is not."""
    bad = tmp_path / "policies"
    bad.mkdir()
    (bad / "x.yaml").write_text("apiVersion: rdma-webhook.io/v1alpha2\nkind: RdmaPolicy\nname: x\n")
    store = PolicyStore(str(bad))
    assert not store.reload(force=True) and store.current is None
    r = create_app(store, cluster).test_client().get("/readyz")
    assert r.status_code == 503


@pytest.mark.parametrize("raw", ["/\xff\xfe", "/caf\xc3", "/\xe2\x82\xac"])
def test_a_path_whose_bytes_are_not_utf8_is_a_json_404(client, raw):
    """PEP 3333 carries a path's bytes as latin-1 characters: one that is not valid UTF-8 (a lone
    0xFF, a cut sequence) is still routed, a JSON 404 as for any unknown path (the last, `/€`
    as UTF-8, too), never the 503 of an error."""
    r = client.get("/", environ_overrides={"PATH_INFO": raw})
    assert (r.status_code, r.get_json()) == (404, client.get("/nowhere").get_json())


def test_each_answer_is_counted_by_its_status(client):
    from webhook.telemetry import metrics

    def count(code: str) -> float:
        return metrics.child(metrics.RESPONSES, code)._value.get()

    ok, missing, wrong = count("200"), count("404"), count("405")
    assert client.get("/healthz").status_code == 200
    assert client.get("/nowhere").status_code == 404
    assert client.get("/nowhere").status_code == 404
    assert client.delete("/readyz").status_code == 405
    assert (count("200") - ok, count("404") - missing, count("405") - wrong) == (1, 2, 1)


def test_wsgi_closes_the_flask_answer_it_joined(cluster):
    """PEP 3333: whoever consumes an app's iterable calls its `close`; `wsgi` consumes Flask's, so
    it closes it (werkzeug runs a response's call_on_close functions there)."""
    from webhook.serving.app import wsgi

    store = PolicyStore(str(POLICIES))
    store.reload(force=True)
    app = create_app(store, cluster)
    closed = []

    @app.get("/closing")
    def closing():
        response = flask.Response(b'{"a":1}', content_type="application/json")
        response.call_on_close(lambda: closed.append(True))
        return response

    started = []
    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/closing",
        "SERVER_NAME": "x",
        "SERVER_PORT": "443",
        "wsgi.url_scheme": "https",
    }
    body = wsgi(app)(environ, lambda status, headers, exc_info=None: started.append(status))
    assert (body, started, closed) == ([b'{"a":1}'], ["200 OK"], [True])
