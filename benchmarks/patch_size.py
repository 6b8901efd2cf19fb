"""The JSON patch the webhook answers against the Go yardstick's (../shared/bench/go-peer), for the
same AdmissionReview: bytes of the whole response, bytes and operations of the patch, and what
each patch does to the pod (the paths they touch). The API server decodes the response and
applies the patch inside its timing of the call, so a larger patch is part of what one call costs.

    .venv/bin/python -m benchmarks.patch_size --go-peer BINARY [--out FILE]

The webhook's answer is made in-process by the admission function the server calls
(`webhook.admission.review.handle`, shipped policies, the example cluster state); the yardstick's
over TLS on loopback. Shapes: those of benchmarks/payloads.py that the yardstick mutates (it makes
the erdma mutation for every review: the denied and untouched shapes are left out).
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import ssl
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import payloads
from benchmarks import provenance
from benchmarks.run import free_port, work_dir

ROOT = Path(__file__).resolve().parent.parent


SHAPES = ("pytorchjob-worker-plain", "pytorchjob-worker", "mpijob-worker", "lws-sriov", "mpijob-launcher")


def describe(response: bytes) -> dict:
    doc = json.loads(response)
    resp = doc.get("response") or {}
    ops = json.loads(base64.b64decode(resp["patch"])) if resp.get("patch") else []
    patch = json.dumps(ops, separators=(",", ":")).encode()
    return {
        "allowed": resp.get("allowed"),
        "response_bytes": len(response),
        "patch_bytes": len(patch),
        "ops": len(ops),
        "paths": [f"{o['op']} {o['path']}" for o in ops],
    }


def ours(body: bytes) -> bytes:
    from webhook.admission import review
    from webhook.cluster.state import FileClusterState
    from webhook.policy.load import load_dir

    policies, errors = load_dir(ROOT / "policies")
    assert policies is not None, errors
    path = ROOT / "examples" / "cluster-state.yaml"
    state = FileClusterState.from_text(path.read_text(), str(path))
    code, doc, _, _ = review.handle(body, policies, state.namespace, state.attachments())
    assert code == 200, doc
    import orjson

    return orjson.dumps(doc)


def theirs(binary: str, bodies: dict[str, bytes], work: Path) -> dict[str, bytes]:
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            "-addr",
            f"127.0.0.1:{port}",
            "-cert",
            str(work / "certs" / "tls.crt"),
            "-key",
            str(work / "certs" / "tls.key"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        ctx = ssl.create_default_context(cafile=str(work / "certs" / "ca.crt"))
        out: dict[str, bytes] = {}
        deadline = time.monotonic() + 20
        for name, body in bodies.items():
            while True:
                try:
                    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=5)
                    conn.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
                    resp = conn.getresponse()
                    out[name] = resp.read()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        return out
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--go-peer", required=True)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "patch_size.json"))
    args = ap.parse_args()
    prov = provenance.start()
    bodies = {name: body for name, body in payloads.bodies().items() if name in SHAPES}
    work, _ = work_dir("rdma-webhook-patch-size-")
    go = theirs(args.go_peer, bodies, work)
    rows = {}
    for name, body in bodies.items():
        a, b = describe(ours(body)), describe(go[name])
        rows[name] = {
            "review_bytes": len(body),
            "webhook": a,
            "go_peer": b,
            "patch_bytes_ratio": round(a["patch_bytes"] / b["patch_bytes"], 2) if b["patch_bytes"] else None,
        }
        print(
            f"{name}: review {len(body)} B; patch webhook {a['patch_bytes']} B / {a['ops']} ops, "
            f"go-peer {b['patch_bytes']} B / {b['ops']} ops; response {a['response_bytes']} / {b['response_bytes']} B"
        )
    out = Path(args.out)
    out.write_text(json.dumps({"provenance": provenance.finish(prov), "shapes": rows}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
