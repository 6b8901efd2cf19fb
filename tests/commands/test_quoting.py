"""Issue 28 item 4, the gke-commands.rest part of the mutation run (mutation/MUTATION.md): what
`webhook.commands.quoting` (bash's brace expansion), `webhook.commands.state` (the shell state a
branch that may have run leaves) and `webhook.commands.files` decide that the reader's tests left
open, pinned against bash itself where bash is the oracle."""

from __future__ import annotations

import subprocess

import pytest

from webhook.commands.quoting import MAX_BRACE_WORDS, brace_words, word_at
from webhook.commands.state import State, Var

pytestmark = pytest.mark.usefixtures("command_caches_emptied")  # conftest: each test reads afresh

# Words as a script may carry them after `export`, `env` or a launcher's -x: each is expanded by
# bash (`printf '%s\0' WORD`) and by brace_words, whose words are then quote-removed (word_at)
WORDS = [
    "A={0,1}",
    "A={1,0}",
    "A=x{0,1}y",
    "A={a,b}{c,d}",
    "A={a,b{1,2}}",
    "A={a,{b,c}}d",
    "{a,b}}",
    "{{a,b}",
    "a{b,c}d{e",
    "A={,1}",
    "A={1,}",
    "x{,}",
    "A={0}",
    "A={}",
    "A={,",
    "A=}{0,1}",
    "A={0,1",
    "A={1..3}",
    "A={3..1}",
    "A={-1..1}",
    "A={1..-1}",
    "A={-3..-1}",
    "A={0..0}",
    "A={5..5}",
    "A={01..03}",
    "A={1..03}",
    "A={001..3}",
    "A={-01..1}",
    "A={1..10..3}",
    "A={10..1..3}",
    "A={1..10..-3}",
    "A={1..3..0}",
    "A={0..9..9}",
    "A={1..2..5}",
    "A={a..e}",
    "A={e..a}",
    "A={a..e..2}",
    "A={A..C}",
    "A={Z..a..7}",
    "A={a..a}",
    "A={1..a}",
    "A={a..1}",
    "A={1..2..x}",
    "A={1.5..3}",
    "A={1..3}{a,b}",
    "A={1..3..}",
    "A={..3}",
    "A={1...3}",
    "A={aa..c}",
    "A='{0,1}'",
    'A="{0,1}"',
    "A=\\{0,1}",
    "A={0\\,1}",
    "A={0,1\\}",
    "A='{'0,1}",
    "A={0','1}",
    'A={0,"1,2"}',
    "A={a..e..0}",
    "A={V..Z}",
    "A={0..10}",
    "A={00..3}",
    "A={a,b}\\,c",
    "A={a,b}'x y'",
    "A={a,b}''x",
    'A={a,b}"x\\"y"',
    'A={a,b}""x',
    "A=x,{a,b}",
    "A={a,b}$'\\x41'",
    "A=$'{0,1}'",
    "A={0,$'x'}",
    "A={'a','b'}",
    "NCCL_IB_HCA=mlx5_{0,1}",
    "NCCL_IB_HCA==mlx5_{0..3}:1",
]


def bash_words(word: str) -> list[str]:
    out = subprocess.run(["bash", "-c", f"printf '%s\\0' {word}"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    return out.stdout.split("\0")[:-1]


@pytest.mark.parametrize("word", WORDS)
def test_brace_words_as_bash_expands_them(word):
    expanded = brace_words(word)
    unexpanded = word_at(word, 0)[0]
    got = [unexpanded] if expanded is None else [word_at(w, 0)[0] for w in expanded]
    assert got == bash_words(word)
    if expanded is not None:
        assert all(word_at(w, 0)[1] == len(w) for w in expanded)  # each a whole word


@pytest.mark.parametrize("word", ["A=${X}", "A=${X:-{a,b\\}}", "A=$X", "A=$(echo {a,b})", "A=x"])
def test_a_word_with_no_brace_expression_is_none(word):
    assert brace_words(word) is None


@pytest.mark.parametrize(
    "word",
    [
        "A=${X}{0,1}",
        "A=$X{0,1}",
        "A={0,1}$X",
        "A=\"$X\"{0,1}",
        "A=`x`{0,1}",
        f"A={{1..{MAX_BRACE_WORDS + 1}}}",
        f"A={{1..{2 * MAX_BRACE_WORDS + 2}..2}}",
        "A={a..C}",
        "A={Z..a..6}",
        "A=x`y`{0,1}",
        "A=$(echo x){a,b}",
        "A=`x`{a,b}`y`",
        "A=``{a,b}",
        "A={a,b}`x",
        'A={a,b}"`x`"',
        'A={a,b}"$X"',
        "A={a,b}{c,d}{e,f}{g,h}{i,j}{k,l}{m,n}{o,p}{q,r}",
    ],
)
def test_a_brace_expression_not_read_here_raises(word):
    with pytest.raises(ValueError):
        brace_words(word)


def test_an_unclosed_quote_or_expansion_ends_the_word():
    """What a parse would refuse (an unclosed quote, `${` or backquote): the scan ends at the word's
    end, reads nothing past it, and never loops."""
    assert brace_words("{a,b}'x") == ["a'x", "b'x"]
    assert brace_words('{a,b}"x') == ['a"x', 'b"x']
    assert brace_words("A=${X{a,b}") is None


def test_the_bound_on_words_is_inclusive():
    assert len(brace_words(f"A={{1..{MAX_BRACE_WORDS}}}")) == MAX_BRACE_WORDS
    assert len(brace_words("A={a,b}{c,d}{e,f}{g,h}{i,j}{k,l}{m,n}{o,p}")) == MAX_BRACE_WORDS


# -- the shell state after a branch that may have run (State.merge) -------------------------------------------


def test_a_variable_only_the_branch_sets_may_keep_its_inherited_value():
    state = State({})
    branch = State({"NCCL_IB_DISABLE": Var(["1"], True, True, "/scripts/env.sh")})
    state.merge(branch)
    v = state.vars["NCCL_IB_DISABLE"]
    assert (v.values, v.exported, v.own, v.origin) == ([None, "1"], True, True, "/scripts/env.sh")
    assert v.values is not branch.vars["NCCL_IB_DISABLE"].values


def test_a_variable_both_have_gathers_the_values_and_is_exported_or_own_if_either_is():
    state = State({"NCCL_NET": Var(["IB"], False, False, None), "NCCL_DEBUG": Var(["INFO"], True, True, "/a.sh")})
    branch = State(
        {"NCCL_NET": Var(["Socket", "IB"], True, True, "/b.sh"), "NCCL_DEBUG": Var(["WARN"], False, False, "/b.sh")}
    )
    state.merge(branch)
    net, debug = state.vars["NCCL_NET"], state.vars["NCCL_DEBUG"]
    assert (net.values, net.exported, net.own, net.origin) == (["IB", "Socket"], True, True, "/b.sh")
    assert (debug.values, debug.exported, debug.own, debug.origin) == (["INFO", "WARN"], True, True, "/a.sh")


@pytest.mark.parametrize("mine,theirs", [(False, False), (False, True), (True, False), (True, True)])
def test_set_a_in_a_branch_may_hold_afterwards(mine, theirs):
    state = State({}, allexport=mine)
    state.merge(State({}, allexport=theirs))
    assert state.allexport is (mine or theirs)


def test_through_the_reader_a_branch_that_exports_or_sets_a_reaches_the_program():
    from webhook.commands import reader

    names = frozenset({"NCCL_IB_DISABLE"})
    for script in (
        "NCCL_IB_DISABLE=1; if [ -n \"$X\" ]; then export NCCL_IB_DISABLE; fi; torchrun t.py",
        "[ -n \"$X\" ] && set -a; NCCL_IB_DISABLE=1; torchrun t.py",
    ):
        assert reader.settings(["bash", "-c", script], names) == [("NCCL_IB_DISABLE", "1")], script


# -- names the substring pre-check (text.mentions) must not miss ------------------------------------------------
# Found by the commands.reader part (mutation/MUTATION.md): a name bash or Python reads but the text does not
# spell out was never read, so each pod below was admitted while NCCL ran with NCCL_IB_DISABLE=1.

HIDDEN_SHELL = [
    "export NCCL_IB_DIS''ABLE=1; torchrun t.py",
    'export NCCL_IB_DIS""ABLE=1; torchrun t.py',
    "export N'CCL_IB_DISABLE'=1; torchrun t.py",
    "export NCCL_IB_\\DISABLE=1; torchrun t.py",
    "export $'NCCL\\x5fIB_DISABLE'=1; torchrun t.py",
    "export $'\\116CCL_IB_DISABLE'=1; torchrun t.py",
    "env NCCL_IB_DIS''ABLE=1 torchrun t.py",
]


@pytest.mark.parametrize("script", HIDDEN_SHELL)
def test_a_name_split_by_quotes_or_spelled_with_escapes_is_read(script, policies):
    from commands.test_shell import read_as_bash_runs_it
    from webhook.commands import text

    assert text.mentions(script, frozenset({"NCCL_IB_DISABLE"}))
    read_as_bash_runs_it(script, policies)


def test_a_python_name_spelled_with_an_escape_is_read(policies):
    from commands.test_reader_admission import denied
    import kube_objects as k

    code = "import os; os.environ['NCCL\\x5fIB_DISABLE'] = '1'; os.execvp('torchrun', ['torchrun', 't.py'])"
    out = subprocess.run(
        [
            "python3",
            "-c",
            code.replace("os.execvp('torchrun', ['torchrun', 't.py'])", "print(os.environ['NCCL_IB_DISABLE'])"),
        ],
        capture_output=True,
        text=True,
        timeout=10,
    ).stdout
    assert out == "1\n"
    pod = k.pod([k.container("trainer", command=["python3", "-c"], args=[code])])
    denied(pod, policies)


@pytest.mark.parametrize(
    "line",
    [
        "python train.py --lr 0.1",
        "bash -c 'python train.py'",
        "echo \"done\"",
        "sed -e 's/a/b/' f",
        "export NCCL_NET=IB",
    ],
)
def test_text_that_hides_no_name_is_not_read_for_it(line):
    from webhook.commands import text

    assert not text.mentions(line, frozenset({"NCCL_IB_DISABLE"}))


# -- ANSI-C strings ($'...'), decoded as bash decodes them ----------------------------------------------------

ANSI_C = [
    "abc",
    "é",
    "日本",
    "a\\nb",
    "\\t\\a\\b\\e\\E\\f\\r\\v",
    "\\\\",
    "\\'",
    '\\"',
    "\\?",
    "\\q",
    "\\1",
    "\\12",
    "\\123",
    "\\1234",
    "\\18",
    "\\177",
    "\\0x",
    "a\\0b",
    "\\x4e",
    "\\x4",
    "\\x4eg",
    "\\xg",
    "\\x7f",
    "\\x41\\x42",
    "\\u00e9",
    "\\u4e2d",
    "\\U0001F600",
    "\\u",
    "\\uZ",
    "\\cA",
    "\\ca",
    "\\c?",
    "\\c\\\\",
    "\\c",
    "\\cAx",
    "\\x80",
    "\\200",
    "\\xff",
    "NCCL\\x5fIB_DISABLE",
]


def bash_ansi_c(body: str) -> str | None:
    out = subprocess.run(
        ["bash", "-c", f"printf '%s' $'{body}'"],
        capture_output=True,
        timeout=10,
        env={"LC_ALL": "C.UTF-8", "PATH": "/usr/bin:/bin"},
    ).stdout
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        return None


@pytest.mark.parametrize("body", ANSI_C)
def test_ansi_c_strings_as_bash_decodes_them(body):
    from webhook.commands.quoting import ansi_c

    got = ansi_c(body)
    if got is not None:  # None: not decoded here (a byte that is no UTF-8 alone, a locale-dependent \\u)
        assert got == bash_ansi_c(body)
    else:
        assert bash_ansi_c(body) is None or body in ("\\u00e9", "\\u4e2d", "\\U0001F600", "\\200")


@pytest.mark.parametrize("text,end", [("abc'", 4), ("a\\'b'", 5), ("abc", -1), ("abc\\", -1), ("", -1), ("'", 1)])
def test_where_an_ansi_c_string_ends(text, end):
    from webhook.commands.quoting import ansi_c_end

    assert ansi_c_end(text, 0) == end


# -- GKE multi-networking's annotation (webhook.fabrics.gke) and script files (webhook.commands.files) ------------


def test_gke_annotation_entries_that_are_not_objects_make_it_unreadable():
    from webhook.fabrics import gke

    for value in (
        '[1]',
        '["eth1"]',
        '[null]',
        '[{"interfaceName": "eth1"}]',
        '{"interfaceName": "eth1", "network": "n"}',
    ):
        assert gke.parse(value) is None, value
        assert gke.networks_of(value) == [], value


def test_gke_networks_listed_are_each_named_once_without_the_pod_network():
    from webhook.fabrics import gke

    value = (
        '[{"interfaceName":"eth0","network":"default"},{"interfaceName":"eth1","network":"rdma-0"},'
        '{"interfaceName":"eth2","network":"rdma-0"},{"interfaceName":"eth3","network":"default"}]'
    )
    assert gke.networks_of(value) == ["rdma-0"]


def test_gke_plan_for_a_pod_without_the_annotation_lists_the_pod_network_first_compactly():
    """GKE's own form: eth0 on the default network first, the policy's networks after it on free
    interfaces (a network without an interface of its own takes the next one: eth1, not eth0)."""
    from webhook.fabrics import gke

    plan = gke.plan(None, (gke.GkeNetwork("rdma-0", None), gke.GkeNetwork("rdma-1", "eth5")))
    assert plan.value == (
        '[{"interfaceName":"eth0","network":"default"},{"interfaceName":"eth1","network":"rdma-0"},'
        '{"interfaceName":"eth5","network":"rdma-1"}]'
    )
    assert (plan.interfaces, plan.pod_interfaces, plan.problem) == (["eth1", "eth5"], ["eth1", "eth5"], None)
    assert plan.added == ["GKE network rdma-0@eth1", "GKE network rdma-1@eth5"]
    # a pod that lists them already keeps its annotation: nothing added
    kept = gke.plan(plan.value, (gke.GkeNetwork("rdma-0", None), gke.GkeNetwork("rdma-1", "eth5")))
    assert (kept.value, kept.interfaces, kept.added, kept.problem) == (None, ["eth1", "eth5"], [], None)


def test_a_script_path_with_a_variable_or_no_path_is_no_known_file():
    from webhook.commands.files import Files

    files = Files("/workspace")
    files.add_dir("/scripts", "ConfigMap 'train-scripts'")
    files.add_file("/workspace/run.sh", "torchrun t.py", "ConfigMap 'run'")
    assert files.lookup("/scripts/launch.sh") == (None, "ConfigMap 'train-scripts'")
    assert files.lookup("run.sh") == ("torchrun t.py", "ConfigMap 'run'")
    for path in ("", "/scripts/$RUN.sh", "$SCRIPTS/launch.sh", "${RUN}.sh"):
        assert files.lookup(path) is None, path


def test_a_new_shell_state_has_set_a_off_and_inherits_the_container_env():
    state = State({})
    assert (state.allexport, state.cleared) == (False, False)


@pytest.mark.parametrize("allexport,cleared", [(False, False), (True, False), (False, True), (True, True)])
def test_a_started_process_inherits_the_exported_variables_but_not_set_a(allexport, cleared):
    """bash(1): a child gets the exported variables (as its environment), not the shell's options;
    `env -i` (cleared) holds for what it starts too."""
    state = State(
        {
            "NCCL_NET": Var(["IB"], True, True, "/a.sh"),
            "LOCAL": Var(["x"], False, True, None),
            "NCCL_DEBUG": Var(["INFO", None], True, False, None),
        },
        allexport,
        cleared,
    )
    child = state.child()
    assert sorted(child.vars) == ["NCCL_DEBUG", "NCCL_NET"]
    net, debug = child.vars["NCCL_NET"], child.vars["NCCL_DEBUG"]
    assert (net.values, net.exported, net.own, net.origin) == (["IB"], True, True, "/a.sh")
    assert (debug.values, debug.exported, debug.own, debug.origin) == (["INFO", None], True, False, None)
    assert (child.allexport, child.cleared) == (False, cleared)
    child.vars["NCCL_NET"].values.append("Socket")
    assert state.vars["NCCL_NET"].values == ["IB"]


@pytest.mark.parametrize("allexport,cleared", [(False, False), (True, False), (False, True), (True, True)])
def test_a_branch_copies_the_whole_state(allexport, cleared):
    state = State(
        {"NCCL_NET": Var(["IB"], True, True, "/a.sh"), "LOCAL": Var(["x"], False, False, None)}, allexport, cleared
    )
    copy_ = state.copy()
    assert sorted(copy_.vars) == ["LOCAL", "NCCL_NET"]
    for name, v in state.vars.items():
        c = copy_.vars[name]
        assert (c.values, c.exported, c.own, c.origin) == (v.values, v.exported, v.own, v.origin)
        assert c is not v and c.values is not v.values
    assert (copy_.allexport, copy_.cleared) == (allexport, cleared)


@pytest.mark.parametrize(
    "path,normal",
    [
        ("/scripts/run.sh", "/scripts/run.sh"),
        ("", ""),
        ("run.sh", "run.sh"),
        ("/a/./b", "/a/b"),
        ("/a/b/", "/a/b"),
        ("/a//b", "/a/b"),
        ("a//b", "a/b"),
        ("/a/../b", "/b"),
        ("//etc/x", "/etc/x"),
        ("//Xfiles/run.sh", "/Xfiles/run.sh"),
        ("///etc/x", "/etc/x"),
        ("/", "/"),
    ],
)
def test_normal_path_as_linux_resolves_it(path, normal):
    from webhook.commands.files import normal_path

    assert normal_path(path) == normal


def test_files_defaults_resolve_nothing_relative_and_bound_the_reading():
    from webhook.commands.files import Budget, Files

    assert Files().working_dir == "" and Files().lookup("run.sh") is None
    assert (Budget().parse_bytes, Budget().steps) == (64 * 1024, 200_000)


def test_a_configmap_mounted_at_the_root_holds_every_absolute_path():
    from webhook.commands.files import Files

    files = Files()
    files.add_dir("/", "ConfigMap 'root'")
    assert files.lookup("/train.sh") == (None, "ConfigMap 'root'")
    assert files.mentioned("bash /train.sh") and not files.mentioned("bash train.sh")


def test_what_a_command_may_name_of_the_files():
    from webhook.commands.files import Files

    files = Files("/workspace")
    files.add_file("/workspace/run.sh", "torchrun t.py", "ConfigMap 'run'")
    assert files.mentioned("bash run.sh") and files.mentioned("bash /workspace/run.sh")
    assert not files.mentioned("bash gun.sh") and not files.mentioned("bash other.sh")
    scripts = Files()
    scripts.add_dir("/scripts", "ConfigMap 'train-scripts'")
    assert scripts.mentioned("bash /scripts/launch.sh")
    assert not scripts.mentioned("bash /script.sh") and not scripts.mentioned("python /opt/run.py")
