"""The command line: `rdma-webhook serve | review | policy lint | certs`, one module per command,
each adding its own subcommand to the parser `main` builds. Commands import what they run lazily,
so `--help` stays fast."""

from webhook.cli.main import main

__all__ = ["main"]
