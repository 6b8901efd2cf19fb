"""A second mutating webhook, standing in for the injectors that run beside rdma-webhook in real
clusters (sidecar injectors, network-resources-injector). It is called after ours (the API server
calls mutating webhooks in the order of their configurations' names) and edits the pod according
to the pod label `e2e.rdma-webhook.io/second`:

- `sidecar`: adds a container `sidecar` asking for one GPU, so our webhook must be reinvoked
  (reinvocationPolicy: IfNeeded) to inject it, without duplicating what it added the first time;
- `disable-ib`: sets NCCL_IB_DISABLE=1 in the first container (a misbehaving injector), which our
  reinvocation or the final validating check must refuse.

It also serves a "late" mutating webhook (`late_configuration`, label `e2e.rdma-webhook.io/late`,
reinvocationPolicy IfNeeded) that changes the pod after rdma-webhook's LAST call, which no
reinvocation of ours can see or repair: the case the final-state check exists for. Its first
call removes our `rdma-webhook.io/status` annotation and marks the pod; our reinvocation puts
the annotation back (a change), so the API server reinvokes the late webhook once more, and
that call, seeing its mark, makes the change its label names (`LATE_MODES`).

It serves HTTPS from a thread of the test process, on loopback.
"""

from __future__ import annotations

import base64
import http.server
import json
import ssl
import threading
from pathlib import Path

from webhook.serving.certs import write_certs

LABEL = "e2e.rdma-webhook.io/second"
NAME = "zz-e2e-second.rdma-webhook.io"


def _patch(pod: dict) -> list[dict]:
    mode = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL)
    containers = pod["spec"]["containers"]
    if mode == "sidecar" and not any(c["name"] == "sidecar" for c in containers):
        return [
            {
                "op": "add",
                "path": "/spec/containers/-",
                "value": {
                    "name": "sidecar",
                    "image": "registry.example/sidecar:1",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                },
            }
        ]
    if mode == "disable-ib":
        env = containers[0].get("env") or []
        if not any(e.get("name") == "NCCL_IB_DISABLE" for e in env):
            if "env" not in containers[0]:
                return [
                    {
                        "op": "add",
                        "path": "/spec/containers/0/env",
                        "value": [{"name": "NCCL_IB_DISABLE", "value": "1"}],
                    }
                ]
            return [
                {"op": "add", "path": "/spec/containers/0/env/-", "value": {"name": "NCCL_IB_DISABLE", "value": "1"}}
            ]
    return []


LATE_LABEL = "e2e.rdma-webhook.io/late"
LATE_NAME = "zzz-e2e-late.rdma-webhook.io"
_MARK = "e2e.rdma-webhook.io~1late-seen"
_STATUS = "rdma-webhook.io~1status"


def _env_index(container: dict, name: str) -> int | None:
    for i, e in enumerate(container.get("env") or []):
        if e.get("name") == name:
            return i
    return None


def _late_change(pod: dict, mode: str) -> list[dict]:
    """The change of `mode` to the pod's first container, as a JSON patch."""
    c = pod["spec"]["containers"][0]
    path = "/spec/containers/0"
    if mode == "disable-ib":
        return [{"op": "add", "path": f"{path}/env/-", "value": {"name": "NCCL_IB_DISABLE", "value": "1"}}]
    if mode == "none":
        return []
    if mode == "gid-index":  # a variable no shipped policy enforces
        i = _env_index(c, "NCCL_IB_GID_INDEX")
        return [] if i is None else [{"op": "replace", "path": f"{path}/env/{i}/value", "value": "3"}]
    if mode == "strip-device":
        return [
            {"op": "remove", "path": f"{path}/resources/{section}/aliyun~1erdma"}
            for section in ("limits", "requests")
            if "aliyun/erdma" in (c.get("resources") or {}).get(section, {})
        ]
    if mode == "drop-ipc-lock":
        return [{"op": "replace", "path": f"{path}/securityContext/capabilities/add", "value": []}]
    if mode == "unset-net":
        i = _env_index(c, "NCCL_NET")
        return [] if i is None else [{"op": "remove", "path": f"{path}/env/{i}"}]
    if mode == "net-socket":
        i = _env_index(c, "NCCL_NET")
        return [] if i is None else [{"op": "replace", "path": f"{path}/env/{i}/value", "value": "Socket"}]
    if mode == "shm-disk":
        volumes = pod["spec"].get("volumes") or []
        return [
            {"op": "replace", "path": f"/spec/volumes/{i}/emptyDir", "value": {}}
            for i, v in enumerate(volumes)
            if v.get("name", "").startswith("rdma-webhook-dshm")
        ]
    raise ValueError(f"unknown late mode {mode!r}")


# What the late webhook does, by the value of its label: each undoes one thing the final-state
# check looks at (the rule that must deny it in brackets).
LATE_MODES = {
    "disable-ib": "env-fallback",
    "strip-device": "device-missing",
    "drop-ipc-lock": "ipc-lock-missing",
    "unset-net": "enforced-env",
    "net-socket": "enforced-env",
    "shm-disk": "shm",
}


def _late_patch(pod: dict) -> list[dict]:
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    mode = (meta.get("labels") or {}).get(LATE_LABEL)
    if "e2e.rdma-webhook.io/late-seen" not in annotations:
        ops = [{"op": "add", "path": f"/metadata/annotations/{_MARK}", "value": "1"}]
        if "rdma-webhook.io/status" in annotations:
            ops.append({"op": "remove", "path": f"/metadata/annotations/{_STATUS}"})
        return ops
    return _late_change(pod, mode)


class SecondWebhook:
    def __init__(self, workdir: Path):
        self.calls: list[str] = []
        self.late_calls: list[str] = []
        certs = Path(workdir) / "second-webhook-certs"
        self.ca_bundle = write_certs(certs, "second", "e2e", ips=["127.0.0.1"])
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's naming)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                req = body["request"]
                outer.calls.append(
                    (req.get("object") or {}).get("metadata", {}).get("name")
                    or (req.get("object") or {}).get("metadata", {}).get("generateName", "")
                )
                resp = {"uid": req["uid"], "allowed": True}
                late = self.path.split("?")[0] == "/late"  # the API server adds ?timeout=...
                if late:
                    outer.late_calls.append(outer.calls.pop())
                ops = _late_patch(req["object"]) if late else _patch(req["object"])
                if ops:
                    resp.update(patchType="JSONPatch", patch=base64.b64encode(json.dumps(ops).encode()).decode())
                data = json.dumps(
                    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(certs / "tls.crt", certs / "tls.key")
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name="second-webhook", daemon=True)
        self.thread.start()

    def configuration(self) -> dict:
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "zz-e2e-second"},
            "webhooks": [
                {
                    "name": NAME,
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Fail",
                    "timeoutSeconds": 10,
                    "reinvocationPolicy": "Never",
                    "clientConfig": {"url": f"https://127.0.0.1:{self.port}/mutate", "caBundle": self.ca_bundle},
                    "rules": [
                        {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}
                    ],
                    "objectSelector": {"matchExpressions": [{"key": LABEL, "operator": "Exists"}]},
                }
            ],
        }

    def late_configuration(self) -> dict:
        """The late webhook: after ours by name, reinvoked too (module docstring)."""
        config = self.configuration()
        config["metadata"]["name"] = "zzz-e2e-late"
        hook = config["webhooks"][0]
        hook.update(
            name=LATE_NAME,
            reinvocationPolicy="IfNeeded",
            objectSelector={"matchExpressions": [{"key": LATE_LABEL, "operator": "Exists"}]},
        )
        hook["clientConfig"] = {**hook["clientConfig"], "url": f"https://127.0.0.1:{self.port}/late"}
        return config

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
