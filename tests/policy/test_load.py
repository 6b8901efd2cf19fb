"""The policy schema, lint messages (file, policy, field), selection precedence, live reload."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from webhook.core import keys
from webhook.policy.load import load_dir, load_texts
from webhook.policy.store import PolicyStore
from conftest import CLI

ROOT = Path(__file__).resolve().parent.parent.parent

GOOD = textwrap.dedent("""\
    apiVersion: rdma-webhook.io/v1alpha1
    kind: RdmaPolicy
    name: {name}
    description: test policy
    priority: {priority}
    namespaceSelector: {selector}
    fabric: {{kind: erdma, ncclNet: [IB], hcaDevices: ["erdma_[0-1]"]}}
    device: {{resource: aliyun/erdma, count: 1}}
    shm: {{sizeLimit: 16Gi}}
    nccl:
      NCCL_NET: {{value: IB, enforce: true}}
      NCCL_IB_HCA: erdma
""")


def good(name="p", priority=0, selector="{}"):
    return GOOD.format(name=name, priority=priority, selector=selector)


def errors_of(text, file="f.yaml"):
    ps, errors = load_texts([(file, text)])
    assert ps is None
    return [str(e) for e in errors]


def test_shipped_policies_load(policies):
    assert set(policies.by_name) == {
        "erdma",
        "sriov-roce",
        "sriov-roce-8rail",
        "ib-shared",
        "efa",
        "oke-roce-host",
        "efa-dra",
        "roce-dranet",
        "roce-dranet-aligned",
        "nd-infiniband",
        "gke-gib",
        "gke-tcpxo",
        "gke",
        "coreweave-ib",
        "gb200-roce",
    }
    erdma = policies.get("erdma")
    assert [(d.resource, d.count, d.per_gpu) for d in erdma.devices] == [("aliyun/erdma", 1, False)]
    env = {e.name: e for e in erdma.env}
    assert env["NCCL_NET"].value == "IB" and env["NCCL_NET"].enforce
    assert env["NCCL_IB_HCA"].value == "erdma,rocep" and env["NCCL_IB_GID_INDEX"].value == "1"
    assert env["NCCL_IB_QPS_PER_CONNECTION"].value == "8" and env["NCCL_MIN_NCHANNELS"].value == "16"
    assert env["NCCL_NET_PLUGIN"].value == "none" and env["NCCL_SOCKET_IFNAME"].value == "eth0"
    assert env["NCCL_DEBUG"].value == "INFO" and not env["NCCL_DEBUG"].enforce
    assert env["NCCL_DEBUG"].yields_to_env_from and env["NCCL_DEBUG"].only_with is None
    assert (env["NCCL_DEBUG_SUBSYS"].value, env["NCCL_DEBUG_SUBSYS"].only_with) == ("INIT,NET", "NCCL_DEBUG")
    sriov = policies.get("sriov-roce")
    senv = {e.name: e.value for e in sriov.env}
    assert [(n.name, n.interface, n.resource) for n in sriov.networks] == [
        ("rdma-network", "net1", "openshift.io/mellanoxrdma")
    ]
    assert senv["NCCL_SOCKET_IFNAME"] == "{interface}" and senv["NCCL_NET"] == "IB"
    assert sriov.host_network == "Forbidden" and erdma.host_network == "Allowed"
    rails = policies.get("sriov-roce-8rail")
    assert [n.interface for n in rails.networks] == [f"net{i}" for i in range(1, 9)]
    efa = policies.get("efa")
    assert efa.fabric.transport == "libfabric" and efa.fabric.providers == ("efa",)
    assert {e.name: e.value for e in efa.env if e.enforce} == {"NCCL_NET": "AWS Libfabric", "FI_PROVIDER": "efa"}
    oke = policies.get("oke-roce-host")
    assert oke.host_network == "Required" and oke.host_fabric()
    assert senv["NCCL_IB_GID_INDEX"] == "3" and senv["NCCL_NET_GDR_LEVEL"] == "SYS"
    # every shipped policy pins NCCL_NET, enforced
    for p in policies.by_name.values():
        assert any(e.name == "NCCL_NET" and e.enforce for e in p.env), p.name


def test_every_shipped_value_cites_a_source():
    for path in (ROOT / "policies").glob("*.yaml"):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            stripped = line.strip()
            if stripped.startswith("NCCL_") or stripped.startswith(("resource:", "count:", "perGpu:", "max:")):
                context = "\n".join(lines[max(0, i - 4) : i])
                assert "[" in context and "#" in context, (
                    f"{path.name}:{i + 1} {stripped!r} has no cited source above it"
                )


@pytest.mark.parametrize(
    "mutate,expect",
    [
        (lambda t: t.replace("name: p", "name: p\n  bad: [", 1), "not valid YAML"),
        (lambda t: t.replace("count: 1", "count: one"), "field device.count"),
        (lambda t: t.replace("count: 1", "count: 0"), "field device.count"),
        (lambda t: t.replace("priority: 0", "priority: 0\nfavourite: yes"), "unknown field 'favourite'"),
        (
            lambda t: t.replace("resource: aliyun/erdma", "resource: erdma"),
            "field device.resource: 'erdma' is not a valid extended resource name",
        ),
        (lambda t: t.replace("resource: aliyun/erdma", "resource: kubernetes.io/erdma"), "reserved"),
        (
            lambda t: t.replace("NCCL_IB_HCA: erdma", "NCCL-IB-HCA: erdma"),
            "field nccl.NCCL-IB-HCA: not a valid environment variable name",
        ),
        (
            lambda t: t.replace("sizeLimit: 16Gi", "sizeLimit: lots"),
            "field shm.sizeLimit: 'lots' is not a Kubernetes quantity",
        ),
        (lambda t: t.replace("sizeLimit: 16Gi", "sizeLimit: 16Gi, perGpu: 1Gi"), "field shm: give exactly one"),
        (
            lambda t: t.replace(
                "namespaceSelector: {}", "namespaceSelector: {matchExpressions: [{key: a, operator: Like}]}"
            ),
            "field namespaceSelector.matchExpressions[0].operator",
        ),
        (
            lambda t: t.replace("NCCL_IB_HCA: erdma", "NCCL_IB_HCA: mlx5"),
            "field nccl.NCCL_IB_HCA: NCCL_IB_HCA='mlx5' selects none of the p policy's erdma fabric's devices",
        ),
        (lambda t: t.replace("NCCL_IB_HCA: erdma", "NCCL_IB_DISABLE: '1'"), "turns NCCL's IB/RoCE transport off"),
        (
            lambda t: t.replace("{value: IB, enforce: true}", "Socket"),
            "field nccl.NCCL_NET: NCCL_NET='Socket' forces NCCL's TCP socket transport (NET/Socket)",
        ),
        (
            lambda t: t.replace("{value: IB, enforce: true}", "Simple"),
            "field nccl.NCCL_NET: NCCL_NET='Simple' names a transport that the p policy's erdma fabric does not provide (IB)",
        ),
        (
            lambda t: t.replace("priority: 0", "priority: 0\nprivileged: true"),
            "field privileged: policies may not ask for privileged",
        ),
        (
            lambda t: t.replace(
                "device: {resource: aliyun/erdma, count: 1}",
                "device: {resource: aliyun/erdma, count: 1, hostPath: /dev}",
            ),
            "field device.hostPath: policies may not ask",
        ),
        (lambda t: t.replace("name: p", "name: Bad_Name"), "must be a DNS-1123 label"),
        (lambda t: t.replace("kind: RdmaPolicy", "kind: Policy"), "field kind"),
    ],
)
def test_lint_names_file_policy_and_field(mutate, expect):
    errors = errors_of(mutate(good()))
    assert any(expect in e for e in errors), errors
    assert all(e.startswith("f.yaml") for e in errors)
    if "YAML" not in expect and "Bad_Name" not in mutate(good()):
        assert any("policy 'p'" in e for e in errors), errors


def test_duplicate_names_across_files():
    ps, errors = load_texts([("a.yaml", good("same")), ("b.yaml", good("same"))])
    assert ps is None
    assert [str(e) for e in errors] == [
        "b.yaml: policy 'same': field name: duplicate policy name, also defined in a.yaml"
    ]


def test_several_policies_per_file_and_all_or_nothing():
    ps, errors = load_texts([("a.yaml", good("one") + "---\n" + good("two"))])
    assert errors == [] and set(ps.by_name) == {"one", "two"}
    ps, errors = load_texts([("a.yaml", good("one")), ("b.yaml", good("two").replace("count: 1", "count: x"))])
    assert ps is None and len(errors) == 1


def test_selection_precedence():
    ps, errors = load_texts(
        [
            ("a.yaml", good("broad", priority=0, selector="{}")),
            ("b.yaml", good("specific", priority=0, selector="{matchLabels: {team: ml}}")),
            ("c.yaml", good("urgent", priority=5, selector="{matchLabels: {tier: gold}}")),
            ("d.yaml", good("aaa-tie", priority=0, selector="{matchLabels: {team: ml}}")),
        ]
    )
    assert errors == []
    assert ps.for_namespace({}).name == "broad"
    # same priority: more requirements win, then the name
    assert ps.for_namespace({"team": "ml"}).name == "aaa-tie"
    assert ps.for_namespace({"team": "ml", "tier": "gold"}).name == "urgent"


def test_selector_operators():
    sel = "{matchExpressions: [{key: env, operator: In, values: [prod]}, {key: legacy, operator: DoesNotExist}]}"
    ps, errors = load_texts([("a.yaml", good("x", selector=sel))])
    p = ps.get("x")
    assert p.allows_namespace({"env": "prod"})
    assert not p.allows_namespace({"env": "dev"})
    assert not p.allows_namespace({"env": "prod", "legacy": ""})


def test_lint_cli(tmp_path):
    (tmp_path / "ok.yaml").write_text(good("fine"))
    out = subprocess.run([*CLI, "policy", "lint", str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 0 and "ok  fine" in out.stdout
    (tmp_path / "bad.yaml").write_text(good("broken").replace("sizeLimit: 16Gi", "sizeLimit: -3"))
    out = subprocess.run([*CLI, "policy", "lint", str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 1
    assert f"{tmp_path / 'bad.yaml'}: policy 'broken': field shm.sizeLimit" in out.stderr
    assert "Traceback" not in out.stderr


def test_lint_cli_shipped_policies():
    out = subprocess.run([*CLI, "policy", "lint", str(ROOT / "policies")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "ok  erdma" in out.stdout and "ok  sriov-roce" in out.stdout


def _configmap_dir(root: Path, files: dict[str, str], generation: int) -> None:
    """Lay out a folder the way the kubelet mounts a ConfigMap: real files in a timestamped
    hidden folder, a `..data` symlink to it, and per-key symlinks through `..data`."""
    real = root / f"..2026_11_22_{generation:04d}"
    real.mkdir()
    for name, text in files.items():
        (real / name).write_text(text)
    tmp_link = root / "..data_tmp"
    os.symlink(real.name, tmp_link)
    os.replace(tmp_link, root / "..data")  # the atomic swap the kubelet does
    for name in files:
        link = root / name
        if not link.is_symlink():
            os.symlink(f"..data/{name}", link)


def test_store_reloads_configmap_swaps_atomically(tmp_path):
    _configmap_dir(tmp_path, {"p.yaml": good("first")}, 1)
    store = PolicyStore(tmp_path)
    assert store.reload(force=True) and set(store.current.by_name) == {"first"}
    assert store.reload() is False  # nothing changed
    _configmap_dir(tmp_path, {"p.yaml": good("second")}, 2)
    assert store.reload() and set(store.current.by_name) == {"second"}
    _configmap_dir(tmp_path, {"p.yaml": good("third").replace("count: 1", "count: many")}, 3)
    assert store.reload() is False
    assert set(store.current.by_name) == {"second"}  # last good stays in force
    assert any("field device.count" in e for e in store.last_errors)


def test_empty_or_missing_folder(tmp_path):
    ps, errors = load_dir(tmp_path)
    assert ps is None and "no *.yaml policy files" in str(errors[0])
    ps, errors = load_dir(tmp_path / "nope")
    assert ps is None and "cannot read the policies folder" in str(errors[0])


def test_namespace_keys_are_the_contract():
    assert keys.NS_INJECTION == "rdma-webhook.io/injection" and keys.POD_INJECT == "rdma-webhook.io/inject"
    assert keys.POD_POLICY == "rdma-webhook.io/policy" and keys.NS_POLICY == "rdma-webhook.io/policy"
    assert keys.STATUS == "rdma-webhook.io/status" and keys.APPLIED_POLICY == "rdma-webhook.io/applied-policy"


def test_lint_reports_every_problem_of_a_file_in_one_run():
    text = (
        good()
        .replace("priority: 0", "priority: 0\nfavourite: yes\nflavour: mint")
        .replace("sizeLimit: 16Gi", "sizeLimit: lots")
        .replace("NCCL_IB_HCA: erdma", "NCCL_IB_HCA: mlx5")
        .replace("count: 1", "count: one")
    )
    errors = errors_of(text)
    for expect in (
        "unknown field 'favourite'",
        "unknown field 'flavour'",
        "field device.count",
        "field shm.sizeLimit: 'lots'",
        "field nccl.NCCL_IB_HCA: NCCL_IB_HCA='mlx5' selects none",
    ):
        assert sum(expect in e for e in errors) == 1, (expect, errors)


def test_yaml_syntax_errors_name_the_line_not_a_field():
    errors = errors_of(good().replace("name: p", "name: p\n  bad: [", 1))
    assert len(errors) == 1 and "field" not in errors[0]
    assert errors[0].startswith("f.yaml: line ") and "not valid YAML" in errors[0]


def test_lint_warns_on_nccl_block_keys_that_are_not_nccl_variables(tmp_path):
    (tmp_path / "p.yaml").write_text(
        good("fine").replace("NCCL_IB_HCA: erdma", "NCCL_IB_HCA: erdma\n  UCX_NET_DEVICES: mlx5_0:1")
    )
    out = subprocess.run(
        [sys.executable, "-m", "webhook", "policy", "lint", str(tmp_path)], capture_output=True, text=True
    )
    assert out.returncode == 0 and "ok  fine" in out.stdout  # a warning, not an error
    assert (
        "warning:" in out.stderr
        and "field nccl.UCX_NET_DEVICES: not a variable of the fabric's transport" in out.stderr
    )
    clean = subprocess.run(
        [sys.executable, "-m", "webhook", "policy", "lint", str(ROOT / "policies")], capture_output=True, text=True
    )
    assert "warning:" not in clean.stderr


def test_shipped_policies_and_examples_cite_public_documents():
    """Every source a shipped policy cites is defined in its header with a title and a public
    URL; nothing points at files outside this repository."""
    import re

    for path in sorted((ROOT / "policies").glob("*.yaml")):
        text = path.read_text()
        header = text[: text.index("apiVersion:")]
        defined = dict(re.findall(r"^#\s+\[([A-Z-]+)\]\s+(.*(?:\n#\s{4,}.*)*)", header, re.M))
        assert defined, path.name
        for tag, body in defined.items():
            assert "https://" in body and '"' in body or "source, https://" in body, (path.name, tag, body)
        comments = "\n".join(line.split("#", 1)[1] for line in text[len(header) :].splitlines() if "#" in line)
        used = set(re.findall(r"\[([A-Z][A-Z-]+)[,\]; ]", comments))
        assert used and used <= set(defined), (path.name, used - set(defined))
    for path in [*sorted((ROOT / "policies").glob("*.yaml")), *sorted((ROOT / "examples").rglob("*.*"))]:
        text = path.read_text().lower()
        assert "seed" not in text.replace("seed-sriov-pod", "") and "shared/" not in text, path


# -- lint speaks to the policy author (issue 25 item 4) -------------------------------------------


def _lint_errors(text: str) -> list[str]:
    from webhook.policy.load import load_texts

    ps, errors = load_texts([("team.yaml", text)])
    assert ps is None
    return [str(e) for e in errors]


def test_lint_suggests_the_field_an_unknown_one_is_a_typo_of():
    text = (ROOT / "policies" / "erdma.yaml").read_text().replace("\npriority:", "\npriorty:", 1)
    errors = _lint_errors(text)
    assert errors == ["team.yaml: policy 'erdma': field priorty: unknown field 'priorty': did you mean 'priority'?"]


def test_one_typo_in_fabric_hca_devices_is_one_problem_not_a_cascade():
    text = (ROOT / "policies" / "erdma.yaml").read_text().replace("hcaDevices:", "hcaDevice:", 1)
    errors = _lint_errors(text)
    assert len(errors) == 1 and "did you mean 'hcaDevices'?" in errors[0], errors
    assert not any("selects none" in e or "required" in e for e in errors)


def test_a_fallback_setting_in_a_policy_is_explained_to_its_author():
    text = (
        (ROOT / "policies" / "erdma.yaml")
        .read_text()
        .replace("NCCL_NET: {value: IB, enforce: true}", "NCCL_NET: {value: Socket, enforce: true}")
    )
    (error,) = _lint_errors(text)
    assert "field nccl.NCCL_NET" in error and "this policy would put it into every pod it injects" in error
    assert "let the policy set" not in error
