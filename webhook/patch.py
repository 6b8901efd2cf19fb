"""The JSON Patch (RFC 6902) from the pod as sent to the mutated copy.

The patch is derived by `jsonpatch.make_patch`, never assembled by hand: paths are escaped
(`/` in annotation keys becomes `~1`), a missing parent is added whole rather than under a path
that does not exist, and an unchanged pod yields an empty patch, so reinvocation is a no-op.
"""

from __future__ import annotations

import base64
from typing import Any

import jsonpatch
import orjson


def make(original: Any, mutated: Any) -> list[dict[str, Any]]:
    """The operations that turn `original` into `mutated` (empty when they are equal)."""
    if original == mutated:
        return []
    return jsonpatch.make_patch(original, mutated).patch


def encode(ops: list[dict[str, Any]]) -> str:
    """The base64 text the AdmissionResponse `patch` field carries."""
    return base64.b64encode(orjson.dumps(ops)).decode("ascii")
