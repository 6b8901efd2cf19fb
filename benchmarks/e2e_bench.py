"""What the end-to-end benchmarks (e2e_latency.py, e2e_scale.py) share: a control plane on
loopback (e2e/cluster.py: etcd, kube-apiserver, kube-controller-manager, the Go binaries built or
reused) with the NetworkAttachmentDefinition CRD established, stopped with everything it started
however the run ends; and the result file, with the provenance block of benchmarks/provenance.py
(commit, machine, load at start and end, command)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Iterator

import yaml

from benchmarks import provenance
from e2e import cluster as c

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def control_plane(prefix: str) -> Iterator[tuple[c.ControlPlane, Path]]:
    """(the started control plane, its work directory); every process stopped on the way out."""
    c.install_signal_handlers()
    bin_dir = Path(os.environ.get("RDMA_WEBHOOK_E2E_BIN") or c.build_binaries())
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    cp = c.ControlPlane(bin_dir, workdir)
    try:
        cp.start()
        cp.apply(o for o in yaml.safe_load_all((ROOT / "e2e" / "crds.yaml").read_text()) if o)
        cp.kubectl(
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/network-attachment-definitions.k8s.cni.cncf.io",
            check=True,
        )
        yield cp, workdir
    finally:
        c.stop_all()


def write(out: str, prov: dict, results: dict) -> None:
    """The result file: {"provenance": ..., **results}."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"provenance": provenance.finish(prov), **results}, indent=2) + "\n")
    print(f"wrote {path}")
