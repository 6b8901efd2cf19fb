"""`rdma-webhook status`: each opted-in namespace's jobs, their policy and the verifier's verdict,
listed from the live cluster (webhook.verify.status)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from webhook.cli.common import EXIT_BAD_INPUT, EXIT_DENIED, EXIT_OK


def register(commands: Any) -> None:
    """Add `status` to the command line's subcommands."""
    s = commands.add_parser(
        "status",
        help="each opted-in namespace's jobs with their policy and NCCL transport verdict",
        description="List, from the live cluster, the jobs whose pods the webhook mutated, in the namespaces "
        "labelled rdma-webhook.io/injection=enabled, with the policy and the verifier's verdict "
        "(the pods' rdma-webhook.io/TransportVerified conditions).",
        epilog="exit status: 0 when no job is False, 1 when one is, 2 when the cluster cannot be read",
    )
    s.add_argument("--namespace", help="only this namespace")
    s.add_argument("--kubeconfig", help="default: in-cluster, else $KUBECONFIG or ~/.kube/config")
    s.add_argument("--output", choices=("table", "json"), default="table")
    s.set_defaults(func=cmd_status)


def _list(kubeconfig: str | None, namespace: str | None) -> tuple[list[dict], set[str]]:
    from kubernetes import client, config

    from webhook.core import keys

    try:
        config.load_incluster_config()
    except Exception:
        config.load_kube_config(config_file=kubeconfig)
    core = client.CoreV1Api()
    selector = f"{keys.NS_INJECTION}={keys.NS_INJECTION_ENABLED}"
    resp = core.list_namespace(label_selector=selector, _preload_content=False)
    opted_in = {n["metadata"]["name"] for n in json.loads(resp.data)["items"]}
    if namespace:
        resp = core.list_namespaced_pod(namespace, label_selector=keys.APPLIED_POLICY_LABEL, _preload_content=False)
    else:
        resp = core.list_pod_for_all_namespaces(label_selector=keys.APPLIED_POLICY_LABEL, _preload_content=False)
    return json.loads(resp.data)["items"], opted_in


def cmd_status(args: argparse.Namespace) -> int:
    from webhook.verify.status import jobs, table

    try:
        pods, opted_in = _list(args.kubeconfig, args.namespace)
    except Exception as exc:
        print(f"rdma-webhook status: cannot read the cluster: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    found = jobs(pods, opted_in)
    if args.output == "json":
        print(json.dumps([j.to_json() for j in found], indent=1))
    elif found:
        sys.stdout.write(table(found))
    else:
        print("no job with mutated pods in an opted-in namespace")
    return EXIT_DENIED if any(j.verdict == "False" for j in found) else EXIT_OK
