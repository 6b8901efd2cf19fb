"""scripts/check-clean-tree.sh, which .ci/run runs after `make test` and after `make e2e` on its
fresh clone: a test that writes into the source tree fails CI. Here the script itself, in a
throw-away repository: it passes on an unchanged tree and fails, naming the path, on each kind
of leftover."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "check-clean-tree.sh"


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        env={
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.invalid",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.invalid",
            "PATH": "/usr/bin:/bin",
            "HOME": str(repo),
        },
    )


@pytest.fixture
def repo(tmp_path) -> Path:
    if shutil.which("git") is None:
        pytest.fail("git is needed (CI checks the tree with it)", pytrace=False)
    repo = tmp_path / "repo"
    (repo / "deploy").mkdir(parents=True)
    (repo / "deploy" / "kustomization.yaml").write_text("resources: []\n")
    (repo / ".gitignore").write_text("build/\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "init")
    return repo


def _run(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=repo, capture_output=True, text=True, timeout=60)


def test_unchanged_and_ignored_outputs_pass(repo, tmp_path):
    snap = tmp_path / "snap"
    assert _run(repo, "snapshot", str(snap)).returncode == 0
    (repo / "build").mkdir()
    (repo / "build" / "out.txt").write_text("ignored build output\n")
    proc = _run(repo, "check", str(snap), "make test")
    assert proc.returncode == 0, proc.stderr
    assert "unchanged after make test" in proc.stdout


@pytest.mark.parametrize("leftover", ["untracked key", "changed tracked file", "deleted tracked file"])
def test_every_leftover_fails_naming_the_path(repo, tmp_path, leftover):
    snap = tmp_path / "snap"
    assert _run(repo, "snapshot", str(snap)).returncode == 0
    if leftover == "untracked key":
        (repo / "deploy" / "certs").mkdir()
        (repo / "deploy" / "certs" / "ca.key").write_text("secret\n")
        path = "deploy/certs/ca.key"
    elif leftover == "changed tracked file":
        (repo / "deploy" / "kustomization.yaml").write_text("resources: [x]\n")
        path = "deploy/kustomization.yaml"
    else:
        (repo / "deploy" / "kustomization.yaml").unlink()
        path = "deploy/kustomization.yaml"
    proc = _run(repo, "check", str(snap), "make e2e")
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "make e2e changed the source tree" in proc.stderr
    assert path in proc.stderr, proc.stderr


def test_ci_checks_the_tree_after_both_targets():
    lines = [ln.strip() for ln in (REPO / ".ci" / "run").read_text().splitlines()]
    order = [
        ln
        for ln in lines
        if ln.startswith(("make test", "make e2e", "scripts/check-clean-tree.sh", "bash scripts/check-clean-tree.sh"))
    ]
    kinds = [
        (
            "check"
            if "check-clean-tree" in ln and " check " in ln
            else "snapshot"
            if "check-clean-tree" in ln
            else ln.split()[1]
        )
        for ln in order
    ]
    assert kinds[:1] == ["snapshot"], order
    assert "test" in kinds and "e2e" in kinds, order
    assert kinds[kinds.index("test") + 1] == "check" and kinds[kinds.index("e2e") + 1] == "check", order
