"""Pod CREATE latency through a real kube-apiserver, with and without the webhook registered.

Starts the e2e control plane (e2e/cluster.py: etcd, kube-apiserver, kube-controller-manager on
loopback) and the webhook as deployed (2 workers, shipped policies, ServiceAccount token), then
for each rate sends labelled GPU pods to an opted-in namespace in an open loop (a request is due
at t0 + i/rate whether or not earlier ones returned; latency is measured from that due time, so a
stalled server is not hidden by a slower sender) for DURATION seconds:

    phase "without": the webhook configurations are not registered
    phase "with":    the MutatingWebhookConfiguration and ValidatingWebhookConfiguration of
                     deploy/ are registered (the API server calls /mutate, then /validate)
    phase "mutate-only": only the MutatingWebhookConfiguration (one webhook call per pod)
    phase "policy":  the policy mode (deploy/admission-policy/mode): the MutatingWebhookConfiguration,
                     no pod webhook of the ValidatingWebhookConfiguration, and the
                     ValidatingAdmissionPolicies and bindings `rdma-webhook policy admission-policy`
                     generates from the shipped policies: one webhook call per pod, the final-state
                     check in the API server's own CEL
    phase "go-peer": the same MutatingWebhookConfiguration pointed at the Go yardstick of
                     ../shared/bench/go-peer (standard library, the same mutation): what one
                     webhook call costs the API server and the machine when the webhook is Go
    phase "go-peer-again": go-peer once more, paired with go-peer like the other phases: the
                     spread of an A/A ratio, the smallest difference this run could resolve

and reports p50/p99 of each and what the webhook adds. Pods are really stored (not dry-run).
The sender runs in this process (threads over keep-alive HTTPS connections), on the same machine:
on 2 cores it competes with the API server, etcd and the webhook; say so with the figures.

    .venv/bin/python -m benchmarks.e2e_latency [--rates 50,200] [--duration 20] [--out FILE]
        [--phases without,with,mutate-only,policy,go-peer[,go-peer-again] --go-peer BINARY] [--repeats N]

With --repeats N the phases run in turn N times per rate, each repeat starting one phase later in
the list, and what a phase adds is the median of its repeats minus the median of the repeats
without a webhook. A phase's namespace (and its pods) is deleted, and the deletion waited for,
before the next phase begins.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import queue
import statistics
import sys
import threading
import time
from pathlib import Path

from e2e import cluster as c
from benchmarks.e2e_bench import control_plane, write
from benchmarks import provenance


ROOT = Path(__file__).resolve().parent.parent


def pod(name: str) -> bytes:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"rdma-webhook.io/inject": "true"}},
            "spec": {
                "containers": [
                    {
                        "name": "pytorch",
                        "image": "registry.example/trainer:1",
                        "resources": {"limits": {"nvidia.com/gpu": "2"}},
                    }
                ]
            },
        }
    ).encode()


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    k = max(0, min(len(values) - 1, int(round(q * (len(values) - 1)))))
    return values[k]


def open_loop(cp: c.ControlPlane, namespace: str, rate: float, duration: float, tag: str, senders: int = 48) -> dict:
    due: "queue.Queue[tuple[int, float] | None]" = queue.Queue()
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    ctx = cp.ssl_context()
    path = f"/api/v1/namespaces/{namespace}/pods"
    headers = {"Authorization": f"Bearer {cp.admin_token}", "Content-Type": "application/json"}

    def sender():
        conn = http.client.HTTPSConnection("127.0.0.1", cp.port, context=ctx, timeout=60)
        while True:
            item = due.get()
            if item is None:
                conn.close()
                return
            i, at = item
            delay = at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            try:
                conn.request("POST", path, body=pod(f"{tag}-{i}"), headers=headers)
                resp = conn.getresponse()
                body = resp.read()
                ok = resp.status == 201
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                conn = http.client.HTTPSConnection("127.0.0.1", cp.port, context=ctx, timeout=60)
                ok, body = False, str(exc).encode()
            took = time.monotonic() - at
            with lock:
                if ok:
                    latencies.append(took)
                else:
                    errors.append(body[:200].decode(errors="replace"))

    threads = [threading.Thread(target=sender, daemon=True) for _ in range(senders)]
    for t in threads:
        t.start()
    n = int(rate * duration)
    t0 = time.monotonic() + 0.5
    for i in range(n):
        due.put((i, t0 + i / rate))
    for _ in threads:
        due.put(None)
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    return {
        "sent": n,
        "ok": len(latencies),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "achieved_per_s": round(len(latencies) / wall, 1),
        "p50_ms": round(percentile(latencies, 0.50) * 1000, 2) if latencies else None,
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 2) if latencies else None,
        "mean_ms": round(statistics.fmean(latencies) * 1000, 2) if latencies else None,
    }


PHASES = ("without", "with", "mutate-only", "policy", "go-peer", "go-peer-again")

# What the API server itself measures (its /metrics, histograms: a mean per phase from the deltas
# of _sum and _count): each webhook call as the API server times it (the round trip: encode,
# TLS, the webhook's answer, decode; labelled by webhook name) and the whole admission step.
SERVER_METRICS = {
    "apiserver_admission_webhook_admission_duration_seconds": ("name", "type"),
    "apiserver_admission_step_admission_duration_seconds": ("type", "operation"),
    "apiserver_validating_admission_policy_check_duration_seconds": ("policy",),  # the policy mode's CEL
}


def server_histograms(cp: c.ControlPlane) -> dict[tuple, tuple[float, float]]:
    """(metric, label values...) -> (sum, count) of the histograms in SERVER_METRICS."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[tuple, tuple[float, float]] = {}
    text = (cp.get("/metrics") or b"").decode()
    for family in text_string_to_metric_families(text):
        labels_of = SERVER_METRICS.get(family.name)
        if not labels_of:
            continue
        for sample in family.samples:
            if sample.name.endswith(("_sum", "_count")) and sample.labels.get("operation", "CREATE") == "CREATE":
                key = (family.name, *(sample.labels.get(k, "") for k in labels_of))
                total, count = out.get(key, (0.0, 0.0))
                out[key] = (
                    (total + sample.value, count) if sample.name.endswith("_sum") else (total, count + sample.value)
                )
    return out


def server_means(before: dict, after: dict) -> dict[str, dict]:
    """Per histogram series: calls in the phase and their mean in ms."""
    out = {}
    for key, (total, count) in after.items():
        total0, count0 = before.get(key, (0.0, 0.0))
        if count - count0 > 0:
            out[" ".join(key)] = {
                "calls": int(count - count0),
                "mean_ms": round((total - total0) / (count - count0) * 1000, 3),
            }
    return out


def cpu_by_process() -> dict[str, float]:
    """CPU seconds (user + system, all threads) used so far by each process this run started
    (e2e/cluster.py's registry: etcd, kube-apiserver, the webhook, the Go yardstick...), each
    with its descendants (the webhook's gunicorn workers), and by this process, the sender.
    Per phase, the difference over the pods sent says which process a phase's cost lands in."""
    ticks = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    used: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(entry)] = int(fields[1])
        used[int(entry)] = (int(fields[11]) + int(fields[12])) / ticks
    roots = {pid: proc.name for pid, proc in c._RUNNING.items()}
    out: dict[str, float] = {}
    for pid, seconds in used.items():
        up = pid
        while up in parent and up not in roots and up > 1:
            up = parent[up]
        if up in roots:
            out[roots[up]] = out.get(roots[up], 0.0) + seconds
    self_times = os.times()
    out["sender"] = self_times.user + self_times.system
    return out


def cpu_per_pod(before: dict[str, float], after: dict[str, float], pods: int) -> dict[str, float]:
    """ms of CPU per pod sent, by process, over one phase."""
    return {name: round((after[name] - before.get(name, 0.0)) * 1000 / pods, 3) for name in sorted(after) if pods}


def phase_configs(
    phase: str, configs: list[dict], peer_port: int | None, ca_bundle: str, admission_policies: list[dict] | None = None
) -> list[dict]:
    """The webhook configurations (and, in the policy mode, admission policies) registered in a
    phase (none for "without")."""
    if phase == "without":
        return []
    if phase == "with":
        return configs
    mutating = json.loads(json.dumps(next(d for d in configs if d["kind"] == "MutatingWebhookConfiguration")))
    if phase in ("go-peer", "go-peer-again"):
        for hook in mutating["webhooks"]:
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{peer_port}/mutate", "caBundle": ca_bundle}
    if phase == "policy":
        return [mutating, *(admission_policies or [])]
    return [mutating]


def generated_admission_policies() -> list[dict]:
    """`rdma-webhook policy admission-policy` over the shipped policies, as an installer runs it."""
    import subprocess

    import yaml

    proc = subprocess.run(
        [sys.executable, "-m", "webhook", "policy", "admission-policy", "--policies", str(ROOT / "policies")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=True,
    )
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def start_go_peer(binary: str, hook: c.Webhook, workdir: Path) -> int:
    """The Go yardstick of ../shared/bench/go-peer on loopback with the webhook's certificate."""
    port = c.free_port()
    proc = c.Process(
        "go-peer",
        [
            binary,
            "-addr",
            f"127.0.0.1:{port}",
            "-cert",
            str(hook.certs / "tls.crt"),
            "-key",
            str(hook.certs / "tls.key"),
        ],
        workdir / "go-peer.log",
    )
    ctx = hook.ssl_context()

    def ready() -> bool:
        try:
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=2)
            conn.request("GET", "/readyz")
            return conn.getresponse().status == 200
        except OSError:
            return False

    c.wait_for("go-peer /readyz", ready, 30, proc=proc)
    return port


def measure_phase(
    cp: c.ControlPlane,
    registered: list[dict],
    ns: str,
    rate: float,
    duration: float,
    tag: str,
    warmup: tuple[float, float] | None = None,
) -> dict:
    """One measured phase: the webhook configurations and the generated admission policies of the
    previous phase removed, `registered` applied (nothing: no webhook, no policy), a fresh opted-in
    namespace `ns`, an optional warm-up (rate, seconds), then pod CREATEs at `rate` for `duration`
    seconds. Returns open_loop's figures with the load average before and the API server's own
    means per admission step and webhook call (`server_means`) over the measured part. The caller
    deletes `ns` (after reading what it needs from it). Shared by e2e_final_state.py."""
    cp.kubectl(
        "delete",
        "mutatingwebhookconfiguration,validatingwebhookconfiguration",
        "rdma-webhook",
        "--ignore-not-found",
        check=True,
    )
    cp.kubectl(
        "delete",
        "validatingadmissionpolicy,validatingadmissionpolicybinding",
        "-l",
        "app.kubernetes.io/part-of=rdma-webhook",
        "--ignore-not-found",
        check=True,
    )
    if registered:
        cp.apply(registered)
    time.sleep(3)  # the API server's configuration and policy informers catch up
    cp.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": ns, "labels": {"rdma-webhook.io/injection": "enabled"}},
            }
        ]
    )
    c.wait_for(
        f"ServiceAccount default in {ns}", lambda: cp.get(f"/api/v1/namespaces/{ns}/serviceaccounts/default"), 60
    )
    if warmup is not None:
        open_loop(cp, ns, warmup[0], warmup[1], f"warm-{tag}")
    load_before = os.getloadavg()
    seen_before, cpu_before = server_histograms(cp), cpu_by_process()
    run = open_loop(cp, ns, rate, duration, tag)
    run.update(
        loadavg_1m_before=round(load_before[0], 2),
        apiserver=server_means(seen_before, server_histograms(cp)),
        cpu_ms_per_pod=cpu_per_pod(cpu_before, cpu_by_process(), run["sent"]),
    )
    return run


def added(runs: list[dict], rate: float, phase: str) -> dict | None:
    """Median over the repeats of a phase's p50 and p99, minus the same medians without a webhook."""

    def med(ph: str, key: str) -> float | None:
        values = [r[key] for r in runs if r["rate"] == rate and r["phase"] == ph and r[key] is not None]
        return statistics.median(values) if values else None

    out: dict = {"rate": rate, "phase": phase}
    for key in ("p50_ms", "p99_ms"):
        base, there = med("without", key), med(phase, key)
        if base is None or there is None:
            return None
        out[key.replace("_ms", "_added_ms")] = round(there - base, 2)
        out[key.replace("_ms", "_median_ms")] = round(there, 2)
    return out


def paired(runs: list[dict], rate: float, phase: str) -> dict | None:
    """The phase against the Go yardstick repeat by repeat: in each repeat, what the phase adds to
    that repeat's `without` over what go-peer adds, for p50 and p99, and its mean per /mutate call
    (the API server's own) over go-peer's; the median over the repeats of each ratio. A drift
    of the machine over the run reaches both sides of each ratio alike."""

    def one(ph: str, repeat: int) -> dict | None:
        return next((r for r in runs if r["rate"] == rate and r["phase"] == ph and r["repeat"] == repeat), None)

    def call_ms(run: dict) -> float | None:
        means = [
            v["mean_ms"]
            for k, v in run["apiserver"].items()
            if k.startswith("apiserver_admission_webhook_admission_duration_seconds") and k.endswith(" admit")
        ]
        return means[0] if len(means) == 1 else None

    ratios: dict[str, list[float]] = {"p50_added": [], "p99_added": [], "mutate_call_mean": []}
    for repeat in sorted({r["repeat"] for r in runs if r["rate"] == rate}):
        base, ours, go = one("without", repeat), one(phase, repeat), one("go-peer", repeat)
        if not (base and ours and go):
            continue
        for key in ("p50", "p99"):
            theirs = go[f"{key}_ms"] - base[f"{key}_ms"]
            if theirs > 0:
                ratios[f"{key}_added"].append((ours[f"{key}_ms"] - base[f"{key}_ms"]) / theirs)
        a, b = call_ms(ours), call_ms(go)
        if a and b:
            ratios["mutate_call_mean"].append(a / b)
    if not ratios["p50_added"]:
        return None
    return {
        "rate": rate,
        "phase": phase,
        **{f"{k}_ratio_to_go_per_repeat": [round(x, 3) for x in v] for k, v in ratios.items()},
        **{f"{k}_ratio_to_go_median": round(statistics.median(v), 3) for k, v in ratios.items() if v},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="50,200")
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds at the lowest rate before measuring")
    ap.add_argument(
        "--phases", default="without,with", help=f"comma-separated, of {', '.join(PHASES)}; go-peer needs --go-peer"
    )
    ap.add_argument("--repeats", type=int, default=1, help="run the phases in turn this many times per rate")
    ap.add_argument("--go-peer", help="binary built from ../shared/bench/go-peer (see benchmarks/README.md)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "e2e_latency.json"))
    ap.add_argument(
        "--summarize", metavar="FILE", help="no run: add the paired ratios (`paired`) to a stored result from its runs"
    )
    args = ap.parse_args()
    if args.summarize:
        stored = json.loads(Path(args.summarize).read_text())
        stored["paired"] = [
            row
            for rate in sorted({r["rate"] for r in stored["runs"]})
            for phase in stored["phases"]
            if phase not in ("without", "go-peer") and (row := paired(stored["runs"], rate, phase))
        ]
        stored["paired_by"] = "e2e_latency.py --summarize (from the runs above, after the run)"
        Path(args.summarize).write_text(json.dumps(stored, indent=1) + "\n")
        for row in stored["paired"]:
            print(json.dumps(row))
        return 0
    rates = [float(r) for r in args.rates.split(",")]
    phases = args.phases.split(",")
    peers = {"go-peer", "go-peer-again"} & set(phases)
    if (
        set(phases) - set(PHASES)
        or "without" not in phases
        or (peers and not args.go_peer)
        or ("go-peer-again" in phases and "go-peer" not in phases)
    ):
        ap.error(
            f"--phases: some of {', '.join(PHASES)}, including without; go-peer needs --go-peer, "
            "go-peer-again needs go-peer"
        )
    prov = provenance.start()
    results: dict = {"duration_s": args.duration, "phases": phases, "repeats": args.repeats, "runs": []}
    with control_plane("rdma-webhook-e2e-bench-") as (cp, workdir):
        docs = c.render_deploy(cp)
        hook = c.install_webhook(cp, workdir, docs)  # registers the configurations
        configs = c.loopback_webhooks(docs, hook.port, hook.ca_bundle)
        peer_port = start_go_peer(args.go_peer, hook, workdir) if peers else None
        admission_policies = generated_admission_policies() if "policy" in phases else []
        warmed = False
        for rate in rates:
            for repeat in range(args.repeats):
                # Each repeat starts one phase later in the list, so that no phase always runs
                # first or last (the API server and etcd hold more objects as a run goes on).
                for position, phase in enumerate(phases[repeat % len(phases) :] + phases[: repeat % len(phases)]):
                    ns = f"bench-{phase}-{int(rate)}-{repeat}"
                    registered = phase_configs(phase, configs, peer_port, hook.ca_bundle, admission_policies)
                    run = measure_phase(
                        cp,
                        registered,
                        ns,
                        rate,
                        args.duration,
                        f"p-{phase}",
                        warmup=(rates[0], args.warmup) if args.warmup and not warmed else None,
                    )
                    run.update(rate=rate, phase=phase, repeat=repeat, position=position)
                    # The namespace goes before the next phase starts: its thousand pods deleted
                    # by the namespace controller beside the next phase's pods were that phase's load.
                    start = time.monotonic()
                    cp.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=300s")
                    run["namespace_deleted_s"] = round(time.monotonic() - start, 1)
                    print(json.dumps(run), flush=True)
                    results["runs"].append(run)
                warmed = True
        for rate in rates:
            for phase in [p for p in phases if p != "without"]:
                row = added(results["runs"], rate, phase)
                if row:
                    results.setdefault("added", []).append(row)
                    print(json.dumps(row), flush=True)
                if "go-peer" in phases and phase != "go-peer":
                    row = paired(results["runs"], rate, phase)
                    if row:
                        results.setdefault("paired", []).append(row)
                        print(json.dumps(row), flush=True)
    write(args.out, prov, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
