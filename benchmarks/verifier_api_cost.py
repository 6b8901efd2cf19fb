"""What the verifier asks of a real API server per container start (issue 44): runs the verifier's
end-to-end test on the real node (e2e/test_node_verify.py, through e2e/run.sh) and stores the
figures it wrote, with their provenance.

The test counts the requests of the verifier's ServiceAccount in the API server's audit log (the
e2e control plane audits that user alone, at Metadata level: verb, resource, subresource,
namespace), for the seven container starts it makes (six bare pods and a Job's pod), and asserts
the counts that are exact (one pods/log get and one pods/status patch per start, one Event per
start plus one per start in a pod with a controller, one list and one watch for all). Beside
them it records the change of kube-apiserver's own `apiserver_request_total` over the same time,
every client's (the kubelet and the scheduler write pods and Events too; the test polls pods).

    python -m benchmarks.verifier_api_cost [--store NAME]   (needs what `make e2e` needs: root, the node)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import provenance
from benchmarks.e2e_bench import write

ROOT = provenance.ROOT
TEST = "test_each_pods_transport_is_read_from_its_own_log_and_shown_where_people_look"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", default="verifier-api-cost", help="benchmarks/results/NAME.json")
    args = parser.parse_args(argv)
    prov = provenance.start()
    with tempfile.TemporaryDirectory(prefix="verifier-api-cost-") as folder:
        env = {**os.environ, "RDMA_WEBHOOK_E2E_WORKDIR": folder, "E2E_PYTHON": sys.executable}
        env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        command = ["./e2e/run.sh", "-k", TEST]
        run = subprocess.run(command, cwd=ROOT, env=env)
        if run.returncode != 0:
            print(f"the e2e test failed ({run.returncode}): nothing stored", file=sys.stderr)
            return 1
        figures = json.loads((Path(folder) / "verifier-api-cost.json").read_text())
    prov["e2e_command"] = " ".join(command)
    write(str(provenance.RESULTS / f"{args.store}.json"), prov, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
