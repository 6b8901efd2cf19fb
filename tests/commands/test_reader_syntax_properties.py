"""Property tests for the syntax families the readers accept and for merge precedence (issue 28,
item 2): not only the bare form of each, but its variants.

- shell option clusters: `bash -c`, `-lc`, `-ec`, `-xc`, `-euxc`, `sh -c`, separate `-e -c`, `-o
  pipefail -c`, ... all read the script; without `c` the word is a file, not read;
- quoting of `NAME=value`: single, double, escaped, `$'...'` (with its escapes), and
  concatenations of them, in `export`, `declare -x`, `NAME=value cmd` and `env NAME=value cmd`;
  compared with what real bash gives, for those and for any run of quotes, backslashes, blanks,
  `$'...'` escapes, expansions, letters and digits (the reading is bash's value or "not known");
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
import os
import re
import subprocess

import pytest
from hypothesis import given, strategies as st

import kube_objects as k
from conftest import CLUSTER_STATE
from strategies import examples
from webhook.cluster.state import FileClusterState
from webhook.commands import reader
from webhook.commands.launchers import LAUNCHERS, MCA_ENV_LIST
from webhook.commands.quoting import word_at
from webhook.commands.shell import SHELLS
from webhook.core import keys
from webhook.core.decision import DENIED, decide
from webhook.grammar import k8s
from webhook.kinds import trainer, workloads
from webhook.kinds.merge import MERGE_KEYS, strategic_merge

NAMES = frozenset({"NCCL_IB_DISABLE", "NCCL_NET", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME"})
NAME = st.sampled_from(sorted(NAMES))
# values as people write them: interface lists, HCA filters, transport names
PLAIN = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.,:^=+-/@%", min_size=1, max_size=12
)
SPICY = st.text(alphabet="abcXYZ019_.,:^=-/ \t*?[]{}~#!&|;<>()$`\"'\\", min_size=1, max_size=12)


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


README_FORMS = [
    ["-c"],
    ["-lc"],
    ["-ec"],
    ["-xc"],
    ["-euxc"],
    ["-cl"],
    ["-e", "-c"],
    ["-l", "-c"],
    ["-o", "pipefail", "-c"],
    ["--login", "-c"],
    ["+x", "-c"],
    ["-ce"],
]


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


_ANSI_NAMED = {"\\": "\\\\", "'": "\\'", '"': '\\"', "?": "\\?", "\t": "\\t", "\n": "\\n", "\x1b": "\\e"}


def _ansi_char(ch: str, how: int) -> str:
    """One character inside $'...': itself (0), its named escape (1), or in octal, hex, \\u or \\U
    (2-5; all the digits each takes, so that a digit after it is not taken too)."""
    if how == 0 and ch not in "\\'":
        return ch
    if how == 1 and ch in _ANSI_NAMED:
        return _ANSI_NAMED[ch]
    return ("\\%03o", "\\x%02x", "\\u%04x", "\\U%08X")[how % 4] % ord(ch)


@st.composite
def quoted(draw) -> tuple[str, str]:
    """(shell word, the value it stands for): the value cut into segments, each quoted its own way:
    single or double quotes, backslashes, `$'...'` with or without escapes, or bare."""
    segments = draw(st.lists(SPICY, min_size=1, max_size=3))
    word: list[str] = []
    for seg in segments:
        ways = ["single", "double", "escaped", "ansi"]
        if all(ch.isalnum() or ch in "_.,:/@%^+=-" for ch in seg):
            ways.append("bare")
        way = draw(st.sampled_from(ways))
        if way == "ansi":
            hows = draw(st.lists(st.integers(0, 5), min_size=len(seg), max_size=len(seg)))
            word.append("$'" + "".join(_ansi_char(ch, how) for ch, how in zip(seg, hows)) + "'")
        else:
            word.append({"single": _single, "double": _double, "escaped": _escaped, "bare": str}[way](seg))
    return "".join(word), "".join(segments)


@examples(ci=200, long=3000)
@given(
    name=NAME,
    q=quoted(),
    form=st.sampled_from(
        [
            "export {n}={w}; python t.py",
            "declare -x {n}={w}\npython t.py",
            "{n}={w} python t.py",
            "export {n}\n{n}={w}\nexec python t.py",
            "env {n}={w} python t.py",
        ]
    ),
)
def test_every_quoting_of_name_value_gives_the_value(name, q, form):
    word, value = q
    script = form.format(n=name, w=word)
    assert reader.settings(["bash", "-c", script], NAMES) == [(name, value)], script


@pytest.mark.parametrize("word,value", [("$'\\x31'", "1"), ("$'So\\x63ket'", "Socket"), ("$'\\061'", "1")])
def test_ansi_c_escapes_are_decoded(word, value):
    assert reader.settings(["bash", "-c", f"export NCCL_IB_DISABLE={word}; python t.py"], NAMES) == [
        ("NCCL_IB_DISABLE", value)
    ]


@pytest.mark.parametrize("word,value", [('" "', " "), ('"IB"" "', "IB "), ('"\t"', "\t")])
def test_blank_double_quoted_string_is_kept(word, value):
    assert reader.settings(["bash", "-c", f"export NCCL_NET={word}; python t.py"], NAMES) == [("NCCL_NET", value)]


@pytest.mark.parametrize("word,value", [("\\ a", " a"), ("\\ ", " "), ("0\\\t", "0\t")])
def test_escaped_blanks_are_kept(word, value):
    assert reader.settings(["bash", "-c", f"export NCCL_NET={word}; python t.py"], NAMES) == [("NCCL_NET", value)]


@pytest.mark.parametrize("word,value", [("'0'\\1", "01"), ('"0"\\1', "01"), ("'IB'\\;", "IB;")])
def test_an_escape_after_a_quoted_string_is_kept(policies, word, value):
    name = "NCCL_NET" if "IB" in word else "NCCL_IB_DISABLE"
    assert reader.settings(["bash", "-c", f"export {name}={word}; python t.py"], NAMES) == [(name, value)]


def test_an_escape_after_a_quoted_string_is_judged(policies):
    c = k.container("trainer", command=["bash", "-c"], args=["export NCCL_IB_DISABLE='0'\\1; exec python train.py"])
    d = decide(k.pod([c], namespace="ml-training"), ML, policies, STATE.attachments())
    assert d.outcome == DENIED


# -- the reading against real bash -------------------------------------------------------------------
# What bash itself gives NAME after `NAME=word` (`bash -c 'printf %s "$NAME"'` in the process that
# sees it), against what the reader reads from the same script: the same value, or "not known"
# (nothing reported) where the word is beyond the reader, never another value.

# bash's value of NAME in the process the assignment reaches, in each form the reader reads
BASH_FORMS = [
    "export {n}={w}; {cmd}",
    "declare -x {n}={w}\n{cmd}",
    "{n}={w} {cmd}",
    "{n}={w}\n{cmd}",
    "env {n}={w} {cmd}",
]
BASH_X = "x1"  # $X in the words: the container env's X


def bash_reads(form: str, name: str, word: str) -> str | None:
    """What bash gives `name` after `word` is assigned in `form`; None when bash does not take
    `word` as one word (`set -- word` gives another count) or the script fails. NAME is in bash's
    environment already (so that a plain `NAME=word` is exported, as the reader assumes for the
    names it is asked about)."""
    # the word alone first (eval'd from $1): a quote it leaves open would otherwise reach into the rest
    script = 'eval "set -- x${1}%" && [ $# = 1 ] || exit 3\n' + form.format(
        n=name, w=word, cmd=f"bash -c 'printf %s \"${name}\"'"
    )
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8", name: "inherited", "X": BASH_X}
    out = subprocess.run(["bash", "-c", script, "bash", word], env=env, capture_output=True, timeout=20)
    return out.stdout.decode("utf-8", "surrogateescape") if out.returncode == 0 else None


def we_read(form: str, name: str, word: str) -> list[tuple[str, str]]:
    return reader.settings(["bash", "-c", form.format(n=name, w=word, cmd="python t.py")], NAMES, Env(X=BASH_X))


# ANSI-C escapes (bash(1), QUOTING): each one as bash gives it; a \u above 0x7f is the locale's
# (not known here), a byte that is not UTF-8 cannot be a value of ours (not known)
ANSI_CASES = [
    "$'\\a\\b\\e\\E\\f\\n\\r\\t\\v'",
    "$'\\\\'",
    "$'\\''",
    "$'\\\"'",
    "$'\\?'",
    "$'\\061'",
    "$'\\61'",
    "$'\\0101'",
    "$'\\1011'",
    "$'\\x31'",
    "$'\\x3'",
    "$'\\x414'",
    "$'\\x'",
    "$'\\xg'",
    "$'\\u41'",
    "$'\\u00411'",
    "$'\\U00000041'",
    "$'\\U000000411'",
    "$'\\u'",
    "$'\\cA'",
    "$'\\ca'",
    "$'\\c?'",
    "$'\\c['",
    "$'\\c1'",
    "$'\\c\\\\x'",
    "$'\\c\\''",
    "$'a\\c'",
    "$'\\z'",
    "$'\\8'",
    "$'a\\0b'c",
    "$'a\\x00b'c",
    "$'\\c@x'",
    "$'\\u0'",
    "$'\\xc3\\xa9'",
    "$'So\\x63ket'",
    "$'\\u00e9'",
    "$'\\U0001F600'",
    "$'\\xff'",
    "$'\\777'",
    "$'a\\\\' NCCL_IB_HCA=x",
]


@pytest.mark.parametrize("word", ANSI_CASES)
def test_each_ansi_c_escape_is_what_bash_gives(word):
    expected = bash_reads(BASH_FORMS[0], "NCCL_NET", word.split(" ")[0])
    assert expected is not None
    got = we_read(BASH_FORMS[0], "NCCL_NET", word)
    if "\\u00e9" in word or "\\U0001" in word or "\\xff" in word or "\\777" in word:
        assert got == [] and word_at(word, 0)[0] is None  # not known: the locale's bytes, or not UTF-8
    else:
        assert ("NCCL_NET", expected) in got and [n for n, _ in got].count("NCCL_NET") == 1, (expected, got)
        assert word_at(word, 0) == (expected, len(word.split(" ")[0]))  # the textual reading agrees


@examples(ci=100, long=2000)
@given(name=NAME, q=quoted(), form=st.sampled_from(BASH_FORMS))
def test_every_quoting_of_name_value_is_what_bash_reads(name, q, form):
    word, value = q
    assert bash_reads(form, name, word) == value, word
    assert we_read(form, name, word) == [(name, value)], word


# words as they come: any run of quotes, backslashes, blanks (bash's and the \r tree-sitter takes
# for one), `$'...'` escapes, expansions, letters and digits; most are not one word or not even
# a whole script, and those bash refuses are not compared
WORD_TOKENS = [
    "'",
    '"',
    "\\",
    " ",
    "\t",
    "\r",
    "$'",
    "$",
    "$X",
    "${X}",
    "\\x31",
    "\\061",
    "\\n",
    "\\t",
    "\\'",
    '\\"',
    "\\\\",
    "\\cA",
    "\\u0041",
    "\\U00000042",
    "\\e",
    "\\x",
    "\\u00e9",
    "\\xc3\\xa9",
    "\\0",
    "a",
    "I",
    "B",
    "0",
    "1",
]
RAW_WORD = st.lists(st.sampled_from(WORD_TOKENS), min_size=1, max_size=12).map("".join)


@examples(ci=400, long=5000)
@given(word=RAW_WORD, form=st.sampled_from(BASH_FORMS))
def test_any_word_is_read_as_bash_reads_it_or_not_known(word, form):
    expected = bash_reads(form, "NCCL_NET", word)
    if expected is None:
        return  # not one word, or not a script bash runs
    got = we_read(form, "NCCL_NET", word)
    assert got in ([], [("NCCL_NET", expected)]), (word, expected, got)
    value, end = word_at(word, 0)  # the textual reading, for scripts the parser does not take
    assert value is None or (value, end) == (expected, len(word)), (word, expected, value, end)


# Scripts where tree-sitter's nodes and bash's words part (each found by the tests above or by
# reading the tree): the reading is bash's for the names it gives, and gives those in `known`.
SPLIT_SCRIPTS = [
    ("export NCCL_NET=IB; NCCL_NET+=x; {cmd}", {"NCCL_NET"}),  # += appends
    ("export NCCL_NET=a$$; {cmd}", set()),  # $$ (the pid) is a `$$` token in a concatenation
    ("export NCCL_NET=$X$$${{X}}; {cmd}", set()),  # `$` ends one node, `${X}` starts the next
    ("export NCCL_NET=IB\r\n{cmd}", {"NCCL_NET"}),  # \r is part of the word in bash, white space in tree-sitter
    ("export NCCL_NET=IB\rx NCCL_IB_HCA=y; {cmd}", {"NCCL_NET", "NCCL_IB_HCA"}),
    ('export NCCL_NET="a"\\\nb; {cmd}', {"NCCL_NET"}),  # a line continuation after a string
    ("export NCCL_NET='a'\\ 'b'; {cmd}", {"NCCL_NET"}),  # an escaped blank between two strings
    ("NCCL_NET=a\\\t\\ b {cmd}", {"NCCL_NET"}),
    ("NCCL_IB_DISABLE='0'\\1 {cmd}", {"NCCL_IB_DISABLE"}),  # `\1` is the command's name in the tree
    ("env NCCL_IB_DISABLE='0'\\1 {cmd}", {"NCCL_IB_DISABLE"}),
    ('export NCCL_NET=" $X" NCCL_IB_HCA="$X "; {cmd}', {"NCCL_NET", "NCCL_IB_HCA"}),  # blanks around an expansion
    ('export NCCL_NET="$" NCCL_IB_HCA="$\'x\'"; {cmd}', {"NCCL_NET", "NCCL_IB_HCA"}),  # `$` tokens in a string
    ("export NCCL_NET=$'\\x31'\\ 1; {cmd}", {"NCCL_NET"}),
    ("export NCCL_IB_DISABLE='0'\\1 NCCL_NET='IB'\\\n; {cmd}", {"NCCL_IB_DISABLE", "NCCL_NET"}),
    # a word token that takes the newline before it (`\env` on the next line) makes the next
    # command an argument of export in the tree: the script gets the textual reading
    ("export NCCL_NET=1\n\\env NCCL_IB_DISABLE=1 {cmd}", {"NCCL_NET", "NCCL_IB_DISABLE"}),
    ("export NCCL_NET=${{X}}\\e=; {cmd}", set()),  # `\e=` is a word, not an assignment
    ("export NCCL_NET=~/x NCCL_IB_HCA=a:~; {cmd}", set()),  # tilde expansion: not known
    ("env NCCL_NET=\\\n~ NCCL_IB_HCA=${{X}}\\t{{:~ {cmd}", set()),
    (
        "export NCCL_NET=':'~ NCCL_IB_HCA=a\\:~ NCCL_SOCKET_IFNAME=\"~\"; {cmd}",
        {"NCCL_NET", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME"},
    ),  # not expanded
    ("env NCCL_NET=\\~ {cmd}", {"NCCL_NET"}),
    ("declare -x NCCL_NET=#:=\\0\\\n=\n{cmd}", {"NCCL_NET"}),  # tree-sitter: A= and a comment
]


@pytest.mark.parametrize("script,known", SPLIT_SCRIPTS)
def test_words_tree_sitter_splits_are_read_as_bash_reads_them(script, known):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8", "X": BASH_X}
    out = subprocess.run(
        ["bash", "-c", script.format(cmd="env -0")], env=env, capture_output=True, timeout=20, check=True
    )
    seen = dict(v.split("=", 1) for v in out.stdout.decode().split("\0") if v.split("=", 1)[0] in NAMES)
    got = reader.settings(["bash", "-c", script.format(cmd="python t.py")], NAMES, Env(X=BASH_X))
    assert {n for n, _ in got} == known and all(seen[n] == v for n, v in got), (seen, got)


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
    setting = {
        "export": [spelling, f"{name}={value}"],
        "set": [spelling, name, value],
        "mca": [spelling, MCA_ENV_LIST, f"{name}={value}"],
    }[action]
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
@given(
    form=st.sampled_from(["$(IB_OFF)", "$$(IB_OFF)", "$(UNDEFINED)", "$(X)", "0$(IB_OFF)", "$(IB_OFF)$(IB_OFF)"]),
    where=st.sampled_from(["env", "args", "script"]),
)
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
SCALAR = st.one_of(
    st.integers(-3, 3), st.text(alphabet="abc01", max_size=3), st.booleans(), st.lists(st.integers(0, 3), max_size=2)
)
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
    keys_ = (
        st.sampled_from(["a", "b", "c", "d", "e"]) if mk != "containerPort" else st.sampled_from([80, 443, 8080, 29500])
    )
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

ENV_NAMES = st.lists(
    st.sampled_from(["NCCL_NET", "NCCL_IB_HCA", "NCCL_DEBUG", "OMP_NUM_THREADS", "PET_X"]),
    unique=True,
    min_size=1,
    max_size=4,
)
VALUE = st.text(alphabet="abcXYZ0129_", min_size=1, max_size=6)


def _env(pairs):
    return [{"name": n, "value": v} for n, v in pairs.items()]


def _node_env(pod):
    node = next(c for c in pod["spec"]["containers"] if c["name"] == "node")
    return {e["name"]: e.get("value") for e in node.get("env") or []}


def _runtime(env, image="runtime:v1", command=("torchrun", "train.py")):
    c = {
        "name": "node",
        "image": image,
        "command": list(command),
        "env": _env(env),
        "resources": {"limits": {"nvidia.com/gpu": "8", "example.com/rdma": "1"}},
    }
    job = {
        "name": "node",
        "template": {
            "metadata": {"labels": {trainer.ANCESTOR_LABEL: "trainer"}},
            "spec": {
                "template": {"metadata": {"labels": {"tier": "base", "keep": "yes"}}, "spec": {"containers": [c]}}
            },
        },
    }
    return {
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "rt"},
        "spec": {"template": {"spec": {"replicatedJobs": [job]}}},
    }


def _override(release, env, labels):
    container = {"name": "node", "env": _env(env)}
    if release == "v2.0":
        return {"podSpecOverrides": [{"targetJobs": [{"name": "node"}], "containers": [container]}]}
    if release == "v2.1":
        return {
            "podTemplateOverrides": [
                {"targetJobs": [{"name": "node"}], "metadata": {"labels": labels}, "spec": {"containers": [container]}}
            ]
        }
    template = {"metadata": {"labels": labels}, "spec": {"containers": [container]}}
    return {
        "runtimePatches": [
            {
                "trainingRuntimeSpec": {
                    "template": {
                        "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": template}}}]}
                    }
                }
            }
        ]
    }


@examples(ci=120, long=2000)
@given(release=st.sampled_from(trainer.TRAINER_RELEASES), names=ENV_NAMES, data=st.data())
def test_trainjob_overrides_win_over_the_runtime(release, names, data):
    base = {n: data.draw(VALUE, label=f"base {n}") for n in names}
    patched = data.draw(
        st.dictionaries(st.sampled_from(names + ["NCCL_SOCKET_IFNAME"]), VALUE, min_size=1), label="patch"
    )
    from_trainer = data.draw(
        st.dictionaries(st.sampled_from(names + ["NCCL_P2P_LEVEL"]), VALUE, max_size=2), label="trainer env"
    )
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
    assert node["image"] == ("user:v2" if from_trainer else "runtime:v1") and node["command"] == [
        "torchrun",
        "train.py",
    ]
    assert node["resources"]["limits"]["example.com/rdma"] == "1"
    if release != "v2.0":  # v2.0 patches the pod spec only
        assert pod["metadata"]["labels"] == {"tier": "patched", "keep": "yes"}


@examples(ci=120, long=2000)
@given(names=ENV_NAMES, data=st.data(), which=st.sampled_from(["patchLeaderTemplate", "patchWorkerTemplate", "both"]))
def test_rolebasedgroup_patches_win_over_the_role_template(names, data, which):
    base = {n: data.draw(VALUE, label=f"base {n}") for n in names}
    patched = data.draw(
        st.dictionaries(st.sampled_from(names + ["NCCL_SOCKET_IFNAME"]), VALUE, min_size=1), label="patch"
    )
    template = {
        "metadata": {"labels": {keys.POD_INJECT: "true", "role": "base"}},
        "spec": {"containers": [{"name": "node", "image": "base:v1", "env": _env(base)}]},
    }
    patch = {
        "metadata": {"labels": {"role": "patched"}},
        "spec": {"containers": [{"name": "node", "image": "patch:v2", "env": _env(patched)}]},
    }
    lws = {"patchLeaderTemplate": patch, "patchWorkerTemplate": patch} if which == "both" else {which: patch}
    role = {"name": "inference", "replicas": 2, "template": template, "leaderWorkerSet": {"size": 4, **lws}}
    obj = {
        "apiVersion": "workloads.x-k8s.io/v1alpha1",
        "kind": "RoleBasedGroup",
        "metadata": {"name": "g"},
        "spec": {"roles": [role]},
    }
    before = copy.deepcopy(obj)
    found = dict(workloads.templates(obj, "workloads.x-k8s.io", "RoleBasedGroup"))
    assert obj == before
    assert set(found) == {
        "spec.roles[inference].leaderWorkerSet.patchLeaderTemplate",
        "spec.roles[inference].leaderWorkerSet.patchWorkerTemplate",
    }
    for path, pod in found.items():
        is_patched = which == "both" or path.endswith(which)
        node = pod["spec"]["containers"][0]
        assert _node_env(pod) == ({**base, **patched} if is_patched else base), path
        assert node["image"] == ("patch:v2" if is_patched else "base:v1")
        assert pod["metadata"]["labels"] == {keys.POD_INJECT: "true", "role": "patched" if is_patched else "base"}
