"""The floors: a minimal Flask app that parses the AdmissionReview and answers allowed:true with
no patch, served exactly like `rdma-webhook serve` would serve the real one (same worker count,
same TLS settings), on gunicorn gthread, on the webhook's own uvicorn workers, or on granian.
gthread and granian are served nowhere else: `serve` runs the uvicorn workers only.

    python -m benchmarks.floor --server gunicorn|uvicorn|granian --port P --tls-cert F --tls-key F
        [--workers N] [--threads N]
"""

from __future__ import annotations

import argparse
import sys

import orjson
from flask import Flask, Response, request

app = Flask("floor")


@app.post("/mutate")
def mutate() -> Response:
    review = orjson.loads(request.get_data(cache=False))
    doc = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": review["request"]["uid"], "allowed": True},
    }
    return Response(orjson.dumps(doc), mimetype="application/json")


@app.get("/readyz")
def readyz() -> Response:
    return Response(b'{"status":"ready"}', mimetype="application/json")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--server",
        choices=("gunicorn", "uvicorn", "granian"),
        required=True,
        help="gunicorn: gthread, the issue's reference floor; uvicorn: the webhook's own stack",
    )
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--tls-cert", required=True)
    ap.add_argument("--tls-key", required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=4)
    args = ap.parse_args()
    from webhook.serving import server as serve
    from webhook.serving.app import wsgi

    # On the webhook's own stacks the floor is served the way `serve` serves the webhook
    # (webhook.serving.app.wsgi: the answer handed over in one piece); the gthread reference floor is
    # plain Flask.
    own = wsgi(app)
    if args.server == "granian":
        from benchmarks.granian_serve import run_granian

        # granian's own thread count (GRANIAN_THREADS), as for the webhook; --threads is gthread's
        run_granian(
            "benchmarks.floor:app",
            host=args.host,
            port=args.port,
            workers=args.workers,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            target_loader=lambda _target=None: own,
        )
        return 0
    from webhook.serving.tls import ServingTLS

    class GunicornTLS(ServingTLS):
        """gunicorn's own workers (the gthread reference floor) call `wrap_socket` on what the
        `ssl_context` setting returns; `serve`'s uvicorn worker never does."""

        def wrap_socket(self, sock, server_side: bool = True, **kwargs):
            self.refresh()
            kwargs["do_handshake_on_connect"] = False
            return self.context.wrap_socket(sock, server_side=server_side, **kwargs)

    tls = GunicornTLS(args.tls_cert, args.tls_key)
    options = serve.gunicorn_options(host=args.host, port=args.port, workers=args.workers, tls=tls)
    if args.server == "gunicorn":
        options.update(gthread_options(args.threads))
    serve._Server(app if args.server == "gunicorn" else own, options).run()
    return 0


def gthread_options(threads: int) -> dict:
    """What the gthread reference floor sets on top of `serve`'s gunicorn options: the worker, its
    threads, and the bounds of gunicorn's own HTTP parser, which `serve`'s uvicorn workers never
    use (they bound a request themselves: webhook.serving.worker.MAX_HEAD, webhook.serving.asgi)."""
    return {
        "worker_class": "gthread",
        "threads": threads,
        "limit_request_line": 4096,
        "limit_request_fields": 64,
        "limit_request_field_size": 8190,
    }


if __name__ == "__main__":
    sys.exit(main())
