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
