"""Real-shaped manifests (tests/manifests/), each a training kind with its companions, through
`rdma-webhook review` as CI runs it and through `/validate` over TLS as `kubectl apply` meets it.

allowed/*.yaml must exit 0 and denied/*.yaml exit 1 (with the rule ids below); every record of
`--output json` must match webhook/cli/review-output.schema.json.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import jsonschema
import pytest
import yaml

from conftest import start_server, stop_server
from webhook.kinds import workloads

ROOT = Path(__file__).resolve().parent.parent.parent
MANIFESTS = ROOT / "tests" / "manifests"
STATE = str(MANIFESTS / "cluster-state.yaml")
SCHEMA = json.loads((ROOT / "webhook" / "cli" / "review-output.schema.json").read_text())
ALLOWED = sorted((MANIFESTS / "allowed").glob("*.yaml"))
DENIED = sorted((MANIFESTS / "denied").glob("*.yaml"))

# denied file -> (kind denied, rule ids)
DENIED_RULES = {
    "appwrapper-mpijob.yaml": ("AppWrapper", ["command-fallback"]),
    "mpijob-launcher-ib-disable.yaml": ("MPIJob", ["command-fallback"]),
    "mpijob-amd.yaml": ("MPIJob", ["command-fallback"]),
    "argo-resource-step.yaml": ("WorkflowTemplate", ["env-fallback"]),
    "rayjob-socket.yaml": ("RayJob", ["env-fallback"]),
    "rbg-worker-hca.yaml": ("RoleBasedGroup", ["env-fallback"]),
    "tfjob-ib-disable.yaml": ("TFJob", ["command-fallback"]),
    "trainingruntime-socket.yaml": ("TrainJob", ["env-fallback"]),
    "trainjob-env.yaml": ("TrainJob", ["env-fallback"]),
    "volcano-cronjob-socket.yaml": ("CronJob", ["env-fallback"]),
}


def run(*args, stdin=None):
    # review uses no policy it is not given (issue 26): these manifests are judged against the whole catalogue
    return subprocess.run(
        [sys.executable, "-m", "webhook", "review", "--policies", str(ROOT / "policies"), *args],
        capture_output=True,
        text=True,
        input=stdin,
        cwd=ROOT,
    )


def records(stdout: str) -> list[dict]:
    out = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    for r in out:
        jsonschema.validate(r, SCHEMA)
    return out


def test_every_denied_file_is_listed():
    assert sorted(p.name for p in DENIED) == sorted(DENIED_RULES)
    assert len(ALLOWED) >= 10


@pytest.mark.parametrize("path", ALLOWED, ids=lambda p: p.name)
def test_allowed_manifests_exit_0_with_companions_not_checked(path):
    out = run("--cluster-state", STATE, "--output", "json", str(path))
    assert out.returncode == 0, out.stderr + out.stdout
    recs = records(out.stdout)
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert [r["document"] for r in recs] == list(range(1, len(docs) + 1))
    checked = [r for r in recs if r["outcome"] != "not-checked"]
    companions = [r for r in recs if r["outcome"] == "not-checked"]
    assert checked and all(r["allowed"] for r in recs)
    # the manifests are modelled on public examples, companions and all: every file ships objects
    # that hold no pods (a Service, ConfigMap, PodGroup, Kueue queue...) beside its workload
    assert companions, [r["kind"] for r in recs]
    for r in companions:
        assert r["kind"] not in {k for _, k in workloads.TEMPLATES} and r["messages"] == ["holds no pods"], r
    # every checked workload met the decision on at least one template (none silently skipped)
    for r in checked:
        assert r["templates"], r


@pytest.mark.parametrize("path", DENIED, ids=lambda p: p.name)
def test_denied_manifests_exit_1_naming_rule_and_template(path):
    out = run("--cluster-state", STATE, "--output", "json", str(path))
    assert out.returncode == 1, out.stderr + out.stdout
    kind, rules = DENIED_RULES[path.name]
    denied = [r for r in records(out.stdout) if r["outcome"] == "denied"]
    assert any(r["kind"] == kind and r["rules"] == rules for r in denied), denied
    for r in denied:
        assert not r["allowed"] and r["messages"]
        bad = [t for t in r["templates"] if t["deniesWorkload"]]
        assert bad and all(t["path"] and t["rules"] for t in bad)


def test_the_whole_directory_recursively_and_from_stdin():
    out = run("--cluster-state", STATE, "--output", "json", str(MANIFESTS / "allowed"), str(MANIFESTS / "denied"))
    assert out.returncode == 1
    recs = records(out.stdout)
    assert {r["file"] for r in recs} == {str(p) for p in ALLOWED + DENIED}
    assert sum(r["outcome"] == "denied" for r in recs) == 11  # the TrainingRuntime and its TrainJob both
    allowed_only = run("--cluster-state", STATE, str(MANIFESTS / "allowed"))
    assert allowed_only.returncode == 0, allowed_only.stderr
    # kustomize build | rdma-webhook review -
    text = "\n---\n".join(p.read_text() for p in ALLOWED)
    piped = run("--cluster-state", STATE, "--output", "json", "-", stdin=text)
    assert piped.returncode == 0, piped.stderr
    assert {r["file"] for r in records(piped.stdout)} == {"-"}
    piped = run("--cluster-state", STATE, "-", stdin=text + "\n---\n" + DENIED[0].read_text())
    assert piped.returncode == 1


def test_strict_refuses_unknown_kinds_only(tmp_path):
    assert run("--cluster-state", STATE, "--strict", str(MANIFESTS / "allowed")).returncode == 0
    odd = tmp_path / "k8s" / "nested"
    odd.mkdir(parents=True)
    (odd / "widget.yml").write_text("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n")
    (tmp_path / "k8s" / "notes.txt").write_text("not a manifest: skipped by extension")
    out = run("--cluster-state", STATE, "--output", "json", str(tmp_path / "k8s"))
    assert out.returncode == 0 and records(out.stdout)[0]["outcome"] == "not-checked"
    assert "unknown kind" in records(out.stdout)[0]["messages"][0]
    out = run("--cluster-state", STATE, "--strict", str(tmp_path / "k8s"))
    assert out.returncode == 2 and "Widget" in out.stderr


def test_unknown_namespace_offline_is_bad_input(tmp_path):
    doc = yaml.safe_load_all((MANIFESTS / "allowed" / "jobset.yaml").read_text())
    job = next(d for d in doc if d["kind"] == "JobSet")
    job["metadata"]["namespace"] = "team-nobody-added"
    f = tmp_path / "job.yaml"
    f.write_text(yaml.safe_dump(job))
    out = run("--cluster-state", STATE, "--output", "json", str(f))
    assert out.returncode == 2 and "add it to the cluster-state file" in out.stderr and "Traceback" not in out.stderr
    assert records(out.stdout)[0]["outcome"] == "error"
    # a denied job elsewhere in the run still reports, and bad input wins
    out = run("--cluster-state", STATE, str(f), str(DENIED[0]))
    assert out.returncode == 2


def test_without_cluster_state_the_assumption_is_said_on_stderr():
    out = run(str(MANIFESTS / "allowed" / "jobset.yaml"))
    assert out.returncode == 0
    assert "no --cluster-state" in out.stderr and "opted in" in out.stderr


def test_trainjob_without_its_runtime_is_bad_input_offline():
    # the ClusterTrainingRuntime of allowed/trainjob.yaml lives in the cluster state only
    out = run("--output", "json", str(MANIFESTS / "allowed" / "trainjob.yaml"))
    assert out.returncode == 2
    assert "ClusterTrainingRuntime 'torch-distributed' is not known" in out.stderr and "Traceback" not in out.stderr
    # given in the input instead, it resolves
    out = run(str(MANIFESTS / "allowed" / "trainjob.yaml"), STATE)
    assert out.returncode == 0, out.stderr


def test_trainer_release_decides_whether_resources_per_node_drops_the_gpu(tmp_path):
    job = next(
        d for d in yaml.safe_load_all((MANIFESTS / "allowed" / "trainjob.yaml").read_text()) if d["kind"] == "TrainJob"
    )
    job["spec"]["trainer"]["resourcesPerNode"] = {"limits": {"memory": "800Gi"}}  # no GPU repeated
    f = tmp_path / "tj.yaml"
    f.write_text(yaml.safe_dump(job))
    merged = records(run("--cluster-state", STATE, "--output", "json", "--trainer-release", "v2.3", str(f)).stdout)[0]
    assert merged["templates"][0]["outcome"] == "mutated"  # the runtime's 8 GPUs stay: RDMA is injected
    replaced = run("--cluster-state", STATE, "--output", "json", "--trainer-release", "v2.2", str(f))
    rec = records(replaced.stdout)[0]
    assert rec["templates"][0]["outcome"] == "unchanged"  # resources replaced whole: no GPU left, no RDMA
    assert any("no container requests a GPU" in w for w in rec["warnings"])


# -- /validate over TLS --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def manifests_server(tmp_path_factory):
    srv = start_server(tmp_path_factory.mktemp("manifests-server"), extra_args=["--cluster-state", STATE])
    yield srv
    stop_server(srv)


def _review(obj, operation="CREATE"):
    api_version = obj.get("apiVersion", "v1") if isinstance(obj, dict) else "v1"
    kind = obj.get("kind", "Pod") if isinstance(obj, dict) else "Pod"
    group, _, version = api_version.rpartition("/")
    cluster_scoped = (group, kind) in workloads.CLUSTER_SCOPED
    meta = obj.get("metadata") if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict) else {}
    ns = "" if cluster_scoped else meta.get("namespace", "ml-training")
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": kind.lower() + "s"},
            "namespace": ns,
            "operation": operation,
            "object": obj,
            "oldObject": None,
        },
    }


def _post(server, path, review):
    status, data, _ = server.request("POST", path, json.dumps(review).encode())
    assert status == 200, data
    r = json.loads(data)["response"]
    assert r["uid"] == review["request"]["uid"]
    if path == "/validate":
        assert "patch" not in r, r  # a validating webhook never patches
    return r


def test_every_manifest_meets_the_same_answer_at_validate(manifests_server):
    """Every workload document of every manifest, sent as the API server sends it: /validate
    allows exactly those `review` allows (the runtimes come from the server's cluster state or
    are a warning), naming the template path in a denial."""
    runtime_docs = [
        d
        for p in ALLOWED + DENIED
        for d in yaml.safe_load_all(p.read_text())
        if d and d["kind"] in ("TrainingRuntime",)
    ]
    seen = 0
    for path in ALLOWED + DENIED:
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or not workloads.is_workload(workloads.group_of(doc["apiVersion"]), doc["kind"]):
                continue
            r = _post(manifests_server, "/validate", _review(doc))
            seen += 1
            if doc["kind"] == "TrainJob" and doc["spec"]["runtimeRef"].get("kind") == "TrainingRuntime":
                # its runtime came in the same file, not in the server's cluster state: a warning
                assert r["allowed"] is True and any("is not known" in w for w in r["warnings"]), r
                continue
            expect_denied = path in DENIED and doc["kind"] == DENIED_RULES[path.name][0]
            if doc["kind"] == "TrainingRuntime" and path in DENIED:
                expect_denied = True
            assert r["allowed"] is (not expect_denied), (path.name, doc["kind"], r)
            if expect_denied:
                assert r["status"]["code"] == 403 and "[" in r["status"]["message"]
    assert seen >= 20 and runtime_docs


@pytest.mark.parametrize("path", ["/mutate", "/validate"])
@pytest.mark.parametrize("operation", ["DELETE", "UPDATE", "CONNECT"])
def test_any_operation_but_create_is_allowed_untouched(manifests_server, path, operation):
    denied_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "w-0", "namespace": "ml-training", "labels": {"rdma-webhook.io/inject": "true"}},
        "spec": {
            "containers": [
                {
                    "name": "t",
                    "env": [{"name": "NCCL_IB_DISABLE", "value": "1"}],
                    "resources": {"limits": {"nvidia.com/gpu": "8"}},
                }
            ]
        },
    }
    malformed = {"apiVersion": "v1", "kind": "Pod", "metadata": "not an object"}
    workload = next(d for d in yaml.safe_load_all((MANIFESTS / "denied" / "rayjob-socket.yaml").read_text()) if d)
    for obj in (None, denied_pod, malformed, workload):
        review = _review(obj, operation)
        if obj is None:
            review["request"].update(
                kind={"group": "", "version": "v1", "kind": "Pod"},
                resource={"group": "", "version": "v1", "resource": "pods"},
                namespace="ml-training",
                oldObject=denied_pod,
            )
        r = _post(manifests_server, path, review)
        assert r == {"uid": review["request"]["uid"], "allowed": True}, (operation, obj, r)
    # the same denied pod on CREATE is still denied: the test would pass on a webhook that allows all
    assert _post(manifests_server, path, _review(denied_pod))["allowed"] is False


def test_deploy_readme_log_filter_matches_what_the_server_writes(manifests_server):
    """deploy/README.md tells operators to `grep PATTERN` the server's log for admissions: the
    pattern must match the lines the server really writes (and only those)."""
    import re
    import time

    readme = (ROOT / "deploy" / "README.md").read_text()
    pattern = re.search(r"logs deploy/rdma-webhook \| grep '([^']+)'", readme).group(1)
    review = _review(next(d for d in yaml.safe_load_all((MANIFESTS / "allowed" / "jobset.yaml").read_text()) if d))
    _post(manifests_server, "/validate", review)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        lines = [line for line in manifests_server.log.read_text().splitlines() if review["request"]["uid"] in line]
        if lines:
            break
        time.sleep(0.05)
    assert len(lines) == 1 and pattern in lines[0], (pattern, lines)
    others = [
        line for line in manifests_server.log.read_text().splitlines() if line.startswith("{") and pattern in line
    ]
    assert all(json.loads(line)["msg"] == "admission" for line in others)
