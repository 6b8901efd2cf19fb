"""Property-based tests: generated pods shaped as the API server sends them (tests/strategies.py),
sent through `webhook.admission.review.handle` for every shipped policy, with the admission contract
checked on every answer.

For every generated pod, and for the pod with its policy annotation set to each shipped policy:
  - the answer is a well-formed AdmissionReview v1 response, never an exception;
  - a patch applies with `jsonpatch` to the object sent and gives the decision's pod;
  - the input and the result are valid Pods (strict OpenAPI schema as kubernetes_validate
    checks it, plus the API server's validation rules the schema cannot express);
  - the webhook applied to its own output gives no patch;
  - non-target containers and init containers are unchanged; user env values are unchanged
    unless enforced by the policy; nothing but IPC_LOCK is added to capabilities; no
    privileged, host namespaces or hostPath appear; only the fields the webhook owns change;
  - a denial's message names every finding's rule id.

Runs: `pytest tests/admission/test_review_properties.py` (profile `rdma-ci`, derandomized, ~20-40 s on 2 cores);
`HYPOTHESIS_PROFILE=long pytest tests/admission/test_review_properties.py` for the long run (thousands of
examples per test, random, failures kept in .hypothesis/ and replayed first).
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
from hypothesis import currently_in_test_context, event, given, note
from hypothesis import strategies as st

import kube_objects as k
import strategies as S
from webhook.fabrics import gke
from webhook.grammar import k8s
from webhook.core import keys, ranks
from webhook.admission import review
from webhook.core.decision import DENIED, MUTATED
from webhook.policy.load import load_dir

POLICIES, _ERRORS = load_dir(S.ROOT / "policies")
assert POLICIES is not None, _ERRORS
POLICY_NAMES = sorted(POLICIES.by_name)
STATE = S.cluster_state()
PATCH_OPS = {"add", "remove", "replace", "move", "copy", "test"}
HOST_FIELDS = ("hostNetwork", "hostPID", "hostIPC", "hostUsers")

ENV_LIST = "OMPI_MCA_mca_base_env_list"


def _listed(value: str) -> set[str]:
    return {item.split("=", 1)[0] for item in value.split(";") if item}


def send(pod: dict[str, Any]) -> tuple[dict[str, Any], Any, dict[str, Any]]:
    """(response, decision, the pod after the patch) for one CREATE review of `pod`."""
    rv = k.admission_review(pod)
    uid = rv["request"]["uid"]
    sent = copy.deepcopy(pod)
    code, doc, decision, _ = review.handle(k.body(rv), POLICIES, STATE.namespace, STATE.attachments())
    assert pod == sent, "handle() modified the object it was given"
    assert code == 200, doc
    doc = json.loads(json.dumps(doc))  # exactly what goes on the wire (JSON types only)
    assert doc["apiVersion"] == "admission.k8s.io/v1" and doc["kind"] == "AdmissionReview"
    r = doc["response"]
    assert r["uid"] == uid
    assert isinstance(r["allowed"], bool)
    assert set(r) <= {"uid", "allowed", "status", "patch", "patchType", "warnings"}, r.keys()
    for w in r.get("warnings", ()):
        assert isinstance(w, str) and 0 < len(w) <= review.MAX_WARNING
    out = pod
    if r["allowed"]:
        assert "status" not in r or r["status"].get("code", 200) < 400
        if "patch" in r:
            assert r["patchType"] == "JSONPatch"
            try:
                ops = json.loads(base64.b64decode(r["patch"], validate=True))
            except (binascii.Error, ValueError) as exc:
                raise AssertionError(f"patch is not base64 JSON: {exc}") from None
            assert isinstance(ops, list) and ops, "an empty patch must be left out"
            for op in ops:
                assert (
                    op["op"] in PATCH_OPS
                    and isinstance(op["path"], str)
                    and (op["path"] == "" or op["path"].startswith("/"))
                )
            out = jsonpatch.apply_patch(pod, ops)
            assert decision is not None and out == decision.pod
        else:
            assert "patchType" not in r
    else:
        assert "patch" not in r and "patchType" not in r
        status = r["status"]
        assert status["code"] == 403 and status["reason"] == "Forbidden"
        assert isinstance(status["message"], str) and status["message"]
        assert decision is not None and decision.outcome == DENIED and decision.denials
        for finding in decision.denials:
            assert f"[{finding.rule}]" in status["message"], (finding.rule, status["message"])
    return r, decision, out


def _caps(c: dict[str, Any], key: str) -> list[Any]:
    return list(((c.get("securityContext") or {}).get("capabilities") or {}).get(key) or [])


def _without(c: dict[str, Any], *paths: tuple[str, ...]) -> dict[str, Any]:
    c = copy.deepcopy(c)
    for path in paths:
        node = c
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
            if node is None:
                break
        if isinstance(node, dict):
            node.pop(path[-1], None)
    return c


def _inserted_exports(c: dict, oc: dict, names: set[str]) -> bool:
    """The mutated launcher's command + args are the sent ones with one run of `-x NAME` pairs
    (NAME of the policy's block) inserted, or unchanged (webhook/core/ranks.py)."""
    before = [*(c.get("command") or []), *(c.get("args") or [])]
    after = [*(oc.get("command") or []), *(oc.get("args") or [])]
    n = len(after) - len(before)
    if n == 0:
        return before == after
    if n < 0 or n % 2:
        return False
    for i in range(len(before) + 1):
        if after[:i] == before[:i] and after[i + n :] == before[i:]:
            run = after[i : i + n]
            return all(run[j] == "-x" and run[j + 1] in names for j in range(0, n, 2))
    return False


def _prune(obj: Any) -> Any:
    """Drop empty dicts/lists (a missing parent the webhook created is 'no change')."""
    if isinstance(obj, dict):
        out = {k: _prune(v) for k, v in obj.items()}
        return {k: v for k, v in out.items() if v not in ({}, [])}
    return obj


def _check_pinned(sent: Any, now: Any, policy: Any) -> None:
    """The affinity changes only by the required node affinity of a policy that pins a pod naming
    no machine type (webhook.core.machines), added to every term and nothing else."""
    if sent == now:
        return
    assert policy is not None and policy.machines is not None and policy.machines.unselected.pin is not None
    key, values = policy.machines.unselected.pin
    expr = {"key": key, "operator": "In", "values": list(values)}
    terms = now["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms and all(expr in t["matchExpressions"] for t in terms), terms
    stripped = copy.deepcopy(now)
    required = stripped["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    for t in required["nodeSelectorTerms"]:
        t["matchExpressions"] = [e for e in t["matchExpressions"] if e != expr]
    # the term the webhook made for a pod that had none is gone with its expression
    required["nodeSelectorTerms"] = [_prune(t) for t in required["nodeSelectorTerms"] if _prune(t)]
    assert _prune(_prune(stripped)) == _prune(sent or {}), (sent, now)


def _required_block(policy, c: dict) -> set[str]:
    """The names of the policy's block a container (as sent) must end up with (or, a launcher,
    forward): all but the logging settings that yield to the user's own (policies set
    NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS): none of those beside an envFrom (whose value ours
    would override), and NCCL_DEBUG_SUBSYS not beside the user's own NCCL_DEBUG, in env or
    anywhere in the command (webhook/core/mutation.py, `add_env`)."""
    names = {e.get("name") for e in c.get("env") or [] if isinstance(e, dict)}
    command = json.dumps([c.get("command"), c.get("args")])
    out = set()
    for e in policy.env:
        if e.yields_to_env_from:
            if c.get("envFrom"):
                continue
            if e.only_with is not None and (e.only_with in names or e.only_with in command):
                continue
        out.add(e.name)
    return out


def check_mutation(pod: dict[str, Any], out: dict[str, Any], decision: Any) -> None:
    """What may change between the pod sent and the pod admitted, and how."""
    policy = POLICIES.get(decision.policy) if decision is not None and decision.policy else None
    spec, ospec = pod["spec"], out["spec"]
    # init containers: never touched
    assert spec.get("initContainers") == ospec.get("initContainers")
    assert len(spec["containers"]) == len(ospec["containers"])
    # host namespaces, pod security context, everything else in the spec except volumes
    for key in HOST_FIELDS + ("securityContext",):
        assert spec.get(key) == ospec.get(key), key
    rest = {k: v for k, v in spec.items() if k not in ("containers", "volumes", "resourceClaims", "affinity")}
    assert rest == {k: v for k, v in ospec.items() if k not in ("containers", "volumes", "resourceClaims", "affinity")}
    _check_pinned(spec.get("affinity"), ospec.get("affinity"), policy)
    # DRA claims: the ones sent stay, in place; the addition is the policy's claim, once
    claims_sent, claims_now = spec.get("resourceClaims") or [], ospec.get("resourceClaims") or []
    assert claims_now[: len(claims_sent)] == claims_sent
    for extra in claims_now[len(claims_sent) :]:
        assert policy is not None and policy.claim is not None, extra
        assert set(extra) == {"name", "resourceClaimTemplateName"} and extra["name"] == policy.claim.name, extra
        assert policy.claim.made_from(extra["resourceClaimTemplateName"]), extra
    assert len(claims_now) - len(claims_sent) <= 1
    assert {k: v for k, v in pod.items() if k not in ("spec", "metadata")} == {
        k: v for k, v in out.items() if k not in ("spec", "metadata")
    }
    meta, ometa = pod["metadata"], out["metadata"]
    assert {k: v for k, v in meta.items() if k not in ("annotations", "labels")} == {
        k: v for k, v in ometa.items() if k not in ("annotations", "labels")
    }
    # labels: only the webhook's own (the applied policy, which the generated admission policy selects by)
    labels, olabels = meta.get("labels") or {}, ometa.get("labels") or {}
    assert {k: v for k, v in labels.items() if k != keys.APPLIED_POLICY_LABEL} == {
        k: v for k, v in olabels.items() if k != keys.APPLIED_POLICY_LABEL
    }
    # annotations: only the webhook's own and the Multus one
    ann, oann = meta.get("annotations") or {}, ometa.get("annotations") or {}
    owned = {keys.STATUS, keys.APPLIED_POLICY, keys.MULTUS_NETWORKS, gke.INTERFACES, gke.DEFAULT_INTERFACE}
    assert {k: v for k, v in ann.items() if k not in owned} == {k: v for k, v in oann.items() if k not in owned}
    if oann.get(gke.INTERFACES) != ann.get(gke.INTERFACES):  # GKE multi-networking: merged, never clobbered
        assert policy is not None and policy.gke_networks
        before, after = gke.parse(ann.get(gke.INTERFACES) or "[]"), gke.parse(oann[gke.INTERFACES])
        assert before is not None and after is not None and after[: len(before)] == before
        assert {g.name for g in policy.gke_networks} <= {e["network"] for e in after}
        names = [e["interfaceName"] for e in after]
        assert len(names) == len(set(names))
    if gke.DEFAULT_INTERFACE in ann:
        assert oann[gke.DEFAULT_INTERFACE] == ann[gke.DEFAULT_INTERFACE]
    else:
        assert oann.get(gke.DEFAULT_INTERFACE) in (None, "eth0")
    if oann.get(keys.MULTUS_NETWORKS) != ann.get(keys.MULTUS_NETWORKS):
        assert policy is not None and policy.networks
        assert all(n.name in oann[keys.MULTUS_NETWORKS] for n in policy.networks)
        if ann.get(keys.MULTUS_NETWORKS, "").strip():
            # merged in the form the user wrote, keeping what was there
            form = "json" if ann[keys.MULTUS_NETWORKS].strip().startswith("[") else "csv"
            if form == "json":
                assert json.loads(oann[keys.MULTUS_NETWORKS])[
                    : len(json.loads(ann[keys.MULTUS_NETWORKS]))
                ] == json.loads(ann[keys.MULTUS_NETWORKS])
            else:  # Multus trims each comma-separated entry; the webhook writes them trimmed
                entries = [e.strip() for e in ann[keys.MULTUS_NETWORKS].split(",") if e.strip()]
                assert oann[keys.MULTUS_NETWORKS].split(",")[: len(entries)] == entries
    # volumes: the ones sent stay as they are, in place; additions are memory-backed emptyDirs
    vols, ovols = spec.get("volumes") or [], ospec.get("volumes") or []
    assert ovols[: len(vols)] == vols
    for v in ovols[len(vols) :]:
        assert set(v) == {"name", "emptyDir"} and v["emptyDir"]["medium"] == "Memory", v
    added_volumes = {v["name"] for v in ovols[len(vols) :]}
    for v in ovols:
        assert "hostPath" not in v
    gpu_resources = policy.gpu_resources if policy else ()
    launchers: set[int] = set()
    if decision.outcome == MUTATED:  # MPI launchers get the block too (webhook/core/ranks.py)
        launchers = {t.index for t in ranks.find_launchers(pod, meta.get("labels") or {}, [])}
    for i, (c, oc) in enumerate(zip(spec["containers"], ospec["containers"])):
        target = any(_gpu(c, r) for r in gpu_resources)
        block = _required_block(policy, c) if policy else set()
        if i in launchers:  # its command may gain Open MPI's `-x NAME` for the block, nothing else
            assert _inserted_exports(c, oc, block), (c.get("command"), c.get("args"), oc.get("command"), oc.get("args"))
        if not target and i in launchers:  # only its env changes (the block, Open MPI's list) and -x flags
            kept = ("env", "command", "args")
            assert {x: v for x, v in c.items() if x not in kept} == {x: v for x, v in oc.items() if x not in kept}
            assert {e["name"] for e in oc.get("env") or []} >= block
            continue
        if not target or decision.outcome != MUTATED:
            assert c == oc, f"container {c['name']!r} is not a target but changed"
            continue
        # only resources, env, volumeMounts and capabilities.add may change
        fields = (
            ("resources",),
            ("env",),
            ("volumeMounts",),
            ("securityContext", "capabilities", "add"),
            ("command",),
            ("args",),
        )
        assert _prune(_without(c, *fields)) == _prune(_without(oc, *fields)), c["name"]
        if i not in launchers:
            assert (c.get("command"), c.get("args")) == (oc.get("command"), oc.get("args"))
        # capabilities: IPC_LOCK is the only addition; drop untouched; never privileged
        add, oadd = _caps(c, "add"), _caps(oc, "add")
        assert oadd[: len(add)] == add and set(oadd[len(add) :]) <= {"IPC_LOCK"}
        assert _caps(c, "drop") == _caps(oc, "drop")
        assert (c.get("securityContext") or {}).get("privileged") == (oc.get("securityContext") or {}).get("privileged")
        # resources: what was set stays (but the GPUs an aligned claim takes over); additions are the
        # device resource, in limits and requests, and a reference to the pod's NIC claim
        aligned = policy.claim is not None and policy.claim.aligned
        refs, orefs = (c.get("resources") or {}).get("claims") or [], (oc.get("resources") or {}).get("claims") or []
        assert orefs[: len(refs)] == refs and all(set(r) == {"name"} for r in orefs[len(refs) :]), (refs, orefs)
        assert {r["name"] for r in orefs[len(refs) :]} <= {e["name"] for e in claims_now}
        for section in ("limits", "requests"):
            have = (c.get("resources") or {}).get(section) or {}
            now = (oc.get("resources") or {}).get(section) or {}
            if aligned and claims_now[len(claims_sent) :]:  # the GPUs are claimed with their NICs now
                have = {r: q for r, q in have.items() if r not in policy.gpu_resources}
                assert not set(policy.gpu_resources) & set(now)
            assert {r: q for r, q in now.items() if r in have} == have
            for r in set(now) - set(have):
                assert r in (*policy.own_resources, "example.com/rdma_vf", "openshift.io/mellanoxrdma"), r
        # env: every user entry keeps its place and value unless the policy enforces that variable
        enforced = {e.name: e.value for e in policy.env if e.enforce}
        policy_env = {e.name: e.value for e in policy.env}
        env, oenv = c.get("env") or [], oc.get("env") or []
        assert len(oenv) >= len(env)
        interfaces = multus_interfaces(oann.get(keys.MULTUS_NETWORKS))
        templated = {e.name for e in policy.env if e.templated}
        for before, after in zip(env, oenv):
            if before != after and before["name"] == ENV_LIST:  # an MPI launcher's list: the block's names added
                assert after["name"] == ENV_LIST and _required_block(policy, c) <= _listed(after["value"]), (
                    before,
                    after,
                )
            elif before != after:
                assert before["name"] in enforced and after["name"] == before["name"], (before, after)
                if before["name"] not in templated:
                    assert after == {"name": before["name"], "value": enforced[before["name"]]}, (before, after)
        for extra in oenv[len(env) :]:
            if extra["name"] == ENV_LIST:  # an MPI launcher forwards the block (webhook/core/ranks.py)
                listed = _listed(extra["value"])
                assert set(extra) == {"name", "value"} and _required_block(policy, c) <= listed <= set(policy_env), (
                    extra
                )
            elif extra["name"] in templated:  # names an interface the pod really has
                assert set(extra) == {"name", "value"} and extra["value"] in interfaces, (extra, interfaces)
            else:
                assert extra == {"name": extra["name"], "value": policy_env[extra["name"]]}
        # mounts: the ones sent stay; the addition is /dev/shm from a memory-backed emptyDir
        ms, oms = c.get("volumeMounts") or [], oc.get("volumeMounts") or []
        assert oms[: len(ms)] == ms
        for m in oms[len(ms) :]:
            assert m["mountPath"] == "/dev/shm"
            vol = next(v for v in ovols if v["name"] == m["name"])
            assert vol.get("emptyDir", {}).get("medium") == "Memory"
    if added_volumes:
        used = {m["name"] for c in ospec["containers"] for m in c.get("volumeMounts") or ()}
        assert added_volumes <= used, "a volume was added that nothing mounts"
    if oann.get(keys.MULTUS_NETWORKS) != ann.get(keys.MULTUS_NETWORKS):
        # Multus refuses duplicate interface names: every attachment of the patched pod has its own
        names = multus_interfaces(oann[keys.MULTUS_NETWORKS])
        assert len(names) == len(set(names)) and not {"eth0", "lo"} & set(names), names


def multus_interfaces(value: Any) -> list[str]:
    """The interface names Multus gives the attachments of an annotation (independently of
    webhook.fabrics.multus): an explicit name, else net<position>."""
    if not isinstance(value, str) or not value.strip():
        return []
    text = value.strip()
    if text.startswith("["):
        entries = _json_or_none(text)
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            return []  # not a list Multus reads (the pod's own; denied where a policy needs the annotation)
        return [e.get("interface") or f"net{i + 1}" for i, e in enumerate(entries)]
    parts = [p.strip() for p in text.split(",") if p.strip()]
    return [p.split("@", 1)[1] if "@" in p and p.split("@", 1)[1] else f"net{i + 1}" for i, p in enumerate(parts)]


def _gpu(c: dict[str, Any], resource: str) -> bool:
    res = c.get("resources") or {}
    for section in ("limits", "requests"):
        value = (res.get(section) or {}).get(resource)
        if value is not None and int(k8s.parse_quantity(value)) > 0:
            return True
    return False


def check_round(pod: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    r, decision, out = send(pod)
    if currently_in_test_context():
        note(f"outcome={decision.outcome if decision else None} policy={decision.policy if decision else None}")
        event(f"outcome: {decision.outcome if decision else None}")
        for finding in decision.denials if decision else ():
            event(f"denied: {finding.rule}")
    errors = S.validity_errors(out)
    assert not errors, errors
    check_mutation(pod, out, decision)
    if r["allowed"]:
        again, d2, same = send(out)
        assert again["allowed"] and "patch" not in again, f"second pass changed the pod: {again}"
        assert same == out
    # outcomes that do not depend on the details of the pod
    meta = pod["metadata"]
    ns = STATE.namespace(meta["namespace"])
    opted = (meta.get("labels") or {}).get(keys.POD_INJECT) == "true"
    if not opted or (ns is not None and ns.labels.get(keys.NS_INJECTION) != "enabled"):
        assert r["allowed"] and "patch" not in r, "a pod or namespace that did not opt in was changed"
    elif ns is None:
        assert not r["allowed"] and "[namespace-unknown]" in r["status"]["message"]
    elif (meta.get("annotations") or {}).get(keys.POD_POLICY) == "no-such-policy":
        assert not r["allowed"] and "[no-policy]" in r["status"]["message"]
    elif decision.policy and ns.labels.get(keys.PSA_ENFORCE) in ("baseline", "restricted"):
        gpu = POLICIES.get(decision.policy).gpu_resources
        if any(_gpu(c, g) for c in pod["spec"]["containers"] for g in gpu):  # a launcher needs no IPC_LOCK
            assert not r["allowed"] and "[pod-security]" in r["status"]["message"]
    if decision is not None and decision.outcome == MUTATED:
        ann = out["metadata"]["annotations"]
        assert ann[keys.STATUS] == "injected" and ann[keys.APPLIED_POLICY] == decision.policy
        assert out["metadata"]["labels"][keys.APPLIED_POLICY_LABEL] == decision.policy
    return r, decision


def _with_policy(pod: dict[str, Any], name: str) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["metadata"].setdefault("annotations", {})[keys.POD_POLICY] = name
    return pod


@given(S.pods())
@S.examples(ci=300, long=5000)
def test_every_pod_and_every_policy_keeps_the_admission_contract(pod):
    errors = S.validity_errors(pod)
    assert not errors, f"the strategy made an invalid pod: {errors}"
    check_round(pod)
    for name in POLICY_NAMES:
        if (pod["metadata"].get("annotations") or {}).get(keys.POD_POLICY) != name:
            check_round(_with_policy(pod, name))


@given(
    S.pods(namespaces=("ml-training", "ai-training", "team-erdma", "pss-privileged", "nad-custom", "nad-no-resource"))
)
@S.examples(ci=150, long=3000)
def test_opted_in_pods_without_fallback_settings_are_mutated(pod):
    """The same contract where mutation is the likely outcome: pods whose GPU containers carry
    no TCP-fallback setting in an opted-in namespace are admitted, each target getting the
    device, IPC_LOCK, /dev/shm and the pinned NCCL_NET."""
    pod["metadata"].setdefault("labels", {})[keys.POD_INJECT] = "true"
    for c in pod["spec"]["containers"] + pod["spec"].get("initContainers", []):
        c.pop("command", None), c.pop("args", None)
        c["env"] = [e for e in c.get("env") or () if not e["name"].startswith("NCCL_") and e["name"] != "TRANSPORT"]
        if not c["env"]:
            del c["env"]
        sc = c.get("securityContext") or {}
        caps = sc.get("capabilities") or {}
        if "drop" in caps:
            caps["drop"] = [d for d in caps["drop"] if d not in ("IPC_LOCK", "CAP_IPC_LOCK")]
        for r in ("aliyun/erdma", "openshift.io/mellanoxrdma", "example.com/rdma_vf"):
            for section in ("limits", "requests"):
                (c["resources"].get(section) or {}).pop(r, None)
    pod["spec"].pop("hostNetwork", None)
    ann = pod["metadata"].get("annotations") or {}
    if ann.get(keys.POD_POLICY) in (
        "no-such-policy",
        "gke",
        "gke-gib",
        "gke-tcpxo",
    ):  # GKE's: tests/fabrics/test_gke.py
        del ann[keys.POD_POLICY]
    ann.pop(gke.INTERFACES, None)  # another fabric's GKE networks are a fabric-mismatch here
    if ann.get(keys.MULTUS_NETWORKS, "").strip().startswith("[") and not isinstance(
        _json_or_none(ann[keys.MULTUS_NETWORKS]), list
    ):
        del ann[keys.MULTUS_NETWORKS]
    if isinstance(_json_or_none(ann.get(keys.MULTUS_NETWORKS, "")), list) and not all(
        isinstance(e, dict) for e in json.loads(ann[keys.MULTUS_NETWORKS])
    ):
        del ann[keys.MULTUS_NETWORKS]
    assert not S.validity_errors(pod)
    r, decision = check_round(pod)
    ns = pod["metadata"]["namespace"]
    if decision.outcome == "unchanged":  # no GPU container (a launcher): nothing to add
        # no container gets RDMA (a launcher, another vendor's GPU, GPUs by DRA claim): the warning says which
        assert r["allowed"] and "patch" not in r and any(w.startswith(decision.reason[:60]) for w in r["warnings"])
        return
    if decision.policy == "sriov-roce" and ns in ("ml-training", "team-erdma", "pss-privileged"):
        assert not r["allowed"] and "[network-attachment]" in r["status"]["message"]  # no NAD there
        return
    names = multus_interfaces(ann.get(keys.MULTUS_NETWORKS))
    if len(names) != len(set(names)) and POLICIES.get(decision.policy).networks:
        # the pod's own list gives two attachments one name: Multus would not start it
        assert not r["allowed"] and "[multus-annotation]" in r["status"]["message"]
        return
    assert r["allowed"], r.get("status")
    _, _, out = send(pod)
    policy = POLICIES.get(decision.policy)
    resources = [d.resource for d in policy.devices]
    for n in policy.networks:
        nad = STATE.attachment(n.namespace or ns, n.name)
        resources.append(
            ((nad or {}).get("metadata", {}).get("annotations") or {}).get(keys.NAD_RESOURCE_NAME) or n.resource
        )
    for c in out["spec"]["containers"]:
        if not any(_gpu(c, g) for g in policy.gpu_resources):
            continue
        for resource in resources:
            assert (
                int(c["resources"]["limits"][resource]) >= 1
                and c["resources"]["requests"][resource] == c["resources"]["limits"][resource]
            )
        assert any(a.upper() in ("IPC_LOCK", "CAP_IPC_LOCK") for a in _caps(c, "add"))
        assert any(m["mountPath"].rstrip("/") == "/dev/shm" for m in c.get("volumeMounts") or ())
        env = {e["name"]: e for e in c["env"]}
        assert env["NCCL_NET"] == {"name": "NCCL_NET", "value": "IB"}


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


@given(S.pods(), st.sampled_from(["UPDATE", "DELETE", "CONNECT"]))
@S.examples(ci=30, long=1000)
def test_only_create_is_considered(pod, operation):
    rv = k.admission_review(pod, operation=operation)
    code, doc, decision, _ = review.handle(k.body(rv), POLICIES, STATE.namespace, STATE.attachments())
    r = doc["response"]
    assert code == 200 and r["uid"] == rv["request"]["uid"] and r["allowed"] is True and "patch" not in r


@given(S.pods())
@S.examples(ci=20, long=500)
def test_strategy_pods_pass_kubernetes_validate_itself(pod):
    """The cached validator used above is kubernetes_validate's own schema: check a sample
    through `kubernetes_validate.validate` (strict) at 1.30 and the newest shipped version."""
    for version in (S.SCHEMA_VERSION, kubernetes_validate.latest_version()):
        kubernetes_validate.validate(pod, version, strict=True)
    r, decision, out = send(pod)
    kubernetes_validate.validate(out, kubernetes_validate.latest_version(), strict=True)


def test_validator_rejects_what_the_api_server_would():
    """The validity checks are not vacuous."""
    pod = k.pytorchjob_worker()
    assert S.validity_errors(pod) == []
    bad = copy.deepcopy(pod)
    bad["spec"]["containers"][0]["bogus"] = 1
    assert S.schema_errors(bad)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, S.SCHEMA_VERSION, strict=True)
    bad = copy.deepcopy(pod)
    bad["spec"]["containers"][0]["volumeMounts"].append({"name": "nope", "mountPath": "/dev/shm"})
    assert any("names no volume" in e for e in S.semantic_errors(bad))
    bad = copy.deepcopy(pod)
    bad["spec"]["containers"][0]["resources"]["requests"]["aliyun/erdma"] = "1"
    assert any("required for an extended resource" in e for e in S.semantic_errors(bad))
    bad = copy.deepcopy(pod)
    bad["spec"]["containers"].append(copy.deepcopy(bad["spec"]["containers"][0]))
    assert any("not unique" in e for e in S.semantic_errors(bad))


@pytest.mark.parametrize(
    "annotation",
    [
        "other-net, kube-system/macvlan-conf@net2",
        " other-net ,",
        "",
        "[]",
        json.dumps([{"name": "other-net", "interface": "net2"}], indent=2),
        "rdma-network",
        '[{"name": "rdma-network"}]',
    ],
)
@pytest.mark.parametrize("namespace", ["ai-training", "nad-custom"])
def test_multus_annotation_merged_in_the_form_written(annotation, namespace):
    """Hand-picked cases Hypothesis reaches rarely: the contract checks of every generated pod
    applied to the Multus merge in both forms, with spaces, empty, and already present."""
    pod = k.pod(
        [k.container("trainer")],
        namespace=namespace,
        annotations={keys.MULTUS_NETWORKS: annotation, keys.POD_POLICY: "sriov-roce"},
    )
    r, decision = check_round(pod)
    assert r["allowed"] and decision.outcome == MUTATED
