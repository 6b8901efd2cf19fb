"""What `rdma-webhook review` decides against: the policies the user chose, and the namespaces.

Policies: only those the user named or shipped with the input, never a default. `--policy NAME`
takes one from the catalogue (the shipped policies/ folder, each a fabric), `--policies DIR` every
policy of one's own folder (as the server's mounted folder), and `RdmaPolicy` documents in the
input are in force too. With none of these no policy is in force, and a pod that would be checked
is bad input with a message that says how to choose one (the server, whose folder is what the
admin mounted, denies such a pod instead).

Namespaces: `Namespace` documents in the input are used like cluster state (their labels decide
opt-in and policy) and win over `--cluster-state` for their namespace; without `--cluster-state`
any other namespace is taken as opted in with no other labels.
"""

from __future__ import annotations

from typing import Any, Mapping

from webhook.core import keys
from webhook.core.decision import Namespace
from webhook.core.model import Policy, PolicySet


POLICY_KIND = "RdmaPolicy"


def is_policy_document(doc: Any) -> bool:
    return (
        isinstance(doc, dict)
        and doc.get("kind") == POLICY_KIND
        and isinstance(doc.get("apiVersion"), str)
        and doc["apiVersion"].startswith("rdma-webhook.io/")
    )


def is_namespace(doc: Any) -> bool:
    """A v1 Namespace document review uses as cluster state: metadata a mapping with a non-empty
    string name and labels a mapping (or none), as the API server takes it; any other is listed
    as holding no pods, and not used."""
    meta = (
        doc.get("metadata")
        if isinstance(doc, dict) and doc.get("kind") == "Namespace" and doc.get("apiVersion") == "v1"
        else None
    )
    return (
        isinstance(meta, dict)
        and isinstance(meta.get("name"), str)
        and meta["name"] != ""
        and isinstance(meta.get("labels") or {}, dict)
    )


def catalogue() -> tuple[dict[str, Policy], list[str]]:
    """The shipped policies by name (the catalogue `--policy` chooses from), or the errors."""
    from webhook.policy.load import default_policies_dir, load_dir

    loaded, errors = load_dir(default_policies_dir())
    if loaded is None:
        return {}, [str(e) for e in errors]
    return dict(loaded.by_name), []


def how_to_choose(names: list[str]) -> str:
    listed = ", ".join(names) if names else "none found"
    return (
        "choose the policies to review against: --policy NAME for a fabric from the catalogue "
        f"({listed}; repeat it or separate names with commas), --policies DIR for your own folder "
        "(the one your cluster's webhook mounts), or RdmaPolicy documents in the input"
    )


def choose(
    policy_names: list[str], policies_dir: str | None, input_docs: list[tuple[str, Any]]
) -> tuple[PolicySet | None, list[str], list[str]]:
    """(the policies in force or None when none is, errors, catalogue names). `input_docs` are
    (where, RdmaPolicy document) pairs from the input."""
    from webhook.policy.compiler import compile_policy
    from webhook.policy.load import load_dir

    errors: list[str] = []
    chosen: dict[str, tuple[Policy, str]] = {}

    def add(policy: Policy, origin: str) -> None:
        if policy.name in chosen and chosen[policy.name][1] != origin:
            errors.append(f"policy {policy.name!r} is given twice ({chosen[policy.name][1]} and {origin}): keep one")
            return
        chosen[policy.name] = (policy, origin)

    if policies_dir:
        loaded, errs = load_dir(policies_dir)
        errors.extend(str(e) for e in errs)
        for p in loaded.by_name.values() if loaded is not None else ():
            add(p, f"--policies {policies_dir}")
    names = [n.strip() for arg in policy_names for n in arg.split(",") if n.strip()]
    shipped, cat_errors = catalogue() if names else ({}, [])
    errors.extend(cat_errors)
    for name in names:
        if name in shipped:
            add(shipped[name], "--policy")
        elif not cat_errors:
            errors.append(
                f"--policy {name}: no such policy in the catalogue ({', '.join(sorted(shipped))}); "
                f"use --policies DIR for a policy of your own"
            )
    for where, doc in input_docs:
        policy, errs = compile_policy(doc, where)
        errors.extend(str(e) for e in errs)
        if policy is not None:
            add(policy, where)
    if errors:
        return None, errors, sorted(shipped)
    if not chosen:
        return None, [], catalogue_names()
    return PolicySet(p for p, _ in chosen.values()), [], sorted(shipped) or catalogue_names()


def catalogue_names() -> list[str]:
    shipped, _ = catalogue()
    return sorted(shipped)


class ReviewState:
    """The namespace lookup `review` decides with: the input's Namespace documents, then the
    cluster-state file, then (without one) every namespace opted in with no other labels."""

    def __init__(self, base: Any, assumed: bool):
        self.base = base
        self.assumed = assumed
        self.input: dict[str, Namespace] = {}
        self.notes: list[str] = []
        from webhook.cluster.state import ClaimStore

        # DRA objects: the cluster-state file's, then the input's (DeviceClasses, claim templates).
        # With a cluster-state file they are all the cluster's (one not listed does not exist);
        # without one, the input's are some, and one not given is only not known.
        base_claims = base.claims() if hasattr(base, "claims") else None
        self.dra = ClaimStore(complete=isinstance(base_claims, ClaimStore))
        if isinstance(base_claims, ClaimStore):
            self.dra.update(base_claims)

    def add(self, obj: Mapping[str, Any], where: str, state_file: str | None) -> None:
        from webhook.cluster.state import namespace_from

        ns = namespace_from(obj)
        if not self.assumed and self.base.namespace(ns.name) is not None:
            self.notes.append(
                f"note: {where}: Namespace {ns.name!r} in the input is used instead of the one in "
                f"{state_file} (its labels decide opt-in and policy)"
            )
        self.input[ns.name] = ns

    def namespace(self, name: str) -> Namespace | None:
        found = self.input.get(name)
        return found if found is not None else self.base.namespace(name)

    def known(self, name: str) -> bool:
        return name in self.input or not self.assumed and self.base.namespace(name) is not None

    def opted_in(self, name: str) -> bool:
        ns = self.namespace(name)
        return ns is not None and ns.labels.get(keys.NS_INJECTION) == keys.NS_INJECTION_ENABLED

    def attachments(self) -> Any:
        return self.base.attachments()

    def claims(self) -> Any:
        return self.dra  # the same lookups whatever else the input holds (lists_all: a state file)
