"""The decision core in-process: body bytes in -> response bytes out, per pod shape.

What is timed per call: `webhook.admission.review.handle(body, ...)` (parse, decision, patch) followed by
`orjson.dumps` of the response document, i.e. everything `/mutate` does except HTTP, metrics and
the log line. Policy loading is excluded. Also the policy-count scaling (1, 10, 100 policies:
variants of policies/erdma.yaml with distinct names and namespace selectors).

    .venv/bin/python -m benchmarks.decision [--seconds 1.0] [--json out.json]
    .venv/bin/python -m benchmarks.decision --cores compiled,interpreted --repeats 5 --store decision-cores
    .venv/bin/python -m benchmarks.decision --instructions --store decision-instructions
    .venv/bin/python -m benchmarks.decision --against ../base --repeats 15 --seconds 0.3 --store decision-against

`--against CHECKOUT --interpreted`: the same with neither checkout compiled (worktrees where `make
compile` is not run): this checkout's interpreted copy against the base's interpreted core.
`--against CHECKOUT` (with `--cores` or `--instructions`): this checkout's compiled core against
another commit's (a worktree with `make compile` run in it), the same bodies for both, each with
its own shipped policies: the before/after figure a change to the decision core must report.

`--cores`: the compiled core (the checkout's extensions, `make compile`) and the interpreted one
(a copy of webhook/ without them on PYTHONPATH) side by side in one run, each repeat a fresh
process per core, the order alternating; medians per shape and the ratio. `--instructions`:
instructions per decision counted by callgrind (valgrind), for both cores: after warm-up
decisions of every shape, N decisions of each shape, their instructions read from a callgrind
dump taken at a marker call between shapes, divided by N (start-up, imports and policy loading
fall outside); repeatable where wall-clock moves with the machine's load. `--store NAME` writes benchmarks/results/NAME.json with the commit, machine,
load and command (benchmarks/provenance.py).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

import orjson
from benchmarks.payloads import ROOT, bodies

try:
    from webhook.admission import review
    from webhook.cluster.state import FileClusterState
    from webhook.policy.load import load_dir, load_texts
except ImportError:  # a checkout from before the regroup into layers, given to --against
    from webhook import review  # type: ignore[no-redef]
    from webhook.cluster import FileClusterState  # type: ignore[no-redef]
    from webhook.policy import load_dir, load_texts  # type: ignore[no-redef]


def policy_variants(n: int) -> list[tuple[str, str]]:
    """n policies: the shipped ones plus n-2 erdma variants, each with its own name and a
    namespace selector that matches no benchmark namespace (so the real choice is unchanged,
    but every auto-selection has n candidates to rank)."""
    texts = [(str(p), p.read_text()) for p in sorted((ROOT / "policies").glob("*.yaml"))]
    erdma = (ROOT / "policies" / "erdma.yaml").read_text()
    for i in range(max(0, n - len(texts))):
        t = (
            erdma.replace("name: erdma", f"name: erdma-v{i:03d}")
            .replace("namespaceSelector: {}", f"namespaceSelector: {{matchLabels: {{team: team-{i:03d}}}}}")
            .replace("priority: 10", f"priority: {20 + i}")
        )
        texts.append((f"variant-{i:03d}.yaml", t))
    return texts


def _policy_dir() -> Path:
    """The shipped policies of the checkout whose `webhook` package is imported (another
    commit's, with --against: its loader may not read this checkout's policy format), else
    this checkout's (the interpreted copy has none beside it)."""
    import webhook

    own = Path(webhook.__file__).resolve().parent.parent / "policies"
    return own if own.is_dir() else ROOT / "policies"


def load_policies(n: int | None):
    if n is None:
        ps, errs = load_dir(_policy_dir())
    else:
        ps, errs = load_texts(policy_variants(n))
    assert ps is not None, errs
    return ps


def one(body: bytes, policies, cluster) -> bytes:
    status, doc, _, _ = review.handle(body, policies, cluster.namespace, cluster.attachments())
    return orjson.dumps(doc)


def measure(body: bytes, policies, cluster, seconds: float) -> tuple[float, float]:
    """(decisions/s, µs per decision): best of 5 rounds, each ~seconds/5 long."""
    n = 200
    t0 = time.perf_counter()
    for _ in range(n):
        one(body, policies, cluster)
    per = (time.perf_counter() - t0) / n
    reps = max(50, int(seconds / 5 / per))
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            one(body, policies, cluster)
        best = min(best, (time.perf_counter() - t0) / reps)
    return 1 / best, best * 1e6


def outcome(body: bytes, policies, cluster) -> str:
    status, doc, decision, _ = review.handle(body, policies, cluster.namespace, cluster.attachments())
    return decision.outcome if decision else ("allowed" if doc.get("response", {}).get("allowed") else "error")


def run(seconds: float = 1.0, scaling: bool = True) -> dict:
    cluster = FileClusterState.from_file(str(ROOT / "examples" / "cluster-state.yaml"))
    bs = bodies()
    out: dict = {"shapes": {}, "scaling": {}}
    shipped = load_policies(None)
    gc.freeze()  # as the server does after loading (webhook.serving.server): what was loaded is never scanned again
    for name, body in bs.items():
        rate, us = measure(body, shipped, cluster, seconds)
        resp = one(body, shipped, cluster)
        out["shapes"][name] = {
            "body_bytes": len(body),
            "response_bytes": len(resp),
            "outcome": outcome(body, shipped, cluster),
            "decisions_per_s": round(rate),
            "us_per_decision": round(us, 1),
        }
    for n in (1, 10, 100) if scaling else ():
        ps = load_policies(n) if n > 1 else load_texts(policy_variants(2)[:1])[0]
        row = {}
        for name in ("pytorchjob-worker", "mpijob-worker", "denied", "untouched"):
            _, us = measure(bs[name], ps, cluster, seconds / 2)
            row[name] = round(us, 1)
        out["scaling"][n] = {"policies": len(ps), "us_per_decision": row}
    return out


CORES = ("compiled", "interpreted")
WARM, CALLS = 30, 200


def _core_env(core: str, pure_dir: Path, against: Path | None = None) -> dict[str, str]:
    """The environment of a child running `core`: "compiled" (this checkout), "interpreted"
    (the copy without extensions) or "base" (the checkout given to --against). The child finds
    `webhook` in the core's folder, then `benchmarks` and `tests` in this checkout; the base is
    seen through a folder holding a link to its webhook/ alone, so that its own benchmarks/ and
    tests/ are never the ones imported."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    first = {"compiled": ROOT, "interpreted": pure_dir, "base": pure_dir / "base"}[core]
    if core == "base" and not first.exists():
        assert against is not None
        first.mkdir()
        (first / "webhook").symlink_to(against / "webhook", target_is_directory=True)
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([str(first), str(ROOT)]))
    env["PYTHONHASHSEED"] = "0"
    return env


def _pure_copy(dest: Path) -> Path:
    import shutil

    shutil.copytree(ROOT / "webhook", dest / "webhook", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    return dest


def _check_core() -> list[str]:
    import importlib

    import webhook

    for name in webhook.COMPILED_MODULES:
        importlib.import_module(f"webhook.{name}")
    return webhook.compiled()


def _child(core: str, pure_dir: Path, args: list[str], against: Path | None = None) -> dict:
    import subprocess

    out = subprocess.run(
        [sys.executable, "-P", "-m", "benchmarks.decision", *args],
        env=_core_env(core, pure_dir, against),
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


INTERPRETED_BASE = False  # --interpreted: the --against checkout is not compiled either


def _expected_core(core: str, against: Path | None) -> list[str] | None:
    """What `webhook.compiled()` must say in a child of `core` (None: the base's own list)."""
    if core == "base" and INTERPRETED_BASE:
        return []
    return [] if core == "interpreted" else None if core == "base" else list(_check_core_names())


def cores_side_by_side(
    seconds: float, repeats: int, cores: tuple[str, str] = CORES, against: Path | None = None
) -> dict:
    """Two builds in one run: `repeats` rounds, a fresh process per build, alternating order.
    The ratio is the second build's time over the first's, per round, then the median, the
    least and the most of those; `ratio_of_best` divides the best rounds (what the machine's
    quiet moments give each build)."""
    import statistics
    import tempfile

    with tempfile.TemporaryDirectory(prefix="rdma-webhook-pure-") as tmp:
        pure = _pure_copy(Path(tmp))
        rounds = []
        for r in range(repeats):
            order = cores if r % 2 == 0 else cores[::-1]
            for core in order:
                got = _child(core, pure, ["--child-run", str(seconds)], against)
                expected = _expected_core(core, against)
                assert expected is None or got["compiled"] == expected, (core, got["compiled"])
                assert core != "base" or INTERPRETED_BASE or got["compiled"], (
                    "the --against checkout has no compiled core (make compile there)"
                )
                rounds.append(
                    {
                        "core": core,
                        "round": r,
                        "us_per_decision": {n: v["us_per_decision"] for n, v in got["shapes"].items()},
                    }
                )
                print(
                    f"round {r} {core:11s} "
                    + " ".join(f"{n} {v['us_per_decision']:.1f}" for n, v in got["shapes"].items()),
                    file=sys.stderr,
                    flush=True,
                )
    shapes = list(rounds[0]["us_per_decision"])
    first, second = cores
    key = f"ratio_{second}_to_{first}"
    out: dict = {
        "repeats": repeats,
        "seconds_per_shape": seconds,
        "rounds": rounds,
        "median_us": {},
        "best_us": {},
        key: {},
    }
    for core in cores:
        mine = [x["us_per_decision"] for x in rounds if x["core"] == core]
        out["median_us"][core] = {n: round(statistics.median(x[n] for x in mine), 1) for n in shapes}
        out["best_us"][core] = {n: round(min(x[n] for x in mine), 1) for n in shapes}
    for n in shapes:
        pairs = [
            b["us_per_decision"][n] / a["us_per_decision"][n]
            for a in rounds
            if a["core"] == first
            for b in rounds
            if b["core"] == second and b["round"] == a["round"]
        ]
        out[key][n] = {
            "median": round(statistics.median(pairs), 3),
            "min": round(min(pairs), 3),
            "max": round(max(pairs), 3),
            "ratio_of_best": round(out["best_us"][second][n] / out["best_us"][first][n], 3),
        }
    return out


def _check_core_names() -> tuple[str, ...]:
    import webhook

    return webhook.COMPILED_MODULES


def child_calls(n: int) -> None:
    """For callgrind: WARM decisions of every shape, then `n` of each shape in turn, each block
    opened by a call of zlib.adler32 (the marker: callgrind dumps its counts on entering
    `adler32_z`, which nothing else here calls after start-up)."""
    import zlib

    cluster = FileClusterState.from_file(str(ROOT / "examples" / "cluster-state.yaml"))
    shipped = load_policies(None)
    gc.freeze()  # as in `run`: the instructions are counted as the wall-clock rounds are timed
    bs = bodies()
    for body in bs.values():
        for _ in range(WARM):
            one(body, shipped, cluster)
    for body in bs.values():
        zlib.adler32(b"")
        for _ in range(n):
            one(body, shipped, cluster)
    zlib.adler32(b"")


def instructions(calls: int, cores: tuple[str, str] = CORES, against: Path | None = None) -> dict:
    import re
    import shutil
    import subprocess
    import tempfile

    if not shutil.which("valgrind"):
        raise SystemExit("--instructions needs valgrind (apt-get install -y valgrind)")
    shapes = list(bodies())
    with tempfile.TemporaryDirectory(prefix="rdma-webhook-pure-") as tmp:
        pure = _pure_copy(Path(tmp))
        out: dict = {"calls": calls, "warm_per_shape": WARM, "instructions_per_decision": {}}
        for core in cores:
            got = _child(core, pure, ["--child-core"], against)
            expected = _expected_core(core, against)
            assert got["compiled"] if expected is None else got["compiled"] == expected, (core, got)
            dump = Path(tmp) / f"cg-{core}.out"
            subprocess.run(
                [
                    "valgrind",
                    "--tool=callgrind",
                    "--dump-before=adler32_z",
                    f"--callgrind-out-file={dump}",
                    sys.executable,
                    "-P",
                    "-m",
                    "benchmarks.decision",
                    "--child-calls",
                    str(calls),
                ],
                env=_core_env(core, pure, against),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=True,
            )
            parts = sorted(Path(tmp).glob(f"cg-{core}.out.*"), key=lambda p: int(p.suffix[1:]))
            totals = [int(re.search(r"^totals: (\d+)", p.read_text(), re.M).group(1)) for p in parts]
            assert len(totals) >= len(shapes) + 1, (core, totals)
            row = {shape: total // calls for shape, total in zip(shapes, totals[-len(shapes) :])}
            for shape, v in row.items():
                print(f"{core:11s} {shape:26s} {v:>10,d} instructions per decision", file=sys.stderr, flush=True)
            out["instructions_per_decision"][core] = row
        first, second = cores
        out[f"ratio_{second}_to_{first}"] = {
            n: round(out["instructions_per_decision"][second][n] / out["instructions_per_decision"][first][n], 3)
            for n in shapes
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=1.0, help="time per shape (default 1.0)")
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--cores", help="compiled,interpreted: both cores side by side")
    ap.add_argument("--repeats", type=int, default=5, help="rounds per core with --cores (default 5)")
    ap.add_argument("--instructions", action="store_true", help="callgrind instruction counts, both cores")
    ap.add_argument(
        "--calls", type=int, default=CALLS, help=f"decisions counted per shape with --instructions ({CALLS})"
    )
    ap.add_argument(
        "--against",
        metavar="CHECKOUT",
        type=Path,
        help="compare (wall-clock rounds, or with --instructions callgrind counts) this checkout's compiled core with that of another "
        "checkout (e.g. a `git worktree` of an earlier commit, `make compile` run there), both on the "
        "same bodies, each with its own shipped policies",
    )
    ap.add_argument("--store", metavar="NAME", help="write benchmarks/results/NAME.json with provenance")
    ap.add_argument(
        "--interpreted",
        action="store_true",
        help="with --against: both interpreted (worktrees without `make compile`): this checkout's copy against the base",
    )
    ap.add_argument("--child-run", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--child-core", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-calls", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_core:
        print(json.dumps({"compiled": _check_core()}))
        return 0
    if args.child_calls:
        child_calls(args.child_calls)
        return 0
    if args.child_run is not None:
        compiled = _check_core()
        res = run(args.child_run, scaling=False)
        print(json.dumps({"compiled": compiled, **res}))
        return 0
    from benchmarks import provenance

    prov = provenance.start()
    if args.cores or args.instructions or args.against:
        against = args.against.resolve() if args.against else None
        if against is not None:
            import subprocess

            base_commit = (
                subprocess.run(
                    ["git", "-C", str(against), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
                ).stdout.strip()
                or "unknown"
            )
            prov["against"] = {"checkout": str(against), "commit": base_commit}
        cores = ("base", "compiled") if against is not None else CORES
        if against is not None and args.interpreted:
            global INTERPRETED_BASE
            INTERPRETED_BASE = True
            cores = ("base", "interpreted")
            prov["interpreted"] = True
        res = (
            instructions(args.calls, cores, against)
            if args.instructions
            else cores_side_by_side(args.seconds, args.repeats, cores, against)
        )
        print(json.dumps({k: v for k, v in res.items() if k != "rounds"}, indent=1))
        if args.store:
            print(f"stored in {provenance.store(args.store, prov, res)}")
        return 0
    res = run(args.seconds)
    res["compiled"] = _check_core()
    print(f"{'shape':26s} {'bytes in':>8s} {'bytes out':>9s} {'outcome':>9s} {'decisions/s':>12s} {'µs each':>8s}")
    for name, r in res["shapes"].items():
        print(
            f"{name:26s} {r['body_bytes']:8d} {r['response_bytes']:9d} {r['outcome']:>9s} {r['decisions_per_s']:12d} {r['us_per_decision']:8.1f}"
        )
    print(f"\ncore: {'compiled (' + ', '.join(res['compiled']) + ')' if res['compiled'] else 'interpreted'}")
    print("\npolicy-count scaling, µs per decision (policy 1 = erdma only)")
    names = list(next(iter(res["scaling"].values()))["us_per_decision"])
    print(f"{'policies':>8s} " + " ".join(f"{n:>18s}" for n in names))
    for n, r in res["scaling"].items():
        print(f"{r['policies']:8d} " + " ".join(f"{r['us_per_decision'][x]:18.1f}" for x in names))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    if args.store:
        print(f"stored in {provenance.store(args.store, prov, res)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
