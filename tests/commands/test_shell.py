"""Edges of webhook/commands/shell.py that the mutation run of the part commands.shell
(mutation/MUTATION.md) found untested.

shell.py turns a script into what the reader (webhook/commands/reader.py) walks: commands with their
prefix assignments and words (quote removal as bash does it), the command substitutions that run
before them, and blocks that run once (`;`, newlines), may run or not (`&&`/`||`, branches, loops,
function bodies) or run in a subshell (`( )`, pipelines, `$( )`). A script it cannot read faithfully
(a syntax error, nesting past its bound, a word tree-sitter cuts where bash does not) is None, and
the reader falls back to the textual reading.

The tests read what a script makes the processes it starts see (`reader.settings`, as the
command-fallback rule reads a container's `bash -c` script) for scripts pods carry, and where the
answer is the parse itself (`parse_script`: None or not, the words a command has) read that. The
module keeps every parse by text (`shell.PARSED`), above it the reader keeps readings
(`reader._READ`), and text.py and python.py keep theirs; mutmut forks each mutant's worker from the
process that ran the clean tests, which hands the original code's parses down: the fixture below
empties every cache before each test, so each parse here is made by the code under test.
"""

from __future__ import annotations

import shlex

import pytest

from webhook.commands import reader, shell, source_words
from webhook.commands.files import Files
from webhook.commands.shell import MAX_DEPTH, MAX_PARSED, MAYBE, SEQ, SUB, Block, Cmd, Ref, parse_script

NAMES = frozenset({"NCCL_IB_DISABLE", "NCCL_NET", "NCCL_IB_HCA", "NCCL_DEBUG"})  # an ib-verbs policy's names


pytestmark = pytest.mark.usefixtures("command_caches_emptied")  # conftest: each test reads afresh


class Env(dict):
    """A container env as the reader looks it up."""

    def get(self, name, default=None):
        return dict.get(self, name, default)


def seen(script: str, **env: str) -> list[tuple[str, str]]:
    """What the processes `bash -c script` starts see of NAMES, made by the script."""
    return reader.settings(["bash", "-c", script], NAMES, Env(env))


def words(cmd: Cmd) -> list[list]:
    """A command's words, a variable reference as `$NAME`, what is not known here as None."""
    return [["$" + p.name if isinstance(p, Ref) else p for p in w] for w in cmd.words]


def _text(parts: list) -> str:
    return "".join("?" if p is None else "$" + p.name if isinstance(p, Ref) else p for p in parts)


def cmds(block: Block | None) -> list[Cmd]:
    """The commands of a parse, depth first."""
    assert block is not None
    out: list[Cmd] = []
    for item in block.items:
        if isinstance(item, Cmd):
            out.append(item)
            for sub in item.subs:
                out.extend(cmds(sub))
        else:
            out.extend(cmds(item))
    return out


def shape(block: Block | None):
    """A parse as nested tuples: ("SEQ"|"MAYBE"|"SUB", items); a command as its prefix
    assignments and words, blank-separated (`$X` a reference, `?` not known here)."""
    assert block is not None
    kinds = {SEQ: "SEQ", MAYBE: "MAYBE", SUB: "SUB"}
    out: list = []
    for item in block.items:
        if isinstance(item, Cmd):
            out.append(" ".join([f"{n}={_text(v)}" for n, v in item.assigns] + [_text(w) for w in item.words]))
        else:
            out.append(shape(item))
    return (kinds[block.kind], out)


# -- parse_script: remembered, bounded, never raising ------------------------------------------------


def test_a_script_is_parsed_once_and_the_same_parse_is_given_again():
    script = "export NCCL_IB_DISABLE=1\ntorchrun --nproc_per_node=8 train.py"
    first = parse_script(script)
    assert first is not None and shell.PARSED[script] is first
    assert parse_script(script) is first
    # the reader, asked twice with different names (so its own reading is not reused), reads it the same
    assert seen(script) == [("NCCL_IB_DISABLE", "1")]
    assert reader.settings(["bash", "-c", script], frozenset({"NCCL_IB_DISABLE"})) == [("NCCL_IB_DISABLE", "1")]


def test_an_unreadable_script_is_remembered_as_unreadable():
    script = 'echo "starting\nexport NCCL_NET=Socket\ntorchrun train.py'  # a quote left open
    assert parse_script(script) is None
    assert script in shell.PARSED and shell.PARSED[script] is None
    assert parse_script(script) is None
    assert seen(script) == [("NCCL_NET", "Socket")]  # the textual reading


def test_the_cache_is_emptied_when_full_and_keeps_the_newest():
    for i in range(shell.CACHE_MAX):
        parse_script(f"export NCCL_DEBUG=INFO; sleep {i}")
    assert len(shell.PARSED) == shell.CACHE_MAX
    block = parse_script("export NCCL_NET=IB; torchrun t.py")
    assert (
        list(shell.PARSED) == ["export NCCL_NET=IB; torchrun t.py"]
        and shell.PARSED["export NCCL_NET=IB; torchrun t.py"] is block
    )
    assert shape(block) == ("SEQ", ["export NCCL_NET=IB", "torchrun t.py"])


def test_a_script_up_to_max_parsed_characters_is_parsed_and_one_more_is_not():
    head = "export NCCL_IB_DISABLE=1\n"
    tail = "torchrun t.py\n"
    pad = MAX_PARSED - len(head) - len(tail)
    script = head + "#" * (pad - 1) + "\n" + tail
    assert len(script) == MAX_PARSED
    assert shape(parse_script(script)) == ("SEQ", ["export NCCL_IB_DISABLE=1", "torchrun t.py"])
    longer = head + "#" * pad + "\n" + tail
    assert parse_script(longer) is None


def test_a_lone_surrogate_does_not_raise():
    # JSON may carry "\udc80": Python keeps it as a lone surrogate; the parse must not raise
    block = parse_script("export NCCL_NET=So\udc80cket; torchrun t.py")
    assert block is not None
    assert words(cmds(block)[1]) == [["torchrun"], ["t.py"]]
    # the export is read (its value holds replacement characters: no byte bash could be given)
    assert [name for name, _ in seen("export NCCL_NET=\udc80; torchrun t.py")] == ["NCCL_NET"]


def test_the_parser_is_made_once():
    parse_script("true")
    made = shell._parser
    assert made is not None
    shell._parser = None
    try:
        assert shape(parse_script("A=1 torchrun t.py")) == ("SEQ", ["A=1 torchrun t.py"])
        assert shell._parser is not None and shell._tree_sitter_parser() is shell._parser
    finally:
        shell._parser = made
    assert shell._tree_sitter_parser() is made


# -- statements: what runs once, what may run, what runs in a subshell ------------------------------


@pytest.mark.parametrize(
    "script, expected",
    [
        # `;` and newlines: each runs once, in order; export and plain assignments are commands of their own
        (
            "set -e; export NCCL_IB_HCA=mlx5_0 NCCL_DEBUG\nNCCL_NET=IB\ntorchrun t.py",
            ("SEQ", ["set -e", "export NCCL_IB_HCA=mlx5_0 NCCL_DEBUG", "NCCL_NET=IB", "torchrun t.py"]),
        ),
        ("A=1 B=2", ("SEQ", ["A=1 B=2"])),  # bare assignments: no words
        ("unset NCCL_NET; unset -v NCCL_IB_HCA", ("SEQ", ["unset NCCL_NET", "unset -v NCCL_IB_HCA"])),
        # { ...; }: this shell; ( ... ): a subshell
        ("{ export NCCL_NET=IB; torchrun t.py; }", ("SEQ", ["export NCCL_NET=IB", "torchrun t.py"])),
        (
            "(cd /w && export NCCL_NET=IB); torchrun t.py",
            ("SEQ", [("SUB", ["cd /w", ("MAYBE", ["export NCCL_NET=IB"])]), "torchrun t.py"]),
        ),
        # a pipeline: each of its commands in a subshell of its own
        (
            "python gen.py | tee log | grep x",
            ("SEQ", [("SUB", ["python gen.py"]), ("SUB", ["tee log"]), ("SUB", ["grep x"])]),
        ),
        ("(a; b) | c", ("SEQ", [("SUB", [("SUB", ["a", "b"])]), ("SUB", ["c"])])),
        # && and ||: the first runs, the rest may
        (
            "test -f /x && export NCCL_NET=IB || export NCCL_NET=Socket",
            ("SEQ", ["test -f /x", ("MAYBE", ["export NCCL_NET=IB"]), ("MAYBE", ["export NCCL_NET=Socket"])]),
        ),
        ("! pgrep sshd", ("SEQ", ["pgrep sshd"])),  # `!` only negates the status
        # branches and loops: the condition runs here, the bodies may run
        (
            "if [ -e /dev/infiniband ]; then export NCCL_NET=IB; elif lsmod; then export NCCL_NET=Socket; else exit 1; fi",
            (
                "SEQ",
                [
                    (
                        "MAYBE",
                        ["export NCCL_NET=IB", ("MAYBE", ["lsmod", "export NCCL_NET=Socket"]), ("MAYBE", ["exit 1"])],
                    )
                ],
            ),
        ),
        ("while read h; do ssh $h true; done", ("SEQ", ["read h", ("MAYBE", ["ssh $h true"])])),
        ("until nc -z master 29500; do sleep 1; done", ("SEQ", ["nc -z master 29500", ("MAYBE", ["sleep 1"])])),
        ("for h in a b; do ssh $h; done", ("SEQ", [("MAYBE", ["ssh $h"])])),
        ("for ((i=0; i<3; i++)); do ping -c1 w$i; done", ("SEQ", ["i=0", ("MAYBE", ["ping -c1 w$i"])])),
        (
            "case $RANK in 0) export NCCL_DEBUG=INFO;; *) export NCCL_DEBUG=WARN;; esac",
            ("SEQ", [("MAYBE", [("MAYBE", ["export NCCL_DEBUG=INFO"]), ("MAYBE", ["export NCCL_DEBUG=WARN"])])]),
        ),
        # a function body: read where it is defined, as a branch (it may be called or not)
        ("setup() { export NCCL_NET=IB; }; setup", ("SEQ", [("MAYBE", ["export NCCL_NET=IB"]), "setup"])),
        ("function setup { export NCCL_NET=IB; }", ("SEQ", [("MAYBE", ["export NCCL_NET=IB"])])),
        # command substitutions: each a subshell run before its command
        (
            "for h in $(cat hosts) \"$(hostname)\" w$(seq 2); do :; done",
            ("SEQ", [("SUB", ["cat hosts"]), ("SUB", ["hostname"]), ("SUB", ["seq 2"]), ("MAYBE", [":"])]),
        ),
        (
            "case $(hostname) in $(cat lead)) exit;; esac",
            ("SEQ", [("SUB", ["hostname"]), ("MAYBE", [("SUB", ["cat lead"]), ("MAYBE", ["exit"])])]),
        ),
        ("for ((i=$(nproc); i>0; i--)); do :; done", ("SEQ", ["i=?", ("MAYBE", [":"])])),
        # comments, [[ ]] and (( )) start no process
        ("# export NCCL_NET=Socket\n[[ -n $X ]]\n((n++))\ntorchrun t.py", ("SEQ", ["torchrun t.py"])),
    ],
)
def test_the_shape_of_a_script(script, expected):
    assert shape(parse_script(script)) == expected


def test_a_substitution_in_a_loop_list_or_a_case_word_runs_with_the_exported_values():
    # the process of $(...) sees what the script exported before it
    for script in [
        'export NCCL_IB_DISABLE=1; for h in "$(python gen.py)"; do echo $h; done',
        "export NCCL_IB_DISABLE=1; for h in x$(python gen.py); do echo $h; done",
        "export NCCL_IB_DISABLE=1; for h in $(python gen.py); do echo $h; done",
        "export NCCL_IB_DISABLE=1; case $(python gen.py) in a) ;; esac",
        "export NCCL_IB_DISABLE=1; for ((i=$(python n.py); i<3; i++)); do :; done",
    ]:
        assert seen(script) == [("NCCL_IB_DISABLE", "1")], script


@pytest.mark.parametrize(
    "script, expected",
    [
        # what a branch, a loop, a function or `||` sets may or may not hold after it: both values
        (
            "export NCCL_NET=IB\nif [ -z \"$IB\" ]; then export NCCL_NET=Socket; fi\ntorchrun t.py",
            [("NCCL_NET", "IB"), ("NCCL_NET", "Socket")],
        ),
        (
            "export NCCL_NET=IB\nibstat || export NCCL_NET=Socket\ntorchrun t.py",
            [("NCCL_NET", "IB"), ("NCCL_NET", "Socket")],
        ),
        (
            "export NCCL_NET=IB\nwhile false; do export NCCL_NET=Socket; done\ntorchrun t.py",
            [("NCCL_NET", "IB"), ("NCCL_NET", "Socket")],
        ),
        (
            "export NCCL_NET=IB\nuntil true; do export NCCL_NET=Socket; done\ntorchrun t.py",
            [("NCCL_NET", "IB"), ("NCCL_NET", "Socket")],
        ),
        (
            "export NCCL_NET=IB\nfor i in 1; do export NCCL_NET=Socket; done\ntorchrun t.py",
            [("NCCL_NET", "IB"), ("NCCL_NET", "Socket")],
        ),
        (
            "export NCCL_NET=IB\nfor ((i=0;i<1;i++)); do export NCCL_NET=Socket; done\ntorchrun t.py",
            [("NCCL_NET", "IB"), ("NCCL_NET", "Socket")],
        ),
        (
            "export NCCL_NET=IB\ncase $R in 0) export NCCL_NET=Socket;; esac\ntorchrun t.py",
            [("NCCL_NET", "IB"), ("NCCL_NET", "Socket")],
        ),
        (
            "export NCCL_NET=IB\nsock() { export NCCL_NET=Socket; }\nsock\ntorchrun t.py",
            [("NCCL_NET", "IB"), ("NCCL_NET", "Socket")],
        ),
        (
            "export NCCL_NET=IB\nif ibstat; then :; elif true; then export NCCL_NET=Socket; fi\ntorchrun t.py",
            [("NCCL_NET", "IB"), ("NCCL_NET", "Socket")],
        ),
        (
            "export NCCL_NET=IB\nif ibstat; then :; else export NCCL_NET=Socket; fi\ntorchrun t.py",
            [("NCCL_NET", "IB"), ("NCCL_NET", "Socket")],
        ),
        # the straight line: the last value before the process
        ("export NCCL_NET=Socket\n{ export NCCL_NET=IB; }\ntorchrun t.py", [("NCCL_NET", "IB")]),
        ("export NCCL_NET=Socket\n! export NCCL_NET=IB\ntorchrun t.py", [("NCCL_NET", "IB")]),
        (
            "export NCCL_NET=Socket\nif export NCCL_NET=IB; then :; fi\ntorchrun t.py",
            [("NCCL_NET", "IB")],
        ),  # a condition runs
        ("export NCCL_NET=Socket\nwhile export NCCL_NET=IB; do break; done\ntorchrun t.py", [("NCCL_NET", "IB")]),
        # a subshell or a pipeline's command: nothing it sets reaches what follows
        ("export NCCL_NET=IB\n(export NCCL_NET=Socket)\ntorchrun t.py", [("NCCL_NET", "IB")]),
        ("export NCCL_NET=IB\nexport NCCL_NET=Socket | cat\ntorchrun t.py", [("NCCL_NET", "IB")]),
        ("export NCCL_NET=IB\necho $(export NCCL_NET=Socket)\ntorchrun t.py", [("NCCL_NET", "IB")]),
        # but the processes inside them see it
        ("(export NCCL_NET=Socket; torchrun t.py)", [("NCCL_NET", "Socket")]),
        ("export NCCL_NET=Socket; torchrun t.py | tee log", [("NCCL_NET", "Socket")]),
        ("NCCL_NET=Socket torchrun t.py 2>&1 | tee log", [("NCCL_NET", "Socket")]),
        ("echo $(NCCL_NET=Socket python probe.py)", [("NCCL_NET", "Socket")]),
        ("! NCCL_NET=Socket python t.py", [("NCCL_NET", "Socket")]),
        ("until NCCL_NET=Socket python probe.py; do sleep 1; done", [("NCCL_NET", "Socket")]),
        ("cat <(NCCL_NET=Socket python gen.py)", [("NCCL_NET", "Socket")]),
    ],
)
def test_what_the_processes_see(script, expected):
    assert seen(script) == expected


# -- the nesting bound ----------------------------------------------------------------------------------
# Syntax nesting is read up to 4 * MAX_DEPTH levels (a deeper script gets the textual reading, which
# reports every NAME=value in it: nothing deeper is waved through). A brace group, a subshell or a
# branch's body is one level; a pipeline's or a list's command inside a group two (the pipeline or
# list, then the group); a command substitution two from the command that holds it (the
# substitution, then its commands), three inside a string, a word of several parts or a loop's list.

NESTINGS = {
    "subshell": (1, lambda s: f"( {s} )"),
    "brace group": (1, lambda s: f"{{ {s}; }}"),
    "if body": (1, lambda s: f"if true; then {s}; fi"),
    "if condition": (1, lambda s: f"if {s}; then :; fi"),
    "redirected group": (2, lambda s: f"{{ {s}; }} >/dev/null"),
    "pipeline": (2, lambda s: f"true | {{ {s}; }}"),
    "list, first": (2, lambda s: f"{{ {s}; }} && true"),
    "list, rest": (2, lambda s: f"true && {{ {s}; }}"),
    "negated": (2, lambda s: f"! ( {s} )"),
    "substitution": (2, lambda s: f"echo $({s})"),
    "substitution as the command": (2, lambda s: f"$({s})"),
    "substitution assigned": (2, lambda s: f"X=$({s})"),
    "substitution exported": (2, lambda s: f"export X=$({s})"),
    "substitution in a loop's list": (3, lambda s: f"for i in $({s}); do :; done"),
    "substitution in a string": (3, lambda s: f'echo "$({s})"'),
    "substitution in a word": (3, lambda s: f"echo x$({s})"),
    "after a heredoc": (3, lambda s: f"cat <<EOF | ( {s} )\nx\nEOF\n"),
    "after a heredoc's &&": (2, lambda s: f"cat <<EOF && ( {s} )\nx\nEOF\n"),
    "after a heredoc's pipe and &&": (3, lambda s: f"cat <<EOF | true && ( {s} )\nx\nEOF\n"),
    "after a heredoc's pipe, inside a list's first": (4, lambda s: f"cat <<EOF | true && ( {s} ) || true\nx\nEOF\n"),
}


def nested(make, n: int) -> str:
    script = "export NCCL_IB_DISABLE=1; torchrun t.py"
    for _ in range(n):
        script = make(script)
    return script


@pytest.mark.parametrize("construct", sorted(NESTINGS))
def test_nesting_is_read_up_to_the_bound_and_no_deeper(construct):
    levels, make = NESTINGS[construct]
    deepest = (4 * MAX_DEPTH - 1) // levels
    inner = cmds(parse_script(nested(make, deepest)))
    assert [words(c) for c in inner if c.words and c.words[0] == ["torchrun"]] == [[["torchrun"], ["t.py"]]]
    assert parse_script(nested(make, deepest + 1)) is None
    # either way the export is reported: by the parse, or by the textual reading
    assert ("NCCL_IB_DISABLE", "1") in seen(nested(make, deepest + 1))


# -- heredocs ------------------------------------------------------------------------------------------


def configmap(path: str, script: str) -> Files:
    files = Files()
    files.add_file(path, script, "configmap/train-scripts")
    return files


@pytest.mark.parametrize(
    "script",
    [
        "bash <<EOF\nexport NCCL_IB_DISABLE=1\ntorchrun t.py\nEOF\n",
        "/bin/bash -s <<'EOF'\nexport NCCL_IB_DISABLE=1\ntorchrun t.py\nEOF\n",  # by path; bash -s reads its stdin
        "sh <<-EOF\n\texport NCCL_IB_DISABLE=1\n\ttorchrun t.py\n\tEOF\n",
        "/usr/bin/python3 <<'EOF'\nimport os\nos.environ['NCCL_IB_DISABLE'] = '1'\nimport runpy; runpy.run_path('t.py')\nEOF\n",
    ],
)
def test_a_shell_or_python_fed_a_heredoc_runs_its_body(script):
    assert seen(script) == [("NCCL_IB_DISABLE", "1")]
    (cmd,) = cmds(parse_script(script))  # read as `<shell> -c <body>`
    body = words(cmd)[2][0]
    assert (
        len(words(cmd)) == 3
        and words(cmd)[1] == ["-c"]
        and body.split() == script.split("\n", 1)[1].rsplit("EOF", 1)[0].split()
    )


@pytest.mark.parametrize(
    "script",
    [
        "cat <<EOF > /etc/profile.d/nccl.sh\nexport NCCL_IB_DISABLE=1\nEOF\ntorchrun t.py",  # data for cat
        "tee /tmp/env <<'EOF'\nNCCL_NET=Socket\nEOF\ntorchrun t.py",
        "$SHELL <<EOF\nexport NCCL_IB_DISABLE=1\nEOF\ntorchrun t.py",  # which program reads it is not known here
    ],
)
def test_a_heredoc_fed_to_another_program_is_data(script):
    assert seen(script) == []


def test_a_heredoc_body_is_the_script_only_of_a_shell_that_is_the_whole_statement():
    # cat reads the heredoc to its end, the shell after it gets nothing
    script = "{ cat > /etc/mpi/hostfile; bash; } <<EOF\nexport NCCL_IB_DISABLE=1\nEOF\ntorchrun t.py"
    assert seen(script) == []
    assert shape(parse_script(script)) == ("SEQ", ["cat", "bash", "torchrun t.py"])
    # a launcher given a heredoc keeps its own words: its -x is read
    script = "mpirun -np 2 -x NCCL_IB_HCA=mlx5_0 python t.py <<EOF\n--epochs 3\nEOF\n"
    assert seen(script) == [("NCCL_IB_HCA", "mlx5_0")]
    assert shape(parse_script(script)) == ("SEQ", ["mpirun -np 2 -x NCCL_IB_HCA=mlx5_0 python t.py"])


def test_a_redirected_shell_without_a_heredoc_keeps_its_words():
    # `bash FILE > log`: the ConfigMap's script is read, as without the redirection
    files = configmap("/scripts/run.sh", "export NCCL_IB_DISABLE=1\ntorchrun t.py\n")
    for script in ["bash /scripts/run.sh > /tmp/log 2>&1", "bash /scripts/run.sh"]:
        got = reader.read(["bash", "-c", script], NAMES, Env(), files=files)
        assert got.found == [("NCCL_IB_DISABLE", "1")], script
    assert shape(parse_script("bash /scripts/run.sh > /tmp/log 2>&1")) == ("SEQ", ["bash /scripts/run.sh"])


def test_an_assignment_or_an_unknown_program_with_a_heredoc_does_not_raise():
    # a bare assignment with a redirection is made in this shell
    assert seen("NCCL_IB_HCA=mlx5_0 <<EOF\nx\nEOF\ntorchrun t.py") == [("NCCL_IB_HCA", "mlx5_0")]
    assert shape(parse_script('"$PY"3 <<EOF\nimport os\nEOF\n')) == ("SEQ", ["$PY3"])


@pytest.mark.parametrize(
    "script, commands",
    [
        # what follows the heredoc's start on its line runs too: a pipeline, a list, a redirected command
        (
            "export NCCL_NET=Socket\ncat <<EOF | python t.py\n--lr 0.1\nEOF\n",
            ["export NCCL_NET=Socket", "cat", "python t.py"],
        ),
        (
            "cat <<EOF > /tmp/hosts && NCCL_NET=Socket torchrun t.py\nnode-0\nEOF\n",
            ["cat", "NCCL_NET=Socket torchrun t.py"],
        ),
        (
            "cat <<EOF > /tmp/hosts && sleep 1 && NCCL_NET=Socket torchrun t.py\nnode-0\nEOF\n",
            ["cat", "sleep 1", "NCCL_NET=Socket torchrun t.py"],
        ),
        (
            "cat <<EOF > /tmp/hosts && NCCL_NET=Socket torchrun t.py > log\nnode-0\nEOF\n",
            ["cat", "NCCL_NET=Socket torchrun t.py"],
        ),
    ],
)
def test_what_follows_a_heredoc_on_its_line_runs(script, commands):
    assert [shape(Block(SEQ, [c]))[1][0] for c in cmds(parse_script(script))] == commands
    assert seen(script) == [("NCCL_NET", "Socket")]


def test_a_heredoc_body_that_is_not_utf8_is_still_read():
    # a lone surrogate (JSON may carry one) in the body: read with a replacement character
    script = "bash <<EOF\n# caf\udce9\nexport NCCL_IB_DISABLE=1\ntorchrun t.py\nEOF\n"
    (cmd,) = cmds(parse_script(script))
    assert words(cmd)[:2] == [["bash"], ["-c"]] and "export NCCL_IB_DISABLE=1\ntorchrun t.py\n" in words(cmd)[2][0]
    assert seen(script) == [("NCCL_IB_DISABLE", "1")]


# -- command substitutions anywhere in a command ---------------------------------------------------------


@pytest.mark.parametrize(
    "script",
    [
        "export NCCL_IB_DISABLE=1\nexport MASTER_ADDR=$(python resolve.py)\ntorchrun t.py",  # in a declaration
        "export NCCL_IB_DISABLE=1\nMASTER_ADDR=$(python resolve.py) torchrun t.py",  # in a prefix assignment
        "export NCCL_IB_DISABLE=1\nenv MASTER_ADDR=$(python resolve.py) torchrun t.py",  # in env's NAME=value
        "export NCCL_IB_DISABLE=1\n$(python -c 'print(\"torchrun\")') t.py",  # as the command's name
        "export NCCL_IB_DISABLE=1\ntorchrun --master-addr=\"$(python resolve.py)\" t.py",
    ],
)
def test_a_command_substitution_runs_with_what_was_exported_before_it(script):
    assert seen(script) == [("NCCL_IB_DISABLE", "1")]
    assert any(words(c)[:1] == [["python"]] for c in cmds(parse_script(script)))


def test_a_word_tree_sitter_splits_where_bash_does_not_makes_the_script_unreadable():
    # `\env` on the next line: tree-sitter takes the newline into the word, bash starts a command
    script = "export NCCL_NET=IB\n\\env NCCL_IB_DISABLE=1 torchrun t.py"
    assert parse_script(script) is None and shell.PARSED[script] is None
    assert seen(script) == [("NCCL_NET", "IB"), ("NCCL_IB_DISABLE", "1")]  # the textual reading
    # the same in a loop's list (a script saved with CRLF line ends): bash refuses it (`do` expected)
    assert parse_script("for h in node-0\r\n\\node-1; do ssh $h true; done") is None


def test_nesting_past_the_bound_counts_statements_that_start_no_process():
    deepest = 4 * MAX_DEPTH - 1
    assert parse_script(nested(lambda s: f"( {s} )", deepest)) is not None
    test = "[[ -e /dev/infiniband/uverbs0 ]]"
    assert parse_script("( " * deepest + test + " )" * deepest) is not None
    assert parse_script("( " * (deepest + 1) + test + " )" * (deepest + 1)) is None


def test_blanks_in_quotes_next_to_a_character_that_is_not_utf8_are_read():
    script = 'export NCCL_NET=" \udce9 $X" NCCL_DEBUG=INFO; torchrun t.py'
    cmd = cmds(parse_script(script))[0]
    assert words(cmd)[1][:3] == ["NCCL_NET", "=", " \ufffd\ufffd\ufffd "] and words(cmd)[1][3] == "$X"
    assert words(cmd)[2] == ["NCCL_DEBUG", "=", "INFO"]
    assert seen(script, X="x") == [("NCCL_NET", " \ufffd\ufffd\ufffd x"), ("NCCL_DEBUG", "INFO")]


# -- words: quote removal as bash does it ----------------------------------------------------------------
# Each word's value is what bash 5 gives NCCL_NET (checked with `bash -c '<form>; env -0'`, X=x1 in its
# environment) in each of the three forms a value reaches a process: export, a prefix assignment, env.
# None: the reader does not know the value here (an expansion it does not follow: nothing reported).

FORMS = ["export NCCL_NET={w}; torchrun t.py", "NCCL_NET={w} torchrun t.py", "env NCCL_NET={w} torchrun t.py"]

WORDS = [
    ("'So cket'", "So cket"),
    ("''", ""),  # single quotes
    ('"Socket"', "Socket"),
    ('""', ""),
    ('" x "', " x "),
    ('"a $X b"', "a x1 b"),
    ('"$X "', "x1 "),
    ('" $X"', " x1"),
    ('"$X$X"', "x1x1"),
    ('"\\$X"', "$X"),
    ('"a\\"b"', 'a"b'),
    ('"$"', "$"),
    ('"${X}"', "x1"),
    ('"${X:-y}"', None),
    ("a'b'\"c\"", "abc"),
    ("a$X", "ax1"),
    ("$X'b'", "x1b"),
    ("${X}${X}", "x1x1"),
    ('"a"\'b\'$\'c\'', "abc"),
    ("'a'\\ 'b'", "a b"),
    ('"a"\\\nb', "ab"),
    ("'a'\\1", "a1"),  # what tree-sitter skips inside a word
    ("a$$", None),
    ("a``\\\nb", "ab"),
    ("IB``x", "IBx"),
    ("a``b", "ab"),  # `$` and backquotes
    ("$'IB'", "IB"),
    ("$'\\x49B'", "IB"),
    ("$'a\\'b'", "a'b"),  # ANSI-C
    ("${X}", "x1"),
    ("$X", "x1"),
    ("${X:-y}", None),
    ("${#X}", None),
    ("$((1+1))", None),
    ("$(hostname)", None),
    ('"$(hostname)"', None),
    ("\\$X", "$X"),
    ("a\\ b", "a b"),
    ("So\\\ncket", "Socket"),
    ("x\\\ty", "x\ty"),
    ("\\ IB", " IB"),  # backslashes
    ("*.py", "*.py"),  # no pathname expansion in an assignment
    ("~/x", None),
    ("a:~/x", None),
    ("\\~", "~"),
    ('"~"', "~"),
    ("':'~", ":~"),
    ("a\\:~", "a:~"),  # tildes
]


@pytest.mark.parametrize("word, value", WORDS)
@pytest.mark.parametrize("form", FORMS)
def test_a_value_is_what_bash_gives_or_not_known(form, word, value):
    script = form.format(w=word)
    assert seen(script, X="x1") == ([] if value is None else [("NCCL_NET", value)])
    assert parse_script(script) is not None  # read from the parse, not by the textual reading


@pytest.mark.parametrize(
    "form, value",
    [
        ('export NCCL_NET=$"Socket"; torchrun t.py', "Socket"),
        ('NCCL_NET=$"a $X" torchrun t.py', "a x1"),
        ('NCCL_NET=$"a"$ torchrun t.py', "a$"),  # translated strings: $"..."
        ('NCCL_NET=a$ torchrun t.py', "a$"),
        ('env NCCL_NET=a$ torchrun t.py', "a$"),
        ('NCCL_NET="$X"$ torchrun t.py', "x1$"),
        ('env NCCL_NET="$X"$ torchrun t.py', "x1$"),  # a `$` that ends the word
        ("export NCCL_NET=; torchrun t.py", ""),
        ("NCCL_NET= torchrun t.py", ""),  # empty
        ("export NCCL_NET=IB; NCCL_NET+=x; torchrun t.py", "IBx"),
        ("export NCCL_NET=IB; NCCL_NET+=$X torchrun t.py", "IBx1"),  # +=
    ],
)
def test_more_values_bash_gives(form, value):
    assert seen(form, X="x1") == [("NCCL_NET", value)]
    assert parse_script(form) is not None


def test_an_array_element_is_no_environment_variable():
    script = "export NCCL_NET=IB NCCL_DEBUG=INFO; hcas[0]=mlx5_0 NCCL_DEBUG=WARN; torchrun t.py"
    assert seen(script) == [("NCCL_NET", "IB"), ("NCCL_DEBUG", "WARN")]
    cmd = cmds(parse_script(script))[1]
    assert [n for n, _ in cmd.assigns] == ["", "NCCL_DEBUG"]


@pytest.mark.parametrize(
    "script, found",
    [
        # one word that tree-sitter splits into several nodes (an escape after a quoted string): one value,
        # and the command after it is the command
        ("NCCL_IB_DISABLE='0'\\1 torchrun t.py", [("NCCL_IB_DISABLE", "01")]),
        ("env NCCL_IB_DISABLE='0'\\1 torchrun t.py", [("NCCL_IB_DISABLE", "01")]),
        ("NCCL_IB_DISABLE='0'\\1\\2 torchrun t.py", [("NCCL_IB_DISABLE", "012")]),
        (
            "export NCCL_IB_DISABLE='0'\\1 NCCL_NET='IB'\\\n; torchrun t.py",
            [("NCCL_IB_DISABLE", "01"), ("NCCL_NET", "IB")],
        ),
        ("NCCL_IB_DISABLE='0'\\1$(echo 1) torchrun t.py", []),  # bash: 011; a substitution: not known
        # a tilde bash expands after a line continuation, or after `:` (home directories: not known)
        ("env NCCL_NET=\\\n~ NCCL_IB_HCA=${X}\\t{:~ torchrun t.py", []),
    ],
)
def test_a_word_split_into_several_nodes_is_one_word(script, found):
    assert seen(script, X="x1") == found
    block = parse_script(script)
    assert any(words(c)[-2:] == [["torchrun"], ["t.py"]] for c in cmds(block))


@pytest.mark.parametrize(
    "script, found",
    [
        # `\e=` is a word to bash, not an assignment: bash gives x1e=; unknown here, never `x1\e=`
        ("export NCCL_NET=${X}\\e=; torchrun t.py", []),
        # tree-sitter reads `NCCL_NET=` and a comment; bash the value `#:=0=`: the textual reading gives it
        ("declare -x NCCL_NET=#:=\\0\\\n=\ntorchrun t.py", [("NCCL_NET", "#:=0=")]),
    ],
)
def test_a_word_tree_sitter_reads_otherwise_than_bash_gets_the_textual_reading(script, found):
    assert parse_script(script) is None
    assert seen(script, X="x1") == found


def test_an_ansi_c_string_that_starts_with_an_escaped_quote_is_read():
    script = "export NCCL_NET=$'\\'IB\\''; torchrun t.py"
    assert words(cmds(parse_script(script))[0])[1] == ["NCCL_NET", "=", "'IB'"]
    assert seen(script) == [("NCCL_NET", "'IB'")]


def test_a_dollar_that_ends_the_script_is_a_dollar():
    script = "export NCCL_IB_HCA=mlx5_0; torchrun t.py --tag=run$"
    assert words(cmds(parse_script(script))[1]) == [["torchrun"], ["t.py"], ["--tag=run", "$"]]
    assert seen(script) == [("NCCL_IB_HCA", "mlx5_0")]


def test_a_form_feed_in_a_word_leaves_its_value_unknown():
    # tree-sitter takes \f for a blank and what follows for a comment; bash keeps both in the word
    got = seen("NCCL_NET=IB\f#x torchrun t.py")
    assert ("NCCL_NET", "IB") not in got


def test_a_word_nested_past_the_bound_makes_the_script_unreadable():
    deepest = 4 * MAX_DEPTH - 1
    assert parse_script("( " * deepest + "torchrun $X" + " )" * deepest) is not None
    assert parse_script("( " * deepest + 'torchrun "$X"' + " )" * deepest) is None  # the string, then $X in it


def test_an_array_subscript_that_is_not_utf8_does_not_raise():
    script = "hca[\udce9]=mlx5_0 NCCL_IB_HCA=mlx5_1; torchrun t.py"
    assert [n for n, _ in cmds(parse_script(script))[0].assigns] == ["", "NCCL_IB_HCA"]
    assert seen(script) == [("NCCL_IB_HCA", "mlx5_1")]


# -- what tree-sitter takes for blanks and bash does not ---------------------------------------------------


@pytest.mark.parametrize(
    "script, found",
    [
        # a script saved with CRLF line ends: bash keeps the \r in the value (NCCL reads "1\r" as 1)
        ("export NCCL_IB_DISABLE=1\r\ntorchrun t.py\r\n", [("NCCL_IB_DISABLE", "1\r")]),
        ("NCCL_NET=IB\r torchrun t.py", [("NCCL_NET", "IB\r")]),
        ("NCCL_NET=a\r\rb torchrun t.py", [("NCCL_NET", "a\r\rb")]),
        ("NCCL_NET=a\vb torchrun t.py", [("NCCL_NET", "a\vb")]),  # \v and \f: not blanks to bash
        ("NCCL_NET=a\fb torchrun t.py", [("NCCL_NET", "a\fb")]),
        ("export NCCL_NET=IB\r\v\f; torchrun t.py", [("NCCL_NET", "IB\r\v\f")]),
    ],
)
def test_carriage_returns_vertical_tabs_and_form_feeds_stay_in_the_word(script, found):
    assert seen(script) == found
    assert any(words(c)[:1] == [["torchrun"]] for c in cmds(parse_script(script)))


# `_tilde_expanded(word)`: whether bash expands a tilde in the word `A=...` (an assignment, or an
# argument that looks like one): an unquoted `~` first in the value or right after an unquoted `:`.
# Each answer is what `HOME=/h bash -c 'env <word> printenv A'` shows (/h: expanded).
TILDES = [
    (b"A=~/x", True),
    (b"A=a:~/x", True),
    (b"A=\\~", False),
    (b"A=\\\n~", True),
    (b"A=a:\\\n~", True),
    (b"A=x\\\n:~", True),
    (b"A=\\::~", True),
    (b"A=\\\\:~", True),
    (b"A=':~'", False),
    (b"A='x':~", True),
    (b"A='x':~/'y'", True),
    (b"A=''~x", False),
    (b"A=$':'~", False),
    (b"A=$'\\':~'", False),
    (b"A=$'\\x3a'~", False),
    (b"A=:$'~'", False),
    (b"A=$'x':~", True),
    (b"A=x$'y':~", True),
    (b"A=$'\\'':~", True),
    (b"A=$'a\\\\':~", True),
    (b"A=$'':~", True),
    (b'A=":~"', False),
    (b'A="\\":~"', False),
    (b'A=":"~', False),
    (b'A="x":~', True),
    (b'A="\\\\":~', True),
    (b'A="a\\"b":~', True),
    (b'A="":~', True),
    (b"A=x$:~", True),
    (b"A=$x:~", True),
    (b"A=x~", False),
    (b"A=x:'~'", False),
    (b"--dir=~/x", False),
    (b"1A=~", False),  # no assignment: bash leaves the tilde
    (b"A='~'\\", False),
    (b"A='~'$", False),  # the word ends the script: a backslash or `$` that is itself
]


@pytest.mark.parametrize("word, expanded", TILDES)
def test_a_tilde_is_expanded_where_bash_expands_it(word, expanded):
    assert source_words.tilde_expanded(word, 0, len(word)) is expanded
    # as a word of a script: a value bash gives with the home directory is not known here
    if not word.startswith((b"-", b"1")) and not word.endswith((b"\\", b"$")):
        script = "env NCCL_NET" + word.decode()[1:] + " torchrun t.py"
        got = seen(script)
        assert (got == []) if expanded else (len(got) == 1 and "/" not in got[0][1]), (script, got)


def test_appending_nothing_to_an_unset_variable_gives_the_empty_value():
    # `NAME+=` with no value: bash appends nothing to NCCL_NET, which was not set (its value is "")
    script = "NCCL_NET+= torchrun t.py"
    assert seen(script) == [("NCCL_NET", "")]
    assert shape(parse_script(script)) == ("SEQ", ["NCCL_NET= torchrun t.py"])


@pytest.mark.parametrize("blank", ["\f", "\v"])
def test_a_comment_tree_sitter_sees_after_a_form_feed_does_not_hide_the_commands_after_it(blank, policies):
    """To bash a form feed or vertical tab is part of a word, so `IB\\f#` is one word and the
    commands after `;` run; tree-sitter takes the character for a blank and the `#` for a comment
    to the end of the line. The script is read as text instead (found by the commands.shell part;
    before the fix it read as [] and the pod was admitted while NCCL ran on TCP)."""
    from commands.test_reader_admission import denied, script_pod

    script = f"export NCCL_NET=IB{blank}#; export NCCL_IB_DISABLE=1; torchrun t.py"
    assert ("NCCL_IB_DISABLE", "1") in reader.settings(
        ["bash", "-c", script], frozenset({"NCCL_IB_DISABLE", "NCCL_NET"})
    )
    denied(script_pod(script), policies)


@pytest.mark.parametrize(
    "script",
    [
        "! { export NCCL_IB_DISABLE=1; }; torchrun t.py",
        "! {\n  export NCCL_IB_DISABLE=1\n}\ntorchrun t.py",
    ],
)
def test_a_negated_group_is_read_as_text_since_tree_sitter_names_a_command_after_its_brace(script, policies):
    """tree-sitter-bash parses `! { ...; }` as a command named `{` without an error; to bash the
    group runs in this shell, so its export reaches torchrun. Read as text, the export is seen
    (found by the commands.shell part; before the fix the script read as [] and the pod was
    admitted while NCCL ran on TCP)."""
    from commands.test_reader_admission import denied, script_pod

    assert ("NCCL_IB_DISABLE", "1") in reader.settings(["bash", "-c", script], frozenset({"NCCL_IB_DISABLE"}))
    denied(script_pod(script), policies)


# -- findings 1, 2 and 5 of the commands.shell part, fixed (nineteenth session) ------------------------------
# Each script below runs NCCL with NCCL_IB_DISABLE=1 under bash (checked by `bash_sees`, which runs it
# with torchrun replaced by a function printing the variable); before the fix each read as nothing and
# the pod was admitted while NCCL ran on TCP.


def bash_sees(script: str) -> str:
    """What `torchrun` (a program on PATH printing NCCL_IB_DISABLE) sees when bash runs the script."""
    import os
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as bin_dir:
        torchrun = os.path.join(bin_dir, "torchrun")
        with open(torchrun, "w") as f:
            f.write("#!/bin/sh\nprintf '%s' \"${NCCL_IB_DISABLE-unset}\"\n")
        os.chmod(torchrun, 0o755)
        env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
        env.pop("NCCL_IB_DISABLE", None)
        return subprocess.run(
            ["bash", "-c", script], capture_output=True, text=True, cwd=bin_dir, env=env, timeout=10
        ).stdout


HEREDOC_LINES = [
    # finding 1: what follows && or || on the line of a heredoc's start may run, in this shell
    "cat <<EOF > /tmp/rdma-webhook-hostfile && export NCCL_IB_DISABLE=1\nnode-0 slots=8\nEOF\ntorchrun t.py",
    "cat <<EOF > /tmp/rdma-webhook-hostfile && NCCL_IB_DISABLE=1 && export NCCL_IB_DISABLE\nnode-0\nEOF\ntorchrun t.py",
    "cat <<EOF > /tmp/rdma-webhook-hostfile || true && eval 'export NCCL_IB_DISABLE=1'\nnode-0\nEOF\ntorchrun t.py",
    "cat <<EOF > /tmp/rdma-webhook-hostfile && set -a\nnode-0\nEOF\nNCCL_IB_DISABLE=1\ntorchrun t.py",
    # finding 2: a heredoc `cat` pipes into a shell is that shell's script
    "cat <<EOF | bash\nexport NCCL_IB_DISABLE=1\ntorchrun t.py\nEOF",
    "cat <<'EOF' | sh -s -- --verbose\nexport NCCL_IB_DISABLE=1\ntorchrun t.py\nEOF",
    "cat <<EOF | bash --norc -o pipefail | tee /tmp/rdma-webhook-log\nexport NCCL_IB_DISABLE=1\ntorchrun t.py\nEOF",
]


def read_as_bash_runs_it(script: str, policies) -> None:
    """bash runs NCCL with NCCL_IB_DISABLE=1, the reader sees it, and the pod is denied."""
    from commands.test_reader_admission import denied, script_pod

    assert bash_sees(script) == "1"
    assert ("NCCL_IB_DISABLE", "1") in seen(script)
    denied(script_pod(script), policies)


@pytest.mark.parametrize("script", HEREDOC_LINES)
def test_the_rest_of_a_heredoc_line_is_read_as_bash_runs_it(script, policies):
    read_as_bash_runs_it(script, policies)


def test_the_shape_of_a_heredoc_line():
    """cat and the commands it pipes into are subshells; a shell reading the heredoc gets it as
    `-c`; what follows && or || may run; a program with a script of its own gets data."""
    assert shape(parse_script("cat <<EOF | bash -s | tee log && X=1 || y\nbody\nEOF\n")) == (
        "SEQ",
        [("SUB", ["cat"]), ("SUB", ["bash -c body\n"]), ("SUB", ["tee log"]), ("MAYBE", ["X=1", "y"])],
    )
    for fed in (
        "python t.py",
        "bash -c 'echo hi'",
        "bash train.sh",
        "python3 -m torch.distributed.run t.py",
        "tee out",
    ):
        parsed = shape(parse_script(f"cat <<EOF | {fed}\nexport NCCL_IB_DISABLE=1\nEOF\n"))
        assert parsed[1][0] == ("SUB", ["cat"]) and "NCCL_IB_DISABLE" not in str(parsed[1][1]), parsed
    assert shape(parse_script("cat <<EOF | python3 -u -\nimport os\nEOF\n"))[1][1] == (
        "SUB",
        ["python3 -c import os\n"],
    )
    # what precedes && (the heredoc's start, a file redirect) is no command: cat alone, in this shell
    assert shape(parse_script("cat <<EOF > /tmp/hostfile && export NCCL_IB_DISABLE=1\nnode-0\nEOF\n")) == (
        "SEQ",
        ["cat", ("MAYBE", ["export NCCL_IB_DISABLE=1"])],
    )
    # only cat passes the heredoc on as it is
    assert "-c" not in str(shape(parse_script("grep -v x <<EOF | bash\nexport NCCL_IB_DISABLE=1\nEOF\n")))
    # after `;` tree-sitter-bash reports an error: the script is read as text, which sees the export
    script = "cat <<EOF > f; export NCCL_IB_DISABLE=1\nx\nEOF\ntorchrun t.py"
    assert parse_script(script) is None and bash_sees(script) == "1" and seen(script) == [("NCCL_IB_DISABLE", "1")]


BRACES = [
    # finding 5: brace expansion applies to export's and env's arguments (not to prefix assignments)
    ("export NCCL_IB_DISABLE={0,1}; torchrun t.py", "1"),
    ("export NCCL_IB_DISABLE={1,0}; torchrun t.py", "0"),
    ("declare -x NCCL_IB_DISABLE={0..1}; torchrun t.py", "1"),
    ("env NCCL_IB_DISABLE={0,1} torchrun t.py", "1"),
    ("export NCCL_IB_DISABLE=x{0,1}; torchrun t.py", "x1"),
    ("NCCL_IB_DISABLE={0,1} torchrun t.py", "{0,1}"),
    ("export NCCL_IB_DISABLE='{0,1}'; torchrun t.py", "{0,1}"),
    ("export NCCL_IB_DISABLE=\\{0,1}; torchrun t.py", "{0,1}"),
]


@pytest.mark.parametrize("script,value", BRACES)
def test_brace_expansion_in_an_argument_as_bash_does_it(script, value):
    assert bash_sees(script) == value
    assert seen(script) == [("NCCL_IB_DISABLE", value)]


def test_a_brace_expansion_with_an_expansion_in_an_assigning_word_is_read_as_text(policies):
    from commands.test_reader_admission import denied, script_pod

    script = "export NCCL_IB_DISABLE=${ZERO:-0}{,1}; torchrun t.py"
    assert bash_sees(script) == "01"
    assert parse_script(script) is None
    # elsewhere such a word stays one word and the script is read
    assert shape(parse_script("cp ${SRC}/{a,b} /dst; export NCCL_IB_DISABLE=1")) == (
        "SEQ",
        ["cp $SRC/{a,b} /dst", "export NCCL_IB_DISABLE=1"],
    )
    denied(script_pod("export NCCL_IB_DISABLE={0,1}; torchrun t.py"), policies, rule="command-fallback")


READERS = {  # what `cat <<EOF | <reader>` pipes the heredoc into: True when the reader runs it as its script
    "bash": True,
    "bash -s": True,
    "bash -s -- a b": True,
    "bash -x": True,
    "bash -eu": True,
    "bash -e -u": True,
    "bash -o pipefail": True,
    "bash -eo pipefail": True,
    "bash +o pipefail": True,
    "bash -O extglob": True,
    "bash --norc": True,
    "bash --noprofile --norc": True,
    "bash --rcfile /dev/null": True,
    "bash --login": True,
    "bash -": True,
    "bash --": True,
    "bash -xs": True,
    "bash -sx a": True,
    "bash +x": True,
    "sh": True,
    "sh -s": True,
    "dash -e": True,
    "bash -c 'echo other'": False,
    "bash -lc 'echo other'": False,
    "bash /nonexistent.sh": False,
    "bash -- /nonexistent.sh": False,
    "bash - /nonexistent.sh": False,
    "bash -ex /nonexistent.sh": False,
    "bash -o pipefail /nonexistent.sh": False,
    "bash --rcfile /dev/null /nonexistent.sh": False,
    "bash \"$SCRIPT\"": False,
    "tee /dev/null": False,
    "python3": True,
    "python3 -": True,
    "python3 - a b": True,
    "python3 -u": True,
    "python3 -W ignore": True,
    "python3 -Wignore": True,
    "python3 -X dev": True,
    "python3 -Xfrozen_modules=off": True,
    "python3 -I -B": True,
    "python3 -E -s": True,
    "python3 -OO": True,
    "python3 --": True,
    "python3 -m json.tool": False,
    "python3 -um json.tool": False,
    "python3 -c 'print(1)'": False,
    "python3 -uc 'print(1)'": False,
    "python3 /nonexistent.py": False,
    "python3 -- /nonexistent.py": False,
    "python3 -W ignore /nonexistent.py": False,
    "python3 -X dev /nonexistent.py": False,
    "bash -c": False,
    "bash -lc": False,
    "python3 -c": False,
    "python3 -c'print(1)'": False,
    "python3 -mjson.tool": False,
    "python3 -m": False,
    "bash -o": True,
    "bash --init-file /dev/null": True,
    "bash --init-file /dev/null /nonexistent.sh": False,
    "bash -e -- -x": False,
    "python3 -Wignore /nonexistent.py": False,
    "python3 -Xdev -u": True,
}


@pytest.mark.parametrize("reader", READERS)
def test_a_heredoc_piped_into_a_shell_or_python_is_its_script_as_bash_and_python_run_it(reader):
    """Each line is run: the body prints a mark when the program at the end of the pipe runs it
    as its script (bash(1), python(1): options only, `-s`, `-`, `--` with no file after it)."""
    import subprocess

    body = "print('MA' + 'RK')" if reader.startswith("python") else "echo MA''RK"  # MARK only when run
    script = f"cat <<'EOF' | {reader}\n{body}\nEOF\n"
    ran = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=10,
        stdin=subprocess.DEVNULL,
        env={"PATH": "/usr/bin:/bin", "SCRIPT": "/nonexistent.sh"},
    ).stdout
    assert ("MARK" in ran) is READERS[reader]
    block = parse_script(script)
    assert block is not None and block.items[0].kind == SUB and len(block.items) == 2
    piped = block.items[1]
    assert piped.kind == SUB and len(piped.items) == 1
    words_of_reader = words(piped.items[0])
    if READERS[reader]:
        assert words_of_reader == [words_of_reader[0], ["-c"], [body + "\n"]]
    else:  # the reader's words as written: the heredoc is its input, not its script
        assert [body + "\n"] not in words_of_reader and len(words_of_reader) == len(shlex.split(reader))
