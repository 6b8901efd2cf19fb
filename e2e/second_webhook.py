"""A second mutating webhook, standing in for the injectors that run beside rdma-webhook in real
clusters (sidecar injectors, network-resources-injector). It is called after ours (the API server
calls mutating webhooks in the order of their configurations' names) and edits the pod according
to the pod label `e2e.rdma-webhook.io/second`:

- `sidecar`: adds a container `sidecar` asking for one GPU, so our webhook must be reinvoked
  (reinvocationPolicy: IfNeeded) to inject it, without duplicating what it added the first time;
- `disable-ib`: sets NCCL_IB_DISABLE=1 in the first container (a misbehaving injector), which our
  reinvocation or the final validating check must refuse.

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
        return [{"op": "add", "path": "/spec/containers/-", "value": {
            "name": "sidecar", "image": "registry.example/sidecar:1",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}}]
    if mode == "disable-ib":
        env = containers[0].get("env") or []
        if not any(e.get("name") == "NCCL_IB_DISABLE" for e in env):
            if "env" not in containers[0]:
                return [{"op": "add", "path": "/spec/containers/0/env", "value": [{"name": "NCCL_IB_DISABLE", "value": "1"}]}]
            return [{"op": "add", "path": "/spec/containers/0/env/-", "value": {"name": "NCCL_IB_DISABLE", "value": "1"}}]
    return []


class SecondWebhook:
    def __init__(self, workdir: Path):
        self.calls: list[str] = []
        certs = Path(workdir) / "second-webhook-certs"
        self.ca_bundle = write_certs(certs, "second", "e2e", ips=["127.0.0.1"])
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's naming)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                req = body["request"]
                outer.calls.append((req.get("object") or {}).get("metadata", {}).get("name")
                                   or (req.get("object") or {}).get("metadata", {}).get("generateName", ""))
                resp = {"uid": req["uid"], "allowed": True}
                ops = _patch(req["object"])
                if ops:
                    resp.update(patchType="JSONPatch", patch=base64.b64encode(json.dumps(ops).encode()).decode())
                data = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp}).encode()
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
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "zz-e2e-second"},
            "webhooks": [{
                "name": NAME, "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
                "timeoutSeconds": 10, "reinvocationPolicy": "Never",
                "clientConfig": {"url": f"https://127.0.0.1:{self.port}/mutate", "caBundle": self.ca_bundle},
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
                "objectSelector": {"matchExpressions": [{"key": LABEL, "operator": "Exists"}]},
            }],
        }

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
