"""webhook/admission/judge.py: the one judge that `/mutate`, `/validate` and `rdma-webhook review`
ask. What it answers is pinned by the review and admission tests; these pin what it is for: the
same decision as the envelope's, a workload expanded once per document in `review`, and an
expansion made in another namespace never reused."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

import webhook
from webhook.admission import judge, review
from webhook.cluster.state import FileClusterState
from webhook.core.decision import Namespace
from webhook.kinds import workloads
from webhook.policy.load import load_dir

ROOT = Path(__file__).resolve().parents[2]
POLICIES, _ = load_dir(ROOT / "policies")
STATE = FileClusterState.from_file(str(ROOT / "examples" / "cluster-state.yaml"))
NS = Namespace("ml", {"rdma-webhook.io/injection": "enabled", "rdma-webhook.io/policy": "ib-shared"})


def _pod(env: list[dict[str, str]] | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml", "labels": {"rdma-webhook.io/inject": "true"}},
        "spec": {
            "containers": [
                {"name": "c", "image": "i", "env": env or [], "resources": {"limits": {"nvidia.com/gpu": "8"}}}
            ]
        },
    }


def _job(env: list[dict[str, str]] | None = None) -> dict:
    pod = _pod(env)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ml"},
        "spec": {"template": {"metadata": pod["metadata"], "spec": pod["spec"]}},
    }


def _body(obj: dict, kind: str, group: str = "") -> bytes:
    return json.dumps(
        {
            "apiVersion": review.API_VERSION,
            "kind": "AdmissionReview",
            "request": {
                "uid": "u",
                "operation": "CREATE",
                "namespace": "ml",
                "object": obj,
                "kind": {"group": group, "version": "v1", "kind": kind},
                "resource": {"group": group, "version": "v1", "resource": kind.lower() + "s"},
            },
        }
    ).encode()


@pytest.mark.parametrize("env", [[], [{"name": "NCCL_IB_DISABLE", "value": "1"}]])
def test_the_envelope_answers_with_the_judges_decision(env):
    lookup = {"ml": NS}.get
    _, _, mutated, _ = review.handle(_body(_pod(env), "Pod"), POLICIES, lookup, None)
    judged, message = judge.judge(_pod(env), "", "Pod", NS, POLICIES, None)
    assert (judged.outcome, judged.policy, [f.text() for f in judged.denials], message) == (
        mutated.outcome,
        mutated.policy,
        [f.text() for f in mutated.denials],
        None,
    )
    _, doc, validated, _ = review.handle_validate(_body(_job(env), "Job", "batch"), POLICIES, lookup, None)
    decision, message = judge.judge(_job(env), "batch", "Job", NS, POLICIES, None)
    assert (decision.outcome, decision.warnings, message) == (
        validated.outcome,
        validated.warnings,
        doc["response"].get("status", {}).get("message"),
    )


def test_a_kind_that_holds_no_pods_is_not_judged():
    assert judge.judge({"apiVersion": "v1", "kind": "Service"}, "", "Service", NS, POLICIES, None) is None


def test_an_expansion_made_in_another_namespace_is_not_used():
    """A TrainJob's runtime is looked up in the namespace it is expanded in: the templates the
    caller found elsewhere (here: none) must not stand for those of the namespace judged."""
    elsewhere = workloads.Expansion(templates=[])
    used, _ = judge.judge_workload(_job(), "batch", "Job", NS, POLICIES, None, expanded=("other", elsewhere))
    assert used.outcome == "unchanged" and used.templates
    reused, _ = judge.judge_workload(_job(), "batch", "Job", NS, POLICIES, None, expanded=("ml", elsewhere))
    assert reused.outcome == "skipped" and not reused.templates


def test_review_expands_each_workload_once(monkeypatch, tmp_path):
    from webhook.cli.main import main

    calls = []
    expand = workloads.expand

    def counting(obj, group, kind, runtimes=None, namespace="", release=None, _depth=0):
        if _depth == 0:
            calls.append(kind)
        return expand(obj, group, kind, runtimes, namespace, release, _depth)

    monkeypatch.setattr(workloads, "expand", counting)
    monkeypatch.setattr("webhook.kinds.verdict.expand", counting)
    manifest = tmp_path / "job.yaml"
    manifest.write_text(json.dumps(_job()))
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()):
        assert main(["review", "--policy", "ib-shared", "--output", "json", str(manifest)]) == 0
    assert calls == ["Job"] and json.loads(out.getvalue())["outcome"] == "mutated"


@pytest.mark.skipif(
    bool(webhook.compiled()),
    reason="counts calls by replacing patch.make, which the compiled core calls "
    "directly; `make test-pure` runs this file on the interpreted core",
)
def test_the_patch_is_made_only_for_the_review_output(monkeypatch, tmp_path):
    from webhook.cli.main import main
    from webhook.core import patch

    made = []
    make = patch.make
    monkeypatch.setattr(patch, "make", lambda *a: made.append(1) or make(*a))
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(json.dumps(_pod()))
    for mode, patches in ((["--output", "json"], 0), (["--explain", "--color", "never"], 0), ([], 1)):
        made.clear()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            assert main(["review", "--policy", "ib-shared", *mode, str(manifest)]) == 0
        assert len(made) == patches, mode
