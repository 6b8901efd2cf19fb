"""webhook/cli/status.py as a program: without a cluster to read, one line and exit 2, never a
traceback. Against the real API server, after the verifier wrote its conditions:
e2e/test_node_verify.py."""

from __future__ import annotations

import os
import subprocess

from conftest import CLI


def test_status_without_a_cluster_is_one_line_and_exit_2(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env.update(KUBECONFIG=str(tmp_path / "no-such-kubeconfig"), HOME=str(tmp_path))
    out = subprocess.run([*CLI, "status"], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 2 and out.stdout == "", out
    assert out.stderr.startswith("rdma-webhook status: cannot read the cluster: ") and out.stderr.count("\n") == 1
    assert "Traceback" not in out.stderr
