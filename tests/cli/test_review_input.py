"""Issue 28 item 5: what `rdma-webhook review DIR` reads when DIR is a real repository: hidden
folders (`.github/workflows`), symlinks (to files, to folders, a loop, a dangling one) and YAML
that is not Kubernetes (a GitHub Actions workflow, a Compose file, Helm values).

What a platform engineer running `rdma-webhook review .` in CI expects, and these tests hold:
- hidden entries (`.git`, `.github`, `.archive/`, `.draft.yaml`) are skipped when walking, and
  read when named as an argument (`review .github/workflows`);
- a symlink is followed, to a file or to a folder: a manifest behind a link is checked (a denied
  one fails the build); each real folder is walked once, so a link back up the tree is no loop
  and no file is read twice; a link that leads nowhere (dangling, or a loop of file links) is an
  unreadable file, bad input (exit 2) naming it;
- a document with neither apiVersion nor kind (another tool's YAML) is "not checked", never
  changes the exit status, not even with --strict, and says what it is.

`review` runs in-process (`webhook.cli.main.main`), so that mutation testing sees it.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
from pathlib import Path

import jsonschema
import pytest

from webhook.cli import review_input

ROOT = Path(__file__).resolve().parent.parent.parent
MANIFESTS = ROOT / "tests" / "manifests"
STATE = str(MANIFESTS / "cluster-state.yaml")
SCHEMA = json.loads((ROOT / "webhook" / "cli" / "review-output.schema.json").read_text())
ALLOWED_JOBSET = MANIFESTS / "allowed" / "jobset.yaml"  # a JobSet (mutated) with a Service, ConfigMap and PDB
DENIED_TFJOB = MANIFESTS / "denied" / "tfjob-ib-disable.yaml"  # NCCL_IB_DISABLE=1 in the command, and a Service

WORKFLOW = """\
name: manifests
on:
  pull_request:
    paths: ["k8s/**"]
jobs:
  review:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - run: pip install rdma-webhook
      - run: rdma-webhook review --policies policies/ k8s/
"""
COMPOSE = """\
services:
  trainer:
    image: nvcr.io/nvidia/pytorch:25.11-py3
    command: ["torchrun", "--nproc-per-node", "8", "train.py"]
    environment:
      NCCL_IB_DISABLE: "1"
    deploy:
      resources:
        reservations:
          devices:
            - driver: nvidia
              count: all
              capabilities: [gpu]
"""
HELM_VALUES = """\
replicaCount: 2
image:
  repository: nvcr.io/nvidia/pytorch
  tag: "25.11-py3"
resources:
  limits:
    nvidia.com/gpu: 8
env:
  - name: NCCL_IB_DISABLE
    value: "1"
"""


def review(*args: str) -> tuple[int, list[dict], str]:
    """`rdma-webhook review --output json ARGS` in-process: (exit status, records, stderr)."""
    from webhook.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(
            ["review", "--policies", str(ROOT / "policies"), "--cluster-state", STATE, "--output", "json", *args]
        )
    recs = [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]
    for r in recs:
        jsonschema.validate(r, SCHEMA)
    return code, recs, err.getvalue()


def files(recs: list[dict]) -> list[str]:
    return sorted({r["file"] for r in recs})


def place(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A training repository: k8s/ with an allowed JobSet, a GitHub workflow, a Compose file, a
    Helm chart's values.yaml, and a hidden folder that holds a manifest that would be denied."""
    top = tmp_path / "repo"
    place(top / "k8s" / "jobset.yaml", ALLOWED_JOBSET.read_text())
    place(top / ".github" / "workflows" / "manifests.yaml", WORKFLOW)
    place(top / "docker-compose.yaml", COMPOSE)
    place(top / "chart" / "values.yaml", HELM_VALUES)
    place(top / ".archive" / "tfjob.yaml", DENIED_TFJOB.read_text())
    place(top / "k8s" / ".draft.yaml", DENIED_TFJOB.read_text())
    return top


# -- hidden entries ---------------------------------------------------------------------------------


def test_hidden_folders_and_files_are_skipped_when_walking(repo):
    code, recs, _ = review(str(repo))
    assert code == 0  # the denied TFJob in .archive/ and k8s/.draft.yaml was not read
    assert files(recs) == [
        str(repo / "chart" / "values.yaml"),
        str(repo / "docker-compose.yaml"),
        str(repo / "k8s" / "jobset.yaml"),
    ]


def test_a_hidden_folder_or_file_named_as_an_argument_is_read(repo):
    code, recs, _ = review(str(repo / ".github" / "workflows"))
    assert code == 0 and files(recs) == [str(repo / ".github" / "workflows" / "manifests.yaml")]
    assert [r["outcome"] for r in recs] == ["not-checked"]
    code, recs, _ = review(str(repo / ".archive"))
    assert code == 1 and files(recs) == [str(repo / ".archive" / "tfjob.yaml")]
    assert [r["outcome"] for r in recs] == ["denied", "not-checked"]  # the TFJob, its Service
    code, recs, _ = review(str(repo / "k8s" / ".draft.yaml"))
    assert code == 1 and recs[0]["outcome"] == "denied"


def test_the_walk_starting_inside_a_hidden_folder_reads_it_but_not_hidden_folders_below(tmp_path):
    top = tmp_path / ".deploy"
    place(top / "jobset.yaml", ALLOWED_JOBSET.read_text())
    place(top / ".old" / "tfjob.yaml", DENIED_TFJOB.read_text())
    code, recs, _ = review(str(top))
    assert code == 0 and files(recs) == [str(top / "jobset.yaml")]


# -- symlinks -------------------------------------------------------------------------------------


def test_a_symlink_to_a_file_is_read_under_its_own_path(tmp_path):
    shared = place(tmp_path / "shared" / "tfjob.yaml", DENIED_TFJOB.read_text())
    top = tmp_path / "repo"
    place(top / "k8s" / "jobset.yaml", ALLOWED_JOBSET.read_text())
    os.symlink(os.path.relpath(shared, top / "k8s"), top / "k8s" / "tfjob.yaml")
    code, recs, _ = review(str(top))
    assert code == 1
    assert files(recs) == [str(top / "k8s" / "jobset.yaml"), str(top / "k8s" / "tfjob.yaml")]
    assert [r["outcome"] for r in recs if r["file"].endswith("tfjob.yaml")] == ["denied", "not-checked"]


def test_a_symlink_to_a_folder_is_walked(tmp_path):
    """A denied manifest behind a folder link fails the build: a CI check that does not follow the
    link would pass it."""
    place(tmp_path / "team-b" / "jobs" / "tfjob.yaml", DENIED_TFJOB.read_text())
    top = tmp_path / "repo"
    place(top / "k8s" / "jobset.yaml", ALLOWED_JOBSET.read_text())
    os.symlink("../../team-b/jobs", top / "k8s" / "team-b")
    code, recs, _ = review(str(top))
    assert code == 1
    assert files(recs) == [str(top / "k8s" / "jobset.yaml"), str(top / "k8s" / "team-b" / "tfjob.yaml")]
    denied = [r for r in recs if r["outcome"] == "denied"]
    assert [r["file"] for r in denied] == [str(top / "k8s" / "team-b" / "tfjob.yaml")]
    assert denied[0]["rules"] == ["command-fallback"]


def test_a_symlink_loop_ends_and_reads_each_file_once(tmp_path):
    top = tmp_path / "repo"
    place(top / "k8s" / "jobset.yaml", ALLOWED_JOBSET.read_text())
    place(top / "k8s" / "nested" / "tfjob.yaml", DENIED_TFJOB.read_text())
    os.symlink("..", top / "k8s" / "nested" / "up")  # k8s/nested/up/nested/up/... for ever
    os.symlink(".", top / "k8s" / "self")
    # each real folder once, in order (at most 10 taken: a walk that loops would go on for 2^40 folders)
    walked = [root for root, _ in itertools.islice(review_input._walk(str(top)), 10)]
    assert walked == [str(top), str(top / "k8s"), str(top / "k8s" / "nested")]
    code, recs, _ = review(str(top))
    assert code == 1
    assert files(recs) == [str(top / "k8s" / "jobset.yaml"), str(top / "k8s" / "nested" / "tfjob.yaml")]
    assert len(recs) == 4 + 2  # the JobSet file's four documents, the TFJob file's two, each once


def test_two_links_to_one_file_read_it_once(tmp_path):
    top = tmp_path / "repo"
    real = place(top / "base" / "tfjob.yaml", DENIED_TFJOB.read_text())
    place(top / "overlays" / "prod" / "jobset.yaml", ALLOWED_JOBSET.read_text())
    os.symlink(os.path.relpath(real, top / "overlays" / "prod"), top / "overlays" / "prod" / "tfjob.yaml")
    code, recs, _ = review(str(top))
    assert code == 1
    assert files(recs) == [str(real), str(top / "overlays" / "prod" / "jobset.yaml")]
    assert sum(r["outcome"] == "denied" for r in recs) == 1


def test_a_dangling_link_is_an_unreadable_file(tmp_path):
    top = tmp_path / "repo"
    place(top / "jobset.yaml", ALLOWED_JOBSET.read_text())
    os.symlink("gone/tfjob.yaml", top / "tfjob.yaml")
    code, recs, err = review(str(top))
    assert code == 2
    assert f"error: {top / 'tfjob.yaml'}: cannot read: No such file or directory" in err
    assert [r["outcome"] for r in recs if r["file"] == str(top / "tfjob.yaml")] == ["error"]
    assert any(r["outcome"] == "mutated" for r in recs)  # the other files are still reviewed


def test_a_loop_of_file_links_is_an_unreadable_file(tmp_path):
    top = tmp_path / "repo"
    top.mkdir()
    os.symlink("b.yaml", top / "a.yaml")
    os.symlink("a.yaml", top / "b.yaml")
    code, recs, err = review(str(top))
    assert code == 2
    assert f"error: {top / 'a.yaml'}: cannot read: Too many levels of symbolic links" in err
    assert [r["outcome"] for r in recs] == ["error", "error"]


# -- YAML that is not Kubernetes --------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, text",
    [
        (".github/workflows/manifests.yaml", WORKFLOW),
        ("docker-compose.yaml", COMPOSE),
        ("chart/values.yaml", HELM_VALUES),
    ],
    ids=["github-workflow", "compose", "helm-values"],
)
def test_yaml_of_other_tools_is_not_checked_and_changes_no_exit_status(tmp_path, name, text):
    path = place(tmp_path / name, text)
    for strict in ((), ("--strict",)):
        code, recs, err = review(*strict, str(path), str(ALLOWED_JOBSET))
        assert code == 0, err
        mine = [r for r in recs if r["file"] == str(path)]
        assert [(r["outcome"], r["messages"], r["kind"]) for r in mine] == [
            ("not-checked", ["not a Kubernetes object (no apiVersion, no kind)"], None)
        ]
        assert [r["outcome"] for r in recs if r["file"] == str(ALLOWED_JOBSET)][0] == "mutated"
    # beside a denied manifest the exit status is the manifest's
    assert review("--strict", str(path), str(DENIED_TFJOB))[0] == 1


def test_the_text_output_names_the_file_without_a_kind(tmp_path):
    from webhook.cli.main import main

    path = place(tmp_path / "docker-compose.yaml", COMPOSE)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["review", "--policies", str(ROOT / "policies"), "--cluster-state", STATE, str(path)])
    assert code == 0 and out.getvalue() == ""
    assert f"{path}: not checked (not a Kubernetes object (no apiVersion, no kind))" in err.getvalue().splitlines()


def test_an_object_with_an_api_version_but_no_kind_is_still_refused_by_strict(tmp_path):
    """The exemption is for other tools' YAML only: a manifest that lost its kind is a broken
    Kubernetes object, and --strict refuses what it cannot check."""
    broken = place(tmp_path / "job.yaml", "apiVersion: batch/v1\nmetadata: {name: train}\nspec: {}\n")
    code, recs, _ = review(str(broken))
    assert code == 0 and recs[0]["messages"] == ["not a Kubernetes object (no kind)"]
    code, recs, err = review("--strict", str(broken))
    assert code == 2 and "--strict refuses what it cannot check" in err
    assert recs[0]["outcome"] == "error"
    only_kind = place(tmp_path / "w.yaml", "kind: Widget\nmetadata: {name: w}\n")
    assert review("--strict", str(only_kind))[0] == 2


def test_a_whole_repository_with_strict(repo):
    """`rdma-webhook review --strict .` at the top of a repository: the workflow is hidden, the
    Compose file and the Helm values are not Kubernetes; only the JobSet decides."""
    code, recs, err = review("--strict", str(repo))
    assert code == 0, err
    assert {r["file"]: r["outcome"] for r in recs if r["document"] == 1} == {
        str(repo / "chart" / "values.yaml"): "not-checked",
        str(repo / "docker-compose.yaml"): "not-checked",
        str(repo / "k8s" / "jobset.yaml"): "mutated",
    }
