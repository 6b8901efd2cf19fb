"""What every command shares: exit statuses and the default policies folder."""

from __future__ import annotations

EXIT_OK, EXIT_DENIED, EXIT_BAD_INPUT = 0, 1, 2


def policies_dir(arg: str | None) -> str:
    from webhook.policy.load import default_policies_dir

    return arg or str(default_policies_dir())
