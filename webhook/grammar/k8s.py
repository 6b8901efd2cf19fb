"""Kubernetes semantics the decision relies on, reproduced exactly where no library offers them.

Quantities come from the official client (`kubernetes.utils.parse_quantity`, loaded on its own:
see `_client_quantity_parser`). Label selectors,
`$(VAR)` expansion and the name grammars are small enough that the rules are written out here,
each following the Kubernetes source it cites, so the webhook judges a pod the way the API server
and kubelet will.
"""

from __future__ import annotations

import importlib.util
import re
from decimal import Decimal
from functools import lru_cache, partial
from pathlib import Path
from typing import Any, Callable, Final, Iterable, Mapping, Protocol


def _client_quantity_parser() -> Callable[[Any], Decimal]:
    """The Kubernetes client's own `parse_quantity`, executed from its file without the `kubernetes`
    package around it. `import kubernetes.utils.quantity` runs the package's `__init__`, which
    imports the whole API client: most of a `review` process's time, and a deep import whose frame
    stack, at some depths, maps and unmaps a 16 KiB stack chunk thousands of times
    (benchmarks/results/review-speed-diagnosis-session22.txt). The module needs only `decimal`."""
    spec = importlib.util.find_spec("kubernetes")  # finds the package, runs none of it
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the kubernetes client package is not installed")
    path = Path(list(spec.submodule_search_locations)[0]) / "utils" / "quantity.py"
    loaded = importlib.util.spec_from_file_location("webhook.grammar._client_quantity", path)
    if loaded is None or loaded.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    parse: Callable[[Any], Decimal] = module.parse_quantity
    return parse


_parse_quantity = _client_quantity_parser()


def parse_quantity(value: Any) -> Decimal:
    """A resource quantity ("8", "64Gi", "500m") as a Decimal; ValueError when it is not one."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, str):
        if not value.isascii():  # the grammar is ASCII; str.isdigit and the client's \d are not ("²")
            raise ValueError(f"{value!r} is not a quantity")
        if value.isdigit():  # the common case, without the general parser
            return Decimal(value)
    elif not isinstance(value, float):
        raise ValueError(f"{value!r} is not a quantity")
    return _general_quantity(value)


@lru_cache(maxsize=1024)  # the same few sizes ("64Gi", "500m") come with every pod of a job
def _general_quantity(value: str | float) -> Decimal:
    try:
        return _parse_quantity(value)
    except Exception as exc:  # the client raises ValueError and, for some strings, others
        raise ValueError(f"{value!r} is not a quantity") from exc


@lru_cache(maxsize=256)  # a handful of sizes per policy, asked on every mutation
def format_bytes(n: int) -> str:
    """A byte count in the largest binary unit that divides it exactly (64Gi, 512Mi, 1000)."""
    for unit, size in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if n and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


# -- names ------------------------------------------------------------------------------------

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
# NCCL reads its settings with getenv; a shell can only export C identifiers, so policy variable
# names are held to that grammar (stricter than the API server's "any printable but '='").
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def is_dns1123_label(name: str) -> bool:
    return isinstance(name, str) and len(name) <= 63 and bool(_DNS1123_LABEL.match(name))


def is_dns1123_subdomain(name: str) -> bool:
    return isinstance(name, str) and len(name) <= 253 and bool(_DNS1123_SUBDOMAIN.match(name))


def is_extended_resource_name(name: str) -> str | None:
    """None if `name` is a valid extended resource name (domain/name, outside kubernetes.io),
    else what is wrong with it (apimachinery IsQualifiedName plus the extended-resource rules)."""
    if not isinstance(name, str) or "/" not in name:
        return "must be <domain>/<name>, e.g. aliyun/erdma"
    prefix, _, part = name.partition("/")
    if len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix):
        return f"prefix {prefix!r} is not a DNS subdomain"
    if len(part) > 63 or not _QUALIFIED_NAME_PART.match(part):
        return f"name {part!r} must be 1-63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
    if prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io"):
        if prefix != "requests.kubernetes.io":
            return "the kubernetes.io domain is reserved"
    return None


def has_capability(items: Any, name: str) -> bool:
    """Whether a capabilities add/drop list names `name`, with or without the `CAP_` prefix and
    in any case, as the container runtimes accept it."""
    if not isinstance(items, list) or not items:
        return False
    wanted = {name.upper(), "CAP_" + name.upper()}
    return any(isinstance(i, str) and i.upper() in wanted for i in items)


def is_env_name(name: str) -> bool:
    return isinstance(name, str) and bool(_ENV_NAME.match(name))


# -- label selectors --------------------------------------------------------------------------

Selector = Callable[[Mapping[str, str]], bool]


def compile_selector(sel: Mapping[str, Any] | None) -> Selector:
    """A metav1.LabelSelector as a predicate over a label map.

    An empty selector matches everything (as in the API). Requirements are ANDed; operators are
    In, NotIn, Exists and DoesNotExist. NotIn and DoesNotExist match an absent key.
    """
    sel = sel or {}
    checks: list[Selector] = []
    for key, value in (sel.get("matchLabels") or {}).items():
        checks.append(partial(_label_is, key, value))
    for expr in sel.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], frozenset(expr.get("values") or ())
        if op == "In":
            checks.append(partial(_label_in, key, values))
        elif op == "NotIn":
            checks.append(partial(_label_not_in, key, values))
        elif op == "Exists":
            checks.append(partial(_label_exists, key))
        elif op == "DoesNotExist":
            checks.append(partial(_label_absent, key))
        else:  # the policy schema rejects other operators before we get here
            raise ValueError(f"unknown selector operator {op!r}")
    return partial(_all_of, tuple(checks))


def _label_is(key: str, value: str, labels: Mapping[str, str]) -> bool:
    return labels.get(key) == value


def _label_in(key: str, values: frozenset[str], labels: Mapping[str, str]) -> bool:
    return key in labels and labels[key] in values


def _label_not_in(key: str, values: frozenset[str], labels: Mapping[str, str]) -> bool:
    return key not in labels or labels[key] not in values


def _label_exists(key: str, labels: Mapping[str, str]) -> bool:
    return key in labels


def _label_absent(key: str, labels: Mapping[str, str]) -> bool:
    return key not in labels


def _all_of(checks: tuple[Selector, ...], labels: Mapping[str, str]) -> bool:
    for check in checks:
        if not check(labels):
            return False
    return True


def selector_size(sel: Mapping[str, Any] | None) -> int:
    """How many requirements a selector has: the more, the more specific."""
    sel = sel or {}
    return len(sel.get("matchLabels") or {}) + len(sel.get("matchExpressions") or [])


# -- plain loops -----------------------------------------------------------------------------
# Compiled, a loop with isinstance is a C loop with a type check per item; `all(map(isinstance,
# items, repeat(str)))` looks up all, map, isinstance, repeat and str by name on every call
# (2-3K instructions each time, 12% of the pod shape check).


def all_str(values: Iterable[Any]) -> bool:
    for v in values:
        if not isinstance(v, str):
            return False
    return True


def all_dict(values: Iterable[Any]) -> bool:
    for v in values:
        if not isinstance(v, dict):
            return False
    return True


# -- environment ------------------------------------------------------------------------------


class Lookup(Protocol):
    """What `$(VAR)` expansion reads: a variable's value, None when it has none that is known."""

    def get(self, name: str) -> str | None: ...


def expand(value: str, defined: Lookup | Mapping[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion (third_party/forked/golang/expansion): `$$` is a literal `$`,
    `$(NAME)` becomes NAME's value if NAME is defined earlier, else stays as written; a `$`
    that starts neither stays as it is. `defined.get(NAME)` gives the value, None when NAME has
    none that is known.

    Written as a scan with `str.find` rather than a regex split: compiled, each step is one C
    call, and the split's match objects and list cost more than the expansion (tests/
    test_fast_paths.py checks it against the regex substitution)."""
    i = value.find("$")
    if i < 0:
        return value
    parts: list[str] = []
    done = 0  # value[:done] is in parts
    close = 0  # where the next `)` is, once looked up past i; -1 when there is none left
    n = len(value)
    while 0 <= i < n - 1:
        after = value[i + 1]
        if after == "$":
            parts.append(value[done:i])
            parts.append("$")
            done = i + 2
        elif after == "(" and close >= 0:
            if close < i + 2:  # each `)` is looked for once: linear even for "$($($(..."
                close = value.find(")", i + 2)
            if close >= 0:
                name = value[i + 2 : close]
                if isinstance(defined, Env):  # the command scan's case: compiled, a direct call
                    known = defined.get(name)
                else:  # through the protocol: a generic method call
                    known = defined.get(name)
                if known is not None:
                    parts.append(value[done:i])
                    parts.append(known)
                    done = close + 1
                i = close  # a `$` inside the parentheses starts nothing
        i = value.find("$", max(i + 1, done))
    if not parts:
        return value
    parts.append(value[done:])
    return "".join(parts)


_UNRESOLVED = object()
_INDEXED: Final = "NCCL_"  # the names `Env` indexes up front


class Env:
    """A container's `env` as its process will see it, resolved on demand: later duplicates win
    and each value is `$(VAR)`-expanded against the entries before it, as the kubelet does.
    Only the names a decision asks about are resolved (a training container often has dozens
    of variables and the decision needs a handful), and each name is resolved once (the rules,
    the command scan and the warnings ask about the same few names).

    Finding a name: the decision asks mostly about NCCL_ variables (the rules, the warnings, the
    policy's block), so only those are indexed, in one pass that hashes nothing else; any other
    name (a `$(MASTER_ADDR)` in a command) is found by a scan from the end. Indexing every name
    hashed each of a padded worker's 41 names, 38K of the decision's 224K instructions, for
    the two or three other names a pod's command asks about.

    `get`/`in`/`[]` give known values; a name whose last entry is `valueFrom` (a Secret, a
    ConfigMap, a field) has no knowable value: `unknown(name)` says so. `index(name)` is the
    position of a name's last entry in the raw list, for the mutation to find it again.
    """

    __slots__ = ("items", "_names", "_nccl", "_resolved")

    def __init__(self, env: Any):
        self.items: list[Any] = env if isinstance(env, list) else []
        names: list[Any] = []
        nccl: dict[str, int] = {}  # later duplicates overwrite earlier
        for item in self.items:
            name: Any = None
            if isinstance(item, dict):
                entry: dict[str, Any] = item  # typed, so compiled code reads it without a method call
                name = entry.get("name")
                if isinstance(name, str) and name.startswith(_INDEXED):
                    nccl[name] = len(names)
            names.append(name)
        self._names = names
        self._nccl = nccl
        self._resolved: dict[str, str | None] = {}  # name -> value, None for valueFrom

    def index(self, name: str, limit: int = -1) -> int | None:
        """The position of the last entry named `name` (before `limit`, when given)."""
        if name.startswith(_INDEXED):
            i = self._nccl.get(name)
            if i is None or limit < 0 or i < limit:
                return i
        names = self._names
        j = len(names) if limit < 0 else limit
        while j > 0:
            j -= 1
            n = names[j]
            if isinstance(n, str) and n == name:  # narrowed: compiled, a string comparison
                return j
        return None

    def _value(self, i: int) -> str | None:
        item: dict[str, Any] = self.items[i]  # a named entry: a dict
        if item.get("valueFrom") is not None:
            return None
        value = item.get("value")
        value = "" if value is None else str(value)
        if "$" in value:
            value = expand(value, _Before(self, i))
        return value

    def get(self, name: str) -> Any:
        value = self._resolved.get(name, _UNRESOLVED)
        if value is _UNRESOLVED:
            i = self.index(name)
            if i is None:
                return None
            value = self._resolved[name] = self._value(i)
        return value

    def __contains__(self, name: object) -> bool:
        return self.get(name) is not None  # type: ignore[arg-type]

    def __getitem__(self, name: str) -> str:
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value

    def unknown(self, name: str) -> bool:
        return self.index(name) is not None and self.get(name) is None


class _Before:
    """The variables defined before entry `limit` (what `$(VAR)` in that entry may refer to)."""

    __slots__ = ("env", "limit")

    def __init__(self, env: Env, limit: int):
        self.env, self.limit = env, limit

    def get(self, name: str) -> str | None:
        i = self.env.index(name, self.limit)
        return None if i is None else self.env._value(i)
