"""Scripts from ConfigMap volumes (issue 24, item 3): a container that runs a script from a
ConfigMap volume has it read as a command when the ConfigMap is in the input (`review`), and a
warning names the script otherwise (always at `/mutate`: no per-request API call is made).

The manifests (tests/manifests-scripts/) are written here after public Kubeflow, MPI Operator
and distributed-training examples that ship their launch scripts in ConfigMaps."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
import yaml

import kube_objects as k
from webhook.admission import review
from webhook.commands import reader
from webhook.commands.files import Files
from webhook.core import scripts
from webhook.core.decision import DENIED, MUTATED, Namespace, decide

ROOT = Path(__file__).resolve().parent.parent.parent
HERE = ROOT / "tests" / "manifests-scripts"
STATE = str(ROOT / "tests" / "manifests" / "cluster-state.yaml")
NS = Namespace("ml-training", {"rdma-webhook.io/injection": "enabled"})
NAMES = frozenset({"NCCL_IB_DISABLE", "NCCL_NET", "NCCL_DEBUG"})


def run(*args, stdin=None):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook",
            "review",
            "--policies",
            str(ROOT / "policies"),
            "--cluster-state",
            STATE,
            "--output",
            "json",
            *args,
        ],
        capture_output=True,
        text=True,
        input=stdin,
        cwd=ROOT,
    )


def records(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def checked(stdout: str) -> dict:
    recs = [r for r in records(stdout) if r["outcome"] != "not-checked"]
    assert len(recs) == 1, recs
    return recs[0]


def unread_warnings(warnings: list[str]) -> list[str]:
    return [w for w in warnings if "not at hand" in w]


class Maps:
    """A ConfigMaps lookup as the decision takes it."""

    def __init__(self, docs: list[dict]):
        self.by = {
            (d["metadata"].get("namespace", "default"), d["metadata"]["name"]): d.get("data") or {}
            for d in docs
            if d.get("kind") == "ConfigMap"
        }

    def config_map(self, namespace: str, name: str):
        return self.by.get((namespace, name))


def docs_of(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((HERE / name).read_text()) if d]


def job_pod() -> dict:
    """The pod the Job controller makes from the issue's example, as the API server sends it."""
    job = docs_of("job-script-ib-disable.yaml")[1]
    tpl = job["spec"]["template"]
    c = tpl["spec"]["containers"][0]
    extra = {key: c[key] for key in ("command", "env", "volumeMounts")}
    pod = k.pod(
        [k.container("trainer", c["image"], gpus=8, **extra)],
        generate_name="llama-finetune-0-",
        labels={
            "batch.kubernetes.io/job-name": "llama-finetune",
            "job-name": "llama-finetune",
            "batch.kubernetes.io/job-completion-index": "0",
        },
        annotations=tpl["metadata"]["annotations"],
        volumes=copy.deepcopy(tpl["spec"]["volumes"]),
        subdomain="llama-finetune",
    )
    pod["spec"]["volumes"][0]["configMap"]["defaultMode"] = 493  # 0755 as the API server stores it
    return pod


# -- review: the ConfigMap in the input ----------------------------------------------------------


def test_the_issue_example_is_denied_naming_the_script_and_its_configmap():
    out = run(str(HERE / "job-script-ib-disable.yaml"))
    assert out.returncode == 1, out.stderr + out.stdout
    rec = checked(out.stdout)
    assert rec["kind"] == "Job" and rec["outcome"] == "denied" and rec["rules"] == ["command-fallback"], rec
    text = " ".join(rec["messages"])
    assert "NCCL_IB_DISABLE='1'" in text and "/scripts/train.sh" in text and "'llama-train-scripts'" in text, text


def test_a_clean_script_passes_without_a_warning():
    out = run(str(HERE / "job-script-clean.yaml"))
    assert out.returncode == 0, out.stderr + out.stdout
    rec = checked(out.stdout)
    assert rec["outcome"] == "mutated" and not unread_warnings(rec["warnings"]), rec


def test_a_script_projected_with_items_and_sourced_is_read():
    out = run(str(HERE / "pytorchjob-source-items.yaml"))
    assert out.returncode == 1, out.stderr + out.stdout
    rec = checked(out.stdout)
    assert rec["rules"] == ["command-fallback"]
    bad = [t for t in rec["templates"] if t["deniesWorkload"]]
    assert len(bad) == 2 and all(
        "/etc/launch/env.sh" in " ".join(t["messages"]) and "NCCL_NET='Socket'" in " ".join(t["messages"]) for t in bad
    ), bad


def test_a_script_mounted_with_subpath_and_run_directly_is_read():
    out = run(str(HERE / "mpijob-subpath.yaml"))
    assert out.returncode == 1, out.stderr + out.stdout
    rec = checked(out.stdout)
    assert rec["kind"] == "MPIJob" and rec["rules"] == ["command-fallback"]
    bad = [t for t in rec["templates"] if t["deniesWorkload"]]
    assert [t["path"] for t in bad] == ["spec.mpiReplicaSpecs.Launcher.template"]
    assert "/opt/launch/run.sh" in " ".join(bad[0]["messages"]) and "'nccl-tests-launch'" in " ".join(
        bad[0]["messages"]
    )


def test_a_script_whose_configmap_is_not_in_the_input_warns_once_and_is_not_denied():
    job = yaml.safe_dump(docs_of("job-script-ib-disable.yaml")[1])
    out = run("-", stdin=job)
    assert out.returncode == 0, out.stderr + out.stdout
    rec = checked(out.stdout)
    warned = unread_warnings(rec["warnings"])
    assert len(warned) == 1, rec["warnings"]
    assert "/scripts/train.sh" in warned[0] and "'llama-train-scripts'" in warned[0]


def test_a_configmap_in_another_file_of_the_input_counts():
    docs = docs_of("job-script-ib-disable.yaml")
    out = run(str(HERE / "job-script-ib-disable.yaml"), "-", stdin=yaml.safe_dump(docs[1]))
    assert out.returncode == 1, out.stderr + out.stdout


# -- /mutate: no ConfigMap at hand ----------------------------------------------------------------


def test_the_same_pod_at_mutate_is_allowed_with_the_warning(policies):
    body = k.body(k.admission_review(job_pod()))
    code, resp, decision, _ = review.handle(body, policies, {"ml-training": NS}.get, None)
    assert code == 200 and resp["response"]["allowed"] is True and decision.outcome == MUTATED
    warned = unread_warnings(resp["response"].get("warnings") or [])
    assert len(warned) == 1 and "/scripts/train.sh" in warned[0] and "'llama-train-scripts'" in warned[0], resp


def test_the_served_mutate_answers_the_same(server):
    status, data, _ = server.request("POST", "/mutate", k.body(k.admission_review(job_pod())))
    assert status == 200, data
    r = json.loads(data)["response"]
    assert r["allowed"] is True and len(unread_warnings(r.get("warnings") or [])) == 1, r


def test_the_decision_reads_the_script_it_is_handed(policies):
    pod = job_pod()
    maps = Maps(docs_of("job-script-ib-disable.yaml"))
    d = decide(pod, NS, policies, None, "CREATE", maps)
    assert d.outcome == DENIED and [f.rule for f in d.denials] == ["command-fallback"]
    assert "/scripts/train.sh" in d.denials[0].message
    clean = decide(pod, NS, policies, None, "CREATE", Maps(docs_of("job-script-clean.yaml")))
    assert clean.outcome == MUTATED and not unread_warnings(clean.warnings)


def test_two_containers_running_one_unread_script_warn_once(policies):
    pod = job_pod()
    pod["spec"]["containers"].append(copy.deepcopy(pod["spec"]["containers"][0]) | {"name": "trainer-2"})
    d = decide(pod, NS, policies)
    assert len(unread_warnings(d.warnings)) == 1, d.warnings


# -- the reading ----------------------------------------------------------------------------------


def files(entries: dict[str, str | None], cm: str = "cm") -> reader.Files:
    f = Files()
    for path, text in entries.items():
        f.add_file(path, text, cm)
    return f


@pytest.mark.parametrize(
    "command,found",
    [
        (["bash", "/s/a.sh"], [("NCCL_IB_DISABLE", "1")]),
        (["/s/a.sh"], [("NCCL_IB_DISABLE", "1")]),
        (["tini", "--", "/s/a.sh"], [("NCCL_IB_DISABLE", "1")]),
        (["bash", "-c", "source /s/env.sh && torchrun x.py"], [("NCCL_NET", "Socket")]),
        (["sh", "-c", ". /s/env.sh; exec torchrun x.py"], [("NCCL_NET", "Socket")]),
        (["bash", "-c", "(source /s/env.sh); torchrun x.py"], []),  # a subshell's assignments stay inside
        (["bash", "-c", "source /s/env.sh"], []),  # no process sees it
        (["bash", "-c", "bash /s/env.sh; torchrun x.py"], []),  # a child shell's exports do not come back
        (["python3", "/s/t.py"], [("NCCL_NET", "Socket")]),
        (["bash", "/s/clean.sh"], []),
        (["bash", "/other/a.sh"], []),  # not a ConfigMap's file: the image's, out of reach
    ],
)
def test_files_are_read_as_the_shell_runs_them(command, found):
    fs = files(
        {
            "/s/a.sh": "#!/bin/bash\nexport NCCL_IB_DISABLE=1\ntorchrun train.py\n",
            "/s/env.sh": "export NCCL_NET=Socket\n",
            "/s/t.py": "import os\nos.environ['NCCL_NET'] = 'Socket'\n",
            "/s/clean.sh": "echo NCCL_IB_DISABLE=1\ntorchrun x.py\n",
        }
    )
    got = reader.read(command, NAMES, None, None, fs)
    assert got.found == found and got.unread == []
    for pair in found:
        assert got.origins[pair].startswith("/s/")


def test_a_file_not_at_hand_is_named_once_and_a_relative_path_uses_the_working_dir():
    fs = Files("/scripts")
    fs.add_dir("/scripts", "train-scripts")
    got = reader.read(["bash", "-c", "bash train.sh; bash /scripts/train.sh"], NAMES, None, None, fs)
    assert got.found == [] and got.unread == [("train.sh", "train-scripts"), ("/scripts/train.sh", "train-scripts")]


def test_a_program_without_a_slash_is_looked_up_in_path_not_in_the_working_dir():
    fs = Files("/scripts")
    fs.add_dir("/scripts", "train-scripts")
    got = reader.read(["torchrun", "--nproc_per_node=8", "train.py", "NCCL_NET=Socket"], NAMES, None, None, fs)
    assert got.found == [] and got.unread == []
    got = reader.read(["./run.sh"], NAMES, None, None, fs)
    assert got.unread == [("./run.sh", "train-scripts")]


def test_volume_shapes(policies):
    c = {
        "name": "c",
        "volumeMounts": [
            {"name": "whole", "mountPath": "/a"},
            {"name": "items", "mountPath": "/b"},
            {"name": "sub", "mountPath": "/c/run.sh", "subPath": "run.sh"},
            {"name": "gone", "mountPath": "/d"},
            {"name": "proj", "mountPath": "/e"},
            {"name": "token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
        ],
    }
    volumes = scripts.config_volumes(
        {
            "volumes": [
                {"name": "whole", "configMap": {"name": "m1"}},
                {"name": "items", "configMap": {"name": "m1", "items": [{"key": "x.sh", "path": "bin/y.sh"}]}},
                {"name": "sub", "configMap": {"name": "m1"}},
                {"name": "gone", "configMap": {"name": "m2"}},
                {"name": "proj", "projected": {"sources": [{"configMap": {"name": "m1"}}]}},
                {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
                {"name": "shm", "emptyDir": {"medium": "Memory"}},
            ]
        }
    )
    maps = Maps(
        [{"kind": "ConfigMap", "metadata": {"namespace": "ns", "name": "m1"}, "data": {"x.sh": "X", "run.sh": "R"}}]
    )
    fs = scripts.files_of(c, volumes, "ns", maps)
    assert fs is not None
    assert fs.lookup("/a/x.sh") == ("X", "m1") and fs.lookup("/b/bin/y.sh") == ("X", "m1")
    assert (
        fs.lookup("/b/x.sh") is None and fs.lookup("/c/run.sh") == ("R", "m1") and fs.lookup("/e/run.sh") == ("R", "m1")
    )
    assert (
        fs.lookup("/d/anything.sh") == (None, "m2")
        and fs.lookup("/var/run/secrets/kubernetes.io/serviceaccount/token") is None
    )
    # another namespace's ConfigMap of that name is not this one
    other = scripts.files_of(c, volumes, "other", maps)
    assert other is not None and other.lookup("/a/x.sh") == (None, "m1")


# -- /validate: a List that holds the ConfigMap ----------------------------------------------------


def list_review(items: list[dict]) -> dict:
    obj = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}
    return k.admission_review(obj, namespace="ml-training", kind="List", resource="lists")


def test_validate_of_a_list_reads_the_configmap_it_holds(policies):
    docs = docs_of("job-script-ib-disable.yaml")
    code, resp, decision, _ = review.handle_validate(k.body(list_review(docs)), policies, {"ml-training": NS}.get, None)
    r = resp["response"]
    assert code == 200 and r["allowed"] is False and decision.outcome == DENIED, r
    msg = r["status"]["message"]
    assert "Job llama-finetune" in msg and "/scripts/train.sh" in msg and "[command-fallback]" in msg, msg
    # the Job alone: the script is not at hand, a warning names it and the Job is allowed
    code, resp, decision, _ = review.handle_validate(
        k.body(list_review(docs[1:])), policies, {"ml-training": NS}.get, None
    )
    r = resp["response"]
    assert r["allowed"] is True and len(unread_warnings(r.get("warnings") or [])) == 1, r
    # a clean script in the list passes
    code, resp, _, _ = review.handle_validate(
        k.body(list_review(docs_of("job-script-clean.yaml"))), policies, {"ml-training": NS}.get, None
    )
    assert resp["response"]["allowed"] is True and not unread_warnings(resp["response"].get("warnings") or [])


def test_the_served_validate_of_the_job_alone_warns(server):
    job = docs_of("job-script-ib-disable.yaml")[1]
    review_doc = k.admission_review(job, kind="Job", resource="jobs")
    review_doc["request"]["kind"]["group"] = review_doc["request"]["resource"]["group"] = "batch"
    status, data, _ = server.request("POST", "/validate", k.body(review_doc))
    assert status == 200, data
    r = json.loads(data)["response"]
    assert r["allowed"] is True and len(unread_warnings(r.get("warnings") or [])) == 1, r


@pytest.mark.parametrize("wrong", [None, 5, "x", [], ["x"], {}, {"a": 1}, True])
def test_wrong_types_in_volumes_and_mounts_never_raise(policies, wrong):
    pod = job_pod()
    spec = pod["spec"]
    c = spec["containers"][0]
    for where, key in [
        (spec["volumes"][0], "name"),
        (spec["volumes"][0], "configMap"),
        (spec["volumes"][-1], "projected"),
        (spec["volumes"][-1]["projected"], "sources"),
        (c["volumeMounts"][0], "name"),
        (c["volumeMounts"][0], "mountPath"),
        (c["volumeMounts"][0], "subPath"),
        (c, "workingDir"),
        (spec["volumes"][0]["configMap"], "items"),
        (spec["volumes"][0]["configMap"], "name"),
    ]:
        broken = copy.deepcopy(pod)
        # the same node in the copy
        path = {
            id(spec["volumes"][0]): broken["spec"]["volumes"][0],
            id(spec["volumes"][-1]): broken["spec"]["volumes"][-1],
            id(spec["volumes"][-1]["projected"]): broken["spec"]["volumes"][-1]["projected"],
            id(c["volumeMounts"][0]): broken["spec"]["containers"][0]["volumeMounts"][0],
            id(c): broken["spec"]["containers"][0],
            id(spec["volumes"][0]["configMap"]): broken["spec"]["volumes"][0]["configMap"],
        }[id(where)]
        path[key] = wrong
        for maps in (None, Maps(docs_of("job-script-ib-disable.yaml"))):
            d = decide(broken, NS, policies, None, "CREATE", maps)
            assert d.outcome in (DENIED, MUTATED, "unchanged"), (key, wrong, d)


_SEGMENTS = st.sampled_from(["scripts", "etc", "app", "run", "x", ".", "", "train.sh"])
_PATHS = st.lists(_SEGMENTS, min_size=0, max_size=4).map(lambda parts: "/" + "/".join(parts))


@settings(max_examples=400, deadline=None)
@example(mounts=[("//etc", "sub")], wd="/", words=["etc"])  # normpath keeps a leading `//`: found by this property
@given(
    mounts=st.lists(st.tuples(_PATHS, st.sampled_from(["", "sub", "sub/x.sh"])), min_size=1, max_size=4),
    wd=st.one_of(st.none(), _PATHS),
    words=st.lists(
        st.one_of(
            _PATHS, _SEGMENTS, st.sampled_from(["bash", "torchrun", "scripts/train.sh", "app/run/train.sh", "-c"])
        ),
        max_size=5,
    ),
)
def test_the_cheap_mount_test_is_never_false_where_the_exact_one_is_true(mounts, wd, words):
    """`may_name_a_mount` spares most pods the ConfigMap file map; it may only say yes too
    often, never no where `Files.mentioned` (what decides whether a command is read) says yes."""
    volumes = [{"name": f"v{i}", "configMap": {"name": f"cm{i}"}} for i in range(len(mounts))]
    c = {
        "name": "c",
        "command": words,
        "volumeMounts": [
            {"name": f"v{i}", "mountPath": p, **({"subPath": sub} if sub else {})} for i, (p, sub) in enumerate(mounts)
        ],
    }
    if wd is not None:
        c["workingDir"] = wd
    line = " ".join(words)
    for handed in (None, scripts.ConfigMapStore()):
        if handed is not None:
            for i in range(len(mounts)):
                handed.add(
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": f"cm{i}"},
                        "data": {"train.sh": "export NCCL_IB_DISABLE=1", "sub": "x"},
                    },
                    "ns",
                )
        files = scripts.files_of(c, scripts.config_volumes({"volumes": volumes}), "ns", handed)
        if files is not None and files.mentioned(line):
            assert scripts.may_name_a_mount(c, line), (c, line)


class _Asked:
    """A file source that answers like `Files` and counts the questions."""

    def __init__(self, files: Files):
        self.inner, self.asked = files, 0

    def lookup(self, path):
        self.asked += 1
        return self.inner.lookup(path)

    def mentioned(self, text):
        self.asked += 1
        return self.inner.mentioned(text)


def test_a_remembered_reading_is_reused_only_while_the_files_answer_the_same():
    """The reading is remembered by command text; the files it looked up are its dependencies,
    like the env values: a second ConfigMap behind the same path is read again."""
    command = ["bash", "-c", "export NCCL_DEBUG=WARN; bash /scripts/train.sh"]
    clean, bad = Files(), Files()
    clean.add_file("/scripts/train.sh", "export NCCL_NET=IB\ntorchrun train.py", "train-clean")
    bad.add_file("/scripts/train.sh", "export NCCL_IB_DISABLE=1\ntorchrun train.py", "train-bad")
    assert ("NCCL_NET", "IB") in reader.read(command, NAMES, None, None, clean).found
    again = reader.read(command, NAMES, None, None, bad)
    assert ("NCCL_IB_DISABLE", "1") in again.found and ("NCCL_NET", "IB") not in again.found
    assert again.origins[("NCCL_IB_DISABLE", "1")] == "/scripts/train.sh"
    unread = Files()
    unread.add_file("/scripts/train.sh", None, "train-elsewhere")
    assert reader.read(command, NAMES, None, None, unread).unread == [("/scripts/train.sh", "train-elsewhere")]


def test_a_remembered_reading_that_ran_no_file_asks_the_files_nothing():
    """Most commands that set NCCL variables run no ConfigMap file (`bash -c 'export ...;
    torchrun ...'`): once remembered, their reading must not build the container's file map."""
    command = ["/bin/bash", "-c", "export NCCL_DEBUG=WARN\ntorchrun --nproc_per_node=8 train.py"]
    files = Files()
    files.add_dir("/etc/app/config-0", "app-config")
    first = _Asked(files)
    assert reader.read(command, NAMES, None, None, first).found == [("NCCL_DEBUG", "WARN")]
    second = _Asked(files)
    assert reader.read(command, NAMES, None, None, second).found == [("NCCL_DEBUG", "WARN")]
    assert second.asked == 0
