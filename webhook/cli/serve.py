"""`rdma-webhook serve`: the flags checked, then the production server (`webhook.serving.server`)."""

from __future__ import annotations

import argparse
import os
import sys

from webhook.cli.common import policies_dir

def cmd_serve(args: argparse.Namespace) -> int:
    from webhook.serving import server as serve
    from webhook.kinds import trainer

    os.environ[trainer.TRAINER_RELEASE_ENV] = args.trainer_release  # the workers inherit it

    if args.check_admission_policy and args.cluster_state:
        print("error: --check-admission-policy reads the cluster's ValidatingAdmissionPolicies from the API server; "
              "it cannot be combined with --cluster-state", file=sys.stderr)
        return 2
    for label, path in (("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key), ("--client-ca", args.client_ca),
                        ("--cluster-state", args.cluster_state)):
        if path and not os.path.isfile(path):
            print(f"error: {label} {path}: no such file", file=sys.stderr)
            return 2
    return serve.run(policies_dir=policies_dir(args.policies), tls_cert=args.tls_cert, tls_key=args.tls_key,
                     host=args.host, port=args.port, workers=args.workers,
                     cluster_state=args.cluster_state, client_ca=args.client_ca, log_level=args.log_level,
                     check_admission_policy=args.check_admission_policy)
