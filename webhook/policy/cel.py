"""CEL text over one container `c` of a pod, as the generated ValidatingAdmissionPolicies use it.

The vocabulary the final-state rules (`webhook.policy.final_state_rules`) and the policy's match
condition and variables (`webhook.policy.admission_policy`) are written in: literals, a
container's resources, env entries and capabilities. Each fragment is written as the API
server's CEL runs cheapest (benchmarks/README.md, "The twentieth session: what the check costs").
"""

from __future__ import annotations

from typing import Iterable, Sequence

from webhook.core.model import GPUS_FIELD, Claim, Policy


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


def re_escape(text: str) -> str:
    """`text` as a literal in an RE2 pattern."""
    return "".join("\\" + ch if ch in r"\.^$|?*+()[]{}" else ch for ch in text)


def has_section(section: str) -> str:
    return f"has(c.resources) && has(c.resources.{section})"


def above_zero(section: str, resource: str) -> str:
    """c has `resource` in `section` (a map known to be there) with a quantity above zero."""
    name = cel_str(resource)
    return (
        f"({name} in c.resources.{section} && "
        f"quantity(string(c.resources.{section}[{name}])).isGreaterThan(quantity('0')))"
    )


# Each resource is written out (`||`, `&&`) rather than iterated over a list literal: the API
# server's CEL runs a comprehension's body through its interpreter per element, at about a
# microsecond a step (benchmarks/README.md, "The twentieth session: what the check costs").


def positive(section: str, resources: Sequence[str]) -> str:
    """A resource of `resources` with a quantity above zero in `section` of c."""
    return f"({has_section(section)} && ({' || '.join(above_zero(section, r) for r in resources)}))"


def is_target(policy: Policy) -> str:
    """A container the decision makes a target: it requests one of the policy's GPUs, or (an
    aligned GPU+NIC claim's policy) references a claim made from that claim (`find_targets`)."""
    gpus = f"{positive('limits', policy.gpu_resources)} || {positive('requests', policy.gpu_resources)}"
    claim = policy.claim
    if claim is None or not claim.aligned:
        return gpus
    made = references_claim(claim)
    return f"{gpus} || (has(c.resources) && has(c.resources.claims) && has(object.spec.resourceClaims) && {made})"


def references_claim(claim: Claim) -> str:
    """CEL: an entry of c's resources.claims names a pod claim (`object.spec.resourceClaims`) made
    from `claim` (`made_from`) by its template or as a ResourceClaim, either name, as the webhook
    reads it (`families._check_claims`, `targets._aligned_entries`). The caller guards it:
    c.resources.claims and object.spec.resourceClaims exist."""
    made = " || ".join(
        f"(has(rc.{field}) && {made_from(claim, 'rc.' + field)})"
        for field in ("resourceClaimTemplateName", "resourceClaimName")
    )
    return f"c.resources.claims.exists(cl, object.spec.resourceClaims.exists(rc, rc.name == cl.name && ({made})))"


def made_from(claim: Claim, name: str) -> str:
    """CEL: the template or claim name `name` is made from `claim` (`Claim.made_from`): its
    template, an equivalent, or an aligned template of any GPU count."""
    templates = [claim.template, *claim.equivalent]
    out = f"{name} in {cel_list(templates)}"
    if claim.aligned and GPUS_FIELD in claim.template:
        head, _, tail = claim.template.partition(GPUS_FIELD)
        # A template name is a DNS subdomain: `.` is its only character special to RE2.
        pattern = "^" + head.replace(".", "\\.") + "[0-9]+" + tail.replace(".", "\\.") + "$"
        out = f"({out} || {name}.matches({cel_str(pattern)}))"
    return out


def sees_gpus_otherwise() -> str:
    """A container that sees GPUs without requesting one (`targets._sees_gpus_otherwise`): its
    env is judged like a target's."""
    return (
        "(has(c.resources) && has(c.resources.claims) && size(c.resources.claims) > 0) || "
        "(has(c.env) && c.env.exists(e, e.name == 'NVIDIA_VISIBLE_DEVICES' && has(e.value) && "
        "!(e.value.trim().lowerAscii() in ['', 'void', 'none'])))"
    )


# The names of c's env entries, bound once per container as `n` (`with_names`): the API
# server's CEL environment has no `cel.bind`, and `[list].all(n, ...)` binds a value once. An
# entry of a name is then found by the lists library's `lastIndexOf` (one native call), where a
# `filter` over the entries for each variable and rule ran the CEL interpreter over every entry
# (benchmarks/README.md, "The twentieth session: what the check costs").
_NAMES = "(has(c.env) ? c.env.map(e, e.name) : [])"


def with_names(condition: str) -> str:
    """`condition` (CEL over c and n) with n bound to c's env names."""
    return f"[{_NAMES}].all(n, {condition})"


def last_value(name: str) -> str:
    """The value of the last env entry of `name` ('' for a valueFrom), as the kubelet reads `env`;
    valid where the entry exists."""
    i = f"n.lastIndexOf({cel_str(name)})"
    return f"(has(c.env[{i}].value) ? c.env[{i}].value : '')"


def env_set_and(name: str, test: str) -> str:
    """CEL: c has an env entry `name`, and `test` (CEL over its last value, `last_value(name)`) holds."""
    return f"({cel_str(name)} in n && {test})"


def env_unset_or(name: str, test: str) -> str:
    """CEL: c has no env entry `name`, or `test` (CEL over its last value, `last_value(name)`) holds."""
    return f"(!({cel_str(name)} in n) || {test})"


def capability(field: str) -> str:
    """c's capabilities `field` (add or drop) names IPC_LOCK, in any case, with or without CAP_;
    the exact name first, one native lookup."""
    listed = f"c.securityContext.capabilities.{field}"
    return (
        f"(has(c.securityContext) && has(c.securityContext.capabilities) && has({listed}) "
        f"&& ('IPC_LOCK' in {listed} || {listed}.exists(x, x.upperAscii() in ['IPC_LOCK', 'CAP_IPC_LOCK'])))"
    )
