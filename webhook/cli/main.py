"""The command line's parser: `rdma-webhook serve | review | policy lint | policy migrate | certs`,
each command in a module of its own beside this one."""

from __future__ import annotations

import argparse
from typing import Iterable

from webhook.cli.certs import cmd_certs
from webhook.cli.policy import cmd_admission_policy, cmd_claim_template, cmd_lint, cmd_migrate
from webhook.cli.review import cmd_review
from webhook.cli.serve import cmd_serve


EXIT_CODES = """exit status:
  0  every document allowed (or not checked: kinds that hold no pods, namespaces not opted in)
  1  any pod or workload denied
  2  bad input: unreadable or invalid YAML, a malformed object or review, no policy chosen (or a bad
     one), and in a pod or template that would be checked: a namespace missing from --cluster-state,
     a TrainJob whose runtime is not given, a resource quantity that is not one, a number where the
     API server wants a string (command, args, env values), a placeholder not filled in ({{ .x }},
     ${X}) where the decision reads; a raw kustomize tree that would be checked, or any with
     --strict; an unknown kind with --strict"""


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("rdma-webhook")
    except Exception:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    from webhook.kinds import trainer

    raw = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(prog="rdma-webhook", description="RDMA injection webhook for GPU training pods.",
                                epilog="`rdma-webhook COMMAND --help` describes each command, its flags and exit codes.",
                                formatter_class=raw)
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="{serve,review,policy,certs}")

    s = sub.add_parser("serve", help="serve the admission webhook over HTTPS", formatter_class=raw,
                       description="Serve POST /mutate and /validate (AdmissionReview v1), /healthz, /readyz and "
                                   "/metrics over TLS.",
                       epilog="exit status: 0 after a clean shutdown (SIGTERM), 2 on a bad flag or a missing file, "
                              "1 when the server fails to start")
    s.add_argument("--policies", metavar="DIR", help="policies folder, reloaded on change (default: the repository's policies/)")
    s.add_argument("--tls-cert", required=True, metavar="FILE", help="serving certificate, PEM (required; reloaded when it changes)")
    s.add_argument("--tls-key", required=True, metavar="FILE", help="its private key, PEM (required)")
    s.add_argument("--client-ca", metavar="FILE", help="require client certificates signed by this CA (API server authentication; default: none required)")
    s.add_argument("--host", default="0.0.0.0", help="address to listen on (default: %(default)s)")
    s.add_argument("--port", type=int, default=8443, help="port to listen on (default: %(default)s)")
    s.add_argument("--workers", type=int, default=2, help="worker processes, each serving many connections (default: %(default)s)")
    s.add_argument("--cluster-state", metavar="FILE",
                   help="read namespaces, NetworkAttachmentDefinitions and Trainer runtimes from this YAML file instead "
                        "of watching the API server (default: the API server, in-cluster or kubeconfig)")
    s.add_argument("--check-admission-policy", action="store_true",
                   help="the policy mode: watch (read-only) the ValidatingAdmissionPolicies that `policy admission-policy` "
                        "generated and report on /metrics (rdma_webhook_admission_policy_in_sync) and /readyz whether they "
                        "match the policies in force (default: off; needs get/list/watch on them, see README)")
    s.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default: %(default)s)")
    s.add_argument("--trainer-release", choices=trainer.TRAINER_RELEASES, default=trainer.trainer_release(),
                   help="the Kubeflow Trainer release whose rules make a TrainJob's pods from its runtime "
                        f"(default: ${trainer.TRAINER_RELEASE_ENV}, else %(default)s)")
    s.set_defaults(func=cmd_serve)

    r = sub.add_parser("review", help="run the admission decision offline on manifests (a CI gate)",
                       formatter_class=raw, epilog=EXIT_CODES,
                       description="Run the decision the server runs on every Pod, workload and AdmissionReview of "
                                   "the given files, directories (read recursively: *.yaml, *.yml, *.json) or stdin (-). "
                                   "Kinds that hold no pods (Services, ConfigMaps, RBAC, CRDs, Kueue and DRA objects...) "
                                   "are listed as not checked. Only the policies chosen with --policy, --policies or "
                                   "RdmaPolicy documents in the input are in force. Namespace documents in the input "
                                   "are used as cluster state; without --cluster-state any other namespace is taken "
                                   "as opted in with no other labels (said on stderr).")
    r.add_argument("files", nargs="+", metavar="PATH", help="manifest files or directories (YAML or JSON); - for stdin")
    r.add_argument("--policy", action="append", metavar="NAME",
                   help="judge against this policy of the shipped catalogue (policies/: efa, efa-dra, erdma, ib-shared, "
                        "nd-infiniband, oke-roce-host, roce-dranet, sriov-roce, sriov-roce-8rail); repeatable, or names "
                        "separated by commas "
                        "(default: none)")
    r.add_argument("--policies", metavar="DIR",
                   help="judge against every policy of this folder, e.g. the one your cluster's webhook mounts "
                        "(default: none; RdmaPolicy documents in the input are in force too, and with no policy in "
                        "force a pod that would be checked is bad input)")
    r.add_argument("--cluster-state", metavar="FILE",
                   help="namespaces, NetworkAttachmentDefinitions, Trainer runtimes and DRA DeviceClasses, "
                        "ResourceClaimTemplates and ResourceClaims (kubectl get ns,net-attach-def,trainingruntimes,"
                        "clustertrainingruntimes,deviceclasses,resourceclaimtemplates,resourceclaims -A -o yaml); "
                        "a namespace missing from it is bad input (default: none, see above)")
    r.add_argument("--namespace", metavar="NS", help="namespace for objects that name none; an object's own namespace is kept (default: 'default')")
    r.add_argument("--explain", action="store_true", help="print the decision, reasons and a diff for people (default: off)")
    r.add_argument("--output", choices=("review", "json"), default="review",
                   help="review: the AdmissionReview answer of each checked document; json: one JSON record per "
                        "line and document (file, document, kind, name, outcome, rules, messages, templates), "
                        "schema in webhook/cli/review-output.schema.json (default: %(default)s; --explain prints text)")
    r.add_argument("--strict", action="store_true",
                   help="exit 2 on a kind that is neither checked nor known to hold no pods (default: listed as not checked)")
    r.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="colour --explain output (default: %(default)s: when stdout is a terminal and NO_COLOR is unset)")
    r.add_argument("--trainer-release", choices=trainer.TRAINER_RELEASES, default=trainer.trainer_release(),
                   help="the Kubeflow Trainer release whose rules make a TrainJob's pods from its runtime "
                        f"(default: ${trainer.TRAINER_RELEASE_ENV}, else %(default)s)")
    r.set_defaults(func=cmd_review)

    pol = sub.add_parser("policy", help="policy tools", description="Policy tools.")
    polsub = pol.add_subparsers(dest="policy_command", required=True, metavar="{lint,migrate,admission-policy,claim-template}")
    lint = polsub.add_parser("lint", help="validate the policy files of a folder", formatter_class=raw,
                             description="Validate every policy file of a folder, reporting every problem of every file.",
                             epilog="exit status: 0 all policies valid (warnings allowed), 1 any problem")
    lint.add_argument("dir", metavar="DIR", help="the policies folder")
    lint.set_defaults(func=cmd_lint)
    mig = polsub.add_parser("migrate", help="print v1alpha1 policy files as v1alpha2 (comments are not kept)")
    mig.add_argument("files", nargs="+", metavar="FILE")
    mig.set_defaults(func=cmd_migrate)
    vap = polsub.add_parser(
        "admission-policy", formatter_class=raw,
        help="print the pods' final-state check as ValidatingAdmissionPolicies (CEL) and their bindings",
        description="Print, as YAML, one ValidatingAdmissionPolicy and one ValidatingAdmissionPolicyBinding per policy "
                    "of the folder: the final-state check of labelled pods that `/validate` makes, run by the API server "
                    "itself (Kubernetes >= 1.30), keyed on the rdma-webhook.io/applied-policy annotation the mutating "
                    "webhook writes. Apply the output with the webhook configurations of the policy mode (README, "
                    "\"Final-state check as a ValidatingAdmissionPolicy\"); regenerate it whenever a policy changes.",
        epilog="exit status: 0 printed, 1 a policy file is invalid (nothing printed), 2 on a bad flag")
    vap.add_argument("--policies", metavar="DIR", help="the policies folder in force (default: the repository's policies/)")
    vap.add_argument("--dry-run", action="store_true",
                     help="bind with validationActions [Warn, Audit]: a pod that fails the check is admitted, the client "
                          "gets a warning and the audit log an annotation (default: off: [Deny])")
    vap.add_argument("--out", metavar="FILE", help="write to FILE instead of stdout")
    vap.set_defaults(func=cmd_admission_policy)
    ct = polsub.add_parser(
        "claim-template", formatter_class=raw,
        help="print the ResourceClaimTemplate of a policy's aligned claim (GPU and NIC pairs on one PCIe root)",
        description="Print, as YAML, the ResourceClaimTemplate that a policy with `claim: {aligned: true}` injects for "
                    "a GPU count: one request per GPU and per NIC, each pair constrained to one "
                    "resource.kubernetes.io/pcieRoot (Kubernetes >= 1.34; GPUs from a DRA driver, not a device plugin).",
        epilog="exit status: 0 printed, 1 no such policy, its claim is not aligned, or no NIC class known, 2 on a bad flag")
    ct.add_argument("policy", metavar="POLICY", help="the policy's name")
    ct.add_argument("--policies", metavar="DIR", help="the policies folder (default: the repository's policies/)")
    ct.add_argument("--gpus", type=int, choices=range(1, 65), metavar="N", required=True, help="GPUs per pod (1-64)")
    ct.add_argument("--gpu-class", default="gpu.nvidia.com",
                    help="the GPUs' DeviceClass (default: %(default)s, NVIDIA's GPU DRA driver)")
    ct.add_argument("--nic-class", help="the NICs' DeviceClass (default: the policy's first dra.deviceClasses)")
    ct.add_argument("--namespace", help="set metadata.namespace (default: none, for kubectl -n)")
    ct.set_defaults(func=cmd_claim_template)

    c = sub.add_parser("certs", help="write a CA and a serving certificate for the webhook Service", formatter_class=raw,
                       description="Write ca.crt, ca.key, tls.crt and tls.key (keys 0600) into --out. stdout carries "
                                   "only the base64 CA bundle, for the webhook configurations' caBundle; messages go "
                                   "to stderr.",
                       epilog="exit status: 0 written, 1 refused or failed (an existing CA without --force, "
                              "--reuse-ca without a CA, an unwritable folder), 2 on a bad flag")
    c.add_argument("--service", required=True, help="the webhook Service's name (required)")
    c.add_argument("--namespace", required=True, help="the Service's namespace (required)")
    c.add_argument("--out", required=True, metavar="DIR", help="folder to write into, created if missing (required)")
    c.add_argument("--dns", action="append", default=[], metavar="NAME", help="extra DNS name (repeatable; default: none)")
    c.add_argument("--ip", action="append", default=[], metavar="IP", help="extra IP address (repeatable; default: none)")
    c.add_argument("--days", type=int, default=365, help="serving certificate validity in days (default: %(default)s)")
    c.add_argument("--reuse-ca", action="store_true",
                   help="renew only the serving certificate, signed by the ca.crt/ca.key already in --out, so "
                        "deployed caBundles stay valid (default: off)")
    c.add_argument("--force", action="store_true",
                   help="replace a CA already in --out; every caBundle deployed with the old one stops working "
                        "(default: off: refused)")
    c.set_defaults(func=cmd_certs)
    return p


def main(argv: Iterable[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
