"""Where a shell or Python takes its program from (webhook.commands.invocation), checked against the
real bash, dash and python3: each argument list runs with every candidate word made a program that
prints which one it is (the command string, the script file, the module, the standard input), and
what the process printed must be what `source` says. Then what the readers built on it see: the
strict-mode idiom `bash -euo pipefail -c '...'` (Dockerfile SHELL lines, CI steps), GitHub
Actions' `bash --noprofile --norc -eo pipefail FILE`, and a heredoc fed to `bash -oe pipefail`.

The finding behind the module: the reader took `bash -euo pipefail -c 'export NCCL_IB_DISABLE=1;
torchrun ...'` for a script file named `pipefail`, read nothing, and the pod was admitted while
NCCL ran on TCP."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from hypothesis import assume, given, strategies as st

from strategies import examples
from webhook.commands import invocation, reader
from webhook.commands.files import Files
from webhook.commands.invocation import COMMAND, FILE, MODULE, STDIN, UNKNOWN

pytestmark = pytest.mark.usefixtures("command_caches_emptied")  # conftest: each test reads afresh

NAMES = frozenset({"NCCL_IB_DISABLE", "NCCL_NET"})
CMD = "{cmd}"  # stands for a candidate command string (the shell's or Python's code)


def run_real(argv: list[str], shell: bool, tmp_path) -> str:
    """What the real interpreter prints when every word of `argv` that could be its program
    prints its own place: CMD words become code printing `command-<index>`, every other word
    `w` is also a file `w` (in the working directory) printing `file-<index>`, a Python module
    `w` printing `module-<index>`, and the standard input prints `stdin`."""
    words = list(argv)
    for i, w in enumerate(words[1:], 1):
        if w == CMD:
            words[i] = f"echo command-{i}" if shell else f"print('command-{i}')"
        elif w.startswith("-c") and not shell and w.endswith(CMD):  # python -c<code>
            words[i] = f"-cprint('command-{i}')"
        elif not w.startswith(("-", "+")):
            (tmp_path / w).write_text(f"echo file-{i}\n" if shell else f"print('file-{i}')\n")
            if not shell and w.isidentifier():
                (tmp_path / f"{w}.py").write_text(f"print('module-{i}')\n")
    stdin = "echo stdin\n" if shell else "print('stdin')\n"
    proc = subprocess.run(
        words,
        input=stdin,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=10,
        env={**os.environ, "PYTHONPATH": ""},
    )
    return proc.stdout.strip().splitlines()[-1] if proc.returncode == 0 and proc.stdout.strip() else "error"


def ours(argv: list[str], shell: bool) -> str:
    kind, i, _ = invocation.source([None if w is None else w for w in argv], shell)
    return kind if kind in (STDIN, UNKNOWN) else f"{kind}-{i}"


SHELL_CASES = [
    ["bash", "-c", CMD],
    ["bash", "-lc", CMD],
    ["bash", "-euo", "pipefail", "-c", CMD],  # the strict-mode idiom
    ["bash", "-xeuo", "pipefail", "-c", CMD],
    ["bash", "-oe", "pipefail", "-c", CMD],  # o before another letter: still the next word
    ["bash", "-oO", "pipefail", "extglob", "-c", CMD],  # two letters, two words, in order
    ["bash", "-o", "errexit", "-o", "nounset", "-c", CMD],
    ["bash", "+o", "history", "+O", "nullglob", "-c", CMD],
    ["bash", "-c", "-x", CMD],  # options after -c: the first operand is the string
    ["bash", "-c", "--", CMD],
    ["bash", "-sc", CMD],  # -c wins over -s
    ["bash", "-s", "-c", CMD],
    ["bash", "--rcfile", "rc", "-c", CMD],
    ["bash", "--init-file", "rc", "-xc", CMD],
    ["bash", "--noprofile", "--norc", "-eo", "pipefail", "run.sh"],  # GitHub Actions' bash
    ["bash", "-e", "run.sh", "-c"],  # after the file, words are its arguments
    ["bash", "--", "run.sh"],
    ["bash", "-", "run.sh"],
    ["bash"],
    ["bash", "-x"],
    ["bash", "-euo", "pipefail"],  # the strict idiom fed by a pipe or heredoc
    ["bash", "-s", "a", "b"],
    ["bash", "-xs", "--", "a"],
    ["bash", "-o"],  # lists its options, then reads on
    ["bash", "-c"],  # an error
    ["sh", "-ec", CMD, "sh", "arg"],
    ["sh", "-oe", "nounset", "-c", CMD],
    ["sh", "-s", "arg"],
    ["sh", "-eu", "run.sh"],
]

PYTHON_CASES = [
    ["python3", "-c", CMD],
    ["python3", "-uc", CMD],
    ["python3", "-c" + CMD],
    ["python3", "-Wignore", "-c", CMD],
    ["python3", "-W", "ignore", "-u", "-c", CMD],
    ["python3", "-uW", "ignore", "-c", CMD],
    ["python3", "-X", "utf8", "-c", CMD],
    ["python3", "-m", "trainer", "a"],
    ["python3", "-um", "trainer"],
    ["python3", "-u", "train.py", "-c", "x"],
    ["python3", "--", "train.py"],
    ["python3", "--check-hash-based-pycs", "never", "train.py"],
    ["python3", "-"],
    ["python3", "-u"],
    ["python3"],
    ["python3", "-c"],  # an error
]


@pytest.mark.parametrize("argv", SHELL_CASES, ids=" ".join)
def test_a_shell_takes_its_program_where_the_real_shell_does(argv, tmp_path):
    exe = "dash" if argv[0] == "sh" else argv[0]
    assert shutil.which(exe), f"{exe} is needed: the cases are checked against the real shell"
    real = run_real([exe, *argv[1:]], True, tmp_path)
    mine = ours(argv, True)
    assert mine == real or (mine == UNKNOWN and real == "error"), (argv, mine, real)


@pytest.mark.parametrize("argv", PYTHON_CASES, ids=" ".join)
def test_python_takes_its_program_where_the_real_python_does(argv, tmp_path):
    real = run_real(argv, False, tmp_path)
    mine = ours(argv, False)
    assert mine == real or (mine == UNKNOWN and real == "error"), (argv, mine, real)


# Words a shell's argument list is made of in the property below: options alone and clustered
# (some taking the next word), their arguments, long options, the ends of the options, a command
# string and script files.
SHELL_WORDS = [
    "-e",
    "-u",
    "-x",
    "-l",
    "-v",
    "-o",
    "-O",
    "+o",
    "+O",
    "+x",
    "-c",
    "-s",
    "-euo",
    "-oe",
    "-ox",
    "-xc",
    "-lc",
    "-ec",
    "-sc",
    "-cs",
    "-oO",
    "--",
    "-",
    "--norc",
    "--login",
    "--rcfile",
    "pipefail",
    "errexit",
    "nounset",
    "extglob",
    "rcfile",
    CMD,
    CMD,
    "run.sh",
    "job.sh",
]


@examples(ci=150, long=3000)
@given(shell=st.sampled_from(["bash", "dash"]), words=st.lists(st.sampled_from(SHELL_WORDS), max_size=6))
def test_any_argument_list_is_read_as_the_real_shell_reads_it(shell, words, tmp_path_factory):
    """Random argument lists run by the real shell: where it runs a program (it did not stop on an
    invalid option or a long option after a short one), `source` names the same word. dash given
    both -c and -s runs the command string and then its standard input; `source` says the
    command string (what the reader reads; the standard input is out of reach there)."""
    plain = [w for w in words if w != CMD and not w.startswith(("-", "+"))]
    assume(len(plain) == len(set(plain)))  # one file per name, so that the file says which word ran
    tmp_path = tmp_path_factory.mktemp("argv")
    real = run_real([shell, *words], True, tmp_path)
    assume(real != "error")
    mine = ours([shell, *words], True)
    if shell == "dash" and mine.startswith(COMMAND) and real == STDIN:
        options = [w for w in words[: int(mine.split("-")[1])] if w.startswith("-") and not w.startswith("--")]
        assert any("s" in w[1:] for w in options), (words, mine, real)
        return
    assert mine == real, (words, mine, real)


def test_the_code_of_a_python_cluster_starts_after_its_letter():
    assert invocation.source(["python3", "-uccode"], False) == (COMMAND, 1, 3)
    assert invocation.source(["python3", "-Wdefault", "-mmod"], False) == (MODULE, 2, 2)
    assert invocation.source(["python3", "-uWc", "t.py"], False) == (FILE, 2, 0)  # W took "c"


def test_a_word_we_cannot_know_among_the_options_is_unknown():
    assert invocation.source(["bash", None, "-c", "x"], True)[0] == UNKNOWN
    assert invocation.source(["python3", "-u", None], False)[0] == UNKNOWN
    # after a shell's -c an unknown word may be another option; after Python's, it is the code
    assert invocation.source(["bash", "-c", None], True)[0] == UNKNOWN
    assert invocation.source(["bash", "-c", "--", None], True) == (COMMAND, 3, 0)
    assert invocation.source(["bash", "-x", "--", None], True) == (FILE, 3, 0)
    assert invocation.source(["python3", "-c", None], False) == (COMMAND, 2, 0)
    assert invocation.source(["python3", "-W"], False)[0] == UNKNOWN


# -- what the readers see -------------------------------------------------------------------------

STRICT = "export NCCL_IB_DISABLE=1; exec torchrun --nproc_per_node=8 train.py"


@pytest.mark.parametrize(
    "command",
    [
        ["bash", "-euo", "pipefail", "-c", STRICT],
        ["/bin/bash", "-xeuo", "pipefail", "-c", STRICT],
        ["bash", "-oe", "pipefail", "-c", STRICT],
        ["sh", "-oe", "nounset", "-c", STRICT],
        ["bash", "-c", "-e", STRICT],
    ],
)
def test_the_script_of_a_strict_mode_shell_is_read(command):
    """Before the shared parser the reader took `pipefail` (or `nounset`, or `-e`'s operand) for
    the script and saw nothing of NCCL_IB_DISABLE=1."""
    assert ("NCCL_IB_DISABLE", "1") in reader.settings(command, NAMES)


def test_a_strict_mode_shell_pod_that_falls_back_to_tcp_is_denied(policies):
    import kube_objects as k
    from commands.test_reader_admission import denied

    pod = k.pod([k.container("trainer", command=["/bin/bash", "-euo", "pipefail", "-c"], args=[STRICT], gpus=8)])
    assert "NCCL_IB_DISABLE" in denied(pod, policies)


def test_github_actions_bash_runs_its_file_not_pipefail():
    f = Files("/workspace")
    f.add_file("/scripts/run.sh", "export NCCL_NET=Socket\nexec torchrun train.py\n", "train-scripts")
    f.add_file("/workspace/pipefail", "export NCCL_NET=IB\n", "train-scripts")
    r = reader.read(["bash", "--noprofile", "--norc", "-eo", "pipefail", "/scripts/run.sh"], NAMES, None, None, f)
    assert r.found == [("NCCL_NET", "Socket")] and r.origins == {("NCCL_NET", "Socket"): "/scripts/run.sh"}


def test_a_shell_reading_its_stdin_runs_no_file_named_by_its_arguments():
    """`bash -s FILE`: FILE is $1, the script comes from the standard input (out of reach)."""
    f = Files("/workspace")
    f.add_file("/scripts/run.sh", "export NCCL_NET=Socket\ntorchrun train.py\n", "train-scripts")
    assert reader.read(["bash", "-s", "/scripts/run.sh"], NAMES, None, None, f).found == []
    assert reader.read(["bash", "-x", "/scripts/run.sh"], NAMES, None, None, f).found == [("NCCL_NET", "Socket")]


def test_python_module_names_are_not_files():
    f = Files("/workspace")
    f.add_file("/workspace/trainer", "import os\nos.environ['NCCL_NET'] = 'Socket'\n", "train-scripts")
    assert reader.read(["python3", "-um", "trainer"], NAMES, None, None, f).found == []
    assert reader.read(["python3", "-u", "trainer"], NAMES, None, None, f).found == [("NCCL_NET", "Socket")]


def test_a_heredoc_fed_to_a_strict_mode_shell_is_its_script(policies):
    from commands.test_shell import read_as_bash_runs_it

    read_as_bash_runs_it("cat <<'EOF' | bash -oe pipefail\nexport NCCL_IB_DISABLE=1\ntorchrun t.py\nEOF", policies)
