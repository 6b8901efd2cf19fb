"""Issue 28 item 4, the gke-commands.rest part of the mutation run (tests/MUTATION.md): what
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
    "A={0,1}", "A={1,0}", "A=x{0,1}y", "A={a,b}{c,d}", "A={a,b{1,2}}", "A={a,{b,c}}d", "{a,b}}", "{{a,b}", "a{b,c}d{e",
    "A={,1}", "A={1,}", "x{,}", "A={0}", "A={}", "A={,", "A=}{0,1}", "A={0,1",
    "A={1..3}", "A={3..1}", "A={-1..1}", "A={1..-1}", "A={-3..-1}", "A={0..0}", "A={5..5}",
    "A={01..03}", "A={1..03}", "A={001..3}", "A={-01..1}", "A={1..10..3}", "A={10..1..3}", "A={1..10..-3}",
    "A={1..3..0}", "A={0..9..9}", "A={1..2..5}", "A={a..e}", "A={e..a}", "A={a..e..2}", "A={A..C}", "A={Z..a..7}",
    "A={a..a}", "A={1..a}", "A={a..1}", "A={1..2..x}", "A={1.5..3}", "A={1..3}{a,b}",
    "A={1..3..}", "A={..3}", "A={1...3}", "A={aa..c}",
    "A='{0,1}'", 'A="{0,1}"', "A=\\{0,1}", "A={0\\,1}", "A={0,1\\}", "A='{'0,1}", "A={0','1}", 'A={0,"1,2"}',
    "A=$'{0,1}'", "A={0,$'x'}", "A={'a','b'}", "NCCL_IB_HCA=mlx5_{0,1}", "NCCL_IB_HCA==mlx5_{0..3}:1",
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


@pytest.mark.parametrize("word", ["A=${X}{0,1}", "A=$X{0,1}", "A={0,1}$X", "A=\"$X\"{0,1}", "A=`x`{0,1}",
                                  f"A={{1..{MAX_BRACE_WORDS + 1}}}", f"A={{1..{2 * MAX_BRACE_WORDS + 2}..2}}",
                                  "A={a..C}", "A={Z..a..6}", "A=x`y`{0,1}",
                                  "A={a,b}{c,d}{e,f}{g,h}{i,j}{k,l}{m,n}{o,p}{q,r}"])
def test_a_brace_expression_not_read_here_raises(word):
    with pytest.raises(ValueError):
        brace_words(word)


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
    branch = State({"NCCL_NET": Var(["Socket", "IB"], True, True, "/b.sh"), "NCCL_DEBUG": Var(["WARN"], False, False, "/b.sh")})
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
    for script in ("NCCL_IB_DISABLE=1; if [ -n \"$X\" ]; then export NCCL_IB_DISABLE; fi; torchrun t.py",
                   "[ -n \"$X\" ] && set -a; NCCL_IB_DISABLE=1; torchrun t.py"):
        assert reader.settings(["bash", "-c", script], names) == [("NCCL_IB_DISABLE", "1")], script


# -- names the substring pre-check (text.mentions) must not miss ------------------------------------------------
# Found by the commands.reader part (tests/MUTATION.md): a name bash or Python reads but the text does not
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
    from test_shell_edges import read_as_bash_runs_it
    from webhook.commands import text

    assert text.mentions(script, frozenset({"NCCL_IB_DISABLE"}))
    read_as_bash_runs_it(script, policies)


def test_a_python_name_spelled_with_an_escape_is_read(policies):
    from test_commands import denied
    import kube_objects as k

    code = "import os; os.environ['NCCL\\x5fIB_DISABLE'] = '1'; os.execvp('torchrun', ['torchrun', 't.py'])"
    out = subprocess.run(["python3", "-c", code.replace("os.execvp('torchrun', ['torchrun', 't.py'])",
                                                         "print(os.environ['NCCL_IB_DISABLE'])")],
                         capture_output=True, text=True, timeout=10).stdout
    assert out == "1\n"
    pod = k.pod([k.container("trainer", command=["python3", "-c"], args=[code])])
    denied(pod, policies)


@pytest.mark.parametrize("line", ["python train.py --lr 0.1", "bash -c 'python train.py'", "echo \"done\"",
                                  "sed -e 's/a/b/' f", "export NCCL_NET=IB"])
def test_text_that_hides_no_name_is_not_read_for_it(line):
    from webhook.commands import text

    assert not text.mentions(line, frozenset({"NCCL_IB_DISABLE"}))
