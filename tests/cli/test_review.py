"""Issue 28 item 4, the review CLI layer (`webhook/cli/review.py`, `review_input.py`,
`review_scope.py`, `review_explain.py`): what `rdma-webhook review` prints and exits with, exactly,
on the inputs a platform team gives it. Written against the survivors of the mutation part
`cli.review-parts` (mutation/MUTATION.md; the record is mutation/mutation-survivors-cli.review-parts.txt).

- `--explain`: the headline, the why/deny/error/warn lines, each template and the diff of the pod
  as it would be, coloured (`--color always`) and not;
- the policies in force: `--policy` (repeated, comma-separated, spaced), `--policies DIR`,
  RdmaPolicy documents in the input, and the errors when they clash or name nothing;
- Namespace documents in the input against `--cluster-state`;
- bad input: unreadable files, invalid YAML (with and without a placeholder), Lists, kustomize
  trees, and in a pod template that would be checked: numbers where strings belong, placeholders,
  quantities that are not ones, each message naming the template, the container and the field.

`review` runs in-process (`webhook.cli.main.main`), so that mutation testing sees it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from webhook.cli import review_explain, review_input, review_scope

ROOT = Path(__file__).resolve().parent.parent.parent
POLICIES = str(ROOT / "policies")
STATE = str(ROOT / "tests" / "manifests" / "cluster-state.yaml")
INJECT = {"rdma-webhook.io/inject": "true"}
NO_STATE = (
    "note: no --cluster-state: every namespace the input does not describe with a Namespace document is "
    "taken as opted in (rdma-webhook.io/injection=enabled) with no other labels, "
    "NetworkAttachmentDefinitions as unknown and Trainer runtimes as those in the input; policies chosen "
    "by namespace labels may differ from the cluster's. Pass --cluster-state (kubectl get ns,net-attach-def,"
    "trainingruntimes,clustertrainingruntimes -A -o yaml) to decide as the cluster does\n"
)
CATALOGUE = sorted(p.stem for p in Path(POLICIES).glob("*.yaml"))


def review(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    """`rdma-webhook review ARGS` in-process: (exit status, stdout, stderr)."""
    from webhook.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    old = sys.stdin
    if stdin is not None:
        sys.stdin = io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["review", *args])
    finally:
        sys.stdin = old
    return code, out.getvalue(), err.getvalue()


def records(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def write(path: Path, *docs) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return str(path)


def tiny(name: str = "tiny-ib", **changes) -> dict:
    """A small RdmaPolicy of one's own (an InfiniBand fabric, one device, NCCL_NET pinned)."""
    doc = {
        "apiVersion": "rdma-webhook.io/v1alpha2",
        "kind": "RdmaPolicy",
        "name": name,
        "description": "tiny",
        "priority": 0,
        "namespaceSelector": {},
        "gpuResources": ["nvidia.com/gpu"],
        "fabric": {"kind": "infiniband", "transport": "ib-verbs", "ncclNet": ["IB"], "hcaDevices": ["mlx5_[0-7]"]},
        "devices": [{"resource": "rdma/ib", "count": 1, "perGpu": False}],
        "shm": {"perGpu": "1Gi", "max": "2Gi"},
        "nccl": {"NCCL_NET": {"value": "IB", "enforce": True}},
    }
    doc.update(changes)
    return doc


def container(
    name: str = "main", env: list | None = None, gpus: str | None = "8", command: list | None = None, **extra
) -> dict:
    c = {
        "name": name,
        "image": "nvcr.io/nvidia/pytorch:25.11-py3",
        "command": command or ["torchrun", "train.py"],
        "resources": {"limits": {"nvidia.com/gpu": gpus}},
    }
    if env is not None:
        c["env"] = env
    c.update(extra)
    return c


def pod(
    name: str = "trainer",
    ns: str | None = "ml-training",
    containers: list | None = None,
    labels: dict | None = None,
    annotations: dict | None = None,
    **spec,
) -> dict:
    meta: dict = {"name": name}
    if ns:
        meta["namespace"] = ns
    meta["labels"] = dict(INJECT) if labels is None else labels
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": containers or [container()], **spec},
    }


def pytorchjob(name: str = "llama", env: list | None = None, ns: str = "ml-training") -> dict:
    def template() -> dict:
        return {"metadata": {"labels": dict(INJECT)}, "spec": {"containers": [container("pytorch", env=env)]}}

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template()},
                "Worker": {"replicas": 2, "template": template()},
            }
        },
    }


def namespace(name: str, **labels: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


IB_DISABLE = [{"name": "NCCL_IB_DISABLE", "value": "1"}]
FALLBACK = (
    "NCCL_IB_DISABLE='1' turns NCCL's IB/RoCE transport off, so NCCL runs on TCP sockets (NET/Socket); "
    "remove it or set it to 0 in env [env-fallback]"
)


def esc(code: str, text: str) -> str:
    return f"\x1b[{code}m{text}\x1b[0m"


# -- --explain: every line, coloured and not ----------------------------------------------------------

MUTATED_DIFF = [
    ("@@", "@@ -6,4 +6,8 @@"),
    (" ", "   labels:"),
    (" ", "     rdma-webhook.io/inject: 'true'"),
    ("+", "+    rdma-webhook.io/applied-policy: tiny-ib"),
    ("+", "+  annotations:"),
    ("+", "+    rdma-webhook.io/status: injected"),
    ("+", "+    rdma-webhook.io/applied-policy: tiny-ib"),
    (" ", " spec:"),
    (" ", "   containers:"),
    ("@@", "@@ -16,2 +20,20 @@"),
    (" ", "       limits:"),
    (" ", "         nvidia.com/gpu: '8'"),
    ("+", "+        rdma/ib: '1'"),
    ("+", "+      requests:"),
    ("+", "+        rdma/ib: '1'"),
    ("+", "+    env:"),
    ("+", "+    - name: NCCL_NET"),
    ("+", "+      value: IB"),
    ("+", "+    securityContext:"),
    ("+", "+      capabilities:"),
    ("+", "+        add:"),
    ("+", "+        - IPC_LOCK"),
    ("+", "+    volumeMounts:"),
    ("+", "+    - name: rdma-webhook-dshm"),
    ("+", "+      mountPath: /dev/shm"),
    ("+", "+  volumes:"),
    ("+", "+  - name: rdma-webhook-dshm"),
    ("+", "+    emptyDir:"),
    ("+", "+      medium: Memory"),
    ("+", "+      sizeLimit: 2Gi"),
]


def mutated_pod_text() -> str:
    return yaml.safe_dump_all([tiny(), pod()], sort_keys=False)


@pytest.mark.parametrize("colour", [True, False])
def test_explain_of_a_policy_and_a_mutated_pod_line_by_line(colour):
    """The headline (file#n, kind, namespace/name, outcome word, policy), the notes as `add` lines
    and the diff of the pod before and after with two lines of context, + green, @@ cyan."""

    def c(code: str, text: str) -> str:
        return esc(code, text) if colour else text

    code, out, err = review("--explain", "--color", "always" if colour else "never", "-", stdin=mutated_pod_text())
    assert code == 0, err
    assert err == NO_STATE
    colours = {"@@": "36", "+": "32", " ": None}
    diff = [f"    {c(colours[k], line) if colours[k] else line}" for k, line in MUTATED_DIFF]
    assert out.splitlines() == [
        f"{c('1', '-#1')}: RdmaPolicy (unnamed): {c('1', 'NOT CHECKED')}",
        "  why: holds no pods; a policy in force for this review",
        "",
        f"{c('1', '-#2')}: Pod ml-training/trainer: {c('32;1', 'MUTATED')} by policy tiny-ib",
        f"  {c('32', 'add ')} main: rdma/ib: 1, 1 NCCL variables, IPC_LOCK",
        f"  {c('32', 'add ')} /dev/shm: memory-backed emptyDir 2Gi",
        "    --- before",
        "    +++ after",
        *diff,
        "",
    ]


def test_explain_of_a_denied_pod_an_error_and_a_companion_coloured(tmp_path):
    f = write(
        tmp_path / "in.yaml",
        tiny(),
        pod("socket", containers=[container(env=IB_DISABLE)]),
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc", "namespace": "ml-training"}},
        pod("empty", containers=[container(gpus=None)]),
    )
    code, out, err = review("--explain", "--color", "always", f)
    assert code == 2
    assert out.split("\n\n")[1:] == [
        f"{esc('1', f + '#2')}: Pod ml-training/socket: {esc('31;1', 'DENIED')} by policy tiny-ib\n"
        f"  {esc('31', 'deny')} container 'main': {FALLBACK}",
        f"{esc('1', f + '#3')}: Service ml-training/svc: {esc('1', 'NOT CHECKED')}\n  why: holds no pods",
        f"{esc('1', f + '#4')}: Pod ml-training/empty: {esc('31;1', 'ERROR')}\n"
        f"  {esc('31', 'error')} container main: resources.limits[nvidia.com/gpu] is empty: give a quantity such as 8 "
        "(an unrendered template?)",
        "",
    ]
    assert err.endswith(
        f"error: {f}#4: container main: resources.limits[nvidia.com/gpu] is empty: give a quantity "
        "such as 8 (an unrendered template?)\n"
    )


def test_explain_of_a_workload_whose_denied_templates_only_warn(tmp_path):
    """Under `workloadValidation: Warn` each template is DENIED (a warning only), its findings as
    deny lines under it, and the workload's warnings after them."""
    f = write(tmp_path / "in.yaml", tiny("tiny-warn", workloadValidation="Warn"), pytorchjob("warned", env=IB_DISABLE))
    code, out, err = review("--explain", "--color", "always", f)
    assert code == 0, err
    master, worker = "spec.pytorchReplicaSpecs.Master.template", "spec.pytorchReplicaSpecs.Worker.template"
    assert out.split("\n\n")[1] == "\n".join(
        [
            f"{esc('1', f + '#2')}: PyTorchJob ml-training/warned: {esc('1', 'UNCHANGED')} by policy tiny-warn",
            f"  why: {master}: container 'pytorch': {FALLBACK}",
            f"  why: {worker}: container 'pytorch': {FALLBACK}",
            f"  {esc('1', master)}: its pods would be {esc('31;1', 'DENIED')} by policy tiny-warn (a warning only: "
            "workloadValidation Warn)",
            f"    {esc('31', 'deny')} container 'pytorch': {FALLBACK}",
            f"  {esc('1', worker)}: its pods would be {esc('31;1', 'DENIED')} by policy tiny-warn (a warning only: "
            "workloadValidation Warn)",
            f"    {esc('31', 'deny')} container 'pytorch': {FALLBACK}",
            f"  {esc('33', 'warn')} {master}, container 'pytorch': {FALLBACK}",
            f"  {esc('33', 'warn')} {worker}, container 'pytorch': {FALLBACK}",
        ]
    )


def test_explain_of_a_workload_that_is_denied_and_one_that_is_mutated(tmp_path):
    f = write(tmp_path / "in.yaml", tiny(), pytorchjob("denied", env=IB_DISABLE), pytorchjob("clean"))
    code, out, err = review("--explain", "--color", "never", f)
    assert code == 1, err
    master, worker = "spec.pytorchReplicaSpecs.Master.template", "spec.pytorchReplicaSpecs.Worker.template"
    blocks = out.split("\n\n")
    assert blocks[1] == "\n".join(
        [
            f"{f}#2: PyTorchJob ml-training/denied: DENIED by policy tiny-ib",
            f"  deny {master}, container 'pytorch': {FALLBACK}",
            f"  deny {worker}, container 'pytorch': {FALLBACK}",
            f"  {master}: its pods would be DENIED by policy tiny-ib (denies the workload)",
            f"    deny container 'pytorch': {FALLBACK}",
            f"  {worker}: its pods would be DENIED by policy tiny-ib (denies the workload)",
            f"    deny container 'pytorch': {FALLBACK}",
        ]
    )
    clean = blocks[2].splitlines()
    code, coloured, err = review("--explain", "--color", "always", f)
    assert coloured.split("\n\n")[2].splitlines()[2:6] == [
        f"    {esc('32', 'add ')} pytorch: rdma/ib: 1, 1 NCCL variables, IPC_LOCK",
        f"    {esc('32', 'add ')} /dev/shm: memory-backed emptyDir 2Gi",
        "      --- before",
        "      +++ after",
    ]
    assert clean[0] == f"{f}#3: PyTorchJob ml-training/clean: MUTATED by policy tiny-ib"
    assert clean[1] == f"  {master}: its pods would be MUTATED by policy tiny-ib"
    assert clean[2] == "    add  pytorch: rdma/ib: 1, 1 NCCL variables, IPC_LOCK"
    assert clean[3:6] == ["    add  /dev/shm: memory-backed emptyDir 2Gi", "      --- before", "      +++ after"]
    assert sum(line.startswith("  spec.") for line in clean) == 2
    assert f"  {worker}: its pods would be MUTATED by policy tiny-ib" in clean
    # the template's pod before and after, as it would be made: its namespace and generateName in the context lines
    assert "      +    rdma-webhook.io/applied-policy: tiny-ib" in clean
    at = clean.index("      @@ -4,6 +4,10 @@")
    assert clean[at + 1 : at + 6] == [
        "         labels:",
        "           rdma-webhook.io/inject: 'true'",
        "      +    rdma-webhook.io/applied-policy: tiny-ib",
        "         namespace: ml-training",
        "         generateName: clean-",
    ]


def test_explain_of_a_skipped_pod_says_why_and_shows_no_diff(tmp_path):
    f = write(tmp_path / "in.yaml", tiny(), namespace("batch"), pod("off", ns="batch"))
    code, out, err = review("--explain", "--color", "always", f)
    assert code == 0, err
    block = out.split("\n\n")[2]
    assert block.splitlines()[0] == f"{esc('1', f + '#3')}: Pod batch/off: {esc('1', 'SKIPPED')}"
    assert all(line.startswith("  why: ") for line in block.splitlines()[1:]), block
    assert "---" not in block and "add" not in block


def test_explain_names_an_unnamed_object_and_a_kindless_one(tmp_path):
    p = pod()
    del p["metadata"]["name"]
    p["metadata"]["generateName"] = "train-"
    q = pod(ns=None)
    del q["metadata"]["name"]
    f = write(tmp_path / "in.yaml", tiny(), p, q, {"spec": {"replicas": 2}}, {"kind": "Gadget"})
    code, out, err = review("--explain", "--color", "never", f)
    heads = [b.splitlines()[0] for b in out.split("\n\n") if b]
    assert heads[1] == f"{f}#2: Pod ml-training/train-: MUTATED by policy tiny-ib"
    assert heads[2] == f"{f}#3: Pod default/(unnamed): MUTATED by policy tiny-ib"
    assert heads[3] == f"{f}#4: (no kind) (unnamed): NOT CHECKED"
    assert heads[4] == f"{f}#5: Gadget (unnamed): NOT CHECKED"
    assert code == 0, err


def test_explain_colour_pieces():
    assert review_explain.color(True, "7", "x") == "\x1b[7mx\x1b[0m"
    assert review_explain.color(False, "7", "x") == "x"
    assert [review_explain.headline_outcome(o) for o in ("not-checked", "mutated", "a-b-c")] == [
        "NOT CHECKED",
        "MUTATED",
        "A B C",
    ]


def test_explain_diff_keeps_key_order_and_long_lines_and_two_lines_of_context():
    before = {"b": 1, "a": "x" * 120, "c": [1, 2, 3, 4, 5, 6, 7], "d": 4, "e": 5, "f": 6}
    after = {"b": 1, "a": "x" * 120, "c": [1, 2, 3, 4, 5, 6, 7], "d": 4, "e": 50, "f": 6}
    assert review_explain._diff(before, after, False) == [
        "--- before",
        "+++ after",
        "@@ -10,4 +10,4 @@",
        " - 7",
        " d: 4",
        "-e: 5",
        "+e: 50",
        " f: 6",
    ]
    # a long value (a command line) is folded where PyYAML's width of 1000 says, the same before and after
    long = "x" * 989 + " ab ab ab ab"
    assert review_explain._diff({"z": 1, "a": long}, {"z": 2, "a": long}, True) == [
        "--- before",
        "+++ after",
        esc("36", "@@ -1,3 +1,3 @@"),
        esc("31", "-z: 1"),
        esc("32", "+z: 2"),
        " a: " + "x" * 989 + " ab ab ab",
        "   ab",
    ]


def test_explain_warnings_that_the_why_line_says_are_not_repeated():
    out = io.StringIO()
    record = {
        "kind": "Pod",
        "namespace": "ns",
        "name": "p",
        "outcome": "unchanged",
        "policy": None,
        "messages": ["no GPU"],
        "warnings": ["no GPU: and more", "other"],
        "templates": [],
    }
    review_explain.explain(out, "f.yaml", record, None, None, False)
    assert out.getvalue() == "f.yaml: Pod ns/p: UNCHANGED\n  why: no GPU\n  warn other\n\n"
    out = io.StringIO()
    record.update(messages=[], warnings=["a", "b"], objectKind="Job", kind="AdmissionReview")
    review_explain.explain(out, "f.yaml", record, None, None, False)
    assert out.getvalue() == "f.yaml: Job ns/p: UNCHANGED\n  warn a\n  warn b\n\n"


# -- the policies in force ----------------------------------------------------------------------------


def test_policy_names_are_split_on_commas_stripped_and_may_repeat(tmp_path):
    f = write(tmp_path / "p.yaml", pod())
    code, out, err = review("--policy", " erdma , ,", "--policy", "erdma", "--output", "json", f)
    assert code == 0, err
    assert [r["policy"] for r in records(out)] == ["erdma"]
    assert "error" not in err


def test_an_unknown_policy_name_lists_the_catalogue(tmp_path):
    f = write(tmp_path / "p.yaml", pod())
    code, out, err = review("--policy", "erdma,roce", f)
    assert code == 2 and out == ""
    assert err == (
        f"error: --policy roce: no such policy in the catalogue ({', '.join(CATALOGUE)}); "
        "use --policies DIR for a policy of your own\n"
    )


def test_a_policy_given_twice_from_two_places_is_an_error(tmp_path):
    doc = yaml.safe_load((Path(POLICIES) / "erdma.yaml").read_text())
    f = write(tmp_path / "p.yaml", doc, pod())
    code, out, err = review("--policies", POLICIES, "--policy", "erdma", f)
    assert code == 2 and out == ""
    assert err == (
        f"error: policy 'erdma' is given twice (--policies {POLICIES} and --policy): keep one\n"
        f"error: policy 'erdma' is given twice (--policies {POLICIES} and {f}#1): keep one\n"
    )


def test_a_bad_policy_in_the_input_is_an_error_naming_where(tmp_path):
    bad = tiny()
    del bad["shm"]
    f = write(tmp_path / "p.yaml", bad, pod())
    code, out, err = review("--policy", "erdma", f)
    assert code == 2 and out == ""
    assert err == f"error: {f}#1: policy 'tiny-ib': field shm: missing: this field is required; add it\n"


def test_a_policies_folder_with_errors_is_bad_input(tmp_path):
    (tmp_path / "pol").mkdir()
    bad = tiny()
    del bad["description"]
    (tmp_path / "pol" / "bad.yaml").write_text(yaml.safe_dump(bad))
    f = write(tmp_path / "p.yaml", pod())
    code, out, err = review("--policies", str(tmp_path / "pol"), f)
    assert code == 2 and out == ""
    assert "description" in err and err.startswith("error: ") and "no policy is in force" not in err


def test_with_no_policy_a_pod_that_would_be_checked_is_bad_input_naming_the_catalogue(tmp_path):
    f = write(tmp_path / "p.yaml", pod())
    code, out, err = review("--output", "json", f)
    how = (
        "choose the policies to review against: --policy NAME for a fabric from the catalogue "
        f"({', '.join(CATALOGUE)}; repeat it or separate names with commas), --policies DIR for your own folder "
        "(the one your cluster's webhook mounts), or RdmaPolicy documents in the input"
    )
    assert code == 2
    assert err == (
        NO_STATE + f"note: no policy is in force: {how}\n"
        f"error: {f}: no policy is in force, so its pods cannot be judged: {how}\n"
    )
    assert review_scope.how_to_choose([]) == how.replace(", ".join(CATALOGUE), "none found")


def test_the_catalogue_and_its_errors(monkeypatch, tmp_path):
    shipped, errors = review_scope.catalogue()
    assert sorted(shipped) == CATALOGUE and errors == [] and shipped["erdma"].name == "erdma"
    assert review_scope.catalogue_names() == CATALOGUE
    from webhook.policy import load

    monkeypatch.setattr(load, "default_policies_dir", lambda: str(tmp_path / "nowhere"))
    shipped, errors = review_scope.catalogue()
    assert shipped == {} and errors == [str(e) for e in load.load_dir(str(tmp_path / "nowhere"))[1]]
    assert "nowhere" in errors[0]
    assert review_scope.catalogue_names() == []
    # a broken catalogue: --policy names no policy, and says why once (not "no such policy")
    f = write(tmp_path / "p.yaml", pod())
    code, out, err = review("--policy", "erdma", f)
    assert code == 2 and err == "".join(f"error: {e}\n" for e in errors)


def test_choose_returns_the_policies_errors_and_names(tmp_path):
    ps, errors, names = review_scope.choose([], None, [])
    assert (ps, errors, names) == (None, [], CATALOGUE)
    ps, errors, names = review_scope.choose(["ib-shared"], None, [])
    assert errors == [] and names == CATALOGUE and sorted(ps.by_name) == ["ib-shared"]
    ps, errors, names = review_scope.choose([], None, [("in.yaml#1", tiny())])
    assert errors == [] and names == CATALOGUE and sorted(ps.by_name) == ["tiny-ib"]
    ps, errors, names = review_scope.choose(["nope"], None, [])
    assert ps is None and names == CATALOGUE and len(errors) == 1
    ps, errors, names = review_scope.choose([], str(tmp_path / "missing"), [])
    assert ps is None and errors and names == []


def test_is_policy_document():
    assert review_scope.is_policy_document(tiny())
    assert review_scope.is_policy_document({**tiny(), "apiVersion": "rdma-webhook.io/v9"})
    assert not review_scope.is_policy_document({**tiny(), "apiVersion": "example.com/v1"})
    assert not review_scope.is_policy_document({**tiny(), "apiVersion": None})
    assert not review_scope.is_policy_document({**tiny(), "kind": "Policy"})
    assert not review_scope.is_policy_document([tiny()])


# -- namespaces: the input's, the cluster-state file's, assumed ------------------------------------------


def test_a_namespace_in_the_input_wins_over_the_cluster_state_and_says_so(tmp_path):
    f = write(tmp_path / "in.yaml", namespace("ml-training", **{"kubernetes.io/metadata.name": "ml-training"}), pod())
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, "--output", "json", f)
    assert code == 0, err
    assert err == (
        f"note: {f}#1: Namespace 'ml-training' in the input is used instead of the one in {STATE} "
        "(its labels decide opt-in and policy)\n"
    )
    ns_rec, pod_rec = records(out)
    assert ns_rec["messages"] == ["holds no pods; its labels decide opt-in and policy for the documents in it"]
    assert pod_rec["outcome"] == "skipped"  # not opted in by the input's labels


def test_a_namespace_in_the_input_and_not_in_the_cluster_state_is_known_without_a_note(tmp_path):
    f = write(
        tmp_path / "in.yaml", namespace("research", **{"rdma-webhook.io/injection": "enabled"}), pod(ns="research")
    )
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, "--output", "json", f)
    assert code == 0 and err == ""
    assert [r["outcome"] for r in records(out)] == ["not-checked", "mutated"]
    # without the Namespace document the namespace is unknown: bad input
    g = write(tmp_path / "pod.yaml", pod(ns="research"))
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, "--output", "json", g)
    assert code == 2 and "namespace 'research' is not in" in err


def test_without_cluster_state_an_input_namespace_decides_opt_in_and_others_are_opted_in(tmp_path):
    f = write(
        tmp_path / "in.yaml",
        namespace("batch"),
        pod(ns="batch"),
        namespace("ml", **{"rdma-webhook.io/injection": "enabled"}),
        pod(ns="ml"),
        pod(ns="elsewhere"),
        namespace("half", **{"rdma-webhook.io/injection": "disabled"}),
        pod(ns="half"),
    )
    code, out, err = review("--policy", "erdma", "--output", "json", f)
    assert code == 0, err
    assert err == NO_STATE  # no note: there is no cluster-state to override
    outcomes = [(r["kind"], r["outcome"]) for r in records(out)]
    assert outcomes == [
        ("Namespace", "not-checked"),
        ("Pod", "skipped"),
        ("Namespace", "not-checked"),
        ("Pod", "mutated"),
        ("Pod", "mutated"),
        ("Namespace", "not-checked"),
        ("Pod", "skipped"),
    ]


def test_review_state_lookups():
    from webhook.cluster.state import AssumedClusterState, FileClusterState

    base = FileClusterState.from_file(STATE)
    st = review_scope.ReviewState(base, assumed=False)
    assert st.known("ml-training") and not st.known("research") and st.notes == []
    assert st.opted_in("ml-training") and not st.opted_in("research")
    st.add(namespace("research", **{"rdma-webhook.io/injection": "enabled"}), "in.yaml#1", STATE)
    assert st.known("research") and st.opted_in("research") and st.notes == []
    st.add(namespace("ml-training"), "in.yaml#2", STATE)
    assert st.notes == [
        f"note: in.yaml#2: Namespace 'ml-training' in the input is used instead of the one in "
        f"{STATE} (its labels decide opt-in and policy)"
    ]
    assert st.namespace("ml-training").labels == {"kubernetes.io/metadata.name": "ml-training"} and not st.opted_in(
        "ml-training"
    )
    assert st.namespace("llm-serving").labels["rdma-webhook.io/injection"] == "enabled"
    assert st.attachments() is base.attachments()
    # the state file's DRA objects are all the cluster's, whatever else the input holds
    assert st.claims().lists_all() and len(st.claims()) == len(base.claims())
    assumed = review_scope.ReviewState(AssumedClusterState(), assumed=True)
    assert not assumed.known("anything") and assumed.opted_in("anything")
    assumed.add(namespace("ml-training"), "x", None)
    assert assumed.notes == [] and assumed.known("ml-training") and not assumed.opted_in("ml-training")


# -- what is read: files, folders, stdin, Lists, kustomize trees -------------------------------------------


def test_documents_of_a_list_stdin_and_empty_documents(tmp_path, monkeypatch):
    f = tmp_path / "l.yaml"
    f.write_text(
        "---\n---\napiVersion: v1\nkind: PodList\nitems: [{kind: Pod}, {kind: Service}]\n---\n"
        "kind: List\nitems: 3\n---\nkind: Listing\nitems: [1]\n---\n- a\n"
    )
    assert review_input.documents(str(f)) == [
        {"kind": "Pod"},
        {"kind": "Service"},
        {"kind": "List", "items": 3},
        {"kind": "Listing", "items": [1]},
        ["a"],
    ]
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"kind": "Pod", "metadata": {"name": "j"}}'))
    assert review_input.documents("-") == [{"kind": "Pod", "metadata": {"name": "j"}}]


def test_an_unreadable_file_says_why(tmp_path):
    missing = str(tmp_path / "missing.yaml")
    with pytest.raises(review_input.InputError) as exc:
        review_input.documents(missing)
    assert str(exc.value) == f"{missing}: cannot read: No such file or directory"
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"kind: Pod\nname: caf\xe9\n")
    with pytest.raises(review_input.InputError) as exc:
        review_input.documents(str(latin))
    assert str(exc.value).startswith(f"{latin}: cannot read: 'utf-8' codec can't decode byte 0xe9")
    code, out, err = review("--policy", "erdma", "--output", "json", missing)
    assert code == 2
    assert records(out) == [
        {
            "file": missing,
            "document": 0,
            "kind": None,
            "apiVersion": None,
            "objectKind": None,
            "namespace": None,
            "name": None,
            "outcome": "error",
            "allowed": False,
            "policy": None,
            "rules": [],
            "messages": [f"{missing}: cannot read: No such file or directory"],
            "warnings": [],
            "templates": [],
        }
    ]


def test_invalid_yaml_hints_at_a_template_only_when_it_holds_a_placeholder(tmp_path):
    plain = tmp_path / "plain.yaml"
    plain.write_text("kind: Pod\nmetadata: {name: [\n")
    with pytest.raises(review_input.InputError) as exc:
        review_input.documents(str(plain))
    with pytest.raises(yaml.YAMLError) as parsing:
        list(yaml.safe_load_all(plain.read_text()))
    assert str(exc.value) == f"{plain}: not valid YAML or JSON: {parsing.value}"
    helm = tmp_path / "helm.yaml"
    helm.write_text("kind: Pod\nspec:\n  replicas: {{ .Values.replicas }}\n")
    with pytest.raises(review_input.InputError) as exc:
        review_input.documents(str(helm))
    assert str(exc.value).endswith(
        " (it holds a template placeholder such as {{ ... }}: render the template first, e.g. helm template, "
        "or quote the value)"
    )
    assert str(exc.value).startswith(f"{helm}: not valid YAML or JSON: ")


def test_input_files_walks_folders_for_manifests_only_and_sorts(tmp_path):
    top = tmp_path / "k8s"
    for name in (
        "b.yaml",
        "a.yml",
        "c.json",
        "d.txt",
        "Kustomization.bak",
        "sub/z.yaml",
        "sub/README.md",
        ".hidden.yaml",
        "zz/Kustomization",
    ):
        (top / name).parent.mkdir(parents=True, exist_ok=True)
        (top / name).write_text("{}\n")
    files, trees = review_input.input_files([str(top), "-", str(tmp_path / "x.yaml")])
    assert files == [str(top / n) for n in ("a.yml", "b.yaml", "c.json", "sub/z.yaml", "zz/Kustomization")] + [
        "-",
        str(tmp_path / "x.yaml"),
    ]
    assert trees == {str(top / "zz" / "Kustomization"): str(top / "zz" / "Kustomization")}


def test_a_file_reached_twice_is_read_once_and_the_files_after_it_still_are(tmp_path):
    top = tmp_path / "k8s"
    top.mkdir()
    for name in ("a.yaml", "c.yaml"):
        (top / name).write_text("{}\n")
    os.symlink(top / "a.yaml", top / "b.yaml")
    assert review_input.input_files([str(top)]) == ([str(top / "a.yaml"), str(top / "c.yaml")], {})


def test_dash_is_stdin_even_beside_a_folder_named_dash(tmp_path, monkeypatch):
    (tmp_path / "-").mkdir()
    (tmp_path / "-" / "kustomization.yaml").write_text("{}\n")
    monkeypatch.chdir(tmp_path)
    assert review_input.input_files(["-"]) == (["-"], {})


def test_kustomize_trees_map_each_file_to_the_outermost_kustomization(tmp_path):
    top = tmp_path / "deploy"
    for name in (
        "plain.yaml",
        "base/kustomization.yml",
        "base/job.yaml",
        "base/Kustomization",
        "base/inner/kustomization.yaml",
        "base/inner/patch.yaml",
        "overlay/kustomization.yaml",
        "overlay/x/y.yaml",
        "baseline/z.yaml",
    ):
        (top / name).parent.mkdir(parents=True, exist_ok=True)
        (top / name).write_text("{}\n")
    files, trees = review_input.input_files([str(top)])
    base = str(top / "base" / "kustomization.yml")  # the first name of KUSTOMIZATION_FILES found
    overlay = str(top / "overlay" / "kustomization.yaml")
    assert trees == {
        str(top / "base" / "Kustomization"): base,
        str(top / "base" / "inner" / "kustomization.yaml"): base,
        str(top / "base" / "inner" / "patch.yaml"): base,
        str(top / "base" / "job.yaml"): base,
        str(top / "base" / "kustomization.yml"): base,
        str(top / "overlay" / "kustomization.yaml"): overlay,
        str(top / "overlay" / "x" / "y.yaml"): overlay,
    }
    assert str(top / "plain.yaml") in files and str(top / "baseline" / "z.yaml") in files
    # a kustomization file named as an argument is its own tree; other names are not
    k = str(top / "overlay" / "kustomization.yaml")
    assert review_input.input_files([k, str(top / "plain.yaml")]) == ([k, str(top / "plain.yaml")], {k: k})
    assert review_input.input_files(["-"]) == (["-"], {})


def test_a_kustomize_tree_is_not_checked_unless_a_file_carries_the_label(tmp_path):
    top = tmp_path / "kust"
    write(
        top / "kustomization.yaml",
        {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": ["svc.yaml"]},
    )
    write(top / "svc.yaml", {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}})
    code, out, err = review("--policy", "erdma", "--output", "json", str(top))
    assert code == 0, err
    why = (
        f"part of a kustomize tree ({top}/kustomization.yaml): its files are bases and patches, not the objects "
        f"the cluster gets; render it first: kubectl kustomize {top} | rdma-webhook review -"
    )
    assert [(r["outcome"], r["allowed"], r["messages"]) for r in records(out)] == [("not-checked", True, [why])] * 2
    write(top / "job.yaml", pod())
    code, out, err = review("--policy", "erdma", "--output", "json", str(top))
    assert code == 2 and f"error: {top}/job.yaml: {why}\n" in err
    assert review_input.kustomize_message("kustomization.yaml") == (
        "part of a kustomize tree (kustomization.yaml): its files are bases and patches, not the objects the cluster "
        "gets; render it first: kubectl kustomize . | rdma-webhook review -"
    )


def test_is_kustomization():
    k = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}
    assert review_input.is_kustomization(k)
    assert review_input.is_kustomization({**k, "kind": "Component", "apiVersion": "kustomize.config.k8s.io/v1alpha1"})
    assert not review_input.is_kustomization({**k, "kind": "Kustomize"})
    assert not review_input.is_kustomization({**k, "apiVersion": "kustomize.toolkit.fluxcd.io/v1"})
    assert not review_input.is_kustomization({"kind": "Kustomization"})
    assert not review_input.is_kustomization([k])


def test_walk_skips_hidden_and_sorts_and_walks_a_folder_once(tmp_path):
    for name in ("b/x.yaml", "a/y.yaml", ".git/z.yaml", "a/.h.yaml", "a/b.yaml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}")
    os.symlink(tmp_path / "a", tmp_path / "c")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "w.yaml").write_text("{}")
    os.symlink(tmp_path / "a", tmp_path / "b" / "again")
    walked = [(os.path.relpath(r, tmp_path), f) for r, f in review_input._walk(str(tmp_path))]
    # b/again and c are a again: skipped, and the walk goes on to d
    assert walked == [(".", []), ("a", ["b.yaml", "y.yaml"]), ("b", ["x.yaml"]), ("d", ["w.yaml"])]


# -- bad input in a template that would be checked -------------------------------------------------------


def problems(template: dict, path: str = "spec.template") -> list[str]:
    return review_input.template_problems(path, template)


def test_numbers_booleans_and_nulls_in_commands_and_env(tmp_path):
    c = container(
        "trainer",
        command=["mpirun", "-np", 16, True, False, 1.5, None],
        args=["--x", 2],
        env=[
            {"name": "NCCL_IB_DISABLE", "value": 1},
            {"name": "A", "value": True},
            {"name": "B", "value": False},
            {"value": 2.5},
            {"name": "C", "value": None},
            {"name": "D"},
            "junk",
            {"name": 7, "value": 3},
        ],
    )
    got = problems({"spec": {"containers": [c]}})
    w = "spec.template, container trainer"
    refuses = "not a string; the API server refuses such a pod and no setting after it would be read"
    assert got == [
        f"{w}: command[2] is 16, a number, {refuses}: quote it ('16')",
        f"{w}: command[3] is True, a boolean, {refuses}: quote it ('true')",
        f"{w}: command[4] is False, a boolean, {refuses}: quote it ('false')",
        f"{w}: command[5] is 1.5, a number, {refuses}: quote it ('1.5')",
        f"{w}: command[6] is None, null, {refuses}: quote it ('None')",
        f"{w}: args[1] is 2, a number, {refuses}: quote it ('2')",
        f"{w}: env[0] (NCCL_IB_DISABLE) value is 1, a number, not a string; the API server refuses such a pod: "
        "quote it ('1')",
        f"{w}: env[1] (A) value is True, a boolean, not a string; the API server refuses such a pod: quote it ('true')",
        f"{w}: env[2] (B) value is False, a boolean, not a string; the API server refuses such a pod: quote it ('false')",
        f"{w}: env[3] value is 2.5, a number, not a string; the API server refuses such a pod: quote it ('2.5')",
        f"{w}: env[7] value is 3, a number, not a string; the API server refuses such a pod: quote it ('3')",
    ]
    assert review_input._describe([1]) == "[1], a list" and review_input._describe({}) == "{}, a dict"
    assert review_input._describe("s") == "'s', a str"


def test_a_command_that_is_not_a_list_does_not_stop_the_args_being_checked():
    c = container("trainer", command="torchrun train.py", args=["--nproc", 8])
    assert problems({"spec": {"containers": [c]}}) == [
        "spec.template, container trainer: args[1] is 8, a number, not a string; the API server refuses such a pod "
        "and no setting after it would be read: quote it ('8')"
    ]


def test_a_utf8_manifest_is_read_as_utf8_whatever_the_locale(tmp_path):
    """A CI runner with the POSIX locale (no coercion to UTF-8): review still reads a UTF-8
    manifest (a comment or description in another language). Run as a process, with the
    package imported from where this one is (the copy, under mutation_verify)."""
    import subprocess

    import webhook

    f = tmp_path / "pod.yaml"
    f.write_text("# entraînement réparti\n" + yaml.safe_dump(pod(), sort_keys=False), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "LANG", "PYTHONUTF8", "PYTHONIOENCODING"))}
    env.update(
        LC_ALL="C",
        PYTHONCOERCECLOCALE="0",
        PYTHONUTF8="0",
        PYTHONPATH=str(Path(webhook.__file__).resolve().parent.parent),
    )
    out = subprocess.run(
        [
            sys.executable,
            "-P",
            "-m",
            "webhook",
            "review",
            "--policy",
            "erdma",
            "--cluster-state",
            STATE,
            "--output",
            "json",
            str(f),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["outcome"] == "mutated"


def test_placeholders_where_the_decision_reads(tmp_path):
    c = container(
        "trainer",
        command=[
            "sh",
            "-c",
            "NCCL_NET='{{ .Values.net }}' torchrun",
            "FI_PROVIDER={{x}}",
            "OTHER={{ y }}",
            "NCCL_SOCKET_IFNAME=${IFACE}",
        ],
        env=[
            {"name": "NCCL_IB_HCA", "value": "${HCA}"},
            {"name": "FI_PROVIDER", "value": "$PROVIDER"},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": " {{ .gpus }} "},
            {"name": "NCCL_DEBUG", "value": "$ NOT"},
            {"name": "HOME", "value": "${HOME}"},
            {"name": "NCCL_ALGO", "value": "a$B"},
            {"name": "NCCL_PROTO", "valueFrom": {}},
        ],
    )
    t = {
        "metadata": {
            "labels": {**INJECT, "k8s.v1.cni.cncf.io/networks": "{{ .nets }}"},
            "annotations": {
                "rdma-webhook.io/policy": "${POLICY}",
                "k8s.v1.cni.cncf.io/networks": "$NETS",
                "other": "{{ x }}",
            },
        },
        "spec": {
            "initContainers": [
                container("setup", env=[{"name": "NCCL_NET", "value": "{{ n }}"}]),
                {"image": "x", "env": [{"name": "NCCL_NET", "value": "${N}"}]},
            ],
            "containers": [c, {"name": "", "env": [{"name": "NCCL_NET", "value": "${M}"}]}, "junk"],
        },
    }
    got = problems(t, "")
    later = "a template placeholder not filled in yet: render the manifest first"
    reads = "is a template placeholder not filled in yet; the decision reads this variable: render the manifest first"
    assert got == [
        f"metadata.annotations[rdma-webhook.io/policy] is '${{POLICY}}', {later}",
        f"metadata.annotations[k8s.v1.cni.cncf.io/networks] is '$NETS', {later}",
        f"metadata.labels[k8s.v1.cni.cncf.io/networks] is '{{{{ .nets }}}}', {later}",
        f"container trainer: command[2] sets NCCL_NET='{{{{ .Values.net }}}}, {later}",
        f"container trainer: command[3] sets FI_PROVIDER={{{{x}}}}, {later}",
        f"container trainer: env[0] (NCCL_IB_HCA) value '${{HCA}}' {reads}",
        f"container trainer: env[1] (FI_PROVIDER) value '$PROVIDER' {reads}",
        f"container trainer: env[2] (NVIDIA_VISIBLE_DEVICES) value ' {{{{ .gpus }}}} ' {reads}",
        f"containers[1]: env[0] (NCCL_NET) value '${{M}}' {reads}",
        f"init container setup: env[0] (NCCL_NET) value '{{{{ n }}}}' {reads}",
        f"initContainers[1]: env[0] (NCCL_NET) value '${{N}}' {reads}",
    ]
    assert problems(t, "spec.x")[0].startswith("spec.x, metadata.annotations[")


def test_quantities_that_are_not_ones():
    limits = {
        "nvidia.com/gpu": "",
        "rdma/ib": "{{ .n }}",
        "cpu": "lots",
        "memory": "inf",
        "a/b": "$N",
        "ok": "8",
        "ok2": 8,
        "ok3": "500m",
    }
    t = {"spec": {"containers": [{"name": "c", "resources": {"limits": limits, "requests": {"x/y": None}}}]}}
    assert problems(t) == [
        "spec.template, container c: resources.limits[nvidia.com/gpu] is empty: give a quantity such as 8 "
        "(an unrendered template?)",
        "spec.template, container c: resources.limits[rdma/ib] is '{{ .n }}', a template placeholder ({{ .n }}) not "
        "filled in yet: render the manifest first",
        "spec.template, container c: resources.limits[cpu] is 'lots', not a quantity (such as 8, 500m or 64Gi): "
        "fix the value",
        "spec.template, container c: resources.limits[memory] is 'inf', not a finite quantity: fix the value",
        "spec.template, container c: resources.limits[a/b] is '$N', a template placeholder ($N) not filled in yet: "
        "render the manifest first",
        "spec.template, container c: resources.requests[x/y] is empty: give a quantity such as 8 "
        "(an unrendered template?)",
    ]


@pytest.mark.parametrize(
    "template",
    [
        None,
        [],
        {"metadata": [], "spec": []},
        {"spec": {"containers": {}}},
        {
            "metadata": {"labels": [], "annotations": None},
            "spec": {
                "containers": [{"name": "c", "command": "x", "env": {}, "resources": {"limits": [], "requests": "x"}}]
            },
        },
        {"spec": {"containers": [{"name": "c", "resources": []}]}},
    ],
)
def test_shapes_that_hold_nothing_to_check(template):
    assert problems(template) == []


def test_bad_input_through_review_names_file_template_container_and_field(tmp_path):
    job = pytorchjob("bad", env=[{"name": "NCCL_IB_HCA", "value": "{{ .Values.hca }}"}])
    f = write(tmp_path / "job.yaml", job)
    code, out, err = review("--policy", "erdma", "--output", "json", f)
    assert code == 2
    msg = (
        "env[0] (NCCL_IB_HCA) value '{{ .Values.hca }}' is a template placeholder not filled in yet; the decision "
        "reads this variable: render the manifest first"
    )
    expected = (
        f"spec.pytorchReplicaSpecs.Master.template, container pytorch: {msg}; "
        f"spec.pytorchReplicaSpecs.Worker.template, container pytorch: {msg}"
    )
    assert err == NO_STATE + f"error: {f}: {expected}\n"
    (rec,) = records(out)
    assert rec["messages"] == [expected] and rec["outcome"] == "error"
    # a pod: no template path before the container
    g = write(tmp_path / "pod.yaml", pod(containers=[container(env=[{"name": "NCCL_NET", "value": 0}])]))
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, g)
    assert code == 2 and out == ""
    assert err == (
        f"error: {g}: container main: env[0] (NCCL_NET) value is 0, a number, not a string; the API server "
        "refuses such a pod: quote it ('0')\n"
    )


# -- review.py: what is checked and what is not -------------------------------------------------------

# Every kind `review` knows to hold no pods (workloads.COMPANION_KINDS), written out here.
COMPANIONS = [
    "Namespace",
    "Service",
    "Endpoints",
    "EndpointSlice",
    "ConfigMap",
    "Secret",
    "ServiceAccount",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "StorageClass",
    "VolumeAttachment",
    "CSIDriver",
    "LimitRange",
    "ResourceQuota",
    "PriorityClass",
    "RuntimeClass",
    "Ingress",
    "IngressClass",
    "NetworkPolicy",
    "PodDisruptionBudget",
    "HorizontalPodAutoscaler",
    "Role",
    "RoleBinding",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "APIService",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "Lease",
    "CertificateSigningRequest",
    "FlowSchema",
    "PriorityLevelConfiguration",
    "Event",
    "DeviceClass",
    "ResourceClaimTemplate",
    "ResourceClaim",
    "ResourceSlice",
    "ResourceFlavor",
    "ClusterQueue",
    "LocalQueue",
    "WorkloadPriorityClass",
    "AdmissionCheck",
    "Topology",
    "Cohort",
    "ProvisioningRequestConfig",
    "MultiKueueConfig",
    "MultiKueueCluster",
    "Queue",
    "PodGroup",
    "NetworkAttachmentDefinition",
    "Gateway",
    "GatewayClass",
    "HTTPRoute",
    "GRPCRoute",
    "Certificate",
    "Issuer",
    "ClusterIssuer",
    "ServiceMonitor",
    "PodMonitor",
    "PrometheusRule",
    "Kustomization",
    "ScaledObject",
    "TriggerAuthentication",
    "WorkflowEventBinding",
    "EventSource",
    "Sensor",
    "RdmaPolicy",
]


def test_the_companion_kinds_are_these():
    from webhook.kinds import workloads

    assert len(COMPANIONS) == len(set(COMPANIONS)) and workloads.COMPANION_KINDS == frozenset(COMPANIONS)


@pytest.mark.parametrize("strict", [(), ("--strict",)])
def test_every_companion_kind_holds_no_pods_even_with_strict(tmp_path, strict):
    f = write(
        tmp_path / "companions.yaml",
        *({"apiVersion": "example.com/v1", "kind": k, "metadata": {"name": k.lower()}} for k in COMPANIONS),
    )
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, *strict, f)
    assert code == 0 and out == ""
    assert err.splitlines() == [f"{f}#{i}: {k}: not checked (holds no pods)" for i, k in enumerate(COMPANIONS, 1)]


def test_what_is_not_a_pod_is_said_on_stderr_and_strict_refuses_it(tmp_path):
    docs = [
        {
            "apiVersion": "example.com/v1",
            "kind": "Gadget",
            "metadata": {"name": "g"},
            "spec": {"template": {"metadata": {"labels": dict(INJECT)}}},
        },
        {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}},
        {"apiVersion": "v1"},
        {"name": "x", "replicas": 2},
        {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"},
        tiny(),
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}},
    ]
    f = write(tmp_path / "in.yaml", *docs)
    kust = (
        f"part of a kustomize tree ({f}#5): its files are bases and patches, not the objects the cluster gets; "
        f"render it first: kubectl kustomize {tmp_path} | rdma-webhook review -"
    )
    labelled = (
        "unknown kind that carries pod templates labelled rdma-webhook.io/inject: the pods it makes are not "
        "checked here (review them as they are made, or use --strict to fail)"
    )
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, f)
    assert code == 0 and out == ""
    assert err.splitlines() == [
        f"{f}#1: Gadget: not checked ({labelled})",
        f"{f}#2: Widget: not checked (unknown kind: pods it may create are not checked)",
        f"{f}#3: not checked (not a Kubernetes object (no kind))",
        f"{f}#4: not checked (not a Kubernetes object (no apiVersion, no kind))",
        f"{f}#5: Kustomization: not checked ({kust})",
        f"{f}#6: RdmaPolicy: not checked (holds no pods; a policy in force for this review)",
        f"{f}#7: Service: not checked (holds no pods)",
    ]
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, "--strict", "--output", "json", f)
    assert code == 2
    refuses = "--strict refuses what it cannot check"
    assert err.splitlines() == [
        f"error: {f}#1: {labelled} ('Gadget', 'example.com/v1'); {refuses}",
        f"error: {f}#2: unknown kind: pods it may create are not checked ('Widget', 'example.com/v1'); {refuses}",
        f"error: {f}#3: not a Kubernetes object (no kind) (None, 'v1'); {refuses}",
        f"error: {f}#5: {kust} ('Kustomization', 'kustomize.config.k8s.io/v1beta1'); {refuses}",
    ]
    recs = records(out)
    assert [(r["document"], r["outcome"], r["allowed"]) for r in recs] == [
        (1, "error", False),
        (2, "error", False),
        (3, "error", False),
        (4, "not-checked", True),
        (5, "error", False),
        (6, "not-checked", True),
        (7, "not-checked", True),
    ]
    assert recs[1]["messages"] == [
        f"unknown kind: pods it may create are not checked ('Widget', 'example.com/v1'); {refuses}"
    ]
    assert recs[1]["kind"] == "Widget" and recs[1]["apiVersion"] == "example.com/v1" and recs[1]["name"] == "w"
    assert recs[3]["messages"] == ["not a Kubernetes object (no apiVersion, no kind)"]


def test_an_unknown_kind_without_the_label_is_not_said_to_carry_it(tmp_path):
    f = write(
        tmp_path / "in.yaml",
        {
            "apiVersion": "example.com/v1",
            "kind": "Gadget",
            "spec": {"template": {"metadata": {"labels": {"app": "x"}}}},
        },
    )
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, "--output", "json", f)
    assert code == 0 and err == ""
    assert records(out)[0]["messages"] == ["unknown kind: pods it may create are not checked"]


def test_documents_that_are_no_objects_and_reviews_without_a_uid_are_bad_input(tmp_path):
    f = write(
        tmp_path / "in.yaml",
        ["a"],
        "text",
        3,
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": ""}},
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": "x"},
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"},
    )
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, "--output", "json", f)
    assert code == 2
    assert err.splitlines() == [
        f"error: {f}#1: expected a Kubernetes object or an AdmissionReview, found a list",
        f"error: {f}#2: expected a Kubernetes object or an AdmissionReview, found a str",
        f"error: {f}#3: expected a Kubernetes object or an AdmissionReview, found a int",
        f"error: {f}#4: AdmissionReview without request.uid",
        f"error: {f}#5: AdmissionReview without request.uid",
        f"error: {f}#6: AdmissionReview without request.uid",
    ]
    recs = records(out)
    assert [r["messages"] for r in recs][:2] == [
        ["expected a Kubernetes object or an AdmissionReview, found a list"],
        ["expected a Kubernetes object or an AdmissionReview, found a str"],
    ]
    assert [(r["kind"], r["apiVersion"], r["outcome"], r["document"]) for r in recs] == [
        (None, None, "error", 1),
        (None, None, "error", 2),
        (None, None, "error", 3),
        ("AdmissionReview", "admission.k8s.io/v1", "error", 4),
        ("AdmissionReview", "admission.k8s.io/v1", "error", 5),
        ("AdmissionReview", "admission.k8s.io/v1", "error", 6),
    ]


def admission_review(
    obj: dict, operation: str = "CREATE", namespace: str | None = "ml-training", kind: object = None
) -> dict:
    req = {
        "uid": "u-1",
        "kind": {"group": "", "version": "v1", "kind": "Pod"} if kind is None else kind,
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": operation,
        "object": obj,
    }
    if namespace is not None:
        req["namespace"] = namespace
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def test_an_admission_review_is_recorded_by_its_object(tmp_path):
    p = pod("ar-pod", ns="llm-serving")
    q = pod(ns=None)
    del q["metadata"]["name"]
    q["metadata"]["generateName"] = "gen-"
    f = write(
        tmp_path / "in.yaml",
        admission_review(p),
        admission_review(p, namespace=None),
        admission_review(q, namespace=None, kind="Pod"),
    )
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, "--output", "json", f)
    assert code == 1 and err == ""
    recs = records(out)
    # the request's namespace, else the object's; a request that names none is not put in `default`
    assert [(r["kind"], r["objectKind"], r["namespace"], r["name"], r["outcome"], r["rules"]) for r in recs] == [
        ("AdmissionReview", "Pod", "ml-training", "ar-pod", "mutated", []),
        ("AdmissionReview", "Pod", "llm-serving", "ar-pod", "mutated", []),
        ("AdmissionReview", None, None, "gen-", "denied", ["namespace-unknown"]),
    ]
    assert recs[0]["apiVersion"] == "admission.k8s.io/v1" and recs[0]["file"] == f and recs[2]["document"] == 3


def test_an_update_is_not_checked_for_bad_input_a_create_is(tmp_path):
    p = pod(containers=[container(env=[{"name": "NCCL_NET", "value": "{{ x }}"}])])
    f = write(tmp_path / "in.yaml", admission_review(p, operation="UPDATE"))
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, "--output", "json", f)
    assert code == 0 and err == ""
    (rec,) = records(out)
    assert (rec["outcome"], rec["messages"]) == ("skipped", ["operation UPDATE: only CREATE is considered"])
    g = write(tmp_path / "in2.yaml", admission_review(p), pod())
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, "--output", "json", g)
    assert code == 2 and [r["outcome"] for r in records(out)] == ["error", "mutated"]
    assert err == (
        f"error: {g}#1: container main: env[0] (NCCL_NET) value '{{{{ x }}}}' is a template placeholder not "
        "filled in yet; the decision reads this variable: render the manifest first\n"
    )


def test_output_review_prints_each_answer_with_the_uid_review_made(tmp_path):
    f = write(
        tmp_path / "in.yaml",
        pod(),
        pod("bad", containers=[container(env=IB_DISABLE)]),
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}},
    )
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, f)
    assert code == 1
    answers = json.loads("[" + out.replace("}\n{", "},\n{") + "]")
    assert [a["response"]["uid"] for a in answers] == [f"review-{f}#1", f"review-{f}#2"]
    assert [a["response"]["allowed"] for a in answers] == [True, False]
    assert answers[0]["apiVersion"] == "admission.k8s.io/v1" and answers[0]["kind"] == "AdmissionReview"
    assert out.startswith('{\n  "apiVersion": "admission.k8s.io/v1",\n  "kind": "AdmissionReview",\n  "response": {\n')
    assert err == f"{f}#3: Service: not checked (holds no pods)\n"
    # one document: the file's name alone
    g = write(tmp_path / "one.yaml", pod())
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, g)
    assert code == 0 and json.loads(out)["response"]["uid"] == f"review-{g}"


def test_the_exit_status_is_bad_input_over_denied_whatever_the_order(tmp_path):
    denied = pod("bad", containers=[container(env=IB_DISABLE)])
    error = pod("err", containers=[container(gpus="")])
    for docs, status in (([denied], 1), ([denied, error], 2), ([error, denied], 2), ([pod(), denied, pod()], 1)):
        f = write(tmp_path / "in.yaml", *docs)
        code, out, err = review("--policy", "erdma", "--cluster-state", STATE, "--output", "json", f)
        assert code == status, (docs, err)
        # each document has its record: bad input does not stop the next
        assert [r["outcome"] for r in records(out)] == [
            {"bad": "denied", "err": "error", "trainer": "mutated"}[d["metadata"]["name"]] for d in docs
        ]


def test_a_cluster_state_that_cannot_be_read_is_bad_input(tmp_path):
    f = write(tmp_path / "in.yaml", pod())
    missing = str(tmp_path / "nope.yaml")
    code, out, err = review("--policy", "erdma", "--cluster-state", missing, "--explain", f)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and missing in err and err.count("\n") == 1


def test_the_namespace_of_objects_that_name_none(tmp_path):
    f = write(tmp_path / "in.yaml", pod("a", ns=None), pod("b", ns="llm-serving"))
    code, out, err = review(
        "--policy", "erdma", "--cluster-state", STATE, "--namespace", "ml-training", "--output", "json", f
    )
    assert code == 0, err
    assert [(r["namespace"], r["outcome"]) for r in records(out)] == [
        ("ml-training", "mutated"),
        ("llm-serving", "mutated"),
    ]
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, "--output", "json", f)
    assert code == 2
    assert [r["outcome"] for r in records(out)] == ["error", "mutated"]
    assert err.splitlines()[0] == (
        f"error: {f}#1: namespace 'default' is not in {STATE}: add it to the cluster-state file (kubectl get "
        f"namespace default -o yaml >> {STATE}) or to the input, or name another with --namespace for objects that "
        "name none"
    )
    assert records(out)[0]["messages"][0].startswith("namespace 'default' is not in ")
    # without a cluster-state, `default` is assumed opted in
    code, out, err = review("--policy", "erdma", "--output", "json", f)
    assert code == 0 and [r["namespace"] for r in records(out)] == ["default", "llm-serving"]


def test_a_pod_not_labelled_in_a_namespace_missing_from_the_state_is_not_bad_input(tmp_path):
    p = pod("plain", ns="elsewhere", labels={"app": "x"})
    f = write(tmp_path / "in.yaml", p)
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, "--output", "json", f)
    assert code == 0 and err == ""
    assert records(out)[0]["outcome"] == "skipped"


def test_a_cluster_scoped_workload_has_no_namespace_and_is_checked_for_bad_input(tmp_path):
    cwt = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "ClusterWorkflowTemplate",
        "metadata": {"name": "nccl"},
        "spec": {
            "templates": [
                {
                    "name": "run",
                    "metadata": {"labels": dict(INJECT)},
                    "container": container("trainer", env=[{"name": "NCCL_NET", "value": 1}]),
                }
            ]
        },
    }
    f = write(tmp_path / "in.yaml", cwt)
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, "--namespace", "team", "--output", "json", f)
    assert code == 2
    assert err == (
        f"error: {f}: spec.templates[run], container main: env[0] (NCCL_NET) value is 1, a number, "
        "not a string; the API server refuses such a pod: quote it ('1')\n"
    )
    (rec,) = records(out)
    assert rec["namespace"] is None and rec["name"] == "nccl"


# -- what the input gives the decision: runtimes, ConfigMaps, DRA objects, in the namespace they name --------


def trainjob_with_runtime() -> list[dict]:
    """tests/manifests/allowed/trainjob-own-runtime.yaml (a TrainingRuntime and its TrainJob) with no
    namespaces: both go where --namespace says."""
    docs = [
        d
        for d in yaml.safe_load_all(
            (ROOT / "tests" / "manifests" / "allowed" / "trainjob-own-runtime.yaml").read_text()
        )
        if d
    ]
    for d in docs:
        d["metadata"].pop("namespace", None)
    return docs


@pytest.mark.parametrize("ns", [("--namespace", "team"), ()])
def test_a_trainjob_finds_its_runtime_in_the_namespace_objects_are_put_in(tmp_path, ns):
    f = write(tmp_path / "tj.yaml", *trainjob_with_runtime())
    code, out, err = review("--policy", "erdma", "--output", "json", *ns, f)
    assert code == 0, err
    assert [(r["kind"], r["namespace"], r["outcome"]) for r in records(out)][:2] == [
        ("TrainingRuntime", ns[1] if ns else "default", "mutated"),
        ("TrainJob", ns[1] if ns else "default", "mutated"),
    ]


def test_a_trainjob_whose_runtime_is_not_given_is_bad_input(tmp_path):
    f = write(tmp_path / "tj.yaml", trainjob_with_runtime()[1])
    code, out, err = review("--policy", "erdma", "--output", "json", "--namespace", "team", f)
    assert code == 2
    g = write(tmp_path / "two.yaml", trainjob_with_runtime()[1], pod())
    code2, out2, _ = review("--policy", "erdma", "--output", "json", "--namespace", "team", g)
    assert code2 == 2 and [r["outcome"] for r in records(out2)] == ["error", "mutated"]
    msg = (
        "runtime TrainingRuntime 'deepspeed-erdma' in namespace 'team' is not known, so the pods of this TrainJob "
        "cannot be checked (give the runtime in the input, or in --cluster-state)"
    )
    assert err == NO_STATE + f"error: {f}: {msg}\n"
    assert records(out)[0]["messages"] == [msg]


@pytest.mark.parametrize("ns", [("--namespace", "team"), ()])
def test_a_script_from_a_configmap_in_the_input_is_read(tmp_path, ns):
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "launch"},
        "data": {"run.sh": "#!/bin/sh\nexport NCCL_IB_DISABLE=1\nexec torchrun train.py\n"},
    }
    p = pod(
        ns=None,
        containers=[
            container(command=["bash", "/scripts/run.sh"], volumeMounts=[{"name": "s", "mountPath": "/scripts"}])
        ],
        volumes=[{"name": "s", "configMap": {"name": "launch"}}],
    )
    f = write(tmp_path / "cm.yaml", cm, p)
    code, out, err = review("--policy", "erdma", "--output", "json", *ns, f)
    assert code == 1, err
    rec = records(out)[1]
    assert rec["rules"] == ["command-fallback"] and rec["namespace"] == (ns[1] if ns else "default")
    assert "in the script /scripts/run.sh (ConfigMap 'launch') that the command runs" in rec["messages"][0]


def dra_input(pod_namespace: str | None) -> list[dict]:
    """tests/core/test_claims.py's EFA pod claiming an EFA DRA device under policy efa, with its DeviceClass
    and ResourceClaimTemplate (the template naming no namespace)."""
    import copy

    from core.test_claims import EXAMPLES, OBJECTS

    make = EXAMPLES["eks-efa-dra-template"][0]
    p = make()
    p["metadata"]["annotations"] = {"rdma-webhook.io/policy": "efa"}
    if pod_namespace is None:
        p["metadata"].pop("namespace", None)
    else:
        p["metadata"]["namespace"] = pod_namespace
    objs = [copy.deepcopy(o) for o in OBJECTS if o["metadata"]["name"] in ("efa.networking.k8s.aws", "efa-32")]
    for o in objs:
        o["metadata"].pop("namespace", None)
    return [*objs, p]


MISMATCH = (
    "this pod claims 'efa' (DeviceClass efa.networking.k8s.aws), another fabric's RDMA NIC; policy efa "
    "provides vpc.amazonaws.com/efa; select policy efa-dra with the annotation rdma-webhook.io/policy: "
    "efa-dra [fabric-mismatch]"
)


def test_dra_objects_in_the_input_are_put_in_the_namespace_objects_are_put_in(tmp_path):
    # the claim template in ml-training (--namespace): the pod's claim is judged, another fabric's: denied
    f = write(tmp_path / "a.yaml", *dra_input("ml-training"))
    code, out, err = review("--policies", POLICIES, "--output", "json", "--namespace", "ml-training", f)
    assert code == 1 and records(out)[-1]["messages"] == [MISMATCH]
    # the claim template in `default`, the pod in ml-training: the claim's template is not known, not judged
    code, out, err = review("--policies", POLICIES, "--output", "json", f)
    assert code == 0 and records(out)[-1]["outcome"] == "mutated"
    # both in `default`
    g = write(tmp_path / "b.yaml", *dra_input(None))
    code, out, err = review("--policies", POLICIES, "--output", "json", g)
    assert code == 1 and records(out)[-1]["messages"] == [MISMATCH]
    assert [r["outcome"] for r in records(out)[:-1]] == ["not-checked", "not-checked"]


def test_dra_objects_of_the_cluster_state_are_read(tmp_path):
    objs = dra_input("ml-training")
    for o in objs[:-1]:
        if o["kind"] == "ResourceClaimTemplate":
            o["metadata"]["namespace"] = "ml-training"
    state = tmp_path / "state.yaml"
    state.write_text(Path(STATE).read_text() + "\n---\n" + yaml.safe_dump_all(objs[:-1]))
    f = write(tmp_path / "pod.yaml", objs[-1])
    code, out, err = review("--policies", POLICIES, "--cluster-state", str(state), "--output", "json", f)
    assert code == 1, err
    assert records(out)[0]["messages"] == [MISMATCH]
    code, out, err = review("--policies", POLICIES, "--cluster-state", STATE, "--output", "json", f)
    assert code == 0 and records(out)[0]["outcome"] == "mutated"


# -- a catalogue policy named but not in force -------------------------------------------------------------


def test_a_catalogue_policy_named_by_the_pod_or_its_namespace_but_not_in_force_says_how_to_add_it(tmp_path):
    hint = "policy {0!r} is in the shipped catalogue but not in force for this review: add --policy {0}"
    research = namespace("research", **{"rdma-webhook.io/injection": "enabled", "rdma-webhook.io/policy": "ib-shared"})
    f = write(
        tmp_path / "in.yaml",
        pod("a", ns=None, annotations={"rdma-webhook.io/policy": "efa"}),
        research,
        pod("b", ns="research"),
        pod("c", ns="research", annotations={"rdma-webhook.io/policy": "ib-shared"}),
        pod("d", annotations={"rdma-webhook.io/policy": "my-own"}),
        pod("e", ns="research", annotations={"rdma-webhook.io/policy": "efa"}),
    )
    code, out, err = review("--policy", "erdma", "--output", "json", "--namespace", "team", f)
    assert code == 1
    recs = records(out)
    assert recs[0]["messages"] == [
        "annotation rdma-webhook.io/policy='efa' names no policy (known: erdma); fix the annotation [no-policy]",
        hint.format("efa"),
    ]
    assert recs[0]["namespace"] == "team"
    assert recs[2]["messages"] == [
        "namespace 'research' label rdma-webhook.io/policy='ib-shared' names no policy; "
        "ask the platform team to fix the label [no-policy]",
        hint.format("ib-shared"),
    ]
    assert recs[3]["messages"][1:] == [hint.format("ib-shared")]  # named twice, said once
    assert recs[4]["messages"] == [
        "annotation rdma-webhook.io/policy='my-own' names no policy (known: erdma); fix the annotation [no-policy]"
    ]
    assert recs[5]["messages"][1:] == [hint.format("efa"), hint.format("ib-shared")]
    # with the catalogue in force, nothing to add
    code, out, err = review("--policies", POLICIES, "--output", "json", f)
    assert code == 1
    assert not any("not in force" in m for r in records(out) for m in r["messages"])


def test_no_hint_when_the_named_policy_is_in_force(tmp_path):
    f = write(
        tmp_path / "in.yaml",
        namespace("research", **{"rdma-webhook.io/injection": "enabled", "rdma-webhook.io/policy": "erdma"}),
        pod("a", ns="research", annotations={"rdma-webhook.io/policy": "ib-shared"}),
    )
    code, out, err = review("--policy", "erdma", "--output", "json", f)
    assert code == 1
    assert records(out)[1]["messages"][1:] == [
        "policy 'ib-shared' is in the shipped catalogue but not in force for this review: add --policy ib-shared"
    ]


# -- colour, the Trainer release, Namespace documents that are not -------------------------------------------


class TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    "colour, tty, no_color, coloured",
    [
        ("auto", False, None, False),
        ("auto", True, None, True),
        ("auto", True, "1", False),
        ("auto", True, "", True),
        ("never", True, None, False),
        ("always", False, "1", True),
    ],
)
def test_colour_auto_is_on_a_terminal_without_no_color(tmp_path, monkeypatch, colour, tty, no_color, coloured):
    from webhook.cli.main import main

    if no_color is None:
        monkeypatch.delenv("NO_COLOR", raising=False)
    else:
        monkeypatch.setenv("NO_COLOR", no_color)
    f = write(tmp_path / "in.yaml", pod())
    out = TTY() if tty else io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["review", "--policy", "erdma", "--cluster-state", STATE, "--explain", "--color", colour, f])
    assert code == 0
    assert out.getvalue().startswith(esc("1", f) if coloured else f"{f}: Pod ml-training/trainer: MUTATED")


@pytest.mark.parametrize("release", ["v2.0", "v2.3"])
def test_the_trainer_release_is_the_one_asked_for(tmp_path, monkeypatch, release):
    from webhook.kinds import trainer

    monkeypatch.setenv(trainer.TRAINER_RELEASE_ENV, "v2.1")
    f = write(tmp_path / "in.yaml", pod())
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, "--trainer-release", release, f)
    assert code == 0 and os.environ[trainer.TRAINER_RELEASE_ENV] == release


def test_only_a_v1_namespace_with_a_name_is_used_as_cluster_state(tmp_path):
    off = {"rdma-webhook.io/injection": "disabled"}
    f = write(
        tmp_path / "in.yaml",
        {"apiVersion": "v2", "kind": "Namespace", "metadata": {"name": "a", "labels": off}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"labels": off}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "", "labels": off}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "c", "labels": off}},
        pod(ns="a"),
        pod(ns="c"),
    )
    code, out, err = review("--policy", "erdma", "--output", "json", f)
    assert code == 0, err
    recs = records(out)
    assert [r["outcome"] for r in recs] == ["not-checked"] * 4 + ["mutated", "skipped"]
    assert [r["messages"][0] for r in recs[:4]] == ["holds no pods"] * 3 + [
        "holds no pods; its labels decide opt-in and policy for the documents in it"
    ]


@pytest.mark.parametrize(
    "meta",
    [
        "b",
        {"name": ["a"]},
        {"name": {"a": 1}},
        {"name": 5},
        {"name": "a", "labels": ["x"]},
        {"name": "a", "labels": "x"},
    ],
)
def test_a_namespace_document_the_api_server_would_refuse_is_not_used_and_does_not_crash_review(tmp_path, meta):
    """Found by this file: such a document made `review` stop with a traceback (exit 1, which a CI
    reads as "denied"). It is listed as holding no pods, and the namespace it names is not taken from it."""
    f = write(tmp_path / "in.yaml", {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}, pod(ns="a"))
    code, out, err = review("--policy", "erdma", "--output", "json", f)
    assert code == 0, err
    assert [(r["outcome"], r["messages"]) for r in records(out)] == [
        ("not-checked", ["holds no pods"]),
        ("mutated", []),
    ]


def test_explain_of_an_unreadable_file_and_a_kustomize_tree(tmp_path):
    missing = str(tmp_path / "missing.yaml")
    code, out, err = review("--policy", "erdma", "--explain", "--color", "never", missing)
    assert code == 2
    assert out == (
        f"{missing}: (no kind) (unnamed): ERROR\n  error {missing}: cannot read: No such file or directory\n\n"
    )
    top = tmp_path / "kust"
    write(top / "kustomization.yaml", {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"})
    write(top / "svc.yaml", {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}})
    why = (
        f"part of a kustomize tree ({top}/kustomization.yaml): its files are bases and patches, not the objects "
        f"the cluster gets; render it first: kubectl kustomize {top} | rdma-webhook review -"
    )
    code, out, err = review("--policy", "erdma", "--explain", "--color", "never", str(top))
    assert code == 0, err
    assert out == (
        f"{top}/kustomization.yaml: Kustomization (unnamed): NOT CHECKED\n  why: {why}\n\n"
        f"{top}/svc.yaml: Service s: NOT CHECKED\n  why: {why}\n\n"
    )
    code, out, err = review("--policy", "erdma", "--explain", "--color", "never", "--strict", str(top))
    assert code == 2
    assert out == (
        f"{top}/kustomization.yaml: Kustomization (unnamed): ERROR\n  error {why}\n\n"
        f"{top}/svc.yaml: Service s: ERROR\n  error {why}\n\n"
    )
    assert err == (NO_STATE + f"error: {top}/kustomization.yaml: {why}\nerror: {top}/svc.yaml: {why}\n")


def test_a_pod_that_would_be_checked_with_no_policy_in_force_and_one_that_would_not(tmp_path):
    f = write(tmp_path / "in.yaml", pod("plain", labels={"app": "x"}), pod(), pod("after", labels={"app": "x"}))
    code, out, err = review("--cluster-state", STATE, "--output", "json", f)
    assert code == 2
    recs = records(out)
    assert [r["outcome"] for r in recs] == ["skipped", "error", "skipped"]
    assert recs[1]["messages"][0].startswith("no policy is in force, so its pods cannot be judged: choose the policies")


def test_explain_of_a_skipped_an_unchanged_and_a_workload_one_of_whose_templates_names_no_policy(tmp_path):
    off = pytorchjob("off", ns="batch")
    cpu = pytorchjob("cpu")
    for spec in cpu["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["resources"] = {}
    named = pytorchjob("named")
    named["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["metadata"]["annotations"] = {
        "rdma-webhook.io/policy": "nope"
    }
    f = write(tmp_path / "in.yaml", tiny(), namespace("batch"), off, cpu, named)
    code, out, err = review("--explain", "--color", "never", f)
    assert code == 1, err
    master, worker = "spec.pytorchReplicaSpecs.Master.template", "spec.pytorchReplicaSpecs.Worker.template"
    no_gpu = (
        "no container requests a GPU (nvidia.com/gpu) or runs an MPI launcher, so none gets RDMA (a pod without GPUs)"
    )
    nope = "annotation rdma-webhook.io/policy='nope' names no policy (known: tiny-ib); fix the annotation [no-policy]"
    blocks = out.split("\n\n")
    # labelled templates in a namespace not opted in: said so, not "no template carries the label" (issue 42)
    assert blocks[2] == (
        f"{f}#3: PyTorchJob batch/off: SKIPPED\n  why: spec.pytorchReplicaSpecs.Master.template, "
        f"spec.pytorchReplicaSpecs.Worker.template carry rdma-webhook.io/inject=true, but namespace 'batch' does "
        f"not carry rdma-webhook.io/injection=enabled: their pods get no RDMA"
    )
    assert blocks[3] == "\n".join(
        [
            f"{f}#4: PyTorchJob ml-training/cpu: UNCHANGED by policy tiny-ib",
            f"  why: {master}: {no_gpu}",
            f"  why: {worker}: {no_gpu}",
            f"  {master}: its pods would be UNCHANGED by policy tiny-ib",
            f"    why: {no_gpu}",
            f"  {worker}: its pods would be UNCHANGED by policy tiny-ib",
            f"    why: {no_gpu}",
        ]
    )
    assert blocks[4].splitlines()[:5] == [
        f"{f}#5: PyTorchJob ml-training/named: DENIED by policy tiny-ib",
        f"  deny {master}: {nope}",
        f"  {master}: its pods would be DENIED (denies the workload)",
        f"    deny {nope}",
        f"  {worker}: its pods would be MUTATED by policy tiny-ib",
    ]


def test_admission_reviews_of_a_service_of_a_bad_uid_and_of_a_kind_without_a_name(tmp_path):
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "ml-training"}}
    service = admission_review(svc, kind={"group": "", "version": "v1", "kind": "Service"})
    service["request"]["resource"] = {"group": "", "version": "v1", "resource": "services"}
    bad_uid = admission_review(pod())
    bad_uid["request"]["uid"] = 705
    not_an_object = admission_review("text", kind={"group": "batch", "version": "v1", "kind": "Job"})
    no_kind_name = admission_review(pod(), kind={"group": ""})
    f = write(tmp_path / "in.yaml", service, bad_uid, not_an_object, no_kind_name)
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, "--output", "json", f)
    assert code == 2
    assert err == f"error: {f}#2: AdmissionReview request has no uid\n"
    recs = records(out)
    assert [(r["objectKind"], r["name"], r["outcome"], r["messages"], r["allowed"]) for r in recs] == [
        ("Service", "s", "skipped", ["not a pod or workload"], True),
        ("Pod", "trainer", "error", ["AdmissionReview request has no uid"], False),
        ("Job", None, "skipped", ["no template carries the pod opt-in label"], True),
        (None, "trainer", "mutated", [], True),
    ]  # a request kind without a kind: a pod
    assert recs[3]["policy"] == "erdma" and recs[0]["warnings"] == [] and recs[0]["policy"] is None
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, f)
    answers = json.loads("[" + out.replace("}\n{", "},\n{") + "]")
    assert [a["response"]["uid"] for a in answers] == ["u-1", "u-1", "u-1"]  # a review's own uid


def test_yaml_dates_in_documents_review_reads_as_text(tmp_path):
    """PyYAML reads `2025-01-01` as a date, which JSON cannot hold: review looks for the opt-in
    label in such documents all the same."""
    top = tmp_path / "kust"
    write(top / "kustomization.yaml", {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"})
    (top / "job.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  annotations:\n    created: 2025-01-01\ndata: {a: b}\n"
    )
    (tmp_path / "gadget.yaml").write_text(
        "apiVersion: example.com/v1\nkind: Gadget\nmetadata:\n  name: g\nspec:\n"
        "  since: 2025-01-01\n  template:\n    metadata:\n      labels:\n"
        "        rdma-webhook.io/inject: 'true'\n"
    )
    code, out, err = review("--policy", "erdma", "--output", "json", str(top), str(tmp_path / "gadget.yaml"))
    assert code == 0, err
    recs = records(out)
    assert [r["outcome"] for r in recs] == ["not-checked"] * 3
    assert recs[2]["messages"][0].startswith("unknown kind that carries pod templates labelled")


def test_documents_of_a_kustomize_tree_are_not_used_as_policies_namespaces_or_configmaps(tmp_path):
    top = tmp_path / "kust"
    write(top / "kustomization.yaml", {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"})
    write(top / "policy.yaml", tiny())
    write(top / "ns.yaml", namespace("batch"))
    p = write(tmp_path / "pod.yaml", pod(ns="batch"))
    code, out, err = review("--output", "json", str(top), p)
    assert code == 2
    assert records(out)[-1]["messages"][0].startswith("no policy is in force, so its pods cannot be judged")
    code, out, err = review("--policy", "erdma", "--output", "json", str(top), p)
    assert (
        code == 0 and records(out)[-1]["outcome"] == "mutated"
    )  # batch assumed opted in: the tree's Namespace is not read


def test_a_single_document_file_is_named_without_a_number(tmp_path):
    f = write(tmp_path / "ns.yaml", namespace("ml-training"))
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, f)
    assert err == (
        f"note: {f}: Namespace 'ml-training' in the input is used instead of the one in {STATE} "
        "(its labels decide opt-in and policy)\n"
        f"{f}: Namespace: not checked (holds no pods; its labels decide opt-in and policy for the documents "
        "in it)\n"
    )
    g = write(tmp_path / "p.yaml", tiny())
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, g, g)
    assert code == 0 and "error" not in err  # the same file twice: one origin, not a policy given twice


def test_bad_input_in_a_namespace_not_opted_in_is_not_checked(tmp_path):
    bad = pod("bad", ns="batch", containers=[container(env=[{"name": "NCCL_NET", "value": 1}])])
    f = write(tmp_path / "in.yaml", namespace("batch"), bad)
    code, out, err = review("--policy", "erdma", "--output", "json", f)
    assert code == 0, err
    assert records(out)[1]["outcome"] == "skipped"


def test_explain_with_output_json_prints_the_text_only(tmp_path):
    f = write(tmp_path / "in.yaml", pod())
    code, out, err = review(
        "--policy", "erdma", "--cluster-state", STATE, "--explain", "--output", "json", "--color", "never", f
    )
    assert code == 0 and out.startswith(f"{f}: Pod ml-training/trainer: MUTATED by policy erdma\n")
    assert not any(line.startswith("{") for line in out.splitlines())


def test_the_record_keeps_the_warnings_whole_that_the_admission_answer_cuts(tmp_path):
    f = write(tmp_path / "job.yaml", pytorchjob("long"))
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, "--output", "json", f)
    assert code == 0, err
    (rec,) = records(out)
    assert len(rec["warnings"][0]) > 256 and rec["warnings"][0].endswith("memory-backed emptyDir 64Gi")
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, f)
    cut = json.loads(out)["response"]["warnings"][0]
    assert cut.endswith(" ...") and len(cut) < len(rec["warnings"][0])


def test_a_catalogue_hint_for_objects_without_a_namespace(tmp_path):
    """A cluster-scoped workload and a review whose request names no namespace: no namespace
    label to read, the pod's own annotation only."""
    cwt = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "ClusterWorkflowTemplate",
        "metadata": {"name": "nccl"},
        "spec": {
            "templates": [
                {
                    "name": "run",
                    "metadata": {"labels": dict(INJECT), "annotations": {"rdma-webhook.io/policy": "efa"}},
                    "container": container("trainer"),
                }
            ]
        },
    }
    ar = admission_review(pod("arp", annotations={"rdma-webhook.io/policy": "efa"}), namespace=None)
    f = write(tmp_path / "in.yaml", cwt, ar)
    code, out, err = review("--policy", "erdma", "--output", "json", f)
    assert code == 1
    named = "annotation rdma-webhook.io/policy='efa' names no policy (known: erdma); fix the annotation [no-policy]"
    recs = records(out)
    assert recs[0]["messages"][0] == f"spec.templates[run]: {named}"
    assert recs[1]["messages"] == [
        named,
        "policy 'efa' is in the shipped catalogue but not in force for this review: add --policy efa",
    ]


def test_a_workload_whose_own_metadata_is_odd_and_whose_template_names_a_policy_not_in_force(tmp_path):
    """The catalogue hint reads the object's metadata: one that is not a mapping, or annotations
    that are not one, are read as none (the template's annotation is what the decision named)."""

    def job(meta: object) -> dict:
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": meta,
            "spec": {
                "template": {
                    "metadata": {"labels": dict(INJECT), "annotations": {"rdma-webhook.io/policy": "efa"}},
                    "spec": {"containers": [container()]},
                }
            },
        }

    f = write(tmp_path / "in.yaml", job("x"), job({"name": "j", "annotations": ["x"]}))
    code, out, err = review("--policy", "erdma", "--output", "json", "--namespace", "ml-training", f)
    assert code == 1, err
    named = (
        "spec.template: annotation rdma-webhook.io/policy='efa' names no policy (known: erdma); fix the "
        "annotation [no-policy]"
    )
    assert [(r["name"], r["namespace"], r["rules"], r["messages"][0]) for r in records(out)] == [
        (None, "ml-training", ["no-policy"], named),
        ("j", "ml-training", ["no-policy"], named),
    ]


def test_a_trainjob_finds_a_cluster_runtime_of_the_cluster_state(tmp_path):
    docs = [
        d for d in yaml.safe_load_all((ROOT / "tests" / "manifests" / "allowed" / "trainjob.yaml").read_text()) if d
    ]
    f = write(tmp_path / "tj.yaml", *[d for d in docs if d["kind"] == "TrainJob"])
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, "--output", "json", f)
    assert code == 0, err
    (rec,) = records(out)
    assert rec["outcome"] == "mutated" and [t["outcome"] for t in rec["templates"]] == ["mutated"]
    code, out, err = review("--policy", "erdma", "--output", "json", f)  # no cluster-state: not known
    assert code == 2 and "ClusterTrainingRuntime 'torch-distributed'" in records(out)[0]["messages"][0]


def test_the_rules_of_a_record_are_sorted_and_each_given_once(tmp_path):
    """Findings come env-fallback first here (NCCL_IB_DISABLE in env, NCCL_NET=Socket in the
    command): the rules are sorted, each once; two findings of one rule give one rule."""
    mixed = container(
        env=[{"name": "NCCL_IB_DISABLE", "value": "1"}], command=["env", "NCCL_NET=Socket", "torchrun", "train.py"]
    )
    twice = container(env=[{"name": "NCCL_NET", "value": "Socket"}, {"name": "NCCL_IB_DISABLE", "value": "1"}])
    job = pytorchjob("job")
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"] = [dict(mixed, name="pytorch")]
    f = write(tmp_path / "p.yaml", pod("mixed", containers=[mixed]), pod("twice", containers=[twice]), job)
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, "--output", "json", f)
    assert code == 1, err
    mixed_rec, twice_rec, job_rec = records(out)
    assert mixed_rec["rules"] == ["command-fallback", "env-fallback"]
    assert [m.rsplit(" [", 1)[1] for m in mixed_rec["messages"]] == ["env-fallback]", "command-fallback]"]
    assert twice_rec["rules"] == ["env-fallback"] and len(twice_rec["messages"]) == 2
    assert job_rec["rules"] == ["command-fallback", "env-fallback"]
    assert [t["rules"] for t in job_rec["templates"]] == [["command-fallback", "env-fallback"]] * 2


def test_pods_that_are_not_objects_or_whose_metadata_is_not_are_denied_as_malformed(tmp_path):
    p = pod()
    p["metadata"] = "x"
    f = write(tmp_path / "in.yaml", admission_review("text"), admission_review(None), p)
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, "--output", "json", f)
    assert code == 1 and err == ""
    not_object = "the request's pod is malformed: the object is not a JSON object [malformed-pod]"
    assert [(r["namespace"], r["outcome"], r["messages"]) for r in records(out)] == [
        ("ml-training", "denied", [not_object]),
        ("ml-training", "denied", [not_object]),
        ("default", "denied", ["the request's pod is malformed: metadata must be an object [malformed-pod]"]),
    ]


def test_a_pod_without_an_api_version_is_reviewed_as_a_pod(tmp_path):
    p = pod()
    del p["apiVersion"]
    q = pod("q")
    q["apiVersion"] = 1
    f = write(tmp_path / "in.yaml", p, q)
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, "--output", "json", f)
    assert code == 0, err
    assert [(r["apiVersion"], r["outcome"]) for r in records(out)] == [(None, "mutated"), (1, "mutated")]


def test_an_admission_review_refused_before_its_request_is_read_is_recorded_by_its_request(tmp_path):
    ar = admission_review(pod("p", ns="other"), namespace="ml-training")
    ar["request"]["uid"] = ""
    f = write(tmp_path / "in.yaml", ar)
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, "--output", "json", f)
    assert code == 2 and err == f"error: {f}: AdmissionReview without request.uid\n"
    (rec,) = records(out)
    assert (rec["namespace"], rec["name"], rec["objectKind"], rec["messages"]) == (
        "ml-training",
        "p",
        "Pod",
        ["AdmissionReview without request.uid"],
    )


RECORD_KEYS = [
    "allowed",
    "apiVersion",
    "document",
    "file",
    "kind",
    "messages",
    "name",
    "namespace",
    "objectKind",
    "outcome",
    "policy",
    "rules",
    "templates",
    "warnings",
]


def test_every_record_has_exactly_the_fields_of_the_schema(tmp_path):
    import jsonschema

    schema = json.loads((ROOT / "webhook" / "cli" / "review-output.schema.json").read_text())
    assert sorted(schema["required"]) == RECORD_KEYS and schema["additionalProperties"] is False
    no_uid = admission_review(pod("p"))
    no_uid["request"]["uid"] = ""
    bad = admission_review(pod("b", containers=[container(gpus="")]))
    f = write(
        tmp_path / "in.yaml",
        admission_review(pod("a")),
        no_uid,
        bad,
        pod(),
        pytorchjob(),
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}},
        ["x"],
        admission_review(
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}},
            kind={"group": "", "version": "v1", "kind": "Service"},
        ),
    )
    code, out, err = review(
        "--policy", "erdma", "--cluster-state", STATE, "--output", "json", f, str(tmp_path / "missing.yaml")
    )
    assert code == 2
    recs = records(out)
    # the unreadable file first: every file is read before any document is decided
    assert [r["outcome"] for r in recs] == [
        "error",
        "mutated",
        "error",
        "error",
        "mutated",
        "mutated",
        "not-checked",
        "error",
        "skipped",
    ]
    for r in recs:
        assert sorted(r) == RECORD_KEYS, r
        jsonschema.validate(r, schema)
    assert [r["allowed"] for r in recs] == [False, True, False, False, True, True, True, False, True]


def test_json_records_are_one_line_each_with_sorted_keys(tmp_path):
    f = write(tmp_path / "in.yaml", pod(), {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}})
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, "--output", "json", f)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 2 and out.endswith("}\n")
    for line in lines:
        assert [k for k, _ in json.loads(line, object_pairs_hook=list)] == RECORD_KEYS


def test_every_document_of_a_kustomize_tree_file_is_listed_and_explained_in_colour(tmp_path):
    top = tmp_path / "kust"
    write(top / "kustomization.yaml", {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"})
    write(
        top / "svc.yaml",
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a"}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "b"}},
    )
    code, out, err = review("--policy", "erdma", "--output", "json", str(top))
    assert code == 0, err
    assert [(r["file"], r["document"], r["name"]) for r in records(out)] == [
        (f"{top}/kustomization.yaml", 1, None),
        (f"{top}/svc.yaml", 1, "a"),
        (f"{top}/svc.yaml", 2, "b"),
    ]
    code, out, err = review("--policy", "erdma", "--explain", "--color", "always", str(top))
    assert code == 0, err
    assert [b.splitlines()[0] for b in out.split("\n\n") if b] == [
        f"{esc('1', f'{top}/kustomization.yaml')}: Kustomization (unnamed): {esc('1', 'NOT CHECKED')}",
        f"{esc('1', f'{top}/svc.yaml#1')}: Service a: {esc('1', 'NOT CHECKED')}",
        f"{esc('1', f'{top}/svc.yaml#2')}: Service b: {esc('1', 'NOT CHECKED')}",
    ]


def test_a_review_whose_request_kind_is_not_an_object_is_taken_for_a_pod_and_mutated(tmp_path):
    """As the server's /mutate would: not judged as a final state (which would deny it for lacking
    what the mutation adds)."""
    f = write(tmp_path / "in.yaml", admission_review(pod("k"), kind="Pod"))
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, "--output", "json", f)
    assert code == 0, err
    (rec,) = records(out)
    assert (rec["objectKind"], rec["outcome"], rec["policy"], rec["messages"]) == (None, "mutated", "erdma", [])


def test_a_review_without_an_operation_is_checked_as_a_create(tmp_path):
    ar = admission_review(pod(containers=[container(env=[{"name": "NCCL_NET", "value": "{{ n }}"}])]))
    del ar["request"]["operation"]
    f = write(tmp_path / "in.yaml", ar)
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, "--output", "json", f)
    assert code == 2
    assert err == (
        f"error: {f}: container main: env[0] (NCCL_NET) value '{{{{ n }}}}' is a template placeholder not "
        "filled in yet; the decision reads this variable: render the manifest first\n"
    )


def test_every_runtime_a_workload_cannot_find_is_named(tmp_path):
    tj = trainjob_with_runtime()[1]
    other = dict(
        tj,
        metadata={"name": "second"},
        spec={**tj["spec"], "runtimeRef": {"name": "other-rt", "kind": "TrainingRuntime"}},
    )
    aw = {
        "apiVersion": "workload.codeflare.dev/v1beta2",
        "kind": "AppWrapper",
        "metadata": {"name": "two", "namespace": "ml-training"},
        "spec": {"components": [{"template": tj}, {"template": other}]},
    }
    f = write(tmp_path / "aw.yaml", aw)
    code, out, err = review("--policy", "erdma", "--cluster-state", STATE, "--output", "json", f)
    assert code == 2
    (rec,) = records(out)
    assert rec["messages"] == [
        "runtime TrainingRuntime 'deepspeed-erdma' in namespace 'ml-training' is not known, so the pods of this "
        "TrainJob cannot be checked; runtime TrainingRuntime 'other-rt' in namespace 'ml-training' is not known, so "
        "the pods of this TrainJob cannot be checked (give the runtime in the input, or in --cluster-state)"
    ]


def as_job(p: dict) -> dict:
    """A batch/v1 Job whose template is the pod `p`."""
    meta = dict(p["metadata"])
    template = {"metadata": {k: v for k, v in meta.items() if k in ("labels", "annotations")}, "spec": p["spec"]}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {k: v for k, v in meta.items() if k in ("name", "namespace")},
        "spec": {"template": template},
    }


def test_a_workload_reads_the_configmaps_and_dra_objects_of_the_input(tmp_path):
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "launch"},
        "data": {"run.sh": "#!/bin/sh\nexport NCCL_IB_DISABLE=1\nexec torchrun train.py\n"},
    }
    p = pod(
        ns=None,
        containers=[
            container(command=["bash", "/scripts/run.sh"], volumeMounts=[{"name": "s", "mountPath": "/scripts"}])
        ],
        volumes=[{"name": "s", "configMap": {"name": "launch"}}],
    )
    f = write(tmp_path / "cm.yaml", cm, as_job(p))
    code, out, err = review("--policy", "erdma", "--output", "json", f)
    assert code == 1, err
    assert "(ConfigMap 'launch') that the command runs" in records(out)[1]["messages"][0]
    *objs, efa = dra_input(None)
    g = write(tmp_path / "dra.yaml", *objs, as_job(efa))
    code, out, err = review("--policies", POLICIES, "--output", "json", g)
    assert code == 1, err
    assert records(out)[-1]["rules"] == ["fabric-mismatch"] and MISMATCH in records(out)[-1]["messages"][0]


def test_no_hint_for_a_mutated_pod_whose_namespace_names_a_policy_not_in_force(tmp_path):
    f = write(
        tmp_path / "in.yaml",
        namespace("research", **{"rdma-webhook.io/injection": "enabled", "rdma-webhook.io/policy": "ib-shared"}),
        pod("a", ns="research", annotations={"rdma-webhook.io/policy": "erdma"}),
    )
    code, out, err = review("--policy", "erdma", "--output", "json", f)
    assert code == 0, err
    assert [(r["outcome"], r["messages"]) for r in records(out)][1] == ("mutated", [])


def test_the_network_attachments_of_the_cluster_state_reach_pods_and_workloads(tmp_path):
    """examples/pods/seed-sriov-pod.yaml asking for a network the cluster does not have: with the
    cluster's NetworkAttachmentDefinitions known, review adds the policy's (rdma-network) beside it."""
    import base64

    p = yaml.safe_load((ROOT / "examples" / "pods" / "seed-sriov-pod.yaml").read_text())
    p["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] = "missing-net"
    state = str(ROOT / "examples" / "cluster-state.yaml")
    f = write(tmp_path / "pod.yaml", p)
    code, out, err = review("--policies", POLICIES, "--cluster-state", state, f)
    assert code == 0, err
    ops = json.loads(base64.b64decode(json.loads(out)["response"]["patch"]))
    assert {
        "op": "replace",
        "path": "/metadata/annotations/k8s.v1.cni.cncf.io~1networks",
        "value": "missing-net,rdma-network@net2",
    } in ops
    g = write(tmp_path / "job.yaml", as_job(p))
    code, out, err = review("--policies", POLICIES, "--cluster-state", state, "--explain", "--color", "never", g)
    assert code == 0, err
    assert "rdma-network@net2" in out


def test_a_review_of_a_kind_that_holds_no_pods_is_not_bad_input_even_labelled(tmp_path):
    """Found by this file: an AdmissionReview of a Service (or any kind that is neither a pod nor a
    workload) whose object carried the pod label was read as a pod: with no policy in force it was
    "no policy is in force, so its pods cannot be judged", and a number in its spec.containers was bad
    input (exit 2), where /validate allows it as "not a pod or workload". It is that now."""
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "s", "namespace": "ml-training", "labels": dict(INJECT)},
    }
    gadget = {
        "apiVersion": "example.com/v1",
        "kind": "Gadget",
        "metadata": {"name": "g", "namespace": "ml-training", "labels": dict(INJECT)},
        "spec": {"containers": [{"name": "c", "env": [{"name": "NCCL_NET", "value": 1}]}]},
    }
    f = write(
        tmp_path / "in.yaml",
        admission_review(svc, kind={"group": "", "version": "v1", "kind": "Service"}),
        admission_review(gadget, kind={"group": "example.com", "version": "v1", "kind": "Gadget"}),
    )
    for chosen in ((), ("--policy", "erdma")):
        code, out, err = review(*chosen, "--cluster-state", STATE, "--output", "json", f)
        assert code == 0, err
        assert [(r["objectKind"], r["outcome"], r["messages"]) for r in records(out)] == [
            ("Service", "skipped", ["not a pod or workload"]),
            ("Gadget", "skipped", ["not a pod or workload"]),
        ]
