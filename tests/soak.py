"""Soak: the real server under mixed traffic while policies reload and the certificate rotates.

    .venv/bin/python -m tests.soak --minutes 10          # the long run, from the checkout's root
    .venv/bin/python -m tests.soak --seconds 30 --json   # what tests/serving/test_server_soak.py runs (shorter)

What runs, against `rdma-webhook serve` started exactly as tests/conftest.py does (2 workers,
TLS on loopback, the example cluster state):

- CLIENTS threads (16) send a mix of reviews: pods that get mutated, pods that are denied, pods
  that are skipped (not opted in), malformed pods and envelopes (denied with a reason), bodies
  that are not JSON (400), plus /healthz. Half of each thread's requests reuse a keep-alive
  connection, half open a fresh one (so new TLS handshakes happen all through the rotation).
- every RELOAD_EVERY seconds a policy file is rewritten, alternating a valid change and an invalid
  one (the last good policies must stay in force);
- every ROTATE_EVERY seconds the serving key and certificate are rewritten atomically with a new
  key pair, signed alternately by two CAs. Clients trust both CAs (like a caBundle holding the
  old and the new CA during a CA rotation) and verify every new connection against them.

At the end: every request sent was answered (client-side counts), none with a 5xx, each answer
was the expected kind; the server's own counters (`rdma_webhook_admissions_total`,
`rdma_webhook_http_responses_total`, diffed from a snapshot taken at the start) match what the
clients counted; the worker processes were not replaced; and the RSS of the gunicorn master and
of each worker (VmRSS from /proc/<pid>/status, workers found through /proc/<pid>/task/*/children)
at the start (after a warm-up) and at the end. A summary is printed; exit status 1 on a failure.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import random
import re
import shutil
import ssl
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization

# By their names from the checkout's root: the working directory of `python -m tests.soak`, and
# under pytest (tests/serving/test_server_soak.py) the checkout the editable install puts on the import path
# (editable_mode=compat, Makefile), after PYTHONPATH so that `make test-pure` still tests its core.
from tests import kube_objects as k
from tests.conftest import Server, start_server, stop_server
from webhook.serving.certs import _pem_key, make_ca, make_serving, service_dns_names

CLIENTS = 16
RELOAD_EVERY = 3.0
ROTATE_EVERY = 4.0
REQUEST_TIMEOUT = 15.0


# -- the request mix ------------------------------------------------------------------------------


def _mix() -> list[tuple[str, int]]:
    """(kind, weight): what each kind of request is and how often it is sent."""
    return [
        ("mutated", 6),
        ("denied", 3),
        ("skipped", 2),
        ("malformed", 1),
        ("envelope", 1),
        ("not-json", 1),
        ("healthz", 2),
    ]


def make_request(kind: str, rng: random.Random) -> tuple[str, str, bytes | None, str | None]:
    """(method, path, body, uid) for one request of `kind`."""
    if kind == "healthz":
        return "GET", "/healthz", None, None
    if kind == "not-json":
        return "POST", "/mutate", b"{not json" + os.urandom(8).hex().encode(), None
    if kind == "mutated":
        pod = rng.choice([k.pytorchjob_worker, k.jobset_worker, k.mpijob_worker, k.lws_worker, k.seed_sriov_pod])()
    elif kind == "denied":
        pod = k.pytorchjob_worker(env=[{"name": "NCCL_IB_DISABLE", "value": rng.choice(["1", "0x1", "-1"])}])
    elif kind == "skipped":
        pod = k.pod([k.container("trainer")], inject=False)
    elif kind == "malformed":
        pod = {"kind": "Pod", "metadata": {"labels": {"rdma-webhook.io/inject": "true"}}, "spec": {"containers": "x"}}
    else:  # envelope: a review with a uid but the wrong apiVersion
        rv = k.admission_review(k.pytorchjob_worker())
        rv["apiVersion"] = "admission.k8s.io/v1beta1"
        return "POST", "/mutate", json.dumps(rv).encode(), rv["request"]["uid"]
    rv = k.admission_review(pod)
    return "POST", "/mutate", json.dumps(rv).encode(), rv["request"]["uid"]


def check(kind: str, status: int, data: bytes, uid: str | None) -> str | None:
    """None when the answer is the expected one for `kind`, else what is wrong."""
    try:
        doc = json.loads(data)
    except ValueError:
        return f"{kind}: HTTP {status}, body is not JSON"
    if kind == "healthz":
        return None if status == 200 else f"healthz: HTTP {status}"
    if kind == "not-json":
        return None if status == 400 and "error" in doc else f"not-json: HTTP {status} {doc}"
    if status != 200:
        return f"{kind}: HTTP {status} {str(doc)[:200]}"
    r = doc.get("response") or {}
    if r.get("uid") != uid:
        return f"{kind}: uid {r.get('uid')!r} is not the one sent"
    if kind == "mutated":
        ok = r.get("allowed") is True and r.get("patchType") == "JSONPatch" and r.get("patch")
    elif kind == "skipped":
        ok = r.get("allowed") is True and "patch" not in r
    elif kind == "denied":
        ok = r.get("allowed") is False and r["status"]["code"] == 403 and "[env-fallback]" in r["status"]["message"]
    elif kind == "malformed":
        ok = r.get("allowed") is False and "[malformed-pod]" in r["status"]["message"]
    else:
        ok = r.get("allowed") is False and r["status"]["code"] == 400
    return None if ok else f"{kind}: unexpected answer {str(r)[:300]}"


# -- rotation and reload --------------------------------------------------------------------------


@dataclass
class Rotator:
    certs: Path
    cas: list[tuple[Any, Any]]  # (certificate, key) of the two CAs clients trust
    rotations: int = 0

    def rotate(self) -> None:
        ca, ca_key = self.cas[self.rotations % len(self.cas)]
        cert, key = make_serving(
            ca, ca_key, service_dns_names("rdma-webhook", "rdma-webhook") + ["localhost"], ["127.0.0.1"]
        )
        # key first, then certificate, each replaced atomically (the server ignores a
        # mismatched pair until both are in place)
        for name, data in (("tls.key", _pem_key(key)), ("tls.crt", cert.public_bytes(serialization.Encoding.PEM))):
            tmp = self.certs / f".{name}.soak"
            tmp.write_bytes(data)
            os.replace(tmp, self.certs / name)
        self.rotations += 1


@dataclass
class Reloader:
    path: Path
    original: str
    writes: int = 0
    valid_writes: int = 0

    def rewrite(self) -> None:
        if self.writes % 2 == 0:
            text = self.original.replace(
                'NCCL_MIN_NCHANNELS: "16"', f'NCCL_MIN_NCHANNELS: "{16 + 16 * (self.writes // 2 % 2)}"'
            )
            self.valid_writes += 1
        else:
            text = self.original.replace("count: 1", "count: lots")  # invalid: rejected whole
        tmp = self.path.with_name(f".{self.path.name}.soak")
        tmp.write_text(text)
        os.replace(tmp, self.path)
        self.writes += 1


# -- process memory -------------------------------------------------------------------------------


def children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                out += [int(p) for p in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
            except OSError:
                pass
    except OSError:
        pass
    return sorted(set(out))


def rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def memory(master: int) -> dict[str, Any]:
    workers = children(master)
    return {
        "master": {"pid": master, "rss_kib": rss_kib(master)},
        "workers": [{"pid": p, "rss_kib": rss_kib(p)} for p in workers],
    }


# -- metrics --------------------------------------------------------------------------------------

_SAMPLE = re.compile(
    r"^(rdma_webhook_admissions_total|rdma_webhook_http_responses_total|rdma_webhook_policy_reloads_total)\{([^}]*)\} ([0-9.e+]+)$"
)


EMPTY: dict[str, Counter] = {"admissions": Counter(), "responses": Counter(), "reloads": Counter()}
SETTLE = 30.0  # seconds the counters may take to show every admission answered


def _total(after: dict[str, Counter], before: dict[str, Counter], metric: str) -> float:
    return sum(after[metric].values()) - sum(before[metric].values())


def settled(
    srv: Server, ctx: ssl.SSLContext, base: dict[str, Counter], admissions: int, responses: int | None = None
) -> dict[str, Counter]:
    """A scrape once the server's counters, diffed from `base`, show the `admissions` (and
    `responses`) the clients were answered, and two scrapes in a row agree: the workers write the
    metrics of a loop pass after its answers are sent (webhook.serving.batch), so a scrape right
    after the last answer may miss it. After SETTLE seconds the last scrape, whatever it holds (a
    mismatch is then reported by `problems`)."""
    deadline, last = time.monotonic() + SETTLE, None
    while True:
        now = scrape(srv, ctx)
        shows = _total(now, base, "admissions") == admissions and (
            responses is None or _total(now, base, "responses") == responses
        )
        if (shows and now == last) or time.monotonic() > deadline:
            return now
        last = now
        time.sleep(0.2)


def scrape(srv: Server, ctx: ssl.SSLContext) -> dict[str, Counter]:
    conn = http.client.HTTPSConnection("localhost", srv.port, context=ctx, timeout=REQUEST_TIMEOUT)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    out: dict[str, Counter] = {"admissions": Counter(), "responses": Counter(), "reloads": Counter()}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        value = float(m.group(3))
        if m.group(1) == "rdma_webhook_admissions_total":
            out["admissions"][labels.get("outcome", "")] += value
        elif m.group(1) == "rdma_webhook_http_responses_total":
            out["responses"][labels.get("code", "")] += value
        else:
            out["reloads"][labels.get("result", "")] += value
    return out


# -- the clients ----------------------------------------------------------------------------------


@dataclass
class Tally:
    sent: Counter = field(default_factory=Counter)  # by kind
    answered: Counter = field(default_factory=Counter)  # by kind
    status: Counter = field(default_factory=Counter)  # by HTTP status
    wrong: list[str] = field(default_factory=list)  # answers that were not the expected kind
    failed: Counter = field(default_factory=Counter)  # requests without an answer, by error
    fresh_connections: int = 0
    certs_seen: set[str] = field(default_factory=set)
    latencies: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def client(i: int, srv: Server, ctx: ssl.SSLContext, stop: threading.Event, tally: Tally) -> None:
    rng = random.Random(i)
    kinds, weights = zip(*_mix())
    conn: http.client.HTTPSConnection | None = None
    while not stop.is_set():
        kind = rng.choices(kinds, weights)[0]
        method, path, body, uid = make_request(kind, rng)
        fresh = conn is None or rng.random() < 0.5
        if fresh:
            if conn is not None:
                conn.close()
            conn = http.client.HTTPSConnection("localhost", srv.port, context=ctx, timeout=REQUEST_TIMEOUT)
        with tally.lock:
            tally.sent[kind] += 1
        start = time.monotonic()
        try:
            if fresh:
                conn.connect()
                der = conn.sock.getpeercert(binary_form=True)
                with tally.lock:
                    tally.fresh_connections += 1
                    tally.certs_seen.add(hashlib.sha256(der).hexdigest()[:16])
            conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
        except Exception as exc:  # noqa: BLE001 - every failure is counted and reported
            with tally.lock:
                tally.failed[
                    f"{kind}: {type(exc).__name__}: {str(exc)[:80]} ({'fresh' if fresh else 'reused'} connection)"
                ] += 1
            conn.close()
            conn = None
            continue
        elapsed = time.monotonic() - start
        problem = check(kind, resp.status, data, uid)
        with tally.lock:
            tally.answered[kind] += 1
            tally.status[resp.status] += 1
            tally.latencies.append(elapsed)
            if problem and len(tally.wrong) < 50:
                tally.wrong.append(problem)
            elif problem:
                tally.wrong.append("...")
        if resp.will_close:
            conn.close()
            conn = None
    if conn is not None:
        conn.close()


# -- the run --------------------------------------------------------------------------------------


def run(
    seconds: float,
    workdir: Path,
    clients: int = CLIENTS,
    reload_every: float = RELOAD_EVERY,
    rotate_every: float = ROTATE_EVERY,
    log=print,
) -> dict[str, Any]:
    srv = start_server(workdir)
    try:
        return _run(srv, seconds, clients, reload_every, rotate_every, log)
    finally:
        stop_server(srv)


def _run(srv: Server, seconds: float, clients: int, reload_every: float, rotate_every: float, log) -> dict[str, Any]:
    # the CA the server started with, plus a second one; clients trust both from the start
    from cryptography import x509

    ca_a = (
        x509.load_pem_x509_certificate((srv.certs / "ca.crt").read_bytes()),
        serialization.load_pem_private_key((srv.certs / "ca.key").read_bytes(), None),
    )
    ca_b = make_ca("rdma-webhook soak CA (next)")
    bundle = b"".join(c.public_bytes(serialization.Encoding.PEM) for c, _ in (ca_a, ca_b))
    ctx = ssl.create_default_context(cadata=bundle.decode())
    rotator = Rotator(srv.certs, [ca_b, ca_a])
    reloader = Reloader(srv.policies_dir / "erdma.yaml", (srv.policies_dir / "erdma.yaml").read_text())

    # warm-up, so start RSS is that of a worker that has served (imports, caches, TLS)
    warm = Tally()
    stop = threading.Event()
    warm_threads = [threading.Thread(target=client, args=(100 + i, srv, ctx, stop, warm)) for i in range(4)]
    for th in warm_threads:
        th.start()
    time.sleep(min(3.0, max(1.0, seconds / 10)))
    stop.set()
    for th in warm_threads:
        th.join(REQUEST_TIMEOUT + 5)
    # the snapshot the window's counts are diffed from holds every warm-up admission: a worker
    # writes the last pass's metrics after its answer is sent (webhook.serving.batch), and a
    # snapshot taken before that counted one admission of the warm-up in the window (CI, twice)
    warm_mutate = sum(n for kind, n in warm.answered.items() if kind != "healthz")
    before = settled(srv, ctx, EMPTY, warm_mutate)
    mem_start = memory(srv.proc.pid)
    log(
        f"soak: {seconds:.0f} s, {clients} clients, reload every {reload_every} s, rotate every {rotate_every} s; "
        f"server pid {srv.proc.pid}, workers {[w['pid'] for w in mem_start['workers']]}"
    )

    tally = Tally()
    stop = threading.Event()
    threads = [
        threading.Thread(target=client, args=(i, srv, ctx, stop, tally), name=f"soak-client-{i}")
        for i in range(clients)
    ]
    started = time.monotonic()
    for th in threads:
        th.start()
    next_reload, next_rotate, next_report = started + reload_every, started + rotate_every / 2, started + 60
    while (now := time.monotonic()) - started < seconds:
        if now >= next_reload:
            reloader.rewrite()
            next_reload += reload_every
        if now >= next_rotate:
            rotator.rotate()
            next_rotate += rotate_every
        if now >= next_report:
            with tally.lock:
                log(
                    f"  {now - started:5.0f} s: sent {sum(tally.sent.values())}, answered {sum(tally.answered.values())}, "
                    f"failed {sum(tally.failed.values())}, rss {memory(srv.proc.pid)}"
                )
            next_report += 60
        if srv.proc.poll() is not None:
            break
        time.sleep(0.05)
    stop.set()
    for th in threads:
        th.join(REQUEST_TIMEOUT + 5)
    elapsed = time.monotonic() - started
    hung = [th.name for th in threads if th.is_alive()]
    mem_end = memory(srv.proc.pid)
    # The workers write their last metric increments once per event-loop pass: wait for them to
    # match the clients' counts (a loaded machine may take a while), up to 30 s; a mismatch that
    # lasts that long is reported below.
    answered_now = sum(tally.answered.values())
    mutate_now = sum(n for kind, n in tally.answered.items() if kind != "healthz")
    after = settled(srv, ctx, before, mutate_now, answered_now)
    adm, resp = _total(after, before, "admissions"), _total(after, before, "responses")
    scrapes_json = 0  # /metrics is not a JSON response and is not counted
    sent = sum(tally.sent.values())
    answered = sum(tally.answered.values())
    mutate_answered = sum(n for kind, n in tally.answered.items() if kind != "healthz")
    start_pids = {w["pid"] for w in mem_start["workers"]}
    end_pids = {w["pid"] for w in mem_end["workers"]}
    summary = {
        "seconds": round(elapsed, 1),
        "clients": clients,
        "sent": sent,
        "answered": answered,
        "requests_per_second": round(answered / elapsed, 1) if elapsed else 0,
        "by_kind": {kind: [tally.sent[kind], tally.answered[kind]] for kind in sorted(tally.sent)},
        "http_status": {str(code): n for code, n in sorted(tally.status.items())},
        "5xx": sum(n for code, n in tally.status.items() if code >= 500),
        "unanswered": dict(tally.failed),
        "wrong_answers": tally.wrong[:20],
        "hung_clients": hung,
        "fresh_connections": tally.fresh_connections,
        "serving_certificates_seen": len(tally.certs_seen),
        "rotations": rotator.rotations,
        "policy_writes": {"valid": reloader.valid_writes, "invalid": reloader.writes - reloader.valid_writes},
        "server_reloads": {key: after["reloads"][key] - before["reloads"][key] for key in ("success", "failure")},
        "server_admissions_total": adm,
        "server_http_responses_total": resp,
        "client_mutate_answered": mutate_answered,
        "client_json_answered": answered - scrapes_json,
        "latency_ms": _percentiles(tally.latencies),
        "rss_kib": {"start": mem_start, "end": mem_end},
        "workers_replaced": sorted(start_pids - end_pids),
        "server_alive": srv.proc.poll() is None,
    }
    summary["problems"] = problems(summary)
    return summary


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    values = sorted(values)
    pick = lambda q: round(values[min(len(values) - 1, int(q * len(values)))] * 1000, 1)  # noqa: E731
    return {"p50": pick(0.5), "p99": pick(0.99), "max": round(values[-1] * 1000, 1)}


RSS_GROWTH_LIMIT_KIB = 20 * 1024  # per process, over the run (after warm-up)


def problems(s: dict[str, Any]) -> list[str]:
    out = []
    if s["sent"] != s["answered"]:
        out.append(f"{s['sent'] - s['answered']} of {s['sent']} requests got no answer: {s['unanswered']}")
    if s["5xx"]:
        out.append(f"{s['5xx']} answers were 5xx")
    if s["wrong_answers"]:
        out.append(f"unexpected answers: {s['wrong_answers'][:5]}")
    if s["hung_clients"]:
        out.append(f"client threads hung: {s['hung_clients']}")
    if s["server_admissions_total"] != s["client_mutate_answered"]:
        out.append(
            f"server counted {s['server_admissions_total']:.0f} admissions, clients got {s['client_mutate_answered']} /mutate answers"
        )
    if s["server_http_responses_total"] != s["client_json_answered"]:
        out.append(
            f"server counted {s['server_http_responses_total']:.0f} responses, clients got {s['client_json_answered']}"
        )
    if s["workers_replaced"]:
        out.append(f"worker processes replaced during the run: {s['workers_replaced']}")
    if not s["server_alive"]:
        out.append("the server process exited")
    start = {w["pid"]: w["rss_kib"] for w in s["rss_kib"]["start"]["workers"]}
    start[s["rss_kib"]["start"]["master"]["pid"]] = s["rss_kib"]["start"]["master"]["rss_kib"]
    end = {w["pid"]: w["rss_kib"] for w in s["rss_kib"]["end"]["workers"]}
    end[s["rss_kib"]["end"]["master"]["pid"]] = s["rss_kib"]["end"]["master"]["rss_kib"]
    for pid, before in start.items():
        after = end.get(pid)
        if before and after and after - before > RSS_GROWTH_LIMIT_KIB:
            out.append(f"pid {pid} RSS grew {before} -> {after} KiB")
    if s["rotations"] >= 2 and s["serving_certificates_seen"] < 2:
        out.append("clients never saw a rotated certificate")
    if s["policy_writes"]["valid"] and s["server_reloads"]["success"] < 1:
        out.append("no successful policy reload counted")
    if s["policy_writes"]["invalid"] and s["server_reloads"]["failure"] < 1:
        out.append("no rejected policy reload counted")
    return out


def format_summary(s: dict[str, Any]) -> str:
    rss = s["rss_kib"]
    lines = [
        f"soak: {s['seconds']} s, {s['clients']} clients, {s['requests_per_second']} req/s",
        f"  sent {s['sent']}, answered {s['answered']}, 5xx {s['5xx']}, unanswered {sum(s['unanswered'].values())}",
        f"  by kind [sent, answered]: {s['by_kind']}",
        f"  HTTP status: {s['http_status']}; latency ms: {s['latency_ms']}",
        f"  server: admissions_total +{s['server_admissions_total']:.0f} (clients: {s['client_mutate_answered']} /mutate answers), "
        f"http_responses_total +{s['server_http_responses_total']:.0f} (clients: {s['client_json_answered']})",
        f"  rotations {s['rotations']} (certificates seen {s['serving_certificates_seen']}, fresh connections {s['fresh_connections']}), "
        f"policy writes {s['policy_writes']}, server reloads {s['server_reloads']}",
        f"  RSS KiB master {rss['start']['master']['rss_kib']} -> {rss['end']['master']['rss_kib']}; workers "
        + ", ".join(
            f"{w['pid']}: {w['rss_kib']} -> {next((e['rss_kib'] for e in rss['end']['workers'] if e['pid'] == w['pid']), 'gone')}"
            for w in rss["start"]["workers"]
        ),
        "  problems: " + ("none" if not s["problems"] else "; ".join(s["problems"])),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=None)
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--clients", type=int, default=CLIENTS)
    ap.add_argument("--reload-every", type=float, default=RELOAD_EVERY)
    ap.add_argument("--rotate-every", type=float, default=ROTATE_EVERY)
    ap.add_argument("--json", action="store_true", help="print the summary as JSON too")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (server log, certs, policies)")
    ap.add_argument("--store", metavar="NAME", help="write benchmarks/results/NAME.json with provenance")
    args = ap.parse_args(argv)
    from benchmarks import provenance

    prov = provenance.start(argv)
    seconds = args.seconds if args.seconds is not None else (args.minutes if args.minutes is not None else 1.0) * 60
    work = Path(tempfile.mkdtemp(prefix="rdma-webhook-soak-"))
    try:
        summary = run(seconds, work, args.clients, args.reload_every, args.rotate_every)
    finally:
        if args.keep:
            print(f"work folder: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(format_summary(summary))
    if args.json:
        print(json.dumps(summary, default=str))
    if args.store:
        print(
            f"stored in {provenance.store(args.store, prov, json.loads(json.dumps({'summary': summary}, default=str)))}"
        )
    return 1 if summary["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
