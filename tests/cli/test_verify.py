"""webhook/cli/verify.py as a program: policies that do not load stop it at once with exit 2 and
the reason; its run against the real API server and node: e2e/test_node_verify.py."""

from __future__ import annotations

import subprocess

from conftest import CLI


def test_verify_refuses_policies_that_do_not_load(tmp_path):
    bad = tmp_path / "policies"
    bad.mkdir()
    (bad / "x.yaml").write_text("apiVersion: rdma-webhook.io/v1alpha2\nkind: RdmaPolicy\nname: x\n")
    out = subprocess.run(
        [*CLI, "verify", "--policies", str(bad), "--metrics-port", "0"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and "rdma-webhook verify: the policies do not load: " in out.stderr, out
    assert "Traceback" not in out.stderr


def test_verify_runs_with_the_image_s_multiprocess_metrics_folder_absent(tmp_path):
    """The image sets PROMETHEUS_MULTIPROC_DIR for the webhook's workers; the verifier is one
    process, and its pod has no such folder: it must not need it (found on the real node)."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env.update(PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "absent"), KUBECONFIG=str(tmp_path / "none"), HOME=str(tmp_path))
    out = subprocess.run(
        [*CLI, "verify", "--metrics-port", "0", "--policies", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.stderr.splitlines()[-1].startswith("rdma-webhook verify: cannot reach the Kubernetes API: ")
    assert not (tmp_path / "absent").exists()
