"""The verdict's rules, each on real lines of tests/proof/nccl-logs/: never verified unless every
rank seen names the expected transport; WARN-only or no NCCL line is unverifiable, never
fallback; the pod condition each verdict makes."""

from __future__ import annotations

from pathlib import Path

from webhook.proof import expectation, nccl_log, verdict

LOGS = Path(__file__).parent / "nccl-logs"


def lines(name: str) -> list[str]:
    return (LOGS / name).read_text().splitlines()


def judge(text: list[str], exp=expectation.ANY_RDMA) -> verdict.Verdict:
    return verdict.judge(nccl_log.read_lines(text), exp)


def test_no_nccl_line_is_unverifiable_with_unknown_condition():
    got = judge(["Starting training", "epoch 1 loss 0.3"])
    assert (got.verdict, got.reasons, got.ranks) == ("unverifiable", ["Unverifiable"], [])
    assert got.condition()[:2] == ("Unknown", "Unverifiable")


def test_warn_only_is_unverifiable_even_with_errors_in_it():
    """A user's NCCL_DEBUG=WARN: the completion errors' WARN lines alone (their INFO follow-ups
    left out) say nothing of the transport: unverifiable, the errors kept as further reasons."""
    warn_only = [line for line in lines("nccl-928-completion-error4.log") if "NCCL WARN" in line]
    got = judge(warn_only)
    assert got.verdict == "unverifiable"
    assert got.reasons == ["Unverifiable", "CompletionError"]
    assert got.condition()[0] == "Unknown"


def test_one_rank_that_never_names_its_network_keeps_the_log_unverifiable():
    ib = lines("nccl-tests-185-roce-2.19.log")
    assert judge(ib).verdict == "verified"
    silent_rank = [line for line in lines("nccl-1504-container-no-network-line-2.21.log") if "26023:" in line]
    assert judge(ib + silent_rank).verdict == "unverifiable"


def test_worst_rank_wins_and_its_reason_is_the_condition_reason():
    got = judge(lines("nccl-tests-185-roce-2.19.log") + lines("nccl-1053-socket-lo.log"))
    assert got.verdict == "fallback" and got.condition()[:2] == ("False", "NetSocket")
    got = judge(lines("nccl-1053-socket-lo.log") + lines("nccl-1814-completion-status12.log"))
    assert got.verdict == "failed" and got.condition()[:2] == ("False", "CompletionError")


def test_verified_condition():
    got = judge(lines("dranet-kuberay-gib-a4.log"))
    assert got.condition()[:2] == ("True", "Verified")
    assert got.to_json()["per_rank"][0]["network"] in ("gIB",)


def test_an_unknown_network_name_proves_nothing():
    """`Using network IB` cut short in the middle of a log (a crash, a rotated file) must not read
    as another transport."""
    cut = [
        line[: line.index("Using network IB") + len("Using network I")] if "Using network IB" in line else line
        for line in lines("deit-28-mlx4-roce.log")
    ]
    cut = [line for line in cut if "NET/IB : Using" not in line]
    got = judge(cut)
    assert got.verdict == "unverifiable"


def test_plugin_missing_under_a_plugin_fabric_is_named():
    """The Socket fallback of a pod whose gIB/OFI plugin was not found says PluginFailed too."""
    exp = expectation.Expectation(policy="p", transport="gib", devices=None, gdr=True, rails=None)
    got = judge(lines("pytorch-72835-lo-socket-2.10.3.log"), exp)
    assert got.reasons == ["NetSocket", "NoDevice", "PluginFailed"]
    assert judge(lines("pytorch-72835-lo-socket-2.10.3.log")).reasons == ["NetSocket", "NoDevice"]


def test_condition_status_of_every_verdict():
    assert verdict.CONDITION_STATUS == {
        "verified": "True",
        "unverifiable": "Unknown",
        "degraded": "False",
        "fallback": "False",
        "failed": "False",
    }
    assert verdict.CONDITION == "rdma-webhook.io/TransportVerified"
