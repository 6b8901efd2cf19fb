"""The final-state check as ValidatingAdmissionPolicies (webhook/policy/admission_policy.py): the
objects' structure for every shipped policy, each policy feature reaching a rule, the CEL
regular expression for NCCL_IB_DISABLE against NCCL's own reading, the comparison the webhook
makes at run time, the CLI, the committed copies (kustomize, chart) and the kustomize policy
mode. Whether the CEL compiles and denies what /validate denies: test_admission_policy_cel.py
(k8s.io/apiserver 1.37's own code, in process) and e2e/test_admission_policy.py (kube-apiserver 1.37)."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import CLI, POLICIES, ROOT
from webhook.grammar import nccl
from webhook.policy import admission_policy as ap, cel, final_state_rules, machine_cel
from webhook.policy.load import load_dir, load_texts

NAMES = sorted(p.stem for p in POLICIES.glob("*.yaml"))


@pytest.fixture(scope="module")
def shipped():
    policies, errors = load_dir(POLICIES)
    assert policies is not None, errors
    return policies


def _by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def test_one_policy_and_one_binding_per_policy(shipped):
    docs = ap.objects(shipped)
    assert [d["metadata"]["name"] for d in _by_kind(docs, ap.POLICY_KIND)] == [
        f"rdma-webhook-final-state-{n}" for n in NAMES
    ]
    for vap, binding in zip(_by_kind(docs, ap.POLICY_KIND), _by_kind(docs, ap.BINDING_KIND)):
        name = vap["metadata"]["labels"][ap.POLICY_LABEL]
        assert vap["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
        assert binding["spec"] == {"policyName": vap["metadata"]["name"], "validationActions": ["Deny"]}
        spec = vap["spec"]
        assert spec["failurePolicy"] == "Fail"
        assert spec["matchConstraints"]["resourceRules"] == [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
        ]
        # the pods of this policy only, by the label the mutation writes, before any CEL runs
        assert spec["matchConstraints"]["objectSelector"] == {"matchLabels": {"rdma-webhook.io/applied-policy": name}}
        assert spec["matchConstraints"]["namespaceSelector"] == {}  # the label is only written in opted-in namespaces
        # one match condition: some rule fails (without it the API server evaluates every
        # validation and message of the policy for every pod it selects)
        assert [m["name"] for m in spec["matchConditions"]] == ["final-state-broken"]
        _balanced(spec["matchConditions"][0]["expression"])
        for v in spec["validations"]:
            assert set(v) in ({"expression", "messageExpression", "reason"}, {"expression", "message", "reason"}), v
            assert v["reason"] == "Forbidden"
            _balanced(v["expression"])
            _balanced(v.get("messageExpression", "''"))


def _balanced(expr: str) -> None:
    """Quotes closed and brackets nested: what a CEL parser would refuse first."""
    stack, quote, i = [], None, 0
    while i < len(expr):
        ch = expr[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "([":
            stack.append(ch)
        elif ch in ")]":
            assert stack and stack.pop() == {")": "(", "]": "["}[ch], expr
        i += 1
    assert quote is None and not stack, expr


def _rules(vap) -> list[str]:
    out = []
    for v in vap["spec"]["validations"]:
        text = v.get("messageExpression") or v["message"]
        out.append(re.search(r"\[([a-z-]+)\]'?\s*$", text).group(1))
    return out


def test_every_policy_feature_has_its_rule(shipped):
    """Each shipped policy's devices, enforced variables, transport, networks and hostNetwork
    reach the CEL, read from the policy (not from a list kept here)."""
    docs = {d["metadata"]["labels"][ap.POLICY_LABEL]: d for d in _by_kind(ap.objects(shipped), ap.POLICY_KIND)}
    assert sorted(docs) == NAMES
    for name, policy in shipped.by_name.items():
        vap = docs[name]
        text = "\n".join(
            v["expression"] + "\n" + v.get("messageExpression", v.get("message", ""))
            for v in vap["spec"]["validations"]
        )
        rules = _rules(vap)
        # A policy with machine types: each type's own rules (a rule several types have alike once)
        types = [t.policy for t in policy.machines.types] if policy.machines is not None else [policy]

        def each(features, types=types):
            out = []
            for t in types:
                out += [f for f in features(t) if f not in out]
            return out

        assert rules.count("ipc-lock-missing") == rules.count("ipc-lock-dropped") == rules.count("shm") == 1
        assert rules.count("machine-type") == (policy.machines is not None)
        assert ("device-missing" in rules) == bool(policy.devices or policy.claim)
        for d in policy.devices:
            assert f"'{d.resource}'" in text
        for resource in policy.equivalent_resources:
            assert f"'{resource}'" in text
        enforced = each(lambda p: [(e.name, e.value, e.templated) for e in p.env if e.enforce])
        assert rules.count("enforced-env") == len(enforced) >= 1
        for name, value, templated in enforced:
            want = value.casefold() if name == "NCCL_NET" else value
            assert f"'{name}' in n && " in text and f"n.lastIndexOf('{name}')" in text
            assert (f"'{want}'" in text) != templated  # a templated value: its presence only (the pod's names vary)
        assert rules.count("multus-networks") == len(policy.networks)
        for n in policy.networks:
            assert n.name in text
        gke_networks = each(lambda p: [g.name for g in p.gke_networks])
        assert rules.count("gke-networks") == len(gke_networks)
        for g in gke_networks:
            assert g in text
        # a type lacking some of the other types' GKE networks: refused when it lists one of them
        lacking = [t for t in types if {g.name for g in t.gke_networks} != set(gke_networks)]
        assert rules.count("fabric-mismatch") == len(each(lambda p: [p] if p in lacking else []))
        assert rules.count("sidecar-missing") == len(each(lambda p: [p.sidecar] if p.sidecar else []))
        assert rules.count("host-network") == (policy.host_network != "Allowed")
        gpus = vap["spec"]["variables"][1 if policy.machines is not None else 0]["expression"]
        for gpu in policy.gpu_resources:
            assert f"'{gpu}'" in gpus
        # NCCL_NET at least, on every transport: one per set of the types' networks
        assert rules.count("env-fallback") >= len({t.nccl_nets for t in types}) >= 1


def test_the_match_condition_holds_each_rule_of_the_validations(shipped):
    """The policy's match condition is the negation of all its rules, each rule's condition in
    the group (targets, checked containers, the pod) its validation applies it to, in one pass
    over the containers; the e2e suite (e2e/test_admission_policy.py) checks against the API
    server that it lets through every pod the validations admit and stops every change a later
    webhook makes."""
    for policy in shipped.by_name.values():
        spec = ap.policy_spec(policy)
        expression = spec["matchConditions"][0]["expression"]
        assert expression.startswith("!(") and expression.endswith(")")
        if policy.machines is None:
            rules = ap.rules(policy)
            assert [v["expression"] for v in spec["validations"]] == [ap._validation(r)["expression"] for r in rules]
            assert expression == f"!({_holds(policy, rules)})", policy.name
            continue
        # machine types: the type computed once (m), then the rules of the pod's type; a pod whose
        # selection names no type the webhook takes ('') breaks the final state
        typed = final_state_rules.by_type(policy)
        assert sorted(n for names, _, _ in typed for n in names) == sorted(t.name for t in policy.machines.types)
        chain = ""
        for names, p, rules in typed:
            guard = f"m == '{names[0]}'" if len(names) == 1 else "m in [" + ", ".join(f"'{n}'" for n in names) + "]"
            chain += f"{guard} ? ({_holds(p, rules)}) : "
        assert expression == f"!([{machine_cel.machine(policy.machines)}].all(m, {chain}false))", policy.name
        assert spec["variables"][0] == {"name": "machine", "expression": machine_cel.machine(policy.machines)}
        assert spec["validations"][0]["expression"] == "variables.machine != ''"
        for v in spec["validations"][1:]:  # each rule only for the types that have it
            assert v["expression"].startswith(("!(variables.machine ", "variables.machine == '' || ")), v["expression"]


def _holds(policy, rules) -> str:
    """The rules of one policy (or machine type) in one pass over the containers, then the pod's."""
    target = cel.is_target(policy)
    by_over = {
        over: " && ".join(f"({r.condition})" for r in rules if r.over == over)
        for over in (ap.TARGETS, ap.CHECKED, ap.POD)
    }
    assert by_over[ap.TARGETS] and by_over[ap.CHECKED]  # IPC_LOCK and shm; NCCL_NET's fallback on every transport
    # a target: its rules and the checked rules; another container that sees GPUs: the checked rules
    each = f"({target}) ? ({by_over[ap.TARGETS]} && {by_over[ap.CHECKED]}) : (!({cel.sees_gpus_otherwise()}) || ({by_over[ap.CHECKED]}))"
    names = any(r.names for r in rules if r.over != ap.POD)
    containers = f"object.spec.containers.all(c, {cel.with_names(each) if names else each})"
    if by_over[ap.POD]:
        return f"{containers} && (({by_over[ap.POD]}) || !object.spec.containers.exists(c, {target}))"
    return containers


def test_env_rules_read_the_last_entry_of_a_name():
    """The env names are bound once per container (`n`), and a rule reads the last entry of its
    name, as the kubelet does."""
    policy = load_texts([("erdma.yaml", (POLICIES / "erdma.yaml").read_text())])[0].by_name["erdma"]
    enforced = next(r for r in ap.rules(policy) if r.name == "enforced-env" and "NCCL_NET" in r.condition)
    assert enforced.names and enforced.condition == (
        "('NCCL_NET' in n && (has(c.env[n.lastIndexOf('NCCL_NET')].value) ? c.env[n.lastIndexOf('NCCL_NET')].value : '')"
        ".lowerAscii() == 'ib')"
    )
    validation = ap._validation(enforced)["expression"]
    assert (
        validation
        == f"variables.targets.all(c, [(has(c.env) ? c.env.map(e, e.name) : [])].all(n, {enforced.condition}))"
    )
    fallback = [r for r in ap.rules(policy) if r.name == "env-fallback"]
    assert fallback and all(r.names and r.over == ap.CHECKED and r.condition.startswith("(!(") for r in fallback)
    assert not any(r.names for r in ap.rules(policy) if r.name not in ("enforced-env", "env-fallback"))


def test_templated_enforced_values_are_checked_for_presence():
    text = (
        (POLICIES / "sriov-roce.yaml")
        .read_text()
        .replace('NCCL_SOCKET_IFNAME: "{interface}"', 'NCCL_SOCKET_IFNAME: {value: "{interface}", enforce: true}')
    )
    policies, errors = load_texts([("sriov-roce.yaml", text)])
    assert policies is not None, errors
    vap = _by_kind(ap.objects(policies), ap.POLICY_KIND)[0]
    found = [v for v in vap["spec"]["validations"] if "NCCL_SOCKET_IFNAME" in v.get("messageExpression", "")]
    assert len(found) == 1 and "!= ''" in found[0]["expression"] and "{interface}" not in found[0]["expression"]


@pytest.mark.parametrize(
    "value",
    [
        "1",
        "0",
        "",
        "08",
        "010",
        "0x0",
        "0x1",
        "0xA",
        "  -1",
        "+2",
        "abc",
        "0x",
        "00",
        "7",
        "0 1",
        "1abc",
        " 0x00f",
        "9",
        "\t3",
        "-0",
    ],
)
def test_the_ib_disable_expression_reads_as_nccl_does(value):
    assert bool(re.match(final_state_rules.IB_DISABLED_RE, value)) == nccl.ib_disabled(value)


@pytest.mark.parametrize(
    "text,literal", [("IB", "'IB'"), ("it's", "'it\\'s'"), ("a\\b", "'a\\\\b'"), ("x\ny", "'x\\x0ay'")]
)
def test_cel_string_literals(text, literal):
    assert cel.cel_str(text) == literal


def test_dry_run_and_bad_actions(shipped):
    binding = _by_kind(ap.objects(shipped, ap.DRY_RUN), ap.BINDING_KIND)[0]
    assert binding["spec"]["validationActions"] == ["Warn", "Audit"]
    for bad in ([], ["Deny", "Warn"], ["Block"], ["Warn", "Warn"]):
        with pytest.raises(ValueError, match="validationActions"):
            ap.objects(shipped, bad)


def test_the_generated_objects_match_themselves_and_nothing_else(shipped):
    docs = ap.objects(shipped)
    vaps, bindings = _by_kind(docs, ap.POLICY_KIND), _by_kind(docs, ap.BINDING_KIND)
    assert ap.mismatches(shipped, vaps, bindings) == []
    # a policy changed without regenerating: named with both digests
    changed, errors = load_texts(
        [
            (
                "erdma.yaml",
                (POLICIES / "erdma.yaml")
                .read_text()
                .replace(
                    "NCCL_NET: {value: IB, enforce: true}",
                    "NCCL_NET: {value: IB, enforce: true}\n  NCCL_IB_TC: {value: '41', enforce: true}",
                ),
            )
        ]
    )
    assert changed is not None, errors
    erdma = [v for v in vaps if v["metadata"]["name"] == "rdma-webhook-final-state-erdma"]
    found = ap.mismatches(changed, erdma, bindings)
    assert len(found) == 1 and "another version of policy erdma (digest " in found[0], found
    assert sum("not in force" in f for f in ap.mismatches(changed, vaps, bindings)) == len(shipped) - 1
    # a rule edited by hand (digest kept)
    edited = copy.deepcopy(vaps)
    [v for v in edited if v["metadata"]["name"] == "rdma-webhook-final-state-erdma"][0]["spec"]["validations"].pop()
    assert ap.mismatches(shipped, edited, bindings) == [
        "ValidatingAdmissionPolicy rdma-webhook-final-state-erdma: its rules were edited after generation; regenerate and apply it"
    ]
    # defaults the API server adds elsewhere are no difference
    defaulted = copy.deepcopy(vaps)
    for v in defaulted:
        v["spec"]["matchConstraints"]["matchPolicy"] = "Equivalent"
        v["spec"]["auditAnnotations"] = None
    assert ap.mismatches(shipped, defaulted, bindings) == []
    # missing objects
    assert ap.mismatches(shipped, vaps[1:], bindings[:-1]) == [
        "ValidatingAdmissionPolicy rdma-webhook-final-state-coreweave-ib for policy coreweave-ib is not installed",
        "ValidatingAdmissionPolicy rdma-webhook-final-state-sriov-roce-8rail has no ValidatingAdmissionPolicyBinding, so it checks nothing",
    ]


def test_the_run_time_check_sets_the_metrics(shipped):
    from kubernetes import client

    from webhook.cluster.admission_policies import AdmissionPolicyCheck
    from webhook.cluster.api import ApiClusterState
    from webhook.telemetry import metrics

    state = ApiClusterState(client.ApiClient(client.Configuration()))  # no connection before start()
    check = AdmissionPolicyCheck(state, client.ApiClient(client.Configuration()), lambda: shipped)
    vaps, bindings = check.informers
    assert check.check() is None  # nothing listed yet
    docs = ap.objects(shipped)
    vaps.items = {d["metadata"]["name"]: d for d in _by_kind(docs, ap.POLICY_KIND)}
    bindings.items = {d["metadata"]["name"]: d for d in _by_kind(docs, ap.BINDING_KIND)}
    vaps.synced = bindings.synced = True
    assert check.check() == [] and metrics.ADMISSION_POLICY_IN_SYNC._value.get() == 1
    del vaps.items["rdma-webhook-final-state-efa"]
    vaps.items["someone-elses"] = {"metadata": {"name": "someone-elses"}, "spec": {}}  # not ours: ignored
    assert check.check() == ["ValidatingAdmissionPolicy rdma-webhook-final-state-efa for policy efa is not installed"]
    assert metrics.ADMISSION_POLICY_IN_SYNC._value.get() == 0 and metrics.ADMISSION_POLICY_MISMATCHES._value.get() == 1


def _cli(*args: str) -> subprocess.CompletedProcess:
    script = Path(sys.executable).parent / "rdma-webhook"
    cli = [str(script)] if script.exists() else [*CLI]
    return subprocess.run([*cli, *args], capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_cli_prints_the_objects(shipped):
    proc = _cli("policy", "admission-policy", "--policies", str(POLICIES))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(
        "# Generated by `rdma-webhook policy admission-policy` from the RDMA policies coreweave-ib, efa, efa-dra, erdma, "
        "gb200-roce, gke, gke-gib, gke-tcpxo,"
    )
    assert list(yaml.safe_load_all(proc.stdout)) == ap.objects(shipped)
    dry = _cli("policy", "admission-policy", "--policies", str(POLICIES), "--dry-run")
    assert dry.returncode == 0 and list(yaml.safe_load_all(dry.stdout)) == ap.objects(shipped, ap.DRY_RUN)


def test_cli_bad_input_is_a_clear_error(tmp_path):
    (tmp_path / "bad.yaml").write_text("apiVersion: rdma-webhook.io/v1alpha2\nkind: RdmaPolicy\nname: x\n")
    proc = _cli("policy", "admission-policy", "--policies", str(tmp_path))
    assert proc.returncode == 1 and proc.stdout == ""
    assert "error: " in proc.stderr and "nothing generated" in proc.stderr and "Traceback" not in proc.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = _cli("policy", "admission-policy", "--policies", str(empty))
    assert proc.returncode == 1 and "no *.yaml policy files" in proc.stderr and "Traceback" not in proc.stderr
    proc = _cli("policy", "admission-policy", "--policies", str(POLICIES), "--out", str(tmp_path / "no" / "such.yaml"))
    assert proc.returncode == 1 and "cannot write" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("name", NAMES)
def test_committed_copies_are_current(name):
    """deploy/admission-policy/NAME/NAME.yaml and the chart's copy are what the generator makes
    from the catalogue policy now (`make catalogue` rewrites them)."""
    policies, errors = load_dir_of(name)
    assert policies is not None, errors
    committed = ROOT / "deploy" / "admission-policy" / name / f"{name}.yaml"
    assert list(yaml.safe_load_all(committed.read_text())) == ap.objects(policies), "run `make catalogue`"
    assert (
        ROOT / "charts" / "rdma-webhook" / "files" / "admission-policy" / f"{name}.yaml"
    ).read_bytes() == committed.read_bytes()


def test_committed_copies_are_the_cli_output_after_their_generated_line(tmp_path):
    """Byte for byte, below the line saying `make catalogue` made them: what `rdma-webhook
    policy admission-policy` prints for a folder holding the one policy (the catalogue's
    generator calls the command's functions rather than the command)."""
    name = "sriov-roce"
    folder = tmp_path / name
    folder.mkdir()
    shutil.copy(POLICIES / f"{name}.yaml", folder)
    proc = _cli("policy", "admission-policy", "--policies", str(folder))
    assert proc.returncode == 0, proc.stderr
    first, rest = (ROOT / "deploy" / "admission-policy" / name / f"{name}.yaml").read_text().split("\n", 1)
    assert first == f"# Generated by make catalogue from policies/{name}.yaml: edit that file, not this one."
    assert rest == proc.stdout


def load_dir_of(name: str):
    return load_texts([(f"{name}.yaml", (POLICIES / f"{name}.yaml").read_text())])


def _kustomize(tmp_path: Path, components: list[str]) -> list[dict]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is not on PATH (the deploy tests render with `kubectl kustomize`)", pytrace=False)
    root = tmp_path / "deploy"
    shutil.copytree(ROOT / "deploy", root, ignore=shutil.ignore_patterns("certs"))
    overlay = root / "mine"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": ["../overlays/cert-manager"],
                "components": [f"../{c}" for c in components],
            }
        )
    )
    proc = subprocess.run([kubectl, "kustomize", str(overlay)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def test_kustomize_policy_mode(tmp_path):
    docs = _kustomize(tmp_path, ["catalogue/erdma", "admission-policy/erdma", "admission-policy/mode"])
    vwc = [d for d in docs if d["kind"] == "ValidatingWebhookConfiguration"][0]
    assert [h["name"] for h in vwc["webhooks"]] == ["workloads.validate.rdma-webhook.io"]
    mwc = [d for d in docs if d["kind"] == "MutatingWebhookConfiguration"][0]
    assert [h["name"] for h in mwc["webhooks"]] == ["pods.mutate.rdma-webhook.io"]
    assert mwc["webhooks"][0]["reinvocationPolicy"] == "IfNeeded"
    deployment = [d for d in docs if d["kind"] == "Deployment"][0]
    assert "--check-admission-policy" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    role = [d for d in docs if d["kind"] == "ClusterRole"][0]
    admission = [r for r in role["rules"] if "admissionregistration.k8s.io" in r["apiGroups"]]
    assert admission == [
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["validatingadmissionpolicies", "validatingadmissionpolicybindings"],
            "verbs": ["get", "list", "watch"],
        }
    ]  # read-only: never writes admission objects
    policies, _ = load_dir_of("erdma")
    assert [d for d in docs if d["kind"] in (ap.POLICY_KIND, ap.BINDING_KIND)] == ap.objects(policies)
    dry = _kustomize(
        tmp_path / "dry",
        ["catalogue/erdma", "admission-policy/erdma", "admission-policy/mode", "admission-policy/dry-run"],
    )
    assert [d["spec"]["validationActions"] for d in dry if d["kind"] == ap.BINDING_KIND] == [["Warn", "Audit"]]


def test_the_metrics_read_as_the_worker_set_them_under_gunicorn(tmp_path):
    """Multi-process metrics: the master imports the module (a 0 it never sets) and forks the
    workers that check; the page shows the worker's value, in sync or not."""
    script = """
import os
from webhook.telemetry import metrics
pid = os.fork()
if pid == 0:
    out = []
    for in_sync, mismatches in ((1, 0), (0, 2)):
        metrics.ADMISSION_POLICY_IN_SYNC.set(in_sync)
        metrics.ADMISSION_POLICY_MISMATCHES.set(mismatches)
        out.append(sorted(l for l in metrics.exposition()[0].decode().splitlines()
                          if l.startswith("rdma_webhook_admission_policy_")))
    print(out)
    os._exit(0)
os.waitpid(pid, 0)
"""
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**__import__("os").environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(
        [
            ["rdma_webhook_admission_policy_in_sync 1.0", "rdma_webhook_admission_policy_mismatches 0.0"],
            ["rdma_webhook_admission_policy_in_sync 0.0", "rdma_webhook_admission_policy_mismatches 2.0"],
        ]
    )


def test_an_edited_match_condition_or_variable_is_a_mismatch_and_api_defaults_are_not(shipped):
    """The run-time check (`mismatches`) reads the installed objects as the API returns them: a
    match condition or a variable edited by hand (the digest kept) is named; a field the API
    server returns empty or null beside ours is no difference; an object of an older policy is
    named with both digests."""
    docs = ap.objects(shipped)
    vaps, bindings = _by_kind(docs, ap.POLICY_KIND), _by_kind(docs, ap.BINDING_KIND)
    name = "rdma-webhook-final-state-erdma"
    edited = f"ValidatingAdmissionPolicy {name}: its rules were edited after generation; regenerate and apply it"
    for field in ("matchConditions", "variables"):
        changed = copy.deepcopy(vaps)
        spec = next(v for v in changed if v["metadata"]["name"] == name)["spec"]
        spec[field][0]["expression"] = "true"
        assert ap.mismatches(shipped, changed, bindings) == [edited], field
    defaulted = copy.deepcopy(vaps)
    for v in defaulted:
        for field in ("matchConditions", "variables", "validations"):
            for item in v["spec"][field]:
                item.update(messageExpression=item.get("messageExpression", ""), auditAnnotations=None)
    assert ap.mismatches(shipped, defaulted, bindings) == []
    older = copy.deepcopy(vaps)
    meta = next(v for v in older if v["metadata"]["name"] == name)["metadata"]
    have, meta["annotations"][ap.DIGEST_ANNOTATION] = meta["annotations"][ap.DIGEST_ANNOTATION], "0123456789abcdef"
    assert ap.mismatches(shipped, older, bindings) == [
        f"ValidatingAdmissionPolicy {name} was generated from another version of policy erdma (digest "
        f"0123456789abcdef, the policy in force makes {have}); regenerate and apply it"
    ]


def test_the_validations_and_match_condition_of_a_policy(shipped):
    """`validations` gives a policy's validations; `broken`, its match condition (a policy with
    machine types: the one that reads the pod's type first)."""
    for policy in shipped.by_name.values():
        spec = ap.policy_spec(policy)
        assert ap.validations(policy) == spec["validations"] and len(spec["validations"]) >= 4
        assert ap.broken(policy) == spec["matchConditions"][0]["expression"]


def test_the_yaml_reads_back_as_the_objects():
    """`to_yaml`: the objects as kubectl and helm read them back, after the header (comment lines)
    when one is given and nothing before them when none is."""
    docs = ap.objects(load_dir_of("erdma")[0])
    text = ap.to_yaml(docs)
    assert text.startswith("apiVersion: ") and list(yaml.safe_load_all(text)) == docs
    headed = ap.to_yaml(docs, "# generated\n")
    assert headed == "# generated\n" + text


def test_an_edited_object_selector_is_a_mismatch(shipped):
    """An installed policy whose objectSelector was edited by hand (the digest kept) checks other
    pods than the generated one: the run-time check names it."""
    docs = ap.objects(shipped)
    vaps, bindings = _by_kind(docs, ap.POLICY_KIND), _by_kind(docs, ap.BINDING_KIND)
    name = "rdma-webhook-final-state-erdma"
    spec = next(v for v in vaps if v["metadata"]["name"] == name)["spec"]
    spec["matchConstraints"]["objectSelector"] = {"matchLabels": {"app": "trainer"}}
    assert ap.mismatches(shipped, vaps, bindings) == [
        f"ValidatingAdmissionPolicy {name}: its rules were edited after generation; regenerate and apply it"
    ]
