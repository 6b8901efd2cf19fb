"""The policy catalogue and how an install chooses from it (issue 26, "safe by default").

deploy/base/policies/ (the repository's policies/) holds the catalogue. Kustomize reads files
only from inside a kustomization's own folder and Helm only from inside the chart, so two copies
exist, and must stay byte-identical to it:

- deploy/catalogue/<name>/<name>.yaml, beside the kustomize Component that merges it into the
  (otherwise empty) policies ConfigMap of deploy/base;
- charts/rdma-webhook/policies/<name>.yaml, which `policies.enabled` names (tests/deploy/test_chart.py).

Overlays are rendered with the real `kubectl kustomize`, from a temporary folder (nothing is
written into the checkout).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CATALOGUE = REPO / "deploy" / "base" / "policies"
COMPONENTS = REPO / "deploy" / "catalogue"
CHART_POLICIES = REPO / "charts" / "rdma-webhook" / "policies"
NAMES = sorted(p.stem for p in CATALOGUE.glob("*.yaml"))


def _kustomize(folder: Path) -> list[dict]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl not found on PATH: needed to render deploy/ (kubectl kustomize)", pytrace=False)
    proc = subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"kubectl kustomize {folder} failed:\n{proc.stderr}"
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def _overlay(tmp: Path, components: list[str], extra: str = "") -> list[dict]:
    """An admin's overlay in `tmp`: deploy/ (cert-manager) plus catalogue components by name."""
    rel = os.path.relpath(REPO / "deploy", tmp)  # kustomize refuses absolute paths
    text = f"resources:\n- {rel}\n"
    if components:
        text += "components:\n" + "".join(f"- {rel}/catalogue/{n}\n" for n in components)
    (tmp / "kustomization.yaml").write_text(text + extra)
    return _kustomize(tmp)


def _policies(docs: list[dict]) -> dict[str, bytes]:
    [cm] = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("rdma-webhook-policies")]
    assert "binaryData" not in cm
    return {k: v.encode() for k, v in (cm.get("data") or {}).items()}


def test_the_catalogue_is_the_twelve_shipped_fabrics():
    assert NAMES == ["efa", "efa-dra", "erdma", "gke-gib", "gke-tcpxo", "ib-shared", "nd-infiniband", "oke-roce-host",
                     "roce-dranet", "roce-dranet-aligned", "sriov-roce", "sriov-roce-8rail"]


@pytest.mark.parametrize("copies", [COMPONENTS, CHART_POLICIES], ids=["kustomize", "helm"])
def test_copies_are_byte_identical(copies):
    hint = "copy deploy/base/policies/<name>.yaml there again (the catalogue's source)"
    if copies == COMPONENTS:
        found = {p.name: p for p in copies.glob("*/*.yaml") if p.name != "kustomization.yaml"}
        assert sorted(p.parent.name for p in found.values()) == NAMES, hint
        assert all(p.parent.name == p.stem for p in found.values()), sorted(found)
    else:
        found = {p.name: p for p in copies.glob("*.yaml")}
    assert sorted(found) == sorted(f"{n}.yaml" for n in NAMES), hint
    for name, path in found.items():
        assert path.read_bytes() == (CATALOGUE / name).read_bytes(), f"{path} differs from the catalogue: {hint}"
        assert not path.is_symlink(), path


def test_each_component_merges_exactly_its_own_file():
    for name in NAMES:
        doc = yaml.safe_load((COMPONENTS / name / "kustomization.yaml").read_text())
        assert doc["kind"] == "Component", name
        [gen] = doc["configMapGenerator"]
        assert gen["name"] == "rdma-webhook-policies" and gen["behavior"] == "merge", name
        assert gen["files"] == [f"{name}.yaml"], name


def test_the_default_install_enforces_no_policy(tmp_path):
    assert _policies(_overlay(tmp_path, [])) == {}


def test_choosing_one_fabric_enforces_exactly_that_one(tmp_path):
    assert _policies(_overlay(tmp_path, ["ib-shared"])) == {"ib-shared.yaml": (CATALOGUE / "ib-shared.yaml").read_bytes()}


def test_every_component_together_is_the_whole_catalogue(tmp_path):
    expected = {p.name: p.read_bytes() for p in CATALOGUE.glob("*.yaml")}
    assert _policies(_overlay(tmp_path, NAMES)) == expected


def test_an_own_policy_beside_a_catalogue_one(tmp_path):
    """deploy/README.md's "your own policy": a file in the overlay, merged into the ConfigMap."""
    own = (CATALOGUE / "sriov-roce.yaml").read_text().replace("name: sriov-roce\n", "name: my-fabric\n")
    (tmp_path / "my-fabric.yaml").write_text(own)
    extra = ("configMapGenerator:\n- name: rdma-webhook-policies\n  namespace: rdma-webhook\n"
             "  behavior: merge\n  files:\n  - my-fabric.yaml\n")
    docs = _overlay(tmp_path, ["ib-shared"], extra)
    assert sorted(_policies(docs)) == ["ib-shared.yaml", "my-fabric.yaml"]
    assert _policies(docs)["my-fabric.yaml"] == own.encode()
    # the Deployment mounts the merged (re-hashed) ConfigMap
    [dep] = [d for d in docs if d["kind"] == "Deployment"]
    [cm] = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("rdma-webhook-policies")]
    vols = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert vols["policies"]["configMap"]["name"] == cm["metadata"]["name"]


def test_readme_documents_choosing_and_adding():
    readme = (REPO / "deploy" / "README.md").read_text()
    assert "catalogue/ib-shared" in readme
    assert "behavior: merge" in readme
