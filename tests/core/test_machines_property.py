"""The property of issue 42 over the shipped catalogue and its machine types: no admitted pod gets
a network its chosen machine type does not have.

Generated pods select a machine type of some shipped policy (or none, or a label value no type
has) by nodeSelector or by required node affinity (one term or several, beside terms and
expressions of their own), list some of the catalogue's GKE networks themselves or none, and carry
a fabric's sidecar or none; each is judged under every shipped policy through the AdmissionReview
envelope, its patch applied to the pod as sent. The machine type a policy should choose is worked
out here from the policy's declared node labels (not by the webhook's code); an admitted pod's
networks must all be that type's (or networks no policy attaches, as GKE's gvnic-1), and a pod
that named no type is pinned to the default type's nodes when the policy says so."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings, strategies as st

import kube_objects as k
import strategies as S
from core.test_decision import respond
from webhook.core import keys, machines
from webhook.core.decision import Namespace
from webhook.fabrics import gke
from webhook.policy.load import load_dir

POLICIES, _ = load_dir(S.ROOT / "policies")
SHIPPED = sorted(POLICIES.by_name)
TYPED = [p for p in POLICIES.ranked() if p.machines is not None]
# every (label key, value) any type of any shipped policy declares, and values none has
LABELS = sorted({(key, v) for p in TYPED for t in p.machines.types for key, values in t.labels for v in values})
UNKNOWN = [("cloud.google.com/gke-accelerator", "nvidia-l4"), ("node.kubernetes.io/instance-type", "n2-standard-8")]


def _variants(policy):
    return [policy, *(t.policy for t in policy.machines.types)] if policy.machines is not None else [policy]


GKE_NETWORKS = sorted({g.name for p in POLICIES.ranked() for v in _variants(p) for g in v.gke_networks})
SIDECARS = sorted({v.sidecar.image for p in POLICIES.ranked() for v in _variants(p) if v.sidecar is not None})
NS = {
    name: Namespace(
        "ml-training",
        {"kubernetes.io/metadata.name": "ml-training", keys.NS_INJECTION: "enabled", keys.NS_POLICY: name},
    )
    for name in SHIPPED
}


@st.composite
def pods(draw):
    selected = draw(st.lists(st.sampled_from(LABELS + UNKNOWN), max_size=2, unique=True))
    route = draw(st.sampled_from(["nodeSelector", "affinity", "affinity-two-terms", "both"]))
    spec: dict = {}
    own_term = {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]}
    if selected:
        exprs = [{"key": key, "operator": "In", "values": [value]} for key, value in selected]
        if route in ("nodeSelector", "both"):
            spec["nodeSelector"] = {key: value for key, value in selected[:1]} | {"kubernetes.io/arch": "amd64"}
        if route != "nodeSelector":
            terms = [{"matchExpressions": exprs + own_term["matchExpressions"]}]
            if route == "affinity-two-terms":
                terms.append({"matchExpressions": exprs})
            spec["affinity"] = {"nodeAffinity": {machines.AFFINITY_KEY: {"nodeSelectorTerms": terms}}}
    elif draw(st.booleans()):
        spec["affinity"] = {"nodeAffinity": {machines.AFFINITY_KEY: {"nodeSelectorTerms": [own_term]}}}
    listed = draw(st.lists(st.sampled_from(GKE_NETWORKS + ["gvnic-1"]), max_size=4, unique=True))
    annotations = None
    if listed:
        entries = [{"interfaceName": "eth0", "network": "default"}]
        entries += [{"interfaceName": f"eth{i + 1}", "network": n} for i, n in enumerate(listed)]
        annotations = {gke.INTERFACES: json.dumps(entries), gke.DEFAULT_INTERFACE: "eth0"}
    containers = [k.container("trainer", gpus=draw(st.sampled_from([1, 4, 8])))]
    sidecar = draw(st.sampled_from([None, *SIDECARS]))
    if sidecar is not None:
        containers.insert(0, k.container("daemon", f"us-docker.pkg.dev/gce-ai-infra/{sidecar}-dev:v1", gpus=None))
    pod = k.pod(containers, namespace="ml-training", generate_name="w-", annotations=annotations, **spec)
    effective = selected[:1] if route == "nodeSelector" else selected  # what the pod's selection names
    return pod, effective, listed


def expected_type(policy, selected):
    """The policy as it should be for this selection, worked out from its declared labels: None
    when no single type fits (the pod must then be refused), the unselected choice when it names
    no type of the policy's keys."""
    if policy.machines is None:
        return policy
    keys_ = {key for t in policy.machines.types for key, _ in t.labels}
    named = [(key, value) for key, value in selected if key in keys_]
    if not named:
        return policy.machines.unselected
    fits = [t for t in policy.machines.types if all(value in dict(t.labels).get(key, ()) for key, value in named)]
    return fits[0].policy if len(fits) == 1 else None


@given(pods())
@settings(S.examples(ci=60, long=1500), suppress_health_check=[HealthCheck.too_slow])
def test_no_admitted_pod_gets_a_network_its_machine_type_does_not_have(case):
    pod, selected, listed = case
    owned = set(GKE_NETWORKS)
    for name in SHIPPED:
        policy = POLICIES.get(name)
        resp, out, d = respond(pod, NS[name], POLICIES)
        if not resp["allowed"]:
            continue
        want = expected_type(policy, selected)
        assert want is not None, (name, selected, d)  # a selection no single type fits is refused
        value = ((out.get("metadata") or {}).get("annotations") or {}).get(gke.INTERFACES)
        got = {e["network"] for e in json.loads(value)} if value else set()
        allowed = {g.name for g in want.gke_networks}
        assert (got & owned) <= allowed, (name, want.machine, sorted(got & owned - allowed), selected, listed)
        if d.outcome == "mutated" and want.pin is not None:
            terms = out["spec"]["affinity"]["nodeAffinity"][machines.AFFINITY_KEY]["nodeSelectorTerms"]
            key, values = want.pin
            assert all({"key": key, "operator": "In", "values": list(values)} in t["matchExpressions"] for t in terms)
