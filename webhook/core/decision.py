"""The decision: a pure function of (pod, namespace, policies, known network attachments).

    decide(...) -> Decision(outcome, mutated pod, denials, warnings, notes)

No I/O happens here: the namespace and the attachment lookup are handed in already resolved, so
`/mutate`, `/validate` and `rdma-webhook review` reach the same answer for the same input. The
steps follow the admission contract: who is considered, which policy applies, which containers
are targets (`webhook.core.targets`), the TCP-fallback rules (`webhook.core.fallback`) and the
warnings (`webhook.core.pod_warnings`), then the mutation (`webhook.core.mutation`) on a private
copy. The JSON patch is derived afterwards from the pod as sent and that copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Mapping, Protocol


from webhook.core import families, fallback, keys, machines, mutation, ranks
from webhook.core.claims import Claims
from webhook.core.pod_warnings import warnings_for
from webhook.core.scripts import ConfigMaps
from webhook.core.subject import Finding, Subject
from webhook.core.targets import Target, find_checked, find_targets, why_no_target
from webhook.grammar import k8s
from webhook.fabrics import gke, multus
from webhook.core.model import Device, Policy, PolicySet

SKIPPED, UNCHANGED, MUTATED, DENIED = "skipped", "unchanged", "mutated", "denied"


class Attachments(Protocol):
    """What the decision needs to know about NetworkAttachmentDefinitions."""

    def attachment(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...


@dataclass(frozen=True)
class Namespace:
    name: str
    labels: dict[str, str]


class Decision:
    """What happens to a pod. A plain class rather than a dataclass, as are the decision's other
    per-request objects (review.Request, targets.Target, subject.Subject): compiled, a dataclass
    keeps the `__init__` the dataclasses module generates at import, which runs as interpreted
    bytecode on every construction (4-5K instructions each, 5% of a decision)."""

    def __init__(
        self,
        outcome: str,
        pod: Any,
        policy: str | None = None,
        denials: list[Finding] | None = None,
        warnings: list[str] | None = None,
        notes: list[str] | None = None,
        reason: str = "",
        templates: list[Any] | None = None,
    ):
        self.outcome = outcome
        self.pod = pod  # the mutated copy when outcome is MUTATED, else the pod as sent
        self.policy = policy
        self.denials: list[Finding] = [] if denials is None else denials
        self.warnings: list[str] = [] if warnings is None else warnings
        self.notes: list[str] = [] if notes is None else notes  # what the mutation added, for people
        self.reason = reason  # why a pod was skipped or left unchanged
        self.templates: list[Any] = [] if templates is None else templates  # workloads: one result per pod template

    def __repr__(self) -> str:
        return f"Decision({self.outcome!r}, policy={self.policy!r}, denials={self.denials!r}, reason={self.reason!r})"

    @property
    def allowed(self) -> bool:
        return self.outcome != DENIED


def _deny(pod: Any, rule: str, message: str) -> Decision:
    """A denial before any policy applies: no policy, no warnings."""
    return Decision(DENIED, pod, None, [Finding(rule, None, message)])


def shape_problem(pod: Any) -> str | None:
    """What makes `pod` unusable as a Pod object (None when the fields we read have sane types).
    Every request passes here first, so each field is looked up once."""
    if not isinstance(pod, dict):
        return "the object is not a JSON object"
    if pod.get("kind") not in (None, "Pod"):
        return f"the object is a {pod.get('kind')!r}, not a Pod"
    found_meta, found_spec = pod.get("metadata"), pod.get("spec")
    if found_meta is not None and not isinstance(found_meta, dict):
        return "metadata must be an object"
    if found_spec is not None and not isinstance(found_spec, dict):
        return "spec must be an object"
    meta: dict[str, Any] = found_meta or {}  # typed: compiled, direct dict calls from here on
    spec: dict[str, Any] = found_spec or {}
    for key in ("labels", "annotations"):
        value = meta.get(key)
        if value is not None and (not isinstance(value, dict) or not k8s.all_str(value.values())):
            return f"metadata.{key} must map strings to strings"
    for key in ("containers", "initContainers", "volumes", "resourceClaims"):
        value = spec.get(key)
        if value is not None and (not isinstance(value, list) or not k8s.all_dict(value)):
            return f"spec.{key} must be a list of objects"
    for kind in ("containers", "initContainers"):
        for i, c in enumerate(spec.get(kind) or ()):
            problem = _container_shape_problem(c)
            if problem:
                return f"spec.{kind}[{i}].{problem}"
    return None


def _container_shape_problem(c: dict[str, Any]) -> str | None:
    resources, sc = c.get("resources"), c.get("securityContext")
    if resources is not None and not isinstance(resources, dict):
        return "resources must be an object"
    if sc is not None and not isinstance(sc, dict):
        return "securityContext must be an object"
    for key in ("env", "envFrom", "volumeMounts", "command", "args"):
        value = c.get(key)
        if value is not None and not isinstance(value, list):
            return f"{key} must be a list"
    if resources:
        for key in ("limits", "requests"):
            sect = resources.get(key)
            if sect is not None and not isinstance(sect, dict):
                return f"resources.{key} must be an object"
        claims = resources.get("claims")
        if claims is not None and not isinstance(claims, list):
            return "resources.claims must be a list"
    caps = sc.get("capabilities") if sc else None
    if caps is not None:
        if not isinstance(caps, dict):
            return "securityContext.capabilities must hold add/drop lists"
        for key in ("add", "drop"):
            if caps.get(key) is not None and not isinstance(caps[key], list):
                return "securityContext.capabilities must hold add/drop lists"
    return None


def pod_name(pod: Any) -> str:
    """The pod's name, or its generateName with a `*` (controller-made pods have no name yet)."""
    meta = pod.get("metadata") if isinstance(pod, dict) else None
    if not isinstance(meta, dict):
        return "(unnamed)"
    if isinstance(meta.get("name"), str) and meta["name"]:
        return meta["name"]
    if isinstance(meta.get("generateName"), str) and meta["generateName"]:
        return f"{meta['generateName']}*"
    return "(unnamed)"


# The shipped policies are a catalogue: an install enforces none until the platform team chooses.
NO_POLICY_CHOSEN: Final = (
    "no RDMA policy is in force on this cluster: the platform team chooses one from the catalogue "
    "(Helm: --set policies.enabled={NAME}; kustomize: the component deploy/catalogue/NAME) or mounts "
    "its own; until then pods that ask for RDMA are refused"
)


def select_policy(pod: dict[str, Any], ns: Namespace, policies: PolicySet | None) -> tuple[Policy | None, str | None]:
    """(policy, None) or (None, why no policy applies): pod annotation, else namespace label,
    else the highest-precedence policy whose namespace selector matches."""
    if policies is None:
        return (
            None,
            "the webhook has no valid policies loaded; ask the platform team to check `rdma-webhook policy lint`",
        )
    if not policies:
        return None, NO_POLICY_CHOSEN
    asked = ((pod.get("metadata") or {}).get("annotations") or {}).get(keys.POD_POLICY)
    if asked is not None:
        policy = policies.get(asked)
        if policy is None:
            known = ", ".join(sorted(policies.by_name))
            return None, f"annotation {keys.POD_POLICY}={asked!r} names no policy (known: {known}); fix the annotation"
        if not policy.allows_namespace(ns.labels):
            return (
                None,
                f"policy {asked!r} (annotation {keys.POD_POLICY}) may not be used in namespace {ns.name!r}; "
                f"remove the annotation or ask the platform team",
            )
        return policy, None
    ns_default = ns.labels.get(keys.NS_POLICY)
    if ns_default is not None:
        policy = policies.get(ns_default)
        if policy is None:
            return (
                None,
                f"namespace {ns.name!r} label {keys.NS_POLICY}={ns_default!r} names no policy; ask the platform team to fix the label",
            )
        if not policy.allows_namespace(ns.labels):
            return (
                None,
                f"namespace {ns.name!r} label {keys.NS_POLICY} names policy {ns_default!r}, whose namespaceSelector does not allow this namespace",
            )
        return policy, None
    policy = policies.for_namespace(ns.labels)
    if policy is None:
        return None, (
            f"pod asked for RDMA ({keys.POD_INJECT}=true) but no policy applies to namespace {ns.name!r}; "
            f"set the pod annotation {keys.POD_POLICY}=<policy> or the namespace label {keys.NS_POLICY}=<policy>"
        )
    return policy, None


def _subject(
    pod: Any,
    policy: Policy,
    namespace: Namespace,
    targets: list[Target],
    config_maps: ConfigMaps | None,
    policies: PolicySet | None,
    devices: list[Device] | None = None,
    problems: list[Finding] | None = None,
    networks: multus.Plan | None = None,
    claim_entry: str | None = None,
) -> Subject:
    subject = Subject(pod, policy, namespace.labels, targets, devices, problems, networks, claim_entry)
    subject.policies = policies
    subject.config_maps = config_maps
    subject.namespace = namespace.name
    return subject


def _assess(
    pod: Any,
    namespace: Namespace | None,
    policies: PolicySet | None,
    attachments: Attachments | None,
    operation: str,
    final: bool,
    config_maps: ConfigMaps | None,
    claims: Claims | None,
) -> Decision | tuple[Subject, list[str]]:
    """The steps `decide` and `check_final` share: who is considered, the policy, the targets and
    the rules. Returns a finished Decision, or the subject and warnings of a pod that passed."""
    problem = shape_problem(pod)
    if problem:
        return _deny(pod, "malformed-pod", f"the request's pod is malformed: {problem}")
    # From here on the pod has the shape `shape_problem` checked: typed as dicts and lists, so
    # that compiled code reads them with direct dict calls instead of generic method calls.
    checked: dict[str, Any] = pod
    meta: dict[str, Any] = checked.get("metadata") or {}
    labels: dict[str, str] = meta.get("labels") or {}
    passed_by = _not_considered(pod, labels, namespace, operation)
    if passed_by is not None:
        return passed_by
    assert namespace is not None  # _not_considered denies a pod of an unknown namespace

    policy, why = select_policy(pod, namespace, policies)
    if policy is None:
        assert why is not None  # select_policy says why no policy applies
        return _deny(pod, "no-policy", why)
    if policy.machines is not None:  # the fabric of the pod's machine type (webhook.core.machines)
        typed, why = machines.choose(checked, policy, policies)
        if typed is None:
            return Decision(DENIED, pod, policy.name, [Finding("machine-type", None, why)])
        policy = typed

    malformed: list[str] = []
    targets = find_targets(pod, policy, malformed)
    if malformed:
        return _deny(pod, "malformed-pod", f"the request's pod is malformed: {malformed[0]}")
    others = find_checked(checked, targets)
    launchers = ranks.find_launchers(checked, labels, targets)
    if not targets and not launchers:
        return _assess_untargeted(checked, policy, namespace, policies, others, attachments, config_maps, claims)
    if not targets:
        return _assess_launcher(checked, meta, policy, namespace, policies, others, launchers, config_maps)
    assert policies is not None  # select_policy found one
    return _assess_targets(
        checked, meta, policy, namespace, policies, targets, others, launchers, attachments, final, config_maps, claims
    )


def _not_considered(pod: Any, labels: dict[str, str], namespace: Namespace | None, operation: str) -> Decision | None:
    """Who is considered: a CREATE of a pod labelled for RDMA in a namespace that enabled the
    webhook. Else the Decision that skips the pod, or denies it when its namespace is unknown."""
    if operation != "CREATE":
        return Decision(SKIPPED, pod, reason=f"operation {operation}, only CREATE is considered")
    if labels.get(keys.POD_INJECT) != keys.POD_INJECT_TRUE:
        return Decision(SKIPPED, pod, reason=f"pod does not carry {keys.POD_INJECT}=true")
    if namespace is None:
        return _deny(
            pod,
            "namespace-unknown",
            "the pod's namespace is unknown to the webhook, so its opt-in cannot be checked; retry in a moment",
        )
    if namespace.labels.get(keys.NS_INJECTION) != keys.NS_INJECTION_ENABLED:
        return Decision(SKIPPED, pod, reason=f"namespace {namespace.name!r} does not carry {keys.NS_INJECTION}=enabled")
    return None


def _assess_untargeted(
    pod: dict[str, Any],
    policy: Policy,
    namespace: Namespace,
    policies: PolicySet | None,
    others: list[Target],
    attachments: Attachments | None,
    config_maps: ConfigMaps | None,
    claims: Claims | None,
) -> Decision:
    """No container gets RDMA: the command rules apply to every labelled pod, and the env rule to
    containers that see GPUs without requesting one. Never mutated: unchanged or denied."""
    subject = _subject(pod, policy, namespace, [], config_maps, policies)
    subject.others = others
    warnings = warnings_for(pod, subject)
    denials = fallback.rule("env-fallback").check(subject) + fallback.rule("command-fallback").check(subject)
    spec: dict[str, Any] = pod.get("spec") or {}
    if spec.get("resourceClaims") and policies is not None:  # GPUs and NICs by claim: of this fabric?
        families.check(pod, policy, policies, namespace.name, namespace.labels, [], [], denials, attachments, claims)
    if denials:
        return Decision(DENIED, pod, policy.name, denials, warnings)
    why = why_no_target(pod, policy, others)
    warnings.insert(0, f"{why}; left unchanged")
    return Decision(UNCHANGED, pod, policy.name, warnings=warnings, reason=why)


def _assess_launcher(
    pod: dict[str, Any],
    meta: dict[str, Any],
    policy: Policy,
    namespace: Namespace,
    policies: PolicySet | None,
    others: list[Target],
    launchers: list[Target],
    config_maps: ConfigMaps | None,
) -> Decision | tuple[Subject, list[str]]:
    """An MPI launcher without a GPU (webhook.core.ranks): it gets the block its ranks need, no
    device, network or /dev/shm, and meets the rules of what the ranks will see."""
    annotations: dict[str, str] = meta.get("annotations") or {}
    names: multus.Plan | None = None
    if policy.gke_networks:  # the same for GKE multi-networking
        names = gke.plan(annotations.get(gke.INTERFACES), policy.gke_networks)
        if names.problem is not None:
            names = gke.plan(None, policy.gke_networks)
    elif policy.networks:  # `{interface}` in the block: the names the workers get by default
        names = multus.plan(annotations.get(keys.MULTUS_NETWORKS), policy.networks, namespace.name)
        if names.problem is not None:
            names = multus.plan(None, policy.networks, namespace.name)
    subject = _subject(pod, policy, namespace, [], config_maps, policies, networks=names)
    subject.others = others
    subject.launchers = launchers
    warnings = warnings_for(pod, subject)
    denials = [
        f for r in ("env-fallback", "command-fallback", "launcher-enforced") for f in fallback.rule(r).check(subject)
    ]
    if denials:
        return Decision(DENIED, pod, policy.name, denials, warnings)
    return subject, warnings


def _assess_targets(
    pod: dict[str, Any],
    meta: dict[str, Any],
    policy: Policy,
    namespace: Namespace,
    policies: PolicySet,
    targets: list[Target],
    others: list[Target],
    launchers: list[Target],
    attachments: Attachments | None,
    final: bool,
    config_maps: ConfigMaps | None,
    claims: Claims | None,
) -> Decision | tuple[Subject, list[str]]:
    """A pod with targets: resolve the fabric (the policy's devices and networks, what the pod
    brings itself, the Multus or GKE annotation as it will be), then every rule."""
    problems: list[Finding] = []
    devices = list(policy.devices)
    unresolved: list[Finding] = []  # a policy network's missing NAD: moot when the pod brings its own
    if policy.networks:
        devices.extend(families.network_devices(policy, namespace.name, attachments, unresolved))
    brought = families.check(
        pod, policy, policies, namespace.name, namespace.labels, targets, devices, problems, attachments, claims
    )
    networks = policy.networks
    if brought.own_network:  # the pod attaches its fabric's network or claims its NIC itself
        networks = ()
        devices = list(policy.devices)
    else:
        problems.extend(unresolved)
    annotations: dict[str, str] = meta.get("annotations") or {}
    plan: multus.Plan | None = None
    if policy.gke_networks and not brought.own_network:  # GKE multi-networking instead of Multus (webhook.fabrics.gke)
        plan = gke.plan(annotations.get(gke.INTERFACES), policy.gke_networks)
        if plan.problem is not None:
            problems.append(Finding("gke-annotation", None, f"{gke.INTERFACES}: {plan.problem}"))
            plan = None
    elif networks or keys.MULTUS_NETWORKS in annotations:
        plan = multus.plan(annotations.get(keys.MULTUS_NETWORKS), networks, namespace.name)
        if plan.problem is not None:
            if networks:
                problems.append(Finding("multus-annotation", None, f"{keys.MULTUS_NETWORKS}: {plan.problem}"))
            plan = None
        elif brought.own_network:
            plan.interfaces = brought.interfaces
    subject = _subject(pod, policy, namespace, targets, config_maps, policies, devices, problems, plan, brought.entry)
    subject.own_claim = brought.own_claim
    subject.others = others
    subject.launchers = launchers
    denials = fallback.findings(subject, final=final)
    warnings = warnings_for(pod, subject) + brought.warnings
    if denials:
        return Decision(DENIED, pod, policy.name, denials, warnings)
    return subject, warnings


def decide(
    pod: Any,
    namespace: Namespace | None,
    policies: PolicySet | None,
    attachments: Attachments | None = None,
    operation: str = "CREATE",
    config_maps: ConfigMaps | None = None,
    claims: Claims | None = None,
) -> Decision:
    """Decide what happens to `pod` (the raw object as sent; never modified here). `config_maps`:
    the ConfigMaps at hand, for scripts the containers run from ConfigMap volumes
    (`webhook.core.scripts`; None: none, and such a script is named in a warning). `claims`: the
    DRA DeviceClasses, templates and claims known (webhook.core.claims), None when not tracked."""
    assessed = _assess(pod, namespace, policies, attachments, operation, False, config_maps, claims)
    if isinstance(assessed, Decision):
        return assessed
    subject, warnings = assessed
    mutated = mutation.private_copy(pod, subject.targets + subject.launchers)  # shares what the mutation leaves alone
    notes = mutation.apply(mutated, subject, warnings)
    if mutated == pod:
        return Decision(UNCHANGED, pod, subject.policy.name, warnings=warnings, reason="already injected")
    return Decision(MUTATED, mutated, subject.policy.name, warnings=warnings, notes=notes)


def check_final(
    pod: Any,
    namespace: Namespace | None,
    policies: PolicySet | None,
    attachments: Attachments | None = None,
    operation: str = "CREATE",
    config_maps: ConfigMaps | None = None,
    claims: Claims | None = None,
) -> Decision:
    """The final-state guard for a pod as it will be stored, after every mutating webhook ran:
    the TCP-fallback rules plus the rules that the RDMA pieces are really there. No mutation."""
    assessed = _assess(pod, namespace, policies, attachments, operation, True, config_maps, claims)
    if isinstance(assessed, Decision):
        return assessed
    subject, warnings = assessed
    return Decision(UNCHANGED, pod, subject.policy.name, warnings=warnings, reason="final state keeps RDMA")
