"""Cluster-state scale against a real kube-apiserver: how long the webhook takes to become ready and
how much memory its processes hold with N namespaces and N NetworkAttachmentDefinitions.

Starts the e2e control plane (e2e/cluster.py), then for each size (cumulative: objects are added
up to it) starts `rdma-webhook serve` as deployed (2 workers, shipped policies, the deploy/
ServiceAccount token; sriov-roce uses a Multus network, so NADs are listed and watched too),
and records:

- ready_s: from the process start to /readyz answering 200 six times in a row;
- prime: the master's log line on its list before the fork (total and per kind: objects,
  seconds, pages), to tell the list's share of ready_s from the start-up's;
- per process (master and each worker): RSS and PSS (/proc/PID/smaps_rollup), in MB;
- nad_change_s: a NAD's resourceName changed through the API until /mutate (called directly,
  as the API server would) patches the new device resource;
- with --dra N: N DeviceClasses (half of the dra.net driver with an rdma selector, half of the
  SR-IOV DRA driver) and N ResourceClaimTemplates spread over the namespaces, created before the
  first size (the policies' `dra` blocks make the webhook list and watch them), and
  class_change_s: a DeviceClass created after the start until a pod whose template requests it
  is taken as claiming sriov-roce's NIC (no VF added any more).

    .venv/bin/python -m benchmarks.e2e_scale [--sizes 0,5000,20000] [--dra 1000] [--settle 300] [--unprimed]
        [--etcd-lists] [--age S]
        [--repeats N] [--out FILE]
    .venv/bin/python -m benchmarks.e2e_scale --sizes 20000 --dra 1000 --page-sizes 500,2000,5000 [--repeats N]

With --page-sizes the webhook is not started: the master's list before the fork is timed in the
script's own process at each page size in turn (what `ApiClusterState.page_size` is worth).

With --unprimed each size is measured twice: as shipped (the gunicorn master lists once before
the fork, ApiClusterState.prime) and with that disabled (each worker lists for itself). With
--etcd-lists, also with every list a consistent read paged through etcd (`list_from_cache=False`)
instead of one answer from the API server's watch cache (webhook/cluster/listing.py).

Before each start of the webhook the script waits (up to --settle seconds) for the machine to go
idle: the controller-manager keeps creating every new namespace's ServiceAccount and root-CA
ConfigMap for a while after the objects are created, and that is not the webhook's time.

Creating 20,000 + 20,000 objects takes minutes on 2 cores. The figures depend on what else the
machine runs: record the load average (printed) with them.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import sys
import threading
import time
import uuid
from pathlib import Path

from e2e import cluster as c
from benchmarks.e2e_bench import control_plane, write
from benchmarks import provenance


ROOT = Path(__file__).resolve().parent.parent


SHIPPED_LIMIT_MB = 256  # deploy/base/deployment.yaml: resources.limits.memory 256Mi


def post_all(cp: c.ControlPlane, objects_of, indexes: range, threads: int = 16) -> None:
    """POST `objects_of(i)` (a list of (path, object)) for every i, from `threads` keep-alive
    connections; 409 (exists) is fine, 429 and 5xx are retried."""
    ctx = cp.ssl_context()
    headers = {"Authorization": f"Bearer {cp.admin_token}", "Content-Type": "application/json"}
    todo = iter(indexes)
    lock = threading.Lock()
    failures: list[str] = []

    def post(conn, path, doc):
        for attempt in range(5):
            try:
                conn.request("POST", path, body=json.dumps(doc).encode(), headers=headers)
                resp = conn.getresponse()
                body = resp.read()
                if resp.status in (201, 409):
                    return conn
                if resp.status == 429 or resp.status >= 500:
                    time.sleep(0.2 * (attempt + 1))
                    continue
                failures.append(f"{path}: {resp.status} {body[:200]!r}")
                return conn
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPSConnection("127.0.0.1", cp.port, context=ctx, timeout=60)
        failures.append(f"{path}: gave up")
        return conn

    def work():
        conn = http.client.HTTPSConnection("127.0.0.1", cp.port, context=ctx, timeout=60)
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                conn.close()
                return
            for path, doc in objects_of(i):
                conn = post(conn, path, doc)

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if failures:
        raise RuntimeError(f"{len(failures)} creations failed, first: {failures[0]}")


def create_many(cp: c.ControlPlane, start: int, stop: int) -> None:
    """Namespaces e2e-scale-<i> (opted in, policy sriov-roce) and one NAD in each."""

    def objects(i: int) -> list[tuple[str, dict]]:
        ns = f"e2e-scale-{i}"
        return [
            (
                "/api/v1/namespaces",
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {
                        "name": ns,
                        "labels": {
                            "rdma-webhook.io/injection": "enabled",
                            "rdma-webhook.io/policy": "sriov-roce",
                            "team": f"t{i % 50}",
                        },
                    },
                },
            ),
            (
                f"/apis/k8s.cni.cncf.io/v1/namespaces/{ns}/network-attachment-definitions",
                {
                    "apiVersion": "k8s.cni.cncf.io/v1",
                    "kind": "NetworkAttachmentDefinition",
                    "metadata": {
                        "name": "rdma-network",
                        "namespace": ns,
                        "annotations": {"k8s.v1.cni.cncf.io/resourceName": "openshift.io/mellanoxrdma"},
                    },
                    "spec": {
                        "config": json.dumps(
                            {
                                "cniVersion": "0.3.1",
                                "type": "sriov",
                                "name": "rdma-network",
                                "ipam": {"type": "whereabouts", "range": "192.0.2.0/24"},
                            }
                        )
                    },
                },
            ),
        ]

    post_all(cp, objects, range(start, stop))


SRIOV_DRIVER = "sriovnetwork.k8snetworkplumbingwg.io"


def device_class(name: str, sriov: bool) -> dict:
    cel = (
        [f'device.driver == "{SRIOV_DRIVER}"']
        if sriov
        else ['device.driver == "dra.net"', 'device.attributes["dra.net"].rdma']
    )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": e}} for e in cel]},
    }


def claim_template(namespace: str, name: str, device_class_name: str) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": device_class_name}}]}}
        },
    }


def create_dra(cp: c.ControlPlane, n: int, namespaces: int) -> None:
    """N DeviceClasses e2e-scale-class-<i> and N templates e2e-scale-tmpl-<i>, each in namespace
    e2e-scale-<i mod namespaces> (which must exist) and requesting class i."""

    def objects(i: int) -> list[tuple[str, dict]]:
        ns = f"e2e-scale-{i % namespaces}"
        return [
            ("/apis/resource.k8s.io/v1/deviceclasses", device_class(f"e2e-scale-class-{i}", i % 2 == 1)),
            (
                f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaimtemplates",
                claim_template(ns, f"e2e-scale-tmpl-{i}", f"e2e-scale-class-{i}"),
            ),
        ]

    post_all(cp, objects, range(n))


def memory(pid: int) -> dict:
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            if key in ("Rss", "Pss"):
                out[key.lower() + "_mb"] = round(int(rest.split()[0]) / 1024, 1)
    return out


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(p) for p in fh.read().split()]
    except OSError:
        return []


def mutate_device(hook: c.Webhook, namespace: str, template: str | None = None) -> set[str]:
    """The VF resources /mutate adds to a 1-GPU pod (which claims its NIC from `template`, if given)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": namespace, "labels": {"rdma-webhook.io/inject": "true"}},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }
    if template is not None:
        pod["spec"]["resourceClaims"] = [{"name": "nic", "resourceClaimTemplateName": template}]
        pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "nic"}]
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace,
            "operation": "CREATE",
            "object": pod,
        },
    }
    conn = http.client.HTTPSConnection("127.0.0.1", hook.port, context=hook.ssl_context(), timeout=10)
    try:
        conn.request("POST", "/mutate", body=json.dumps(review).encode(), headers={"Content-Type": "application/json"})
        doc = json.loads(conn.getresponse().read())
    finally:
        conn.close()
    if not doc["response"]["allowed"]:  # never one of the sets compared with
        return {"denied: " + doc["response"]["status"]["message"]}
    patch = json.loads(base64.b64decode(doc["response"].get("patch") or b"W10="))
    text = json.dumps(patch)
    return {r for r in ("openshift.io/mellanoxrdma", "openshift.io/scale_changed") if r in text}


def settle(limit: float) -> float:
    """Wait (up to `limit` s) until the machine is nearly idle: after creating thousands of
    namespaces the controller-manager is still making each one's ServiceAccount and root-CA
    ConfigMap, and that work is the cluster's, not the webhook's. Idle: less than 0.3 s of CPU
    per second over the last 5 s, from /proc/stat. Returns the seconds waited."""

    def busy() -> tuple[int, int]:
        fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
        return sum(fields) - fields[3] - fields[4], sum(fields)  # not idle, not iowait; all

    started = time.monotonic()
    while time.monotonic() - started < limit:
        b0, t0 = busy()
        time.sleep(5)
        b1, t1 = busy()
        if (b1 - b0) / max(1, t1 - t0) * (os.cpu_count() or 1) < 0.3:
            break
    return round(time.monotonic() - started, 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="0,5000,20000")
    ap.add_argument(
        "--settle",
        type=float,
        default=300.0,
        help="before each start of the webhook, wait up to this long for the machine to go idle",
    )
    ap.add_argument("--repeats", type=int, default=1, help="starts of each variant at each size, in turn")
    ap.add_argument(
        "--unprimed",
        action="store_true",
        help="at each size also start the webhook without the master's list before the fork",
    )
    ap.add_argument(
        "--age",
        type=float,
        default=0.0,
        metavar="S",
        help="wait S seconds after creating the objects before the first start: a real cluster's "
        "objects were not all made a minute ago (the etcd-paged lists were seen to slow down with age)",
    )
    ap.add_argument(
        "--etcd-lists",
        action="store_true",
        help="at each size also start the webhook with its lists read from etcd in pages, not from the watch cache",
    )
    ap.add_argument(
        "--dra",
        type=int,
        default=0,
        metavar="N",
        help="also N DeviceClasses and N ResourceClaimTemplates (in the first namespaces of the first size)",
    )
    ap.add_argument(
        "--page-sizes",
        metavar="N,N,...",
        help="instead of starting the webhook: time the master's list before the fork "
        "(ApiClusterState.prime, in this process) at each page size, in turn, --repeats times",
    )
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "e2e_scale.json"))
    args = ap.parse_args()
    if args.dra and not min(s for s in [int(x) for x in args.sizes.split(",")] if s):
        ap.error("--dra needs a size above 0 (its templates live in the namespaces)")
    sizes = [int(s) for s in args.sizes.split(",")]
    prov = provenance.start()
    results: dict = {
        "shipped_memory_limit_mb": SHIPPED_LIMIT_MB,
        "device_classes": args.dra,
        "claim_templates": args.dra,
        "runs": [],
    }
    with control_plane("rdma-webhook-e2e-scale-") as (cp, workdir):
        docs = c.render_deploy(cp)
        cp.apply(
            [
                c.pick(docs, "Namespace", "rdma-webhook"),
                c.pick(docs, "ServiceAccount", "rdma-webhook"),
                c.pick(docs, "ClusterRole", "rdma-webhook"),
                c.pick(docs, "ClusterRoleBinding", "rdma-webhook"),
            ]
        )
        kc = c.service_account_kubeconfig(cp, "rdma-webhook", "rdma-webhook", workdir / "webhook.kubeconfig")
        have = 0
        variants = ["primed"] + ["unprimed"] * args.unprimed + ["etcd-lists"] * args.etcd_lists
        # One start not recorded, so that no variant pays for being first: on a fresh machine
        # the first start reads the modules from disk (in a run without this, the first start,
        # on the empty cluster, took 2.78 s and the next one 1.54 s).
        results["warm_up"] = measure(cp, workdir, kc, 0, "warm-up", variants, args.settle)  # the empty replica's memory
        for size in sizes:
            if size > have:
                t = time.monotonic()
                create_many(cp, have, size)
                print(f"created namespaces+NADs {have}..{size} in {time.monotonic() - t:.0f}s", flush=True)
                if args.dra and not have:
                    t = time.monotonic()
                    create_dra(cp, args.dra, size)
                    print(
                        f"created {args.dra} DeviceClasses + {args.dra} ResourceClaimTemplates in {time.monotonic() - t:.0f}s",
                        flush=True,
                    )
                have = size
                if args.age:
                    print(f"waiting {args.age:.0f}s (--age) before the starts", flush=True)
                    time.sleep(args.age)
            if args.page_sizes:
                results["runs"].extend(
                    prime_by_page_size(
                        kc, size, [int(n) for n in args.page_sizes.split(",")], args.repeats, args.settle, args.dra > 0
                    )
                )
                continue
            for repeat in range(args.repeats):
                for variant in variants:
                    run = measure(cp, workdir, kc, size, variant, variants, args.settle, repeat, dra=args.dra > 0)
                    results["runs"].append(run)
    write(args.out, prov, results)
    return 0


# `--unprimed`: the same webhook with ApiClusterState.prime disabled, so that each worker makes
# the first list itself (as before the master listed once for the replica): an A/B in one run.
UNPRIMED = [
    sys.executable,
    "-c",
    "import sys; from webhook.cluster import api; from webhook.cli.main import main; "
    "api.ApiClusterState.prime = lambda self, budget=0: False; sys.exit(main(sys.argv[1:]))",
]
# `--etcd-lists`: the same webhook with its lists made as consistent reads, paged through etcd, as
# they were before they asked the watch cache (`list_from_cache`, webhook/cluster/listing.py).
ETCD_LISTS = [
    sys.executable,
    "-c",
    "import sys; from webhook.cluster import api; from webhook.cli.main import main; "
    "api.ApiClusterState.__init__.__kwdefaults__['list_from_cache'] = False; sys.exit(main(sys.argv[1:]))",
]
LAUNCHERS = {"unprimed": UNPRIMED, "etcd-lists": ETCD_LISTS}


def prime_by_page_size(
    kc: Path, size: int, page_sizes: list[int], repeats: int, settle_limit: float, dra: bool
) -> list[dict]:
    """The master's list before the fork alone (namespaces, NADs and, with `dra`, the DRA kinds, as
    the shipped policies make it), timed in this process at each page size in turn."""
    from kubernetes import client, config

    from webhook.cluster.api import ApiClusterState

    runs = []
    for repeat in range(repeats):
        for page_size in page_sizes:
            settled = settle(settle_limit)
            load = os.getloadavg()[0]
            configuration = client.Configuration()
            config.load_kube_config(config_file=str(kc), client_configuration=configuration)  # the webhook's account
            state = ApiClusterState(
                client.ApiClient(configuration), lambda: True, page_size=page_size, uses_dra=lambda: dra
            )
            t = time.monotonic()
            assert state.prime(budget=120.0)
            took = time.monotonic() - t
            kinds = {
                i.kind: {"objects": len(i.items), "pages": i.pages, "s": round(i.list_seconds, 3)}
                for i in (state._ns, state._nads, *state._dra_informers)
                if i.synced
            }
            run = {
                "namespaces": size,
                "page_size": page_size,
                "repeat": repeat,
                "prime_s": round(took, 3),
                "kinds": kinds,
                "settle_s": settled,
                "loadavg_1m_at_start": round(load, 2),
            }
            print(json.dumps(run), flush=True)
            runs.append(run)
    return runs


def prime_line(hook: c.Webhook) -> str | None:
    """What the master's list before the fork took, per kind, as it logged it
    (`ApiClusterState.prime`): where a slow start spent its time."""
    for line in (hook.dir / f"{hook.name}.log").read_text(errors="replace").splitlines():
        try:
            msg = json.loads(line).get("msg", "")
        except ValueError:
            continue
        if isinstance(msg, str) and msg.startswith("listed before the fork"):
            return msg
    return None


def measure(
    cp: c.ControlPlane,
    workdir: Path,
    kc: Path,
    size: int,
    variant: str,
    variants: list[str],
    settle_limit: float,
    repeat: int = 0,
    dra: bool = False,
) -> dict:
    """One start of the webhook at this size: readiness, memory, a NAD change in decisions (and
    with `dra` a DeviceClass created after the start)."""
    settled = settle(settle_limit)
    load = os.getloadavg()[0]
    hook = c.Webhook(workdir, kc, workers=2, name=f"scale-{size}-{variant}-{repeat}", launcher=LAUNCHERS.get(variant))
    started = time.monotonic()
    hook.start(wait_ready=False)
    hook.wait_ready(600)
    ready_s = time.monotonic() - started
    time.sleep(5)  # let the workers settle after the lists (garbage collected, watches open)
    procs = {"master": memory(hook.proc.pid)}
    for n, pid in enumerate(children(hook.proc.pid)):
        procs[f"worker{n}"] = memory(pid)
    run = {
        "namespaces": size,
        "nads": size,
        "variant": variant,
        "repeat": repeat,
        "ready_s": round(ready_s, 2),
        "settle_s": settled,
        "processes": procs,
        "pss_total_mb": round(sum(p["pss_mb"] for p in procs.values()), 1),
        "loadavg_1m_at_start": round(load, 2),
        "prime": prime_line(hook),
    }
    if size:
        ns = f"e2e-scale-{size // 2 + repeat * len(variants) + variants.index(variant)}"  # a NAD of its own
        assert mutate_device(hook, ns) == {"openshift.io/mellanoxrdma"}
        cp.apply(
            [
                {
                    "apiVersion": "k8s.cni.cncf.io/v1",
                    "kind": "NetworkAttachmentDefinition",
                    "metadata": {
                        "name": "rdma-network",
                        "namespace": ns,
                        "annotations": {"k8s.v1.cni.cncf.io/resourceName": "openshift.io/scale_changed"},
                    },
                    "spec": {"config": "{}"},
                }
            ]
        )
        t = time.monotonic()
        # every worker must see it: probe repeatedly (each request may reach either worker)
        c.wait_for(
            "NAD change in decisions",
            lambda: all(mutate_device(hook, ns) == {"openshift.io/scale_changed"} for _ in range(6)),
            60,
            interval=0.05,
        )
        run["nad_change_s"] = round(time.monotonic() - t, 3)
        if dra:
            late = f"e2e-scale-late-{variant}-{repeat}"
            cp.apply([claim_template(ns, late, late)])  # its class does not exist yet: no NIC, the VF is added
            c.wait_for(
                "the template in decisions",
                lambda: mutate_device(hook, ns, late) == {"openshift.io/scale_changed"},
                60,
                interval=0.05,
            )
            cp.apply([device_class(late, sriov=True)])
            t = time.monotonic()
            c.wait_for(
                "DeviceClass creation in decisions",
                lambda: all(mutate_device(hook, ns, late) == set() for _ in range(6)),
                60,
                interval=0.05,
            )
            run["class_change_s"] = round(time.monotonic() - t, 3)
    print(json.dumps(run), flush=True)
    hook.stop()
    return run


if __name__ == "__main__":
    sys.exit(main())
