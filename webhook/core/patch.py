"""The JSON Patch (RFC 6902) from the pod as sent to the mutated copy.

The patch is derived by diffing the two documents, never assembled by hand: paths are escaped
(`/` in annotation keys becomes `~1`, `~` becomes `~0`), a missing parent is added whole rather
than under a path that does not exist, and an unchanged pod yields an empty patch, so
reinvocation is a no-op.

Why not `jsonpatch.make_patch`: it looks for moved and copied values across the whole document
(sorting and serialising every member of every list it compares), which cost about 2 ms per
admission, over 90% of the decision, for a pod of 8 KB. The mutation never moves anything: it
adds keys, appends to lists (inserts, for a launcher's `-x` flags) and replaces values in
place. This diff walks both documents together; a value the copy shares with the original (the
very same object: most of a pod) is skipped by identity before any call, and list items are
screened with a C-level `==`, so its cost is that of the parts that changed:

    dicts   a key only in the original: remove; only in the copy: add (whole value); in both and
            different: recurse
    lists   the copy longer: when it has more new items than kept ones, or it is a list of words
            (a command line) for which one replace is fewer bytes than an add per new word,
            one replace of the whole list (less to encode, and less for the API server to apply);
            else the items both end with are set aside (items inserted in the middle, such
            as `-x NAME` after the launcher's name in a list holding a long script, come out
            as adds at their place, not as a replace of every later item), the common
            positions that differ: recurse, the new items: add at their index, in order; the
            copy shorter: the common positions that differ: recurse, extra items of the
            original: remove from the end backwards
    other   different type or value: replace

Every operation applies to the document as it stands after the previous ones, so the patch
applies to exactly the object sent and yields the copy (tests/core/test_decision.py applies every
patch with `jsonpatch` and checks that a second pass gives none).

Equality is JSON equality, not Python's: `1 == 1.0 == True` in Python, so two subtrees that
`==` calls equal are confirmed by walking them with type checks, unless they are the very same
object, the usual case for what the mutation shares. The walks are plain loops: compiled, each is
a C loop, where `all(map(operator.is_, a, b))` looked up its builtins by name on every call.
"""

from __future__ import annotations

from typing import Any, Final

import orjson
import pybase64


def _escape(key: str) -> str:
    if "~" in key:
        key = key.replace("~", "~0")
    if "/" in key:
        key = key.replace("/", "~1")
    return key


def _same(a: Any, b: Any) -> bool:
    """JSON equality: identical, or equal with the same types all the way down. The C-level
    `==` screens first; only subtrees it calls equal that are not the same object are walked."""
    if a is b:
        return True
    if type(a) is not type(b) or a != b:
        return False
    if type(a) is list:
        la: list[Any] = a
        lb: list[Any] = b
        for i in range(len(la)):  # equal lengths: `==` said so
            x, y = la[i], lb[i]
            if x is not y and not _same(x, y):
                return False
        return True
    if type(a) is dict:
        da: dict[Any, Any] = a
        db: dict[Any, Any] = b
        for k, v in da.items():  # the same keys: `==` said so
            w = db[k]
            if v is not w and not _same(v, w):
                return False
        return True
    return True


def _diff(a: Any, b: Any, path: str, ops: list[dict[str, Any]]) -> None:
    ta, tb = type(a), type(b)
    if ta is dict and tb is dict:
        _diff_dicts(a, b, path, ops)
    elif ta is list and tb is list:
        _diff_lists(a, b, path, ops)
    elif ta is not tb or a != b:
        ops.append({"op": "replace", "path": path, "value": b})


_MISSING: Final = object()  # no JSON value is this object


# Typed as dict and list (checked by the caller), so that compiled, the loops walk the dict's
# entries and index the list directly, not through the generic iterator protocol (a tuple per
# item of `items()`, an iterator per loop: a fifth of the patch's instructions).
# The mutation only adds keys, so removals are looked for only when fewer of the copy's keys were
# found in the original than the original has (one walk of the copy, not one of each).
def _diff_dicts(a: dict[str, Any], b: dict[str, Any], path: str, ops: list[dict[str, Any]]) -> None:
    kept = 0
    for key, value in b.items():
        old = a.get(key, _MISSING)  # one lookup, not `in` and then `[]`
        if old is _MISSING:
            ops.append({"op": "add", "path": f"{path}/{_escape(key)}", "value": value})
        else:
            kept += 1
            if old is not value:
                t = type(value)
                if t is dict or t is list:
                    _diff(old, value, f"{path}/{_escape(key)}", ops)
                elif type(old) is not t or old != value:
                    ops.append({"op": "replace", "path": f"{path}/{_escape(key)}", "value": value})
    if kept < len(a):  # keys of different names: no operation here depends on another's order
        for key in a:
            if key not in b:
                ops.append({"op": "remove", "path": f"{path}/{_escape(key)}"})


def _diff_lists(a: list[Any], b: list[Any], path: str, ops: list[dict[str, Any]]) -> None:
    la, lb = len(a), len(b)
    if lb > la:
        grown = lb - la
        if grown > la or _words_shorter_whole(b, grown, len(path)):
            ops.append({"op": "replace", "path": path, "value": b})
            return
        # a[:end] pairs with b[:end], b[end:end + grown] is new, and the tails after them are
        # equal. In the usual case, items appended, that is one comparison of the last items.
        end = la
        while end > 0:
            x, y = a[end - 1], b[end - 1 + grown]
            if x is not y and not _same(x, y):
                break
            end -= 1
        _diff_items(a, b, end, path, ops)
        for i in range(end, end + grown):
            ops.append({"op": "add", "path": f"{path}/{i}", "value": b[i]})
        return
    _diff_items(a, b, lb, path, ops)
    for i in range(la - 1, lb - 1, -1):
        ops.append({"op": "remove", "path": f"{path}/{i}"})


# The bytes of one add of a word, less the word: `{"op":"add","path":"<path>/<i>","value":""},`
_ADD_BYTES: Final = 36


def _words_shorter_whole(b: list[Any], grown: int, path_len: int) -> bool:
    """A list of words (a command line) that grew: is one replace of the whole list shorter than
    an add per new word? Each word costs its length plus its quotes and comma either way; the
    replace also carries the kept words, each add its own operation and path; the new words are
    counted against the replace, so a close call keeps the adds. Lists of anything but strings
    (env, volumes: items of their own size) keep their adds."""
    whole_bytes = 0
    for x in b:
        if type(x) is not str:
            return False
        whole_bytes += len(x) + 3
    return whole_bytes < grown * (_ADD_BYTES + path_len + 3)


def _diff_items(a: list[Any], b: list[Any], n: int, path: str, ops: list[dict[str, Any]]) -> None:
    """The first n positions, pair by pair; what the mutation shares is skipped by identity."""
    for i in range(n):
        x, y = a[i], b[i]
        if x is not y and not _same(x, y):
            _diff(x, y, f"{path}/{i}", ops)


def make(original: Any, mutated: Any) -> list[dict[str, Any]]:
    """The operations that turn `original` into `mutated` (empty when they are equal)."""
    if _same(original, mutated):
        return []
    ops: list[dict[str, Any]] = []
    _diff(original, mutated, "", ops)
    return ops


def encode(ops: list[dict[str, Any]]) -> str:
    """The base64 text the AdmissionResponse `patch` field carries."""
    return pybase64.b64encode_as_string(orjson.dumps(ops))  # = base64.b64encode, in SIMD: 6x faster
