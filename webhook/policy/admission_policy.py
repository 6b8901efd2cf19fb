"""The pods' final-state check as Kubernetes objects: one ValidatingAdmissionPolicy (CEL, run by
the API server itself) and its binding per RDMA policy, generated from the policy so that the
two can never disagree.

Why: `/validate` on pods is a second webhook round trip for every labelled pod, made only to
look at the pod once every mutating webhook has run. What it checks there is mostly whether the
pieces our mutation added are still in place, and that is plain data the API server can check
in-process: the mutating webhook writes the policy it applied on the pod (the label
`rdma-webhook.io/applied-policy`), and each generated policy selects the pods that carry its
name (an objectSelector, no CEL) and checks, in CEL:

- device-missing: every GPU container still has the policy's device resources (non-zero
  limits), an equivalent resource, or a reference to the policy's DRA claim;
- ipc-lock-missing / ipc-lock-dropped: IPC_LOCK is still added (or the container privileged)
  and not dropped;
- enforced-env: each enforced NCCL variable still has its value (the last entry of that name,
  as the kubelet reads `env`; NCCL_NET without case);
- env-fallback: no later `env` entry turns the transport off (NCCL_IB_DISABLE, NCCL_NET,
  NCCL_NET_PLUGIN: the judgements `webhook.fabrics.transports` makes that a regular
  expression can make too);
- shm: the /dev/shm our mutation mounted is still a memory-backed emptyDir;
- host-network: hostNetwork as the policy wants it;
- multus-networks: the policy's Multus networks are still in the pod's networks annotation.
- gke-networks: the policy's GKE networks are still in the pod's networking.gke.io/interfaces
  annotation; sidecar-missing: a pod with a GPU container still runs the fabric's sidecar.

What CEL cannot check (commands read as the shell reads them, NCCL_IB_HCA's filter grammar,
`$(VAR)` expansion, a network's device named by its NetworkAttachmentDefinition) is listed in
the README with what covers it. Nothing here runs on the admission path: the objects are made
by `rdma-webhook policy admission-policy` at install time, and compared with what the cluster
holds by `webhook.cluster.admission_policies` (read-only).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable, NamedTuple, Sequence

from webhook.core import keys
from webhook.core.model import GPUS_FIELD, Policy, PolicySet
from webhook.fabrics import gke

API_VERSION = "admissionregistration.k8s.io/v1"
POLICY_KIND = "ValidatingAdmissionPolicy"
BINDING_KIND = "ValidatingAdmissionPolicyBinding"
NAME_PREFIX = "rdma-webhook-final-state-"
# The label every generated object carries, and the one naming its RDMA policy: the run-time
# check lists the objects by the first and pairs them with the policies by the second.
PART_OF = {"app.kubernetes.io/name": "rdma-webhook", "app.kubernetes.io/part-of": "rdma-webhook"}
POLICY_LABEL = keys.PREFIX + "rdma-policy"
# A digest of the generated spec, written on both objects, so a mismatch is one string compare
# and a person can see which policy text an object was made from.
DIGEST_ANNOTATION = keys.PREFIX + "final-state-digest"
ACTIONS = ("Deny", "Warn", "Audit")
DRY_RUN = ("Warn", "Audit")

# NCCL_IB_DISABLE as NCCL reads it (strtoll base 0, `webhook.grammar.nccl.int_param`): non-zero
# when the number's first non-zero digit comes before it ends. (A number past int64 is 0 to
# NCCL; this calls it non-zero: the one place the CEL is stricter than the webhook.)
IB_DISABLED_RE = r"^[ \t\n\v\f\r]*[+-]?(0[xX][0-9a-fA-F]*[1-9a-fA-F]|0[0-7]*[1-7]|[1-9])"


def cel_str(text: str) -> str:
    """A CEL string literal (single quotes; backslash, quote and control characters escaped)."""
    out = []
    for ch in text:
        if ch in "\\'":
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ch == "\x7f":
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "'" + "".join(out) + "'"


def cel_list(items: Iterable[str]) -> str:
    return "[" + ", ".join(cel_str(i) for i in items) + "]"


def object_name(policy_name: str) -> str:
    return NAME_PREFIX + policy_name


# -- CEL fragments over one container `c` ------------------------------------------------------

def _has_section(section: str) -> str:
    return f"has(c.resources) && has(c.resources.{section})"


def _above_zero(section: str, resource: str) -> str:
    """c has `resource` in `section` (a map known to be there) with a quantity above zero."""
    name = cel_str(resource)
    return (f"({name} in c.resources.{section} && "
            f"quantity(string(c.resources.{section}[{name}])).isGreaterThan(quantity('0')))")


# Each resource is written out (`||`, `&&`) rather than iterated over a list literal: the API
# server's CEL runs a comprehension's body through its interpreter per element, at about a
# microsecond a step (benchmarks/README.md, "The twentieth session: what the check costs").

def _positive(section: str, resources: Sequence[str]) -> str:
    """A resource of `resources` with a quantity above zero in `section` of c."""
    return f"({_has_section(section)} && ({' || '.join(_above_zero(section, r) for r in resources)}))"


def _target(policy: Policy) -> str:
    """A container the decision makes a target: it requests one of the policy's GPUs (`find_targets`)."""
    return f"{_positive('limits', policy.gpu_resources)} || {_positive('requests', policy.gpu_resources)}"


def _others() -> str:
    """A container that sees GPUs without requesting one (`targets._sees_gpus_otherwise`): its
    env is judged like a target's."""
    return ("(has(c.resources) && has(c.resources.claims) && size(c.resources.claims) > 0) || "
            "(has(c.env) && c.env.exists(e, e.name == 'NVIDIA_VISIBLE_DEVICES' && has(e.value) && "
            "!(e.value.trim().lowerAscii() in ['', 'void', 'none'])))")


# The names of c's env entries, bound once per container as `n` (`_with_names`): the API
# server's CEL environment has no `cel.bind`, and `[list].all(n, ...)` binds a value once. An
# entry of a name is then found by the lists library's `lastIndexOf` (one native call), where a
# `filter` over the entries for each variable and rule ran the CEL interpreter over every entry
# (benchmarks/README.md, "The twentieth session: what the check costs").
_NAMES = "(has(c.env) ? c.env.map(e, e.name) : [])"


def _with_names(condition: str) -> str:
    """`condition` (CEL over c and n) with n bound to c's env names."""
    return f"[{_NAMES}].all(n, {condition})"


def _last(name: str) -> str:
    """The value of the last env entry of `name` ('' for a valueFrom), as the kubelet reads `env`;
    valid where the entry exists."""
    i = f"n.lastIndexOf({cel_str(name)})"
    return f"(has(c.env[{i}].value) ? c.env[{i}].value : '')"


def _env_set_and(name: str, test: str) -> str:
    """CEL: c has an env entry `name`, and `test` (CEL over its last value, `_last(name)`) holds."""
    return f"({cel_str(name)} in n && {test})"


def _env_unset_or(name: str, test: str) -> str:
    """CEL: c has no env entry `name`, or `test` (CEL over its last value, `_last(name)`) holds."""
    return f"(!({cel_str(name)} in n) || {test})"


def _capability(field: str) -> str:
    """c's capabilities `field` (add or drop) names IPC_LOCK, in any case, with or without CAP_;
    the exact name first, one native lookup."""
    listed = f"c.securityContext.capabilities.{field}"
    return (f"(has(c.securityContext) && has(c.securityContext.capabilities) && has({listed}) "
            f"&& ('IPC_LOCK' in {listed} || {listed}.exists(x, x.upperAscii() in ['IPC_LOCK', 'CAP_IPC_LOCK'])))")


def _names(over: str = "variables.targets") -> str:
    """Who the message is about: the container when `over` holds one (most training pods), else
    the containers among which the rule failed. The API server evaluates every messageExpression
    of a matched policy whether its rule held or not, so this one must cost little: naming only
    the failing containers would repeat the rule's whole check for every admitted pod
    (benchmarks/README.md, "The final-state check in the API server")."""
    return (f"(size({over}) == 1 ? \"container '\" + {over}[0].name + \"'\" : "
            f"'one of the containers ' + {over}.map(c, \"'\" + c.name + \"'\").join(', '))")


# What a rule's condition is about: every container of the targets, every container the
# transport's env checks judge, or the pod.
TARGETS, CHECKED, POD = "targets", "checked", "pod"


class Rule(NamedTuple):
    """One final-state rule: its id, the CEL condition that must hold, why and what to do, what
    the condition is over (TARGETS, CHECKED or POD), and whether it reads the container's env
    names `n` (`_with_names`)."""
    name: str
    condition: str
    message: str
    over: str = TARGETS
    names: bool = False


def _groups(policy: Policy) -> dict[str, str]:
    """CEL over a container `c` for each container group: the policy's variables filter the
    containers by it (the match condition, which cannot use variables, tests the same `_target`
    and `_others` in its one pass)."""
    target = _target(policy)
    return {TARGETS: target, CHECKED: f"{target} || {_others()}"}


def _validation(rule: Rule) -> dict[str, Any]:
    """One rule as a validation. Over containers: the condition must hold for each of them; the
    message names the container (`_names`), then says why and what to do, as the webhook's
    denial does. Over the pod: it must hold when the pod has a target."""
    if rule.over == POD:
        return {"expression": f"size(variables.targets) == 0 || ({rule.condition})",
                "message": f"rdma-webhook: {rule.message} [{rule.name}]", "reason": "Forbidden"}
    group = f"variables.{rule.over}"
    return {
        "expression": f"{group}.all(c, {_with_names(rule.condition) if rule.names else rule.condition})",
        "messageExpression": f"'rdma-webhook: ' + {_names(group)} + {cel_str(': ' + rule.message + f' [{rule.name}]')}",
        "reason": "Forbidden",
    }


def _fallback_checks(policy: Policy) -> list[tuple[str, str, str]]:
    """(variable, CEL that its last value (`_last`) is fine, why) for the transport's variables whose
    judgement a CEL expression makes exactly (`webhook.fabrics.transports`)."""
    out: list[tuple[str, str, str]] = []
    for name in policy.watched:
        if name in policy.warned:
            continue
        if name == "NCCL_IB_DISABLE":
            out.append((name, f"!{_last(name)}.matches({cel_str(IB_DISABLED_RE)})",
                        "NCCL_IB_DISABLE is non-zero, which turns NCCL's IB/RoCE transport off, so NCCL runs on TCP sockets; "
                        "a webhook that ran after rdma-webhook may have set it"))
        elif name == "NCCL_NET":
            out.append((name, f"{_last(name)}.lowerAscii() in {cel_list(n.casefold() for n in policy.nccl_nets)}",
                        f"NCCL_NET names a transport that policy {policy.name} does not provide ({'/'.join(policy.nccl_nets)}), "
                        f"so NCCL uses TCP; a webhook that ran after rdma-webhook may have set it"))
        elif name == "NCCL_NET_PLUGIN" and policy.fabric.net_plugins:
            paths = cel_str("^.*/(" + "|".join(_re_escape(n) for n in policy.fabric.net_plugins) + ")$")  # a path to a listed library
            out.append((name, f"({_last(name)} in {cel_list(policy.fabric.net_plugins)} || {_last(name)}.matches({paths}))",
                        f"NCCL_NET_PLUGIN does not load the fabric's plugin ({'/'.join(policy.fabric.net_plugins)}), which "
                        f"leaves NCCL its built-in transports (TCP sockets here)"))
    return out


def _device_condition(policy: Policy) -> tuple[str, str] | None:
    """(CEL that a target has the fabric's device, what it lacks) or None when the policy's
    device is not a fixed resource (a host fabric; a network's device, named by its
    NetworkAttachmentDefinition, which CEL cannot read)."""
    parts: list[str] = []
    wants: list[str] = []
    if policy.devices:
        resources = [d.resource for d in policy.devices]
        parts.append(f"({_has_section('limits')} && {' && '.join(_above_zero('limits', r) for r in resources)})")
        wants.append(" and ".join(resources) + " in resources.limits")
    if policy.claim is not None:
        claim = policy.claim
        templates = [claim.template, *claim.equivalent]
        made_from = f"rc.resourceClaimTemplateName in {cel_list(templates)}"
        if claim.aligned and GPUS_FIELD in claim.template:  # the template of any GPU count (Claim.made_from)
            head, _, tail = claim.template.partition(GPUS_FIELD)
            # A template name is a DNS subdomain: `.` is its only character special to RE2.
            pattern = "^" + head.replace(".", "\\.") + "[0-9]+" + tail.replace(".", "\\.") + "$"
            made_from = f"({made_from} || rc.resourceClaimTemplateName.matches({cel_str(pattern)}))"
        parts.append("(has(object.spec.resourceClaims) && has(c.resources) && has(c.resources.claims) && "
                     "c.resources.claims.exists(cl, object.spec.resourceClaims.exists(rc, rc.name == cl.name && "
                     f"has(rc.resourceClaimTemplateName) && {made_from})))")
        wants.append(f"a resources.claims entry for the pod's {policy.claim.template} claim")
    if not parts:
        return None
    equivalent = list(policy.equivalent_resources)
    if equivalent:
        parts.append(f"{_positive('limits', equivalent)} || {_positive('requests', equivalent)}")
    return " || ".join(parts), " or ".join(wants)


def rules(policy: Policy) -> list[Rule]:
    """The final-state rules of one policy, in the order of the webhook's final-state rules."""
    out: list[Rule] = []
    device = _device_condition(policy)
    if device is not None:
        condition, wants = device
        out.append(Rule("device-missing", condition,
                         f"lacks {wants}, so it gets no RDMA device and NCCL uses TCP; a webhook that ran after "
                         f"rdma-webhook may have removed it"))
    privileged = "(has(c.securityContext) && has(c.securityContext.privileged) && c.securityContext.privileged)"
    out.append(Rule("ipc-lock-missing", f"{privileged} || {_capability('add')}",
                     "securityContext.capabilities.add lacks IPC_LOCK, which RDMA needs to pin memory"))
    out.append(Rule("ipc-lock-dropped", f"!{_capability('drop')}",
                     "securityContext.capabilities.drop lists IPC_LOCK, which RDMA needs to pin memory (ibv_reg_mr fails "
                     "and NCCL falls back to TCP)"))
    for setting in policy.env:
        if not setting.enforce:
            continue
        if setting.templated:  # the value names the pod's interfaces: present, not compared
            same = _env_set_and(setting.name, f"{_last(setting.name)} != ''")
            want = f"set (to {setting.value!r} with the pod's interface names)"
        elif setting.name == "NCCL_NET":
            same = _env_set_and(setting.name, f"{_last(setting.name)}.lowerAscii() == {cel_str(setting.value.casefold())}")
            want = f"{setting.value!r}"
        else:
            same = _env_set_and(setting.name, f"{_last(setting.name)} == {cel_str(setting.value)}")
            want = f"{setting.value!r}"
        out.append(Rule("enforced-env", same,
                         f"{setting.name} is missing or changed, but policy {policy.name} pins it to {want} so that a "
                         f"missing RDMA device fails at start instead of running on TCP", names=True))
    for name, fine, why in _fallback_checks(policy):
        out.append(Rule("env-fallback", _env_unset_or(name, fine), why, over=CHECKED, names=True))
    # The first mount at /dev/shm (`ms[0]`), bound once: each of our volumes of its name (none when
    # a later webhook swapped in a volume of its own) is still a memory-backed emptyDir.
    shm = ("has(c.volumeMounts) && [c.volumeMounts.filter(m, m.mountPath == '/dev/shm' || m.mountPath == '/dev/shm/')]"
           ".all(ms, size(ms) > 0 && (!has(object.spec.volumes) || object.spec.volumes.all(v, "
           "!v.name.startsWith('rdma-webhook-dshm') || v.name != ms[0].name || (has(v.emptyDir) && has(v.emptyDir.medium) && "
           "v.emptyDir.medium == 'Memory'))))")
    out.append(Rule("shm", shm,
                     "/dev/shm is no longer the memory-backed emptyDir rdma-webhook mounted there; NCCL and "
                     "DataLoader workers need shared memory in RAM"))
    host = "(has(object.spec.hostNetwork) && object.spec.hostNetwork)"
    if policy.host_network == "Forbidden":
        mechanism = "GKE attaches" if policy.gke_networks else "Multus does"
        out.append(Rule("host-network", f"!{host}",
                         f"hostNetwork: true, but policy {policy.name} attaches its fabric through the pod's own "
                         f"interfaces ({mechanism} not attach networks to host-network pods); remove hostNetwork", over=POD))
    elif policy.host_network == "Required":
        out.append(Rule("host-network", host,
                         f"policy {policy.name} reaches its fabric through the host's interfaces and the pod no "
                         f"longer has hostNetwork: true, so NCCL finds no RDMA device and uses TCP", over=POD))
    for network in policy.networks:
        name = network.name
        csv = rf"(^|,)\s*([^,/@]*/)?{_re_escape(name)}(@[^,]*)?\s*(,|$)"
        js = rf"\"name\"\s*:\s*\"{_re_escape(name)}\""
        ann = f"object.metadata.annotations[{cel_str(keys.MULTUS_NETWORKS)}]"
        present = (f"has(object.metadata.annotations) && {cel_str(keys.MULTUS_NETWORKS)} in object.metadata.annotations && "
                   f"({ann}.matches({cel_str(csv)}) || {ann}.matches({cel_str(js)}))")
        out.append(Rule("multus-networks", present,
                         f"the pod's {keys.MULTUS_NETWORKS} annotation no longer lists the {name} network of policy "
                         f"{policy.name}; a webhook that ran after rdma-webhook may have removed it", over=POD))
    for g in policy.gke_networks:  # GKE multi-networking's JSON list (webhook.fabrics.gke)
        ann = f"object.metadata.annotations[{cel_str(gke.INTERFACES)}]"
        listed = rf"\"network\"\s*:\s*\"{_re_escape(g.name)}\""
        present = (f"has(object.metadata.annotations) && {cel_str(gke.INTERFACES)} in object.metadata.annotations && "
                   f"{ann}.matches({cel_str(listed)})")
        out.append(Rule("gke-networks", present,
                         f"the pod's {gke.INTERFACES} annotation no longer lists the {g.name} network of policy "
                         f"{policy.name}; a webhook that ran after rdma-webhook may have removed it", over=POD))
    if policy.sidecar is not None:
        image = cel_str(policy.sidecar.image)
        runs = (f"object.spec.containers.exists(c, has(c.image) && c.image.contains({image})) || "
                f"(has(object.spec.initContainers) && object.spec.initContainers.exists(c, has(c.image) && "
                f"c.image.contains({image}) && has(c.restartPolicy) && c.restartPolicy == 'Always'))")
        out.append(Rule("sidecar-missing", runs,
                         f"no container of the pod runs the {policy.sidecar.name} sidecar (an image of "
                         f"{policy.sidecar.image}) that policy {policy.name}'s fabric needs beside the GPU containers", over=POD))
    return out


def validations(policy: Policy) -> list[dict[str, Any]]:
    """The CEL rules of one policy as the ValidatingAdmissionPolicy's validations."""
    return [_validation(rule) for rule in rules(policy)]


def broken(policy: Policy, found: list[Rule] | None = None) -> str:
    """CEL that is true when some rule of the policy (`found`: its `rules`) fails: the policy's
    match condition.

    Why: the API server evaluates every validation and every messageExpression of a policy
    whose match conditions hold, for every pod, whether a rule failed or not (k8s.io/apiserver
    policy/validating/validator.go): the validations and the second activation the messages
    need were most of the check's cost (benchmarks/README.md). This one expression holds the
    same conditions in one pass over the containers; for a pod that keeps
    everything the mutation gave it (nearly every pod) it is false, and the API server skips
    the validations. For a pod it holds for, the validations run as before and name the rule
    and the container. It cannot use `variables` (match conditions are evaluated before them),
    so the groups' filters are written out."""
    by_over: dict[str, list[str]] = {TARGETS: [], CHECKED: [], POD: []}
    names = False
    for rule in rules(policy) if found is None else found:
        by_over[rule.over].append(f"({rule.condition})")
        names = names or (rule.over != POD and rule.names)
    target, checked = " && ".join(by_over[TARGETS]) or "true", " && ".join(by_over[CHECKED])
    # One pass over the containers: a target's rules and the checked rules for a target, the
    # checked rules alone for another container that sees GPUs, nothing for the rest.
    if checked:
        each = f"({_target(policy)}) ? ({target} && {checked}) : (!({_others()}) || ({checked}))"
    else:
        each = f"!({_target(policy)}) || ({target})"
    holds = [f"object.spec.containers.all(c, {_with_names(each) if names else each})"]
    if by_over[POD]:  # the pod's rules first: they hold for nearly every pod, and then the scan for a target is skipped
        holds.append(f"(({' && '.join(by_over[POD])}) || !object.spec.containers.exists(c, {_target(policy)}))")
    return "!(" + " && ".join(holds) + ")"


def _re_escape(text: str) -> str:
    """`text` as a literal in an RE2 pattern."""
    return "".join("\\" + ch if ch in r"\.^$|?*+()[]{}" else ch for ch in text)


def policy_spec(policy: Policy) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy's spec for one RDMA policy."""
    found, groups = rules(policy), _groups(policy)
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
            # The pods this policy was applied to, by the label the mutation writes, and nothing
            # else: `/mutate` writes it only on labelled pods of opted-in namespaces outside
            # kube-system and rdma-webhook, so a namespace selector would repeat what the label
            # already says. Both selectors are parsed again for every policy and every pod
            # (LabelSelectorAsSelector validates each requirement), before any CEL runs: one
            # requirement per policy is the cheapest test the API server offers.
            "namespaceSelector": {},
            "objectSelector": {"matchLabels": {keys.APPLIED_POLICY_LABEL: policy.name}},
        },
        "matchConditions": [{"name": "final-state-broken", "expression": broken(policy, found)}],
        "variables": [{"name": over, "expression": f"object.spec.containers.filter(c, {groups[over]})"}
                      for over in (TARGETS, CHECKED)],
        "validations": [_validation(rule) for rule in found],
    }


def digest(spec: Any) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def objects(policies: PolicySet, actions: Sequence[str] = ("Deny",)) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and binding of every policy, by policy name. `actions` are
    the binding's validationActions: Deny (the default), or Warn and Audit (a dry run: the API
    server warns the client and writes the audit annotation, the pod is admitted)."""
    bad = [a for a in actions if a not in ACTIONS]
    if bad or not actions or len(set(actions)) != len(actions) or ("Deny" in actions and "Warn" in actions):
        raise ValueError(f"validationActions {list(actions)}: give Deny, or Warn and/or Audit (each once)")
    out: list[dict[str, Any]] = []
    for policy in sorted(policies.by_name.values(), key=lambda p: p.name):
        spec = policy_spec(policy)
        for kind, body in ((POLICY_KIND, spec),
                           (BINDING_KIND, {"policyName": object_name(policy.name), "validationActions": list(actions)})):
            meta = {"name": object_name(policy.name), "labels": {**PART_OF, POLICY_LABEL: policy.name},
                    "annotations": {DIGEST_ANNOTATION: digest(spec)}}  # each object its own dicts
            out.append({"apiVersion": API_VERSION, "kind": kind, "metadata": meta, "spec": body})
    return out


def mismatches(policies: PolicySet, installed: Iterable[dict[str, Any]], bindings: Iterable[dict[str, Any]]) -> list[str]:
    """How the generated objects the cluster holds (`installed`: ValidatingAdmissionPolicies,
    `bindings`: their bindings, both as the API returns them, our label on each) differ from
    those the policies in force make: one line per difference, [] when they agree. The
    binding's validationActions are the installer's choice (Deny or a dry run), not compared."""
    by_name = {str((o.get("metadata") or {}).get("name")): o for o in installed}
    bound = {str((o.get("spec") or {}).get("policyName")): o for o in bindings}
    out: list[str] = []
    wanted = sorted(policies.by_name.values(), key=lambda p: p.name)
    for policy in wanted:
        name = object_name(policy.name)
        spec = policy_spec(policy)
        found = by_name.get(name)
        if found is None:
            out.append(f"{POLICY_KIND} {name} for policy {policy.name} is not installed")
        else:
            have = ((found.get("metadata") or {}).get("annotations") or {}).get(DIGEST_ANNOTATION)
            if have != digest(spec):
                out.append(f"{POLICY_KIND} {name} was generated from another version of policy {policy.name} "
                           f"(digest {have}, the policy in force makes {digest(spec)}); regenerate and apply it")
            elif not _same_rules(found.get("spec") or {}, spec):
                out.append(f"{POLICY_KIND} {name}: its rules were edited after generation; regenerate and apply it")
        if name not in bound:
            out.append(f"{POLICY_KIND} {name} has no {BINDING_KIND}, so it checks nothing")
    known = {object_name(p.name) for p in wanted}
    for name in sorted(set(by_name) - known):
        out.append(f"{POLICY_KIND} {name} checks pods of a policy that is not in force; delete it")
    return out


def _same_rules(have: dict[str, Any], want: dict[str, Any]) -> bool:
    """The fields we generate, compared as generated (the API server adds defaults to others)."""
    if (have.get("matchConstraints") or {}).get("objectSelector") != want["matchConstraints"]["objectSelector"]:
        return False
    for field in ("matchConditions", "variables", "validations"):
        if [_strip(x) for x in have.get(field) or []] != [_strip(x) for x in want.get(field) or []]:
            return False
    return True


def _strip(item: Any) -> Any:
    return {k: v for k, v in item.items() if v not in (None, "")} if isinstance(item, dict) else item


def to_yaml(docs: list[dict[str, Any]], header: str = "") -> str:
    import yaml

    return header + yaml.safe_dump_all(docs, sort_keys=False, width=1000)

