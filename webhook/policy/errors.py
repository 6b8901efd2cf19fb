"""What is wrong with a policy file, as one value: the file, the policy and the field, and what.

Its own module because every step of loading reports these (`webhook.policy.load` reading the
files, `webhook.policy.compiler` checking a document against its schema, `webhook.policy.sections`
compiling each section), and the steps import it from below rather than from each other.
"""

from __future__ import annotations


class PolicyError(Exception):
    """One thing wrong with a policy file: where (file, policy, field) and what."""

    def __init__(self, file: str, policy: str | None, field: str | None, message: str):
        self.file, self.policy, self.field, self.message = file, policy, field, message
        super().__init__(str(self))

    def __str__(self) -> str:
        where = [self.file]
        if self.policy:
            where.append(f"policy {self.policy!r}")
        if self.field:
            where.append(f"field {self.field}")
        return f"{': '.join(where)}: {self.message}"
