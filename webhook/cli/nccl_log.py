"""`rdma-webhook nccl-log`: read NCCL logs (files or stdin) and say, for each, which network NCCL
used and whether that is what the policy promised: the verifier's reading, offline, for a person
with a log in hand or a CI job after its NCCL test.

Only the first --max-bytes / --max-lines of each input are read (NCCL prints its network at
init), so a log of any size takes bounded memory and time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import IO, Any, BinaryIO

from webhook.cli.common import EXIT_BAD_INPUT, EXIT_DENIED, EXIT_OK

EXIT_CODES = """exit status:
  0  every input verified: each rank NCCL printed uses the promised transport, devices, rails and GDR
  1  any input not verified: fallback (TCP), degraded (GDR off, fewer rails, another device),
     failed (completion errors) or unverifiable (no NCCL line, only WARN lines, a rank that never
     said which network it uses)
  2  bad input: a file missing, unreadable or a directory; an unknown policy or a bad --policies folder"""


def register(commands: Any) -> None:
    """Add `nccl-log` to the command line's subcommands."""
    from webhook.proof import nccl_log

    r = commands.add_parser(
        "nccl-log",
        help="read NCCL logs: the transport each rank used, against a policy",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EXIT_CODES,
        description="Read NCCL's INFO lines (NCCL_DEBUG=INFO; NCCL_DEBUG_SUBSYS=INIT,NET is enough) in each "
        "file or stdin (-), as a container runtime, kubectl --timestamps, mpirun or torchrun prints them, "
        "and print one JSON object per input: transport, plugin, devices, gdr, ranks, verdict "
        "(verified, fallback, degraded, failed, unverifiable) and reasons. Without --policy any RDMA "
        "transport is proof; with one, its fabric's transport, devices, GDR and rails (docs/proof.md).",
    )
    r.add_argument("files", nargs="+", metavar="FILE", help="NCCL logs; - for stdin")
    r.add_argument(
        "--policy",
        metavar="NAME",
        help="judge against this policy: of --policies DIR when given, else of the shipped catalogue (policies/)",
    )
    r.add_argument("--policies", metavar="DIR", help="the folder --policy is looked up in (default: the catalogue)")
    r.add_argument(
        "--output", choices=("json", "text"), default="json", help="one JSON object per line (default), or text"
    )
    r.add_argument(
        "--max-bytes", type=_positive, default=nccl_log.MAX_BYTES, help="bytes read of each input (default 16 MiB)"
    )
    r.add_argument(
        "--max-lines", type=_positive, default=nccl_log.MAX_LINES, help="lines read of each input (default 200000)"
    )
    r.set_defaults(func=run)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def _load_policy(name: str | None, folder: str | None, err: IO[str]) -> tuple[bool, Any]:
    """(ok, the Policy or None)."""
    if name is None:
        return True, None
    from webhook.policy.load import default_policies_dir, load_dir

    where = folder or str(default_policies_dir())
    if not os.path.isdir(where):
        print(f"rdma-webhook nccl-log: --policies {where}: not a folder", file=err)
        return False, None
    loaded, errors = load_dir(where)
    if loaded is None:
        for e in errors:
            print(f"rdma-webhook nccl-log: {e}", file=err)
        return False, None
    policy = loaded.get(name)
    if policy is None:
        names = ", ".join(sorted(loaded.by_name)) or "none"
        print(f"rdma-webhook nccl-log: no policy {name!r} in {where} (there: {names})", file=err)
        return False, None
    return True, policy


def _open(path: str) -> tuple[BinaryIO | None, str | None]:
    if path == "-":
        return sys.stdin.buffer, None
    if os.path.isdir(path):
        return None, "is a directory (give the log files)"
    try:
        return open(path, "rb"), None
    except OSError as e:
        return None, e.strerror or str(e)


def _one(path: str, args: argparse.Namespace, expected: Any, err: IO[str]) -> tuple[dict[str, Any], bool]:
    """The JSON object of one input, and whether it is verified."""
    from webhook.proof import nccl_log, verdict

    stream, problem = _open(path)
    if stream is None:
        print(f"rdma-webhook nccl-log: {path}: {problem}", file=err)
        return {"file": path, "error": problem}, False
    try:
        reading = nccl_log.read_stream(stream, max_bytes=args.max_bytes, max_lines=args.max_lines)
    except OSError as e:
        print(f"rdma-webhook nccl-log: {path}: {e.strerror or e}", file=err)
        return {"file": path, "error": e.strerror or str(e)}, False
    finally:
        if path != "-":
            stream.close()
    result = verdict.judge(reading, expected)
    out = {"file": path, **result.to_json(), "lines_read": reading.lines, "truncated": reading.truncated}
    if reading.binary_lines and not reading.nccl_lines:
        print(
            f"rdma-webhook nccl-log: {path}: looks binary (no NCCL line, {reading.binary_lines} binary line(s))",
            file=err,
        )
    return out, result.verdict == verdict.VERIFIED


def _text(obj: dict[str, Any]) -> str:
    if "error" in obj:
        return f"{obj['file']}: error: {obj['error']}"
    head = (
        f"{obj['file']}: {obj['verdict']}"
        + (f" ({', '.join(obj['reasons'])})" if obj["reasons"] else "")
        + f"; transport {obj['transport']}, plugin {obj['plugin']}, gdr {obj['gdr']}, {obj['ranks']} rank(s)"
        + (f", devices {', '.join(obj['devices'][:16])}" if obj["devices"] else "")
    )
    return "\n".join([head, *(f"  {note}" for note in obj["notes"])])


def run(args: argparse.Namespace, out: IO[str] | None = None, err: IO[str] | None = None) -> int:
    from webhook.proof.expectation import expectation

    out = out or sys.stdout
    err = err or sys.stderr
    ok, policy = _load_policy(args.policy, args.policies, err)
    if not ok:
        return EXIT_BAD_INPUT
    expected = expectation(policy)
    status = EXIT_OK
    for path in args.files:
        obj, verified = _one(path, args, expected, err)
        print(json.dumps(obj, sort_keys=False) if args.output == "json" else _text(obj), file=out)
        if "error" in obj:
            status = EXIT_BAD_INPUT
        elif not verified and status == EXIT_OK:
            status = EXIT_DENIED
    return status
