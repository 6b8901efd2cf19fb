"""NCCL's log, read: bytes in, what NCCL said about its network out, per process ("rank").

Why a reader of its own: the admission decision is a prediction, and only NCCL's init lines say
what a job really got (`NET/IB : Using [0]mlx5_0:1/IB`, `Using network Socket`, `GPU Direct RDMA
Disabled for HCA 0`). Those lines reach us as people and machines pass them on, so the reader
takes them as they come:

- wherever the line starts: a container runtime's CRI prefix (`2024-01-01T00:00:00Z stdout F `),
  `kubectl logs --timestamps`, an mpirun launcher's `[1,3]<stdout>:`, PyTorch's `[rank3]:`, a
  leading `[155] `: the reader looks for NCCL's own `NCCL INFO` / `NCCL WARN` marker (or NCCL
  2.2's `host:pid:tid [dev] INFO`) and reads the process from what precedes it;
- every format from NCCL 2.3 to today's: `NET/IB: [0] mlx5_3:1/IB` (2.3) and
  `NET/IB : Using [0]mlx5_0:1/IB [1]...` (2.4 on), `Using internal Network IB` (2.3) and
  `Using network IB` (2.4 on), `Ring 00 : ... via NET/IB/0` (2.4-2.6) and
  `Channel 00/0 : ... via NET/IB/0/GDRDMA` (2.7 on), `GPU Direct RDMA Enabled for HCA` (2.12 on),
  plugins (aws-ofi-nccl `NET/OFI Selected Provider is efa`, gIB, FasTrak, GPUDirectTCPX,
  FastSocket, HPC-X's IBext);
- ranks interleaved as a launcher prints them: state is kept per process (`host:pid`, else the
  launcher's rank, else the GPU index NCCL prints), so one rank's Socket cannot hide behind
  another's IB;
- bounded: at most `max_bytes` and `max_lines` of the input are read (a 1 GB log streams, its
  tail is never read), a line longer than `max_line` is cut there and its rest skipped, at most
  `max_ranks` processes and `MAX_ITEMS` devices, networks and messages each are kept.

Nothing here judges: `webhook.proof.verdict` compares a `Reading` with what a policy promised.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import BinaryIO, Iterable, Iterator

MAX_BYTES = 16 * 1024 * 1024  # NCCL initialises early; 16 MiB of a log is far past its init lines
MAX_LINES = 200_000
MAX_LINE = 8192  # NCCL's own lines are < 1 KiB; a longer one is someone else's (or garbage)
MAX_RANKS = 4096
MAX_ITEMS = 64  # devices, networks, channels' networks, messages kept per rank

# -- where a line's NCCL part starts, and whose it is ------------------------------------------

_MARKER = re.compile(r"\bNCCL (INFO|WARN|TRACE|ABORT)\b ?")
# NCCL 2.2 and earlier printed no "NCCL" before the level.
_OLD = re.compile(r"(\S+):(\d+):(\d+) \[(\d+)\] (INFO|WARN) ")
_PROCESS = re.compile(r"([^\s:\[\]|]+):(\d+):(\d+) \[(\d+)\]")
_TORCH_RANK = re.compile(r"\[rank(\d+)\]:?")
_MPI_RANK = re.compile(r"\[\d+,(\d+)\]<std(?:out|err)>:")
_LEAD_RANK = re.compile(r"^\[(\d+)\]")
_DEV_ONLY = re.compile(r"\[(\d+)\]\s*$")
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d[T ][\d:.,]+(?:Z|[+-]\d\d:?\d\d)?\s*")
_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)")
# The CRI log format the kubelet writes (and `kubectl logs` reads): a line longer than the
# runtime's buffer is split into records tagged P (partial) and a last one tagged F.
_CRI = re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-]\d\d:\d\d) (stdout|stderr) ([PF]) ")

# -- what a message says -------------------------------------------------------------------------

_USING_NETWORK = re.compile(r"^Using (?:internal )?[Nn]etwork (\S.*?)\s*$")
_NET_USING = re.compile(r"^NET/([A-Za-z][\w.-]*) ?: ?Using (.*)$")
_NET_DEVICE = re.compile(r"\[(\d+)\]\s?([\w.:-]+?):(\d+)/(IB|RoCE|ETH)\b")
_OLD_IB_DEVICE = re.compile(r"^NET/IB: \[(\d+)\] ([\w.-]+):(\d+)/(IB|RoCE)")
_SOCKET_DEVICE = re.compile(r"\[(\d+)\]([\w.-]+):[^\s]*<\d+>")
_OFI_PROVIDER = re.compile(r"NET/OFI Selected [Pp]rovider is ([\w;-]+)(?:.*?found (\d+) nics)?")
_CHANNEL = re.compile(r"\bvia NET/([A-Za-z][\w. -]*?)/(\d+)(/GDRDMA)?")
_GDR = re.compile(r"GPU Direct RDMA (Enabled|Disabled) for HCA (\d+) '([^']*)'")
_COMM_RANK = re.compile(r"\bcomm 0x[0-9a-fA-F]+ rank (\d+) nranks (\d+)")
_LOADED_PLUGIN = re.compile(r"NET/Plugin ?: ?Loaded net plugin (.+?) \(v\d+\)|^Initialized NET plugin (\S+)")
_GDR_NET = re.compile(r"^NET/([A-Za-z][\w.-]*) ?: ")
_P2P_PLUGIN = re.compile(r"^P2P plugin (\S+)")
_PLUGIN_INIT = re.compile(r"^NET/(\w+)(?: ?: | )(?:Initializing|ver\.)")

_NO_DEVICE = ("NET/IB : No device found", "NET/IB: No device found", "returned 0 devices", "No IB device found")
_VERBS_MISSING = ("Failed to open libibverbs",)
_COMPLETION = ("Got completion from peer", "Got completion with error", "ibv_poll_cq error", "NET/IB : Got async")
_PLUGIN_FAILED = (
    "NET/OFI Couldn't find any optimal provider",
    "NET/OFI OFI NCCL failure",
    "Failed to initialize any NET plugin",
    "Failed to find ncclNetPlugin symbol",
    "NET/Plugin: Failed to load",
    "NET/Plugin : Failed to load",
)
_NET_NOT_FOUND = re.compile(r"\bnetwork \S+ not found")
_PLUGIN_MISSING = ("No plugin found", "Could not find: libnccl-net", "using internal implementation")


@dataclass
class Rank:
    """What one process's NCCL lines said. `nets` are NCCL's names of the networks it chose
    (`Using network IB`); `channel_nets` those its connections went through (`via NET/IB/0`)."""

    key: str
    host: str | None = None
    nccl_rank: int | None = None
    nranks: int | None = None
    info: int = 0
    warn: int = 0
    nets: list[str] = field(default_factory=list)
    channel_nets: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)  # RDMA NICs NCCL's net transport listed
    listed_by: list[str] = field(default_factory=list)  # the NET/<name> transports that listed them
    listing_whole: bool = False  # a `NET/IB : Using [0]... ; OOB` line, so `devices` are all of them
    links: list[str] = field(default_factory=list)  # IB | RoCE, one per device
    sockets: list[str] = field(default_factory=list)  # interfaces NET/Socket listed
    provider: str | None = None  # libfabric provider (aws-ofi-nccl)
    nics: int | None = None  # NICs the OFI plugin found
    plugin: str | None = None  # the net plugin NCCL loaded, or "internal"
    gdr_enabled: list[str] = field(default_factory=list)
    gdr_disabled: list[str] = field(default_factory=list)
    channels_gdr: int = 0
    channels_plain: int = 0  # net connections printed without /GDRDMA
    no_device: bool = False
    verbs_missing: bool = False
    plugin_failed: list[str] = field(default_factory=list)
    plugin_missing: bool = False
    completion_errors: list[str] = field(default_factory=list)

    def label(self) -> str:
        if self.nccl_rank is not None:
            return f"rank {self.nccl_rank} ({self.key})"
        return self.key


@dataclass
class Reading:
    """A log read: its ranks in the order first seen, NCCL's version, and how much was read."""

    ranks: dict[str, Rank] = field(default_factory=dict)
    version: str | None = None
    lines: int = 0
    bytes: int = 0
    nccl_lines: int = 0
    binary_lines: int = 0  # lines with NUL bytes or mostly undecodable
    truncated: bool = False  # the input went on past max_bytes or max_lines
    partial_lines: int = 0  # cut lines (the input ended inside one, or longer than max_line): skipped
    ranks_dropped: int = 0  # processes past max_ranks, not kept

    def info_lines(self) -> int:
        return sum(r.info for r in self.ranks.values())


def _add(items: list[str], item: str) -> None:
    if item not in items and len(items) < MAX_ITEMS:
        items.append(item)


def _process_key(prefix: str) -> tuple[str, str | None]:
    """Which process a line is from, read from what precedes NCCL's marker."""
    found = None
    for found in _PROCESS.finditer(prefix):
        pass  # the last one: a launcher's own prefix comes before NCCL's host:pid:tid [dev]
    if found is not None:
        return f"{found.group(1)}:{found.group(2)}", found.group(1)
    for pattern in (_TORCH_RANK, _MPI_RANK):
        m = pattern.search(prefix)
        if m:
            return f"rank{m.group(1)}", None
    m = _LEAD_RANK.match(_TIMESTAMP.sub("", prefix.strip())) or _DEV_ONLY.search(prefix)
    if m:
        return f"[{m.group(1)}]", None
    return "-", None


def split_line(text: str) -> tuple[str, str, str] | None:
    """(process key, level, message) of an NCCL line, None for any other line."""
    m = _MARKER.search(text)
    if m is not None:
        key, _host = _process_key(text[: m.start()])
        return key, m.group(1), text[m.end() :].strip()
    m2 = _OLD.search(text)
    if m2 is not None:
        return f"{m2.group(1)}:{m2.group(2)}", m2.group(5), text[m2.end() :].strip()
    return None


class Reader:
    """Feed it lines (`feed`), read its `reading`. One Reader per log."""

    def __init__(self, max_ranks: int = MAX_RANKS):
        self.reading = Reading()
        self.max_ranks = max_ranks
        self.partial: dict[str, str] = {}  # a CRI stream's P records, joined with its next F

    def _join_cri(self, text: str) -> str | None:
        """A CRI record's line, its P records joined to it; None while the line is still partial."""
        m = _CRI.match(text)
        if m is None:
            return text
        stream, tag, content = m.group(1), m.group(2), text[m.end() :]
        if tag == "P":
            joined = self.partial.get(stream, "") + content
            self.partial[stream] = joined[:MAX_LINE]  # a longer line is not NCCL's: kept cut
            return None
        return self.partial.pop(stream, "") + content

    def _rank(self, key: str, text: str) -> Rank | None:
        rank = self.reading.ranks.get(key)
        if rank is None:
            if len(self.reading.ranks) >= self.max_ranks:
                self.reading.ranks_dropped += 1
                return None
            m = _PROCESS.search(text)
            rank = Rank(key, host=m.group(1) if m and key.startswith(m.group(1) + ":") else None)
            self.reading.ranks[key] = rank
        return rank

    def feed(self, text: str) -> None:
        """Read one line (no newline; any prefix)."""
        reading = self.reading
        reading.lines += 1
        joined = self._join_cri(text)
        if joined is None:
            return
        text = joined
        if "\x00" in text or text.count("\ufffd") * 4 > len(text) > 0:
            reading.binary_lines += 1
            text = text.replace("\x00", "")
        if reading.version is None:
            v = _VERSION.search(text)
            if v:
                reading.version = v.group(1)
        parts = split_line(text)
        if parts is None:
            return
        key, level, message = parts
        rank = self._rank(key, text)
        if rank is None:
            return
        reading.nccl_lines += 1
        if level == "WARN":
            rank.warn += 1
        else:
            rank.info += 1
        _read_message(rank, message)


def _read_message(rank: Rank, message: str) -> None:
    """What one NCCL message says of the network, into `rank`."""
    m = _COMM_RANK.search(message)
    if m and rank.nccl_rank is None:
        rank.nccl_rank, rank.nranks = int(m.group(1)), int(m.group(2))
    m = _USING_NETWORK.match(message)
    if m:
        _add(rank.nets, m.group(1))
        return
    if "via NET/" in message:
        _read_channel(rank, message)
        return
    m = _NET_USING.match(message)
    if m:
        _read_net_using(rank, m.group(1), m.group(2))
        return
    m = _OLD_IB_DEVICE.match(message)
    if m:
        _add(rank.listed_by, "IB")
        _add(rank.devices, m.group(2))
        _add(rank.links, m.group(4))
        return
    m = _GDR.search(message)
    if m:
        net = _GDR_NET.match(message)
        if net is not None and net.group(1) not in ("Socket", "FastSocket"):
            # NCCL checks GDR for the devices of the network it uses: `NET/gIB : GPU Direct RDMA
            # Enabled for HCA 0 'mlx5_0'` names both (2.12 on)
            _add(rank.listed_by, net.group(1))
            _add(rank.gdr_enabled if m.group(1) == "Enabled" else rank.gdr_disabled, m.group(3))
        return
    m = _OFI_PROVIDER.search(message)
    if m:
        rank.provider = m.group(1)
        rank.nics = int(m.group(2)) if m.group(2) else rank.nics
        return
    _read_plugin(rank, message)
    _read_errors(rank, message)


def _read_channel(rank: Rank, message: str) -> None:
    for c in _CHANNEL.finditer(message):
        _add(rank.channel_nets, c.group(1).strip())
        if c.group(3):
            rank.channels_gdr += 1
        elif c.group(1).strip() not in ("Socket", "FastSocket"):
            rank.channels_plain += 1


def _read_net_using(rank: Rank, net: str, rest: str) -> None:
    """`NET/<net> : Using ...`: the devices a net transport found (2.4 on). `NET/IB : Using
    interface X for sideband communication` (2.3) names no device."""
    if net in ("Socket", "FastSocket"):
        for s in _SOCKET_DEVICE.finditer(rest):
            _add(rank.sockets, s.group(2))
        if net == "FastSocket":
            _add(rank.listed_by, net)  # a plugin: listed only when NCCL loaded it (NET/Socket is also bootstrap's)
        return
    listing, oob, _ = rest.partition("; OOB")
    if oob and _NET_DEVICE.search(listing):
        rank.listing_whole = True
    for d in _NET_DEVICE.finditer(listing):
        _add(rank.listed_by, net)
        _add(rank.devices, d.group(2))
        _add(rank.links, d.group(4))


def _read_plugin(rank: Rank, message: str) -> None:
    m = _LOADED_PLUGIN.search(message)
    if m:
        rank.plugin = m.group(1) or m.group(2)
        return
    m = _PLUGIN_INIT.match(message)
    if m:
        rank.plugin = m.group(1)
        return
    m = _P2P_PLUGIN.match(message)
    if m:
        rank.plugin = m.group(1)
        return
    if any(s in message for s in _PLUGIN_MISSING):
        rank.plugin_missing = True
        if rank.plugin is None:
            rank.plugin = "internal"


def _read_errors(rank: Rank, message: str) -> None:
    if any(s in message for s in _NO_DEVICE):
        rank.no_device = True
    elif any(s in message for s in _VERBS_MISSING):
        rank.verbs_missing = True
    elif any(s in message for s in _COMPLETION):
        _add(rank.completion_errors, message[:300])
    elif any(s in message for s in _PLUGIN_FAILED) or _NET_NOT_FOUND.search(message):
        _add(rank.plugin_failed, message[:300])


# -- reading a stream, bounded -------------------------------------------------------------------


def lines_of(
    stream: BinaryIO, max_bytes: int = MAX_BYTES, max_lines: int = MAX_LINES, max_line: int = MAX_LINE
) -> Iterator[tuple[str, bool, int]]:
    """The first lines of a binary stream as text, each with whether it is whole and the bytes
    read for it. A line is not
    whole when the stream (or `max_bytes`) ends inside it, or when it is longer than `max_line`
    (its rest is skipped): such a line proves nothing and the reader skips it. Never more than
    `max_bytes` read, never more than `max_line` bytes held at once."""
    read = 0
    count = 0
    while count < max_lines and read < max_bytes:
        raw = stream.readline(min(max_line, max_bytes - read))
        if not raw:
            return
        start = read
        read += len(raw)
        whole = raw.endswith(b"\n")
        if not whole and len(raw) >= max_line:
            # cut: skip to the end of this line (bounded by max_bytes like the rest)
            while read < max_bytes:
                rest = stream.readline(min(max_line, max_bytes - read))
                read += len(rest)
                if not rest or rest.endswith(b"\n"):
                    break
        count += 1
        yield raw.rstrip(b"\r\n").decode("utf-8", errors="replace"), whole, read - start


def read_stream(
    stream: BinaryIO,
    max_bytes: int = MAX_BYTES,
    max_lines: int = MAX_LINES,
    max_line: int = MAX_LINE,
    max_ranks: int = MAX_RANKS,
) -> Reading:
    """Read the first `max_bytes` / `max_lines` of a binary stream (a file, a pod's log)."""
    reader = Reader(max_ranks)
    reading = reader.reading
    for text, whole, size in lines_of(stream, max_bytes, max_lines, max_line):
        reading.bytes += size
        if whole:
            reader.feed(text)
        else:
            reading.lines += 1
            reading.partial_lines += 1
    if reading.lines >= max_lines or reading.bytes >= max_bytes:
        reading.truncated = bool(stream.read(1))
    return reading


def read_lines(lines: Iterable[str], max_lines: int = MAX_LINES, max_ranks: int = MAX_RANKS) -> Reading:
    """Read whole lines already decoded (a test's, a controller's), at most `max_lines` of them."""
    reader = Reader(max_ranks)
    for i, text in enumerate(lines):
        if i >= max_lines:
            reader.reading.truncated = True
            break
        reader.reading.bytes += len(text) + 1
        if len(text) > MAX_LINE:
            reader.reading.lines += 1
            reader.reading.partial_lines += 1
            continue
        reader.feed(text.rstrip("\r\n"))
    return reader.reading
