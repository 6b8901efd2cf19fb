"""A reading of NCCL's log against what the policy promised: one verdict, its reasons, and the
pod condition they make.

The rule this module keeps: never `verified` unless the lines prove it. Every rank seen must have
said which network it uses and it must be the expected one, with no error; a rank that said
nothing about its network leaves the whole log `unverifiable`, and so does a log with no NCCL
line or only WARN lines (a user's NCCL_DEBUG=WARN): unknown, never `fallback`, so that nothing
is reported, let alone killed, on a misread.

Verdicts, worst first: `failed` (completion errors: RDMA was tried and broke), `fallback` (NCCL
runs on TCP: NET/Socket, FastSocket, libfabric's tcp provider), `degraded` (RDMA, but not as
promised: GDR off, fewer rails, another device or RDMA transport), `unverifiable`, `verified`.
Reasons are CamelCase so that the first one can be a pod condition's reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from webhook.proof.expectation import NETWORKS, PLUGIN_TRANSPORTS, TCP, Expectation, transport_of
from webhook.proof.nccl_log import Rank, Reading

VERIFIED, UNVERIFIABLE, DEGRADED, FALLBACK, FAILED = "verified", "unverifiable", "degraded", "fallback", "failed"
SEVERITY = {VERIFIED: 0, UNVERIFIABLE: 1, DEGRADED: 2, FALLBACK: 3, FAILED: 4}

# The pod condition the verifier sets (webhook.proof's controller, next): type, and per verdict
# its status; its reason is the verdict's first reason.
CONDITION = "rdma-webhook.io/TransportVerified"
CONDITION_STATUS = {VERIFIED: "True", UNVERIFIABLE: "Unknown", DEGRADED: "False", FALLBACK: "False", FAILED: "False"}
_TCP_PROVIDERS = ("tcp", "sockets", "udp")
# A network name that is none of these (a line cut short, a plugin this reader does not know)
# proves nothing: the rank is unverifiable, never judged as another transport.
KNOWN = frozenset(NETWORKS.values())


@dataclass
class RankVerdict:
    label: str
    host: str | None
    transport: str | None
    network: str | None  # NCCL's own name: IB, IBext, AWS Libfabric, Socket...
    devices: list[str]
    gdr: bool | None
    verdict: str
    reasons: list[str]
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.label,
            "host": self.host,
            "transport": self.transport,
            "network": self.network,
            "devices": self.devices,
            "gdr": self.gdr,
            "verdict": self.verdict,
            "reasons": self.reasons,
        }


@dataclass
class Verdict:
    verdict: str
    reasons: list[str]
    transport: str | None
    plugin: str | None
    devices: list[str]
    gdr: bool | None
    ranks: list[RankVerdict]
    notes: list[str]
    expected: Expectation
    version: str | None = None

    def condition(self) -> tuple[str, str, str]:
        """(status, reason, message) of the pod condition CONDITION."""
        status = CONDITION_STATUS[self.verdict]
        reason = "Verified" if self.verdict == VERIFIED else (self.reasons[0] if self.reasons else "Unverifiable")
        return status, reason, "; ".join(self.notes)[:1024]

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "reasons": self.reasons,
            "transport": self.transport,
            "plugin": self.plugin,
            "devices": self.devices,
            "gdr": self.gdr,
            "ranks": len(self.ranks),
            "nccl_version": self.version,
            "policy": self.expected.policy,
            "expected": {
                "transport": self.expected.transport,
                "devices": list(self.expected.devices) if self.expected.devices is not None else None,
                "gdr": self.expected.gdr,
                "rails": self.expected.rails,
            },
            "notes": self.notes,
            "per_rank": [r.to_json() for r in self.ranks],
        }


def network_of(rank: Rank) -> str | None:
    """NCCL's name of the network a rank uses: what it said it chose (2.3 on), else what its
    connections went through, else the transport that listed its devices or the OFI provider."""
    if rank.nets:
        return rank.nets[-1]
    if rank.channel_nets:
        rdma = [n for n in rank.channel_nets if transport_of(n) != TCP]
        return rdma[0] if rdma else rank.channel_nets[0]
    if rank.provider is not None:
        return "Libfabric"
    if rank.listed_by:
        return rank.listed_by[0]
    if (rank.no_device or rank.verbs_missing) and rank.sockets:
        return "Socket"
    return None


def gdr_of(rank: Rank) -> bool | None:
    """GPUDirect RDMA on this rank: False when an HCA says Disabled, or when its net connections
    were printed and none with /GDRDMA; True when HCAs say Enabled or a connection has /GDRDMA."""
    if rank.gdr_disabled:
        return False
    if rank.gdr_enabled or rank.channels_gdr:
        return True
    if rank.channels_plain:
        return False
    return None


def _judge_rank(rank: Rank, exp: Expectation) -> RankVerdict:
    network = network_of(rank)
    transport = transport_of(network) if network is not None else None
    gdr = gdr_of(rank) if transport not in (None, TCP) else None
    out = RankVerdict(rank.label(), rank.host, transport, network, _devices(rank), gdr, VERIFIED, [])
    causes = _causes(rank)
    if rank.completion_errors:
        return _set(out, FAILED, ["CompletionError", *causes], f"{rank.completion_errors[0]}")
    if transport is None:
        return _set(out, UNVERIFIABLE, ["Unverifiable", *causes], "printed no line naming its network")
    if transport not in KNOWN:
        return _set(out, UNVERIFIABLE, ["Unverifiable", *causes], f"network {network!r} is none NCCL is known to name")
    if transport == TCP:
        return _set(out, FALLBACK, ["NetSocket", *causes], f"uses NET/{network}")
    if transport == "libfabric" and rank.provider and rank.provider.split(";")[0].lower() in _TCP_PROVIDERS:
        return _set(out, FALLBACK, ["NetSocket"], f"libfabric provider {rank.provider} is TCP")
    reasons: list[str] = []
    notes: list[str] = []
    if exp.transport is not None and transport != exp.transport:
        reasons.append("WrongTransport")
        notes.append(f"uses {network} ({transport}), expected {exp.transport}")
    if exp.providers and rank.provider and rank.provider.split(";")[0].lower() not in exp.providers:
        reasons.append("WrongDevice")
        notes.append(f"libfabric provider {rank.provider}, expected {'/'.join(exp.providers)}")
    wrong = [d for d in _devices(rank) if not exp.device_ok(d)]
    if wrong:
        reasons.append("WrongDevice")
        notes.append(f"devices {', '.join(wrong)} are not the policy's")
    # only a full listing counts rails (`NET/IB : Using [0].. [n]`, the OFI plugin's NIC count),
    # not the HCAs GDR lines happen to name
    rails = len(rank.devices) if rank.listing_whole else rank.nics
    if exp.rails is not None and rails is not None and rails < exp.rails:
        reasons.append("FewerRails")
        notes.append(f"{rails} NIC(s), expected {exp.rails}")
    if exp.gdr and gdr is False:
        reasons.append("GdrDisabled")
        notes.append(f"GPUDirect RDMA disabled{' for ' + ', '.join(rank.gdr_disabled) if rank.gdr_disabled else ''}")
    if reasons:
        return _set(out, DEGRADED, reasons, "; ".join(notes))
    return _set(out, VERIFIED, [], f"uses {network}" + (f" on {', '.join(rank.devices[:8])}" if rank.devices else ""))


def _devices(rank: Rank) -> list[str]:
    """The NICs a rank's lines name: listed by its net transport, or in its GDR lines."""
    return list(dict.fromkeys([*rank.devices, *rank.gdr_enabled, *rank.gdr_disabled]))


def _causes(rank: Rank) -> list[str]:
    """What a rank's lines say about why it is not on RDMA."""
    out = []
    if rank.no_device:
        out.append("NoDevice")
    if rank.verbs_missing:
        out.append("VerbsMissing")
    if rank.plugin_failed:
        out.append("PluginFailed")
    return out


def _set(out: RankVerdict, verdict: str, reasons: list[str], note: str) -> RankVerdict:
    out.verdict = verdict
    out.reasons = list(dict.fromkeys(reasons))
    out.notes.append(f"{out.label}: {note}")
    return out


def _shared(values: list[str | None]) -> str | None:
    seen = {v for v in values if v is not None}
    if not seen:
        return None
    return seen.pop() if len(seen) == 1 else "mixed"


def judge(reading: Reading, exp: Expectation) -> Verdict:
    """The verdict of a whole log: its worst rank's, with every reason seen (worst first)."""
    ranks = [_judge_rank(r, exp) for r in reading.ranks.values()]
    plugins = [r.plugin for r in reading.ranks.values()]
    if exp.transport in PLUGIN_TRANSPORTS:
        for rv, rank in zip(ranks, reading.ranks.values()):
            if rv.verdict != VERIFIED and rank.plugin_missing and "PluginFailed" not in rv.reasons:
                rv.reasons.append("PluginFailed")  # the plugin the fabric needs was not found
    devices = sorted({d for r in ranks for d in r.devices})
    gdrs = [r.gdr for r in ranks if r.transport not in (None, TCP)]
    gdr = False if False in gdrs else (True if gdrs and all(gdrs) else None)
    verdict = Verdict(
        VERIFIED,
        [],
        _shared([r.transport for r in ranks]),
        _shared(plugins),
        devices,
        gdr,
        ranks,
        [],
        exp,
        reading.version,
    )
    if not ranks or reading.info_lines() == 0:
        why = "no NCCL line" if not ranks else "only NCCL WARN lines (NCCL_DEBUG=WARN?)"
        extra = [reason for r in ranks for reason in r.reasons if reason not in ("Unverifiable",)]
        verdict.verdict = UNVERIFIABLE
        verdict.reasons = list(dict.fromkeys(["Unverifiable", *extra]))
        verdict.notes = [f"{why}: NCCL_DEBUG=INFO prints the network NCCL uses"]
        return verdict
    worst = max(ranks, key=lambda r: SEVERITY[r.verdict])
    verdict.verdict = worst.verdict
    ordered = sorted(ranks, key=lambda r: -SEVERITY[r.verdict])
    verdict.reasons = list(dict.fromkeys(reason for r in ordered for reason in r.reasons))
    verdict.notes = [note for r in ordered if r.verdict != VERIFIED for note in r.notes][:16]
    if verdict.verdict == VERIFIED:
        verdict.notes = [f"{len(ranks)} rank(s) on {verdict.transport}" + (", GDR on" if gdr else "")]
    if reading.ranks_dropped:
        # lines of processes past the first max_ranks were not read: they prove nothing
        verdict.notes.append(f"{reading.ranks_dropped} line(s) of ranks past the first {len(reading.ranks)} not read")
        if verdict.verdict == VERIFIED:
            verdict.verdict, verdict.reasons = UNVERIFIABLE, ["Unverifiable"]
    return verdict
