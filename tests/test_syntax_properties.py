"""Property tests for the syntax families the readers accept and for merge precedence (issue 28,
item 2): not only the bare form of each, but its variants.

- shell option clusters: `bash -c`, `-lc`, `-ec`, `-xc`, `-euxc`, `sh -c`, separate `-e -c`, `-o
  pipefail -c`, ... all read the script; without `c` the word is a file, not read;
- quoting of `NAME=value`: single, double, escaped, `$'...'`, and concatenations of them, in
  `export`, `declare -x`, `NAME=value cmd` and `env NAME=value cmd`;
- launcher flag spellings (`-x`, `--x`, `-genv`, `-env`, `--mca mca_base_env_list`, ...) among
  the family's other flags, drawn from the table;
- `$(VAR)` forms of the kubelet's expansion, in env values and in command arguments;
- merge precedence: `strategic_merge` (the patch wins for every field, lists with a merge key
  merged item by item), the TrainJob overrides of every Trainer release over the runtime, and a
  RoleBasedGroup role's leader/worker patches over its template.

Examples per test follow tests/strategies.py's profiles (`examples(ci, long)`: a thirtieth under
the `mutation` profile).
"""

from __future__ import annotations

import copy
import re

import pytest
from hypothesis import given, strategies as st

import kube_objects as k
from conftest import CLUSTER_STATE
from strategies import examples
from webhook.cluster.state import FileClusterState
from webhook.commands import reader
from webhook.commands.launchers import LAUNCHERS, MCA_ENV_LIST
from webhook.commands.shell import SHELLS
from webhook.core import keys
from webhook.core.decision import DENIED, decide
from webhook.grammar import k8s
from webhook.kinds import merge, trainer, workloads
from webhook.kinds.merge import MERGE_KEYS, strategic_merge

NAMES = frozenset({"NCCL_IB_DISABLE", "NCCL_NET", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME"})
NAME = st.sampled_from(sorted(NAMES))
# values as people write them: interface lists, HCA filters, transport names
PLAIN = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.,:^=+-/@%", min_size=1, max_size=12)
SPICY = st.text(alphabet="abcXYZ019_.,:^=-/ *?[]{}~#!&|;<>()$`\"'\\", min_size=1, max_size=12)


STATE = FileClusterState.from_file(str(CLUSTER_STATE))
ML = STATE.namespace("ml-training")


class Env(dict):
    def get(self, name):  # type: ignore[override]
        return dict.get(self, name)


# -- shell option clusters -------------------------------------------------------------------------

SHELL = st.sampled_from(sorted(SHELLS)).flatmap(lambda s: st.sampled_from([s, f"/bin/{s}", f"/usr/bin/{s}"]))
OPTS = st.lists(st.sampled_from("elxuvi"), unique=True, max_size=4)


@st.composite
def shell_options(draw) -> list[str]:
    """The words between the shell and its script, as people write them: `c` in a cluster at any
    place, or on its own, with other options before it (`-o pipefail`, `+x`, `--login`)."""
    letters = draw(OPTS)
    form = draw(st.sampled_from(["cluster", "separate", "split"]))
    words: list[str] = []
    if draw(st.booleans()):
        words += draw(st.sampled_from([["-o", "pipefail"], ["+x"], ["--login"], ["-O", "extglob"], ["--noprofile"]]))
    if form == "cluster":
        at = draw(st.integers(0, len(letters)))
        words.append("-" + "".join(letters[:at]) + "c" + "".join(letters[at:]))
    elif form == "separate":
        words += [f"-{x}" for x in letters] + ["-c"]
    else:
        words += (["-" + "".join(letters)] if letters else []) + ["-c"]
    return words


README_FORMS = [["-c"], ["-lc"], ["-ec"], ["-xc"], ["-euxc"], ["-cl"], ["-e", "-c"], ["-l", "-c"], ["-o", "pipefail", "-c"],
                ["--login", "-c"], ["+x", "-c"], ["-ce"]]


@pytest.mark.parametrize("shell", ["sh", "bash", "/bin/bash"])
@pytest.mark.parametrize("opts", README_FORMS, ids=[" ".join(o) for o in README_FORMS])
def test_each_documented_option_form_reads_the_script(shell, opts):
    script = "export NCCL_IB_DISABLE=1; exec python train.py"
    assert reader.settings([shell, *opts, script], NAMES) == [("NCCL_IB_DISABLE", "1")]


@examples(ci=150, long=3000)
@given(shell=SHELL, opts=shell_options(), name=NAME, value=PLAIN)
def test_any_option_cluster_with_c_reads_the_script(shell, opts, name, value):
    script = f"export {name}='{value}'; exec python train.py"
    assert reader.settings([shell, *opts, script], NAMES) == [(name, value)]
    # the script as the container's args, the shell as its command: the same argv
    assert reader.settings([shell, *opts, f"cd /work && {script}"], NAMES) == [(name, value)]


@examples(ci=60, long=1000)
@given(shell=SHELL, letters=OPTS, name=NAME, value=PLAIN)
def test_without_c_the_word_is_a_file_and_not_read(shell, letters, name, value):
    opts = ["-" + "".join(letters)] if letters else []
    assert reader.settings([shell, *opts, f"export {name}='{value}'; exec python train.py"], NAMES) == []


# -- quoting variants of NAME=value ----------------------------------------------------------------

def _single(part: str) -> str:
    return "'" + part.replace("'", "'\\''") + "'"


def _double(part: str) -> str:
    return '"' + re.sub(r'([\\"$`])', r"\\\1", part) + '"'


def _escaped(part: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "_.,:/@%^+=-" else "\\" + ch for ch in part)


def _ansi_plain(part: str) -> str:
    return "$'" + part + "'"  # only for parts with no backslash and no quote


@st.composite
def quoted(draw) -> tuple[str, str]:
    """(shell word, the value it stands for): the value cut into segments, each quoted its own way."""
    segments = draw(st.lists(SPICY, min_size=1, max_size=3))
    word: list[str] = []
    quoted_before = False
    for seg in segments:
        ways = [_single]
        # not after a quoted segment (test_an_escape_after_a_quoted_string_is_kept), nor an
        # escaped blank first (test_escaped_blanks_are_kept): known misreadings, tested apart
        if not quoted_before and (word or seg[:1] not in " \t"):
            ways.append(_escaped)
        if seg.strip(" \t"):  # a double-quoted string of blanks only: test_blank_double_quoted_string_is_kept
            ways.append(_double)
        if "\\" not in seg and "'" not in seg:
            ways.append(_ansi_plain)
        if all(ch.isalnum() or ch in "_.,:/@%^+=-" for ch in seg):
            ways.append(str)
        way = draw(st.sampled_from(ways))
        word.append(way(seg))
        quoted_before = way in (_single, _double, _ansi_plain)
    return "".join(word), "".join(segments)


@examples(ci=200, long=3000)
@given(name=NAME, q=quoted(), form=st.sampled_from(["export {n}={w}; python t.py", "declare -x {n}={w}\npython t.py",
                                                    "{n}={w} python t.py", "export {n}\n{n}={w}\nexec python t.py",
                                                    "env {n}={w} python t.py"]))
def test_every_quoting_of_name_value_gives_the_value(name, q, form):
    word, value = q
    script = form.format(n=name, w=word)
    assert reader.settings(["bash", "-c", script], NAMES) == [(name, value)], script


@pytest.mark.xfail(strict=True, reason="webhook/commands/shell.py word(): an ANSI-C string $'...' that holds a backslash escape "
                                       "is 'not known' instead of decoded, so `export NCCL_IB_DISABLE=$'\\x31'` (bash: 1) is not judged")
@pytest.mark.parametrize("word,value", [("$'\\x31'", "1"), ("$'So\\x63ket'", "Socket"), ("$'\\061'", "1")])
def test_ansi_c_escapes_are_decoded(word, value):
    assert reader.settings(["bash", "-c", f"export NCCL_IB_DISABLE={word}; python t.py"], NAMES) == [("NCCL_IB_DISABLE", value)]


@pytest.mark.xfail(strict=True, reason="webhook/commands/shell.py word(): a double-quoted string of blanks only (\" \") has no "
                                       "string_content node in tree-sitter-bash and is read as '' (`export NCCL_NET=\"IB\"\" \"` is read as IB, "
                                       "NCCL sees 'IB ')")
@pytest.mark.parametrize("word,value", [('" "', " "), ('"IB"" "', "IB "), ('"\t"', "\t")])
def test_blank_double_quoted_string_is_kept(word, value):
    assert reader.settings(["bash", "-c", f"export NCCL_NET={word}; python t.py"], NAMES) == [("NCCL_NET", value)]


@pytest.mark.xfail(strict=True, reason="webhook/commands/shell.py word(): an assignment value that starts with an escaped blank "
                                       "is misread (`NAME=\\ a` is read as 'a', `NAME=\\ ` as a backslash; bash gives ' a' and ' '), "
                                       "and an escaped tab is dropped (`NAME=0\\<TAB>` is read as '0')")
@pytest.mark.parametrize("word,value", [("\\ a", " a"), ("\\ ", " "), ("0\\\t", "0\t")])
def test_escaped_blanks_are_kept(word, value):
    assert reader.settings(["bash", "-c", f"export NCCL_NET={word}; python t.py"], NAMES) == [("NCCL_NET", value)]


@pytest.mark.xfail(strict=True, reason="webhook/commands/shell.py word(), concatenation: a backslash-escaped character after a "
                                       "quoted string is dropped, so `export NCCL_IB_DISABLE='0'\\1` (bash: 01, NCCL: 1, IB off) is "
                                       "read as 0 and the pod is allowed")
@pytest.mark.parametrize("word,value", [("'0'\\1", "01"), ('"0"\\1', "01"), ("'IB'\\;", "IB;")])
def test_an_escape_after_a_quoted_string_is_kept(policies, word, value):
    name = "NCCL_NET" if "IB" in word else "NCCL_IB_DISABLE"
    assert reader.settings(["bash", "-c", f"export {name}={word}; python t.py"], NAMES) == [(name, value)]


@pytest.mark.xfail(strict=True, reason="the same misreading through the decision: `export NCCL_IB_DISABLE='0'\\1` turns IB off "
                                       "(bash gives 01, NCCL's strtoll 1) and the pod is admitted")
def test_an_escape_after_a_quoted_string_is_judged(policies):
    c = k.container("trainer", command=["bash", "-c"], args=["export NCCL_IB_DISABLE='0'\\1; exec python train.py"])
    d = decide(k.pod([c], namespace="ml-training"), ML, policies, STATE.attachments())
    assert d.outcome == DENIED


# -- launcher flag spellings -----------------------------------------------------------------------

def _flags(launcher: str, *actions: str) -> list[str]:
    return sorted(f for f, a in LAUNCHERS[launcher].items() if a in actions)


@st.composite
def launcher_command(draw) -> tuple[list[str], str, str]:
    """A launcher, some of its `arg` flags with arguments, one flag that sets NAME=VALUE for the
    ranks in one of the spellings the table gives it, more `arg` flags, then the program."""
    launcher = draw(st.sampled_from(sorted(LAUNCHERS)))
    name, value = draw(NAME), draw(PLAIN.filter(lambda v: ";" not in v))
    spelling = draw(st.sampled_from(_flags(launcher, "export", "set", "mca")))
    action = LAUNCHERS[launcher][spelling]
    setting = {"export": [spelling, f"{name}={value}"], "set": [spelling, name, value],
               "mca": [spelling, MCA_ENV_LIST, f"{name}={value}"]}[action]
    args = _flags(launcher, "arg")
    before = draw(st.lists(st.sampled_from(args), max_size=3))
    after = draw(st.lists(st.sampled_from(args), max_size=3))
    argv = [launcher]
    for f in before:
        argv += [f, draw(st.sampled_from(["8", "host1,host2", "ppr:8:node", "/etc/hosts"]))]
    argv += setting
    for f in after:
        argv += [f, "2"]
    argv += draw(st.sampled_from([["python", "train.py"], ["bash", "-lc", "exec python train.py"], ["./run.sh"]]))
    return argv, name, value


@examples(ci=200, long=3000)
@given(cmd=launcher_command())
def test_every_spelling_of_a_launcher_setting_is_read(cmd):
    argv, name, value = cmd
    assert (name, value) in reader.settings(argv, NAMES), argv


# -- $(VAR) forms ------------------------------------------------------------------------------------

VAR = st.sampled_from(["X", "HCA", "IB_OFF", "UNDEFINED"])
DEFINED = {"X": "Socket", "HCA": "mlx5_0", "IB_OFF": "1"}


@st.composite
def dollar_value(draw) -> tuple[str, str]:
    """(value as written in the manifest, value after the kubelet's expansion), built piece by piece."""
    written, meant = [], []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["text", "ref", "escaped", "dollar", "open"]))
        if kind == "text":
            t = draw(st.text(alphabet="abc01_-=:", min_size=1, max_size=5))
            written.append(t), meant.append(t)
        elif kind == "ref":
            v = draw(VAR)
            written.append(f"$({v})"), meant.append(DEFINED.get(v, f"$({v})"))
        elif kind == "escaped":
            v = draw(VAR)
            written.append(f"$$({v})"), meant.append(f"$({v})")
        elif kind == "dollar":
            written.append("$$"), meant.append("$")
        else:
            written.append("$x"), meant.append("$x")  # a `$` that starts neither stays
    return "".join(written), "".join(meant)


@examples(ci=200, long=3000)
@given(dv=dollar_value())
def test_kubelet_expansion_of_every_form(dv):
    written, meant = dv
    assert k8s.expand(written, DEFINED) == meant


@examples(ci=40, long=500)
@given(form=st.sampled_from(["$(IB_OFF)", "$$(IB_OFF)", "$(UNDEFINED)", "$(X)", "0$(IB_OFF)", "$(IB_OFF)$(IB_OFF)"]),
       where=st.sampled_from(["env", "args", "script"]))
def test_var_references_are_judged_after_expansion(policies, form, where):
    """NCCL_IB_DISABLE written with `$(VAR)`: denied exactly when the expanded value turns IB off
    (the shell never sees `$(IB_OFF)` when the kubelet expanded it; `$$(IB_OFF)` reaches the shell
    as a command substitution, not known, not judged)."""
    expanded = k8s.expand(form, DEFINED)
    env = [{"name": n, "value": v} for n, v in DEFINED.items()]
    kw = {}
    if where == "env":
        env.append({"name": "NCCL_IB_DISABLE", "value": form})
    elif where == "args":
        kw = {"command": ["env"], "args": [f"NCCL_IB_DISABLE={form}", "python", "train.py"]}
    else:
        kw = {"command": ["bash", "-c"], "args": [f"export NCCL_IB_DISABLE={form}; exec python train.py"]}
    pod = k.pod([k.container("trainer", env=env, **kw)], namespace="ml-training")
    d = decide(pod, ML, policies, STATE.attachments())
    if where == "script" and "$(" in expanded:
        off = False  # a command substitution in the shell: not known
    else:
        off = expanded.lstrip("-").isdigit() and int(expanded) != 0
    assert (d.outcome == DENIED) == off, (form, where, expanded, [f.message for f in d.denials])


# -- merge precedence: strategic_merge ---------------------------------------------------------------

FIELD = st.sampled_from(["image", "value", "command", "args", "labels", "spec", "name2", "medium", "sizeLimit", "x"])
SCALAR = st.one_of(st.integers(-3, 3), st.text(alphabet="abc01", max_size=3), st.booleans(),
                   st.lists(st.integers(0, 3), max_size=2))
TREE = st.recursive(SCALAR, lambda inner: st.dictionaries(FIELD, inner, max_size=4), max_leaves=12)


def reference_merge(base, patch):
    """A map patch merges key by key and wins at every leaf; anything else replaces."""
    if isinstance(patch, dict):
        out = dict(base) if isinstance(base, dict) else {}
        for key, value in patch.items():
            out[key] = reference_merge(out.get(key), value)
        return out
    return patch


@examples(ci=200, long=3000)
@given(base=st.dictionaries(FIELD, TREE, max_size=5), patch=st.dictionaries(FIELD, TREE, max_size=5))
def test_strategic_merge_patch_wins_for_every_field(base, patch):
    before = copy.deepcopy((base, patch))
    out = strategic_merge(base, patch)
    assert out == reference_merge(base, patch)
    assert (base, patch) == before  # a new object
    if patch:
        assert strategic_merge(out, patch) == out  # applying the patch again changes nothing


ITEM_FIELDS = st.dictionaries(st.sampled_from(["value", "image", "readOnly", "subPath", "command"]), SCALAR, max_size=3)


@st.composite
def keyed_lists(draw):
    key = draw(st.sampled_from(sorted(MERGE_KEYS)))
    mk = MERGE_KEYS[key]
    keys_ = st.sampled_from(["a", "b", "c", "d", "e"]) if mk != "containerPort" else st.sampled_from([80, 443, 8080, 29500])
    base_keys = draw(st.lists(keys_, unique=True, max_size=4))
    patch_keys = draw(st.lists(keys_, unique=True, max_size=4))
    base = [{mk: kv, **draw(ITEM_FIELDS)} for kv in base_keys]
    patch = [{mk: kv, **draw(ITEM_FIELDS)} for kv in patch_keys]
    return key, mk, base, patch


@examples(ci=200, long=3000)
@given(kl=keyed_lists())
def test_lists_with_a_merge_key_merge_item_by_item_and_the_patch_wins(kl):
    key, mk, base, patch = kl
    out = strategic_merge({key: base}, {key: patch})[key]
    order = [b[mk] for b in base] + [p[mk] for p in patch if p[mk] not in {b[mk] for b in base}]
    assert [item[mk] for item in out] == order
    for item in out:
        b = next((x for x in base if x[mk] == item[mk]), {})
        p = next((x for x in patch if x[mk] == item[mk]), {})
        assert item == {**b, **p}


@examples(ci=100, long=2000)
@given(base=st.dictionaries(FIELD, TREE, min_size=1, max_size=5), data=st.data())
def test_a_null_in_the_patch_deletes_and_patch_delete_removes_an_item(base, data):
    gone = data.draw(st.sampled_from(sorted(base)), label="deleted field")
    assert strategic_merge(base, {gone: None}) == {k_: v for k_, v in base.items() if k_ != gone}
    names = data.draw(st.lists(st.sampled_from(["a", "b", "c", "d"]), unique=True, min_size=1), label="env")
    victim = data.draw(st.sampled_from(names), label="victim")
    env = [{"name": n, "value": n.upper()} for n in names]
    out = strategic_merge({"env": env}, {"env": [{"name": victim, "$patch": "delete"}]})
    assert out == {"env": [e for e in env if e["name"] != victim]}


@examples(ci=60, long=1000)
@given(base=st.lists(st.integers(0, 5), max_size=4), patch=st.lists(st.integers(0, 5), max_size=4), key=FIELD)
def test_lists_without_a_merge_key_are_replaced(base, patch, key):
    assert strategic_merge({key: base}, {key: patch}) == {key: patch}


# -- merge precedence in the kinds that merge ------------------------------------------------------

ENV_NAMES = st.lists(st.sampled_from(["NCCL_NET", "NCCL_IB_HCA", "NCCL_DEBUG", "OMP_NUM_THREADS", "PET_X"]), unique=True,
                     min_size=1, max_size=4)
VALUE = st.text(alphabet="abcXYZ0129_", min_size=1, max_size=6)


def _env(pairs):
    return [{"name": n, "value": v} for n, v in pairs.items()]


def _node_env(pod):
    node = next(c for c in pod["spec"]["containers"] if c["name"] == "node")
    return {e["name"]: e.get("value") for e in node.get("env") or []}


def _runtime(env, image="runtime:v1", command=("torchrun", "train.py")):
    c = {"name": "node", "image": image, "command": list(command), "env": _env(env),
         "resources": {"limits": {"nvidia.com/gpu": "8", "example.com/rdma": "1"}}}
    job = {"name": "node", "template": {"metadata": {"labels": {trainer.ANCESTOR_LABEL: "trainer"}},
                                        "spec": {"template": {"metadata": {"labels": {"tier": "base", "keep": "yes"}},
                                                              "spec": {"containers": [c]}}}}}
    return {"kind": "ClusterTrainingRuntime", "metadata": {"name": "rt"}, "spec": {"template": {"spec": {"replicatedJobs": [job]}}}}


def _override(release, env, labels):
    container = {"name": "node", "env": _env(env)}
    if release == "v2.0":
        return {"podSpecOverrides": [{"targetJobs": [{"name": "node"}], "containers": [container]}]}
    if release == "v2.1":
        return {"podTemplateOverrides": [{"targetJobs": [{"name": "node"}], "metadata": {"labels": labels},
                                          "spec": {"containers": [container]}}]}
    template = {"metadata": {"labels": labels}, "spec": {"containers": [container]}}
    return {"runtimePatches": [{"trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": template}}}]}}}}]}


@examples(ci=120, long=2000)
@given(release=st.sampled_from(trainer.TRAINER_RELEASES), names=ENV_NAMES, data=st.data())
def test_trainjob_overrides_win_over_the_runtime(release, names, data):
    base = {n: data.draw(VALUE, label=f"base {n}") for n in names}
    patched = data.draw(st.dictionaries(st.sampled_from(names + ["NCCL_SOCKET_IFNAME"]), VALUE, min_size=1), label="patch")
    from_trainer = data.draw(st.dictionaries(st.sampled_from(names + ["NCCL_P2P_LEVEL"]), VALUE, max_size=2), label="trainer env")
    labels = {"tier": "patched"}
    spec = {"runtimeRef": {"name": "rt"}, **_override(release, patched, labels)}
    if from_trainer:
        spec["trainer"] = {"env": _env(from_trainer), "image": "user:v2"}
    runtime = _runtime(base)
    before = copy.deepcopy(runtime)
    [(job, pod)] = list(trainer.trainjob_pods({"spec": spec}, runtime, release))
    assert job == "node" and runtime == before
    # the override over the runtime, spec.trainer.env over both, each name once
    assert _node_env(pod) == {**base, **patched, **from_trainer}
    node = pod["spec"]["containers"][0]
    assert node["image"] == ("user:v2" if from_trainer else "runtime:v1") and node["command"] == ["torchrun", "train.py"]
    assert node["resources"]["limits"]["example.com/rdma"] == "1"
    if release != "v2.0":  # v2.0 patches the pod spec only
        assert pod["metadata"]["labels"] == {"tier": "patched", "keep": "yes"}


@examples(ci=120, long=2000)
@given(names=ENV_NAMES, data=st.data(), which=st.sampled_from(["patchLeaderTemplate", "patchWorkerTemplate", "both"]))
def test_rolebasedgroup_patches_win_over_the_role_template(names, data, which):
    base = {n: data.draw(VALUE, label=f"base {n}") for n in names}
    patched = data.draw(st.dictionaries(st.sampled_from(names + ["NCCL_SOCKET_IFNAME"]), VALUE, min_size=1), label="patch")
    template = {"metadata": {"labels": {keys.POD_INJECT: "true", "role": "base"}},
                "spec": {"containers": [{"name": "node", "image": "base:v1", "env": _env(base)}]}}
    patch = {"metadata": {"labels": {"role": "patched"}}, "spec": {"containers": [{"name": "node", "image": "patch:v2", "env": _env(patched)}]}}
    lws = {"patchLeaderTemplate": patch, "patchWorkerTemplate": patch} if which == "both" else {which: patch}
    role = {"name": "inference", "replicas": 2, "template": template, "leaderWorkerSet": {"size": 4, **lws}}
    obj = {"apiVersion": "workloads.x-k8s.io/v1alpha1", "kind": "RoleBasedGroup", "metadata": {"name": "g"},
           "spec": {"roles": [role]}}
    before = copy.deepcopy(obj)
    found = dict(workloads.templates(obj, "workloads.x-k8s.io", "RoleBasedGroup"))
    assert obj == before
    assert set(found) == {"spec.roles[inference].leaderWorkerSet.patchLeaderTemplate",
                          "spec.roles[inference].leaderWorkerSet.patchWorkerTemplate"}
    for path, pod in found.items():
        is_patched = which == "both" or path.endswith(which)
        node = pod["spec"]["containers"][0]
        assert _node_env(pod) == ({**base, **patched} if is_patched else base), path
        assert node["image"] == ("patch:v2" if is_patched else "base:v1")
        assert pod["metadata"]["labels"] == {keys.POD_INJECT: "true", "role": "patched" if is_patched else "base"}
