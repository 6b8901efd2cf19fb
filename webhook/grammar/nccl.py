"""How NCCL itself reads the settings that decide between RDMA and TCP sockets.

Each function mirrors a piece of the NCCL source, so that a value is judged the way the library
will judge it at run time, not the way a person might read it:

- integer parameters (NCCL_IB_DISABLE, ...) go through `ncclLoadParam` (src/misc/param.cc):
  `strtoll(str, NULL, 0)`; an empty value leaves the default, an out-of-range one (ERANGE) too;
- NCCL_NET is compared with each network plugin's name using `strcasecmp` (`ncclNetInit`,
  src/plugin/net.cc); when no plugin of that name initialises, NCCL stops with
  "Failed to initialize any NET plugin" instead of falling back;
- NCCL_IB_HCA is parsed by `parseStringList` and matched by `matchIfList` (src/misc/utils.cc):
  a leading `^` excludes, then a leading `=` asks for exact names; entries are comma separated,
  each an optional `:port`; names match by case-sensitive prefix unless exact.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_STRTOLL = re.compile(r"[ \t\n\v\f\r]*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")


def strtoll(text: str) -> int | None:
    """C `strtoll(text, NULL, 0)`: the longest numeric prefix in base 16 (0x), 8 (leading 0) or
    10. Returns None where C would set ERANGE; 0 where there is no number at all."""
    m = _STRTOLL.match(text)
    if not m:
        return 0
    sign, digits = m.groups()
    if digits[:2] in ("0x", "0X"):
        value = int(digits[2:], 16)
    elif digits.startswith("0"):
        value = int(digits, 8) if len(digits) > 1 else 0
    else:
        value = int(digits)
    if sign == "-":
        value = -value
    if value < _INT64_MIN or value > _INT64_MAX:
        return None
    return value


def _atoi(text: str) -> int:
    """C `atoi`: NCCL reads the `:port` suffix with it (base 10, 0 when there is no number)."""
    m = re.match(r"[ \t\n\v\f\r]*([+-]?[0-9]+)", text)
    return int(m.group(1)) if m else 0


def int_param(value: str | None, default: int = 0) -> int:
    """The value NCCL's `ncclLoadParam` ends up with for an integer parameter set to `value`."""
    if value is None or value == "":
        return default
    parsed = strtoll(value)
    return default if parsed is None else parsed


def ib_disabled(value: str | None) -> bool:
    """Whether NCCL_IB_DISABLE=value turns the IB/RoCE transport off (any non-zero integer)."""
    return int_param(value) != 0


def net_selected(value: str, plugin_names: Iterable[str]) -> bool:
    """Whether NCCL_NET=value names one of `plugin_names` (case-insensitive, as strcasecmp)."""
    wanted = value.casefold()
    return any(wanted == name.casefold() for name in plugin_names)


@dataclass(frozen=True)
class HcaFilter:
    exclude: bool
    exact: bool
    entries: tuple[tuple[str, int | None], ...]  # (name prefix or exact name, port or None)


def parse_hca(value: str) -> HcaFilter:
    """NCCL_IB_HCA as NCCL parses it (`^` then `=` prefixes, comma list, optional `:port`)."""
    exclude = value.startswith("^")
    if exclude:
        value = value[1:]
    exact = value.startswith("=")
    if exact:
        value = value[1:]
    entries = []
    for item in value.split(","):
        name, sep, port = item.partition(":")
        if name:  # NCCL skips entries with an empty name
            entries.append((name, _atoi(port) if sep else None))
    return HcaFilter(exclude, exact, tuple(entries))


def hca_selects(flt: HcaFilter, device: str, port: int = 1) -> bool:
    """Whether the filter keeps `device`:`port` (an empty list keeps everything)."""
    if not flt.entries:
        return True
    if device.endswith("*"):
        return _family_selected(flt, device[:-1], port)
    matched = False
    for name, want_port in flt.entries:
        name_ok = device == name if flt.exact else device.startswith(name)
        port_ok = want_port is None or want_port == port
        if name_ok and port_ok:
            matched = True
            break
    return matched != flt.exclude


def _family_selected(flt: HcaFilter, stem: str, port: int) -> bool:
    """Whether the filter keeps some device of the family `stem*` (devices named by the node, as
    CoreWeave's ibpN or ConnectX-8's rocep..._dma): a listed name of the family, or a prefix that
    covers the family, keeps one; excluded, the family is gone only when a prefix covers it all."""
    for name, want_port in flt.entries:
        if want_port is not None and want_port != port:
            continue
        member = name.startswith(stem) and len(name) > len(stem)  # a name of the family: the stem and more
        covers = not flt.exact and stem.startswith(name)
        if flt.exclude and covers:
            return False
        if not flt.exclude and (member or covers):
            return True
    return flt.exclude


def hca_selected_devices(value: str, devices: Iterable[str]) -> list[str]:
    """The fabric devices (port 1, as RoCE/eRDMA devices expose) that NCCL_IB_HCA=value keeps."""
    flt = parse_hca(value)
    return [d for d in devices if hca_selects(flt, d)]


def debug_verbose(value: str | None) -> bool:
    """NCCL_DEBUG at INFO or TRACE (NCCL compares case-insensitively): heavy logging."""
    return value is not None and value.strip().upper() in ("INFO", "TRACE")


# NCCL_DEBUG_SUBSYS subsystems that print a few lines per rank at init, not per operation: INIT
# (the network chosen, the channels), NET (the devices, GDR), ENV and BOOTSTRAP (NCCL's own
# default set). NCCL reads the list case-insensitively; a leading ^ excludes instead.
_LIGHT_SUBSYS = frozenset(("INIT", "NET", "ENV", "BOOTSTRAP"))


def debug_subsys_light(value: str | None) -> bool:
    """NCCL_DEBUG_SUBSYS=value keeps INFO logging to init lines (see _LIGHT_SUBSYS)."""
    if value is None or value.strip().startswith("^"):
        return False
    names = [n.strip().upper() for n in value.split(",") if n.strip()]
    return bool(names) and all(n in _LIGHT_SUBSYS for n in names)
