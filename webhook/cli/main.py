"""The command line's parser: `rdma-webhook serve | review | policy lint | policy migrate | nccl-log | verify | status | certs`,
each command in a module of its own beside this one."""

from __future__ import annotations

import argparse
from typing import Iterable

from webhook.cli import certs, nccl_log, policy, review, serve, status, verify


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("rdma-webhook")
    except Exception:
        return "unknown"


# The commands, each a module with `register(commands)`, which adds its subcommand, in the order
# `--help` lists them.
COMMANDS = (serve, review, policy, nccl_log, verify, status, certs)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rdma-webhook",
        description="RDMA injection webhook for GPU training pods.",
        epilog="`rdma-webhook COMMAND --help` describes each command, its flags and exit codes.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = p.add_subparsers(
        dest="command", required=True, metavar="{serve,review,policy,nccl-log,verify,status,certs}"
    )
    for command in COMMANDS:
        command.register(commands)
    return p


def main(argv: Iterable[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
