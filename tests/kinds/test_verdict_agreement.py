"""Issue 42 item 3, one answer at apply time and at create time (webhook.kinds.verdict): for
every workload manifest of the test corpora (tests/manifests*/, examples/) and every shipped
policy, what /validate says of each labelled template is what /mutate does to a pod made from it
as its controller makes it (generateName, defaulted, the service-account token volume; an MPI
launcher with the operator's label): the same outcome, and a template refuses the workload
exactly when its pods would be refused, except where the policy chose `workloadValidation: Warn`
or a template placeholder is filled in only when the pod is made.

The CPU MPIJob of tests/manifests-nics/mpijob-cpu-sockets.yaml is the example the issue names:
its launcher's `-x FI_PROVIDER=sockets` under the EFA policy was a warning at /validate and a
refusal at creation (the job stuck in FailedCreate); the refusal is the answer that holds at
creation, where the webhook cannot see that no worker gets RDMA, so /validate refuses too.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
import yaml

from nic_corpus import ROOT, controller_pods, mutate, shipped, validate
from webhook.cluster.state import ClaimStore, FileClusterState, RuntimeStore, is_dra, is_runtime
from webhook.core import keys
from webhook.core.decision import Namespace
from webhook.core.scripts import ConfigMapStore, is_config_map
from webhook.kinds.workloads import expand

PS = shipped()
CORPORA = sorted(p for p in ROOT.glob("tests/manifests*/**/*.yaml") if p.name != "cluster-state.yaml") + sorted(
    p for p in (ROOT / "examples").glob("**/*.yaml") if p.name != "cluster-state.yaml"
)
EXCUSED = ("workloadValidation Warn", "a template placeholder is filled in only when the pod is made")


def _state_file(path: Path) -> Path:
    own = path.parent / "cluster-state.yaml"
    if own.exists():
        return own
    up = path.parent.parent / "cluster-state.yaml"
    return up if up.exists() else ROOT / "examples" / "cluster-state.yaml"


def _workloads(path: Path) -> list[tuple[dict, list[dict]]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    out = []
    for d in docs:
        api = str(d.get("apiVersion") or "")
        group = api.split("/")[0] if "/" in api else ""
        if d.get("kind") == "Pod" or not group:
            continue
        if expand(
            d, group, str(d.get("kind")), RuntimeStore(x for x in docs if is_runtime(x)), "ml-training"
        ).templates:
            out.append((d, docs))
    return out


CASES = [(p, i) for p in CORPORA for i in range(len(_workloads(p)))]


def _cluster(path: Path, obj: dict, docs: list[dict], policy: str):
    """The corpus's cluster state with the workload's namespace opted in under `policy`, and the
    input's companions (runtimes, DRA objects, ConfigMaps) as the caches would hold them."""
    base = yaml.safe_load(_state_file(path).read_text())
    items = base["items"] if base.get("kind") == "List" else [base]
    ns = obj["metadata"].get("namespace") or "ml-training"
    namespaces = [
        Namespace(i["metadata"]["name"], dict(i["metadata"].get("labels") or {}))
        for i in items
        if i.get("kind") == "Namespace" and i["metadata"]["name"] != ns
    ]
    labels = {"kubernetes.io/metadata.name": ns, keys.NS_INJECTION: keys.NS_INJECTION_ENABLED, keys.NS_POLICY: policy}
    namespaces.append(Namespace(ns, labels))
    nads = [i for i in items if i.get("kind") == "NetworkAttachmentDefinition"]
    runtimes = [i for i in items + docs if is_runtime(i)]
    dra = [i for i in items + docs if is_dra(i)]
    state = FileClusterState(namespaces, nads, runtimes, dra)
    claims = ClaimStore()
    claims.update(state.claims())
    cms = ConfigMapStore()
    for d in docs:
        if is_config_map(d):
            cms.add(d, ns)
    return state, claims, cms, ns


@pytest.mark.parametrize("case", CASES, ids=[f"{p.relative_to(ROOT)}#{i}" for p, i in CASES])
def test_validate_of_each_template_is_mutate_of_its_pods_under_every_shipped_policy(case):
    path, index = case
    obj, docs = _workloads(path)[index]
    checked = 0
    for policy in sorted(PS.by_name):
        state, claims, cms, ns = _cluster(path, obj, docs, policy)
        vresp, vdecision = validate(obj, PS, state, claims, config_maps=cms)
        templates = {t.path: t for t in vdecision.templates}
        refused_pod = False
        for tpath, pod in controller_pods(obj, ns, RuntimeStore(d for d in docs if is_runtime(d))):
            resp, _, d = mutate(pod, PS, state, claims, config_maps=cms)
            if d.outcome == "skipped":
                assert tpath not in templates, (policy, tpath)
                continue
            t = templates[tpath]
            assert t.decision.outcome == d.outcome, (policy, tpath, t.decision.denials, d.denials, d.reason)
            assert [f.rule for f in t.decision.denials] == [f.rule for f in d.denials], (policy, tpath)
            if not resp["allowed"] and t.why_not not in EXCUSED:
                assert t.deny, (policy, tpath, t.why_not)
                refused_pod = True
            checked += 1
        if refused_pod:
            assert not vresp["allowed"], (policy, vresp)
    assert checked, "no labelled template judged under any policy"


def test_a_cpu_mpijob_with_fi_provider_sockets_is_refused_at_apply_time_as_its_launcher_is_at_creation(tmp_path):
    path = ROOT / "tests" / "manifests-nics" / "mpijob-cpu-sockets.yaml"
    [(obj, docs)] = _workloads(path)
    state, claims, cms, ns = _cluster(path, obj, docs, "efa")
    vresp, vdecision = validate(obj, PS, state, claims)
    launcher = [p for p in controller_pods(obj, ns) if ".Launcher." in p[0]]
    [(tpath, pod)] = launcher
    resp, _, d = mutate(pod, PS, state, claims)
    assert not resp["allowed"] and [f.rule for f in d.denials] == ["command-fallback"], d.denials
    assert "FI_PROVIDER='sockets'" in d.denials[0].message
    assert not vresp["allowed"] and "FI_PROVIDER='sockets'" in vresp["status"]["message"]
    assert any("no template of this workload gets RDMA, but its pods carry" in w for w in vresp["warnings"])
    # review, the same
    from webhook.cli.main import main

    state_file = tmp_path / "state.yaml"
    state_file.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": ns,
                    "labels": {keys.NS_INJECTION: keys.NS_INJECTION_ENABLED, keys.NS_POLICY: "efa"},
                },
            }
        )
    )
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["review", "--policy", "efa", "--cluster-state", str(state_file), "--output", "json", str(path)])
    [rec] = [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]
    assert code == 1 and not rec["allowed"] and rec["rules"] == ["command-fallback"], rec
