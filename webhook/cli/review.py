"""`rdma-webhook review`: the decision `serve` runs, offline, on Pod manifests, workloads and
AdmissionReview files, so that a platform team can fail a CI build on a training manifest that
would fall back to TCP. Exit status: 0 all allowed, 1 any denied, 2 bad input.

Four steps: read every input (review_input), choose what to decide against (review_scope), judge
each document (review_judge, which calls the judge the server calls), and print what was found
(review_report, review_explain).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from webhook.cli.common import EXIT_BAD_INPUT

EXIT_CODES = """exit status:
  0  every document allowed (or not checked: kinds that hold no pods, namespaces not opted in)
  1  any pod or workload denied
  2  bad input: unreadable or invalid YAML, a malformed object or review, no policy chosen (or a bad
     one), and in a pod or template that would be checked: a namespace missing from --cluster-state,
     a TrainJob whose runtime is not given, a resource quantity that is not one, a number where the
     API server wants a string (command, args, env values), a placeholder not filled in ({{ .x }},
     ${X}) where the decision reads; a raw kustomize tree that would be checked, or any with
     --strict; an unknown kind with --strict"""

NO_STATE_NOTE = (
    "note: no --cluster-state: every namespace the input does not describe with a Namespace document is "
    "taken as opted in ({injection}=enabled) with no other labels, NetworkAttachmentDefinitions as "
    "unknown and Trainer runtimes as those in the input; policies chosen by namespace labels may differ "
    "from the cluster's. Pass --cluster-state (kubectl get ns,net-attach-def,trainingruntimes,"
    "clustertrainingruntimes -A -o yaml) to decide as the cluster does"
)

# In --policy's help, the policies of the shipped catalogue: read from the policies folder only
# when the help is printed (reading it takes longer than a review of a few manifests).
CATALOGUE = "{catalogue}"


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = super()._get_help_string(action)
        if text is None or CATALOGUE not in text:
            return text
        from webhook.cli.review_scope import catalogue_names

        return text.replace(CATALOGUE, ", ".join(catalogue_names()) or "none found")


def register(commands: Any) -> None:
    """Add `review` to the command line's subcommands."""
    from webhook.kinds import trainer

    r = commands.add_parser(
        "review",
        help="run the admission decision offline on manifests (a CI gate)",
        formatter_class=_HelpFormatter,
        epilog=EXIT_CODES,
        description="Run the decision the server runs on every Pod, workload and AdmissionReview of the given files, "
        "directories (read recursively: *.yaml, *.yml, *.json) or stdin (-). Kinds that hold no pods "
        "(Services, ConfigMaps, RBAC, CRDs, Kueue and DRA objects...) are listed as not checked. Only the "
        "policies chosen with --policy, --policies or RdmaPolicy documents in the input are in force. "
        "Namespace documents in the input are used as cluster state; without --cluster-state any other "
        "namespace is taken as opted in with no other labels (said on stderr).",
    )
    r.add_argument("files", nargs="+", metavar="PATH", help="manifest files or directories (YAML or JSON); - for stdin")
    r.add_argument(
        "--policy",
        action="append",
        metavar="NAME",
        help=f"judge against this policy of the shipped catalogue (policies/: {CATALOGUE}); repeatable, or "
        "names separated by commas (default: none)",
    )
    r.add_argument(
        "--policies",
        metavar="DIR",
        help="judge against every policy of this folder, e.g. the one your cluster's webhook mounts "
        "(default: none; RdmaPolicy documents in the input are in force too, and with no policy in "
        "force a pod that would be checked is bad input)",
    )
    r.add_argument(
        "--cluster-state",
        metavar="FILE",
        help="namespaces, NetworkAttachmentDefinitions, Trainer runtimes and DRA DeviceClasses, "
        "ResourceClaimTemplates and ResourceClaims (kubectl get ns,net-attach-def,trainingruntimes,"
        "clustertrainingruntimes,deviceclasses,resourceclaimtemplates,resourceclaims -A -o yaml); "
        "a namespace missing from it is bad input (default: none, see above)",
    )
    r.add_argument(
        "--namespace",
        metavar="NS",
        help="namespace for objects that name none; an object's own namespace is kept (default: 'default')",
    )
    r.add_argument(
        "--explain", action="store_true", help="print the decision, reasons and a diff for people (default: off)"
    )
    r.add_argument(
        "--output",
        choices=("review", "json"),
        default="review",
        help="review: the AdmissionReview answer of each checked document; json: one JSON record per "
        "line and document (file, document, kind, name, outcome, rules, messages, templates), "
        "schema in webhook/cli/review-output.schema.json (default: %(default)s; --explain prints text)",
    )
    r.add_argument(
        "--strict",
        action="store_true",
        help="exit 2 on a kind that is neither checked nor known to hold no pods (default: listed as not checked)",
    )
    r.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour --explain output (default: %(default)s: when stdout is a terminal and NO_COLOR is unset)",
    )
    r.add_argument(
        "--trainer-release",
        choices=trainer.TRAINER_RELEASES,
        default=trainer.trainer_release(),
        help="the Kubeflow Trainer release whose rules make a TrainJob's pods from its runtime "
        f"(default: ${trainer.TRAINER_RELEASE_ENV}, else %(default)s)",
    )
    r.set_defaults(func=cmd_review)


def _cluster_state(path: str | None) -> tuple[Any, Any] | None:
    """(the review's namespace lookup, the Trainer runtimes known) from --cluster-state, or as
    assumed without one; None (said on stderr) when the file is bad."""
    from webhook.cli.review_scope import ReviewState
    from webhook.cluster.state import AssumedClusterState, ClusterStateError, FileClusterState, RuntimeStore

    runtimes = RuntimeStore()
    if path:
        try:
            base: FileClusterState | AssumedClusterState = FileClusterState.from_file(path)
        except ClusterStateError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return None
        runtimes.update(base.runtimes())
    else:
        base = AssumedClusterState()
    return ReviewState(base, assumed=not path), runtimes


def _scope(args: argparse.Namespace, inputs: Any, state: Any) -> tuple[Any, list[str]] | None:
    """(the policies in force or None, the catalogue's names), the notes on what the review
    assumes said on stderr; None when the policies chosen are bad (said on stderr)."""
    from webhook.cli import review_scope
    from webhook.core import keys

    policies, errors, names = review_scope.choose(args.policy or [], args.policies, inputs.policy_docs)
    if errors:
        for err in errors:
            print(f"error: {err}", file=sys.stderr)
        return None
    if not args.cluster_state:
        print(NO_STATE_NOTE.format(injection=keys.NS_INJECTION), file=sys.stderr)
    for note in state.notes:
        print(note, file=sys.stderr)
    if policies is None:
        print(f"note: no policy is in force: {review_scope.how_to_choose(names)}", file=sys.stderr)
    return policies, names


def cmd_review(args: argparse.Namespace) -> int:
    from webhook.cli import review_input
    from webhook.cli.review_judge import Judging
    from webhook.cli.review_report import Report
    from webhook.core import scripts
    from webhook.kinds import trainer

    os.environ[trainer.TRAINER_RELEASE_ENV] = args.trainer_release
    found = _cluster_state(args.cluster_state)
    if found is None:
        return EXIT_BAD_INPUT
    state, runtimes = found
    color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty() and not os.environ.get("NO_COLOR"))
    report = Report(args.output, args.explain, color)
    config_maps = scripts.ConfigMapStore()  # for the scripts containers run from ConfigMap volumes
    inputs = review_input.read(args.files, args.namespace, args.cluster_state, state, runtimes, config_maps, report)
    scope = _scope(args, inputs, state)
    if scope is None:
        return EXIT_BAD_INPUT
    judging = Judging(args, report, state, runtimes, config_maps, *scope)
    for path, docs in inputs.files:
        for i, doc in enumerate(docs, 1):
            judging.review(path, i, doc, f"{path}#{i}" if len(docs) > 1 else path, inputs.trees.get(path))
    return report.finish()
