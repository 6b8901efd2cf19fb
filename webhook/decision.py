"""The decision: a pure function of (pod, namespace, policies, known network attachments).

    decide(...) -> Decision(outcome, mutated pod, denials, warnings, notes)

No I/O happens here: the namespace and the attachment lookup are handed in already resolved, so
`/mutate`, `/validate` and `rdma-webhook review` reach the same answer for the same input. The
steps follow the admission contract: who is considered, which policy applies, which containers
are targets, the TCP-fallback rules (`webhook.fallback`), then the mutation (`webhook.mutation`)
on a private copy. The JSON patch is derived afterwards from the pod as sent and that copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol


from webhook import fallback, k8s, keys, mutation, nccl
from webhook.fallback import Finding, Subject, Target
from webhook.policy_model import Policy, PolicySet

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
    per-request objects (review.Request, fallback.Target and Subject): compiled, a dataclass
    keeps the `__init__` the dataclasses module generates at import, which runs as interpreted
    bytecode on every construction (4-5K instructions each, 5% of a decision)."""

    def __init__(self, outcome: str, pod: Any, policy: str | None = None, denials: list[Finding] | None = None,
                 warnings: list[str] | None = None, notes: list[str] | None = None, reason: str = "",
                 templates: list[Any] | None = None):
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


def _deny(pod: Any, policy: str | None, rule: str, message: str, warnings: list[str] | None = None) -> Decision:
    return Decision(DENIED, pod, policy, [Finding(rule, None, message)], warnings or [])


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
    for key in ("containers", "initContainers", "volumes"):
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
            for name, value in (sect or {}).items():  # "many" GPUs: denied, not read as none
                try:
                    finite = k8s.parse_quantity(value).is_finite()  # the parser takes "inf", "NaN"
                except ValueError:
                    finite = False
                if not finite:
                    return f"resources.{key}[{name!r}] is not a quantity: {value!r}"
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


def _annotations(pod: dict[str, Any]) -> dict[str, str]:
    meta: dict[str, Any] = pod.get("metadata") or {}
    found: dict[str, str] = meta.get("annotations") or {}
    return found


def select_policy(pod: dict[str, Any], ns: Namespace, policies: PolicySet | None) -> tuple[Policy | None, str | None]:
    """(policy, None) or (None, why no policy applies): pod annotation, else namespace label,
    else the highest-precedence policy whose namespace selector matches."""
    if not policies:
        return None, "the webhook has no valid policies loaded; ask the platform team to check `rdma-webhook policy lint`"
    asked = _annotations(pod).get(keys.POD_POLICY)
    if asked is not None:
        policy = policies.get(asked)
        if policy is None:
            known = ", ".join(sorted(policies.by_name))
            return None, f"annotation {keys.POD_POLICY}={asked!r} names no policy (known: {known}); fix the annotation"
        if not policy.allows_namespace(ns.labels):
            return None, f"policy {asked!r} (annotation {keys.POD_POLICY}) may not be used in namespace {ns.name!r}; remove the annotation or ask the platform team"
        return policy, None
    ns_default = ns.labels.get(keys.NS_POLICY)
    if ns_default is not None:
        policy = policies.get(ns_default)
        if policy is None:
            return None, f"namespace {ns.name!r} label {keys.NS_POLICY}={ns_default!r} names no policy; ask the platform team to fix the label"
        if not policy.allows_namespace(ns.labels):
            return None, f"namespace {ns.name!r} label {keys.NS_POLICY} names policy {ns_default!r}, whose namespaceSelector does not allow this namespace"
        return policy, None
    policy = policies.for_namespace(ns.labels)
    if policy is None:
        return None, (f"pod asked for RDMA ({keys.POD_INJECT}=true) but no policy applies to namespace {ns.name!r}; "
                      f"set the pod annotation {keys.POD_POLICY}=<policy> or the namespace label {keys.NS_POLICY}=<policy>")
    return policy, None


def _gpu_count(container: dict[str, Any], gpu_resources: tuple[str, ...]) -> int:
    resources: dict[str, Any] = container.get("resources") or {}
    best = 0
    for section in ("limits", "requests"):
        values: dict[str, Any] = resources.get(section) or {}
        for res in gpu_resources:
            if res in values:
                value = values[res]
                if type(value) is str and value.isdecimal() and value.isascii():  # "8": the usual form
                    count = int(value)
                else:
                    try:
                        count = int(k8s.parse_quantity(value))
                    except ValueError:
                        continue
                best = max(best, count)
    return best


def find_targets(pod: dict[str, Any], policy: Policy) -> list[Target]:
    targets = []
    spec: dict[str, Any] = pod.get("spec") or {}
    containers: list[dict[str, Any]] = spec.get("containers") or []
    for i, c in enumerate(containers):
        gpus = _gpu_count(c, policy.gpu_resources)
        if gpus > 0:
            targets.append(Target(i, str(c.get("name")), gpus, k8s.Env(c.get("env")), bool(c.get("envFrom"))))
    return targets


def resolve_network(policy: Policy, pod_ns: str, attachments: Attachments | None) -> tuple[str | None, str | None]:
    """(device resource, problem): the NetworkAttachmentDefinition's resourceName annotation when
    the cluster state has it, else the policy's resource."""
    if not policy.network_name:
        return policy.device_resource, None
    net_ns = policy.network_namespace or pod_ns
    if attachments is None:  # cluster state not known (offline review without a state file)
        if policy.device_resource:
            return policy.device_resource, None
        return None, (f"the {policy.name} policy takes its device resource from NetworkAttachmentDefinition "
                      f"{net_ns}/{policy.network_name}, which cannot be looked up here")
    nad = attachments.attachment(net_ns, policy.network_name)
    if nad is None:
        return None, (f"NetworkAttachmentDefinition {net_ns}/{policy.network_name} does not exist, so Multus cannot attach "
                      f"the RDMA network and NCCL would use TCP; ask the platform team to create it in {net_ns!r}")
    resource = ((nad.get("metadata") or {}).get("annotations") or {}).get(keys.NAD_RESOURCE_NAME)
    if resource:
        return resource, None
    if policy.device_resource:
        return policy.device_resource, None
    return None, (f"NetworkAttachmentDefinition {net_ns}/{policy.network_name} names no device resource "
                  f"({keys.NAD_RESOURCE_NAME}) and the {policy.name} policy gives none: the pod would get an "
                  f"interface without an RDMA device")


def _warnings(pod: dict[str, Any], subject: Subject) -> list[str]:
    out: list[str] = []
    spec: dict[str, Any] = pod.get("spec") or {}
    found = spec.get("securityContext")
    pod_sc: dict[str, Any] = found if isinstance(found, dict) else {}
    for c, _, settings in subject.commands():
        for name, value in settings:
            if name == "NCCL_DEBUG" and nccl.debug_verbose(value):
                out.append(f"{c.get('name')}: the command sets NCCL_DEBUG={value}, which logs heavily; use WARN outside debugging")
                break
    for t in subject.targets:
        debug = t.env.get("NCCL_DEBUG")
        if nccl.debug_verbose(debug):
            out.append(f"{t.name}: NCCL_DEBUG={debug} logs heavily; use WARN outside debugging")
        if t.has_env_from:
            out.append(f"{t.name}: envFrom values cannot be checked for NCCL settings; the policy's env entries take precedence over them")
        unknown = [n for n in fallback.WATCHED if t.env.unknown(n)]
        if unknown:
            out.append(f"{t.name}: {', '.join(unknown)} come from valueFrom and cannot be checked")
        sc: dict[str, Any] = subject.container(t).get("securityContext") or {}
        non_root = sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True
        user = sc.get("runAsUser", pod_sc.get("runAsUser"))
        if non_root or (isinstance(user, int) and user != 0):
            out.append(f"{t.name}: runs as non-root, so the added IPC_LOCK stays out of its effective capabilities; "
                       f"raise the memlock limit or grant the capability in the image")
    return out


def _assess(pod: Any, namespace: Namespace | None, policies: PolicySet | None, attachments: Attachments | None,
            operation: str, final: bool) -> Decision | tuple[Subject, list[str]]:
    """The steps `decide` and `check_final` share: who is considered, the policy, the targets and
    the rules. Returns a finished Decision, or the subject and warnings of a pod that passed."""
    problem = shape_problem(pod)
    if problem:
        return _deny(pod, None, "malformed-pod", f"the request's pod is malformed: {problem}")
    # From here on the pod has the shape `shape_problem` checked: typed as dicts and lists, so
    # that compiled code reads them with direct dict calls instead of generic method calls.
    checked: dict[str, Any] = pod
    meta: dict[str, Any] = checked.get("metadata") or {}
    labels: dict[str, str] = meta.get("labels") or {}
    if operation != "CREATE":
        return Decision(SKIPPED, pod, reason=f"operation {operation}, only CREATE is considered")
    if labels.get(keys.POD_INJECT) != keys.POD_INJECT_TRUE:
        return Decision(SKIPPED, pod, reason=f"pod does not carry {keys.POD_INJECT}=true")
    if namespace is None:
        return _deny(pod, None, "namespace-unknown",
                     "the pod's namespace is unknown to the webhook, so its opt-in cannot be checked; retry in a moment")
    if namespace.labels.get(keys.NS_INJECTION) != keys.NS_INJECTION_ENABLED:
        return Decision(SKIPPED, pod, reason=f"namespace {namespace.name!r} does not carry {keys.NS_INJECTION}=enabled")

    policy, why = select_policy(pod, namespace, policies)
    if policy is None:
        return _deny(pod, None, "no-policy", why or "no policy applies")

    targets = find_targets(pod, policy)
    if not targets:
        # No container gets RDMA, but a launcher's `mpirun -x NCCL_IB_DISABLE=1` still sends
        # every worker to TCP: the command rules apply to every labelled pod.
        subject = Subject(pod, policy, namespace.labels, [])
        warnings = _warnings(pod, subject)
        denials = fallback.rule("command-fallback").check(subject)
        if denials:
            return Decision(DENIED, pod, policy.name, denials, warnings)
        gpu = "/".join(policy.gpu_resources)
        warnings.insert(0, f"no container requests a GPU ({gpu}); left unchanged (an MPI launcher needs no RDMA device)")
        return Decision(UNCHANGED, pod, policy.name, warnings=warnings, reason="no GPU container")

    resource, net_problem = resolve_network(policy, namespace.name, attachments)
    subject = Subject(pod, policy, namespace.labels, targets, resource, net_problem)
    annotations: dict[str, str] = meta.get("annotations") or {}
    if policy.network_name and isinstance(annotations.get(keys.MULTUS_NETWORKS), str) and mutation.parse_networks(annotations[keys.MULTUS_NETWORKS]) is None:
        subject.network_problem = (f"annotation {keys.MULTUS_NETWORKS} starts with '[' but is not a JSON list of "
                                   f"network objects; Multus would reject the pod. Fix the annotation")
    denials = fallback.findings(subject, final=final)
    warnings = _warnings(pod, subject)
    if denials:
        return Decision(DENIED, pod, policy.name, denials, warnings)
    return subject, warnings


def decide(pod: Any, namespace: Namespace | None, policies: PolicySet | None,
           attachments: Attachments | None = None, operation: str = "CREATE") -> Decision:
    """Decide what happens to `pod` (the raw object as sent; never modified here)."""
    assessed = _assess(pod, namespace, policies, attachments, operation, final=False)
    if isinstance(assessed, Decision):
        return assessed
    subject, warnings = assessed
    assert namespace is not None  # _assess answers a pod without a namespace with a Decision
    mutated = mutation.private_copy(pod, subject.targets)  # shares what the mutation leaves alone
    notes = mutation.apply(mutated, subject, namespace.name, warnings)
    if mutated == pod:
        return Decision(UNCHANGED, pod, subject.policy.name, warnings=warnings, reason="already injected")
    return Decision(MUTATED, mutated, subject.policy.name, warnings=warnings, notes=notes)


def check_final(pod: Any, namespace: Namespace | None, policies: PolicySet | None,
                attachments: Attachments | None = None, operation: str = "CREATE") -> Decision:
    """The final-state guard for a pod as it will be stored, after every mutating webhook ran:
    the TCP-fallback rules plus the rules that the RDMA pieces are really there. No mutation."""
    assessed = _assess(pod, namespace, policies, attachments, operation, final=True)
    if isinstance(assessed, Decision):
        return assessed
    subject, warnings = assessed
    return Decision(UNCHANGED, pod, subject.policy.name, warnings=warnings, reason="final state keeps RDMA")
