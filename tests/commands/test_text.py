"""Edges of webhook/commands/text.py and webhook/commands/python.py that the mutation run of the
part commands.text-python (mutation/MUTATION.md) found untested.

text.py is the cheap reading of a command: whether it mentions a variable at all (`prefixes`,
`mentions`), the textual reading a script the parser cannot read falls back to (`scan_text`:
`NAME=value` starting a word, `environ["NAME"] = "value"`), and which MPI launchers a command runs
(`mentions_launcher`, `launcher_use`, what core.ranks decides forwarding by). python.py reads
`python -c` code with Python's own parser for what it puts into `os.environ` (`python_settings`):
the last value on the straight-line path, every value inside a branch, nothing after a deletion.

Commands and scripts are what pods carry: `bash -lc` scripts, `python -c` one-liners, `torchrun`
and `mpirun` command lines (argv joined with NUL as core.ranks joins them), env exports. Each
module keeps what it computed by input (prefixes and scanners by set of names, launcher use by
text, parsed Python by code); mutmut forks each mutant's worker from the process that ran the
clean tests, which hands the original code's answers down to the mutant: its computing code runs
only for an input no clean test used. The fixture below empties them before each test: every
answer here is computed by the code under test.
"""

from __future__ import annotations

import pytest

from webhook.commands import reader
from webhook.commands.python import python_settings
from webhook.commands.shell import MAX_PARSED
from webhook.commands.text import launcher_use, mentions, mentions_launcher, prefixes, scan_text

NCCL = frozenset({"NCCL_IB_DISABLE", "NCCL_NET", "NCCL_IB_HCA", "NCCL_DEBUG"})  # an ib-verbs policy's names
EFA = frozenset({"FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "NCCL_NET_PLUGIN"})  # an EFA policy's
INTEL = frozenset({"I_MPI_FABRICS", "I_MPI_OFI_PROVIDER", "FI_PROVIDER"})  # Intel MPI over libfabric


pytestmark = pytest.mark.usefixtures("command_caches_emptied")  # conftest: each test reads afresh


def argv(*words: str) -> str:
    """A container's command + args as core.ranks hands them to `launcher_use`."""
    return "\0".join(words)


# -- prefixes and mentions: the pre-check before any reading -------------------------------------


def test_prefixes_are_cut_at_the_first_underscore_after_the_first_character():
    assert prefixes(NCCL) == ("NCCL_",)
    assert prefixes(EFA) == ("FI_", "NCCL_")
    assert prefixes(INTEL) == ("FI_", "I_")  # one-letter prefix: I_MPI_FABRICS is under I_
    assert prefixes(frozenset({"LD_PRELOAD", "PATH"})) == ("LD_", "PATH")  # no `_`: the whole name
    # a leading `_` is not the cut: up to the next one
    assert prefixes(frozenset({"_ITERS_MAX", "_ITERS"})) == ("_ITERS", "_ITERS_")
    # the same set again: the same answer (remembered)
    assert prefixes(INTEL) == ("FI_", "I_")


def test_mentions_is_true_only_when_a_name_itself_is_in_the_text():
    assert mentions("export NCCL_IB_HCA=mlx5_0; torchrun --nproc_per_node=8 train.py", NCCL)
    # the prefix is there, no name: NCCL_SOCKET_IFNAME is not asked about
    assert not mentions("export NCCL_SOCKET_IFNAME=net1; torchrun train.py", NCCL)
    assert not mentions("torchrun --nnodes=2 --nproc_per_node=8 train.py", NCCL)
    # a name under the second prefix
    assert mentions("export FI_PROVIDER=efa; python train.py", EFA)
    assert mentions("python -c 'import os; os.environ[\"NCCL_NET_PLUGIN\"] = \"none\"'", EFA)
    assert mentions("mpirun -genv I_MPI_FABRICS shm:ofi ./a.out", INTEL)
    assert not mentions("mpirun -genv I_MPI_DEBUG 5 ./a.out", INTEL)


# -- scan_text: the textual reading -------------------------------------------------------------


def test_a_setting_at_the_very_start_of_the_text_is_read():
    assert scan_text("NCCL_NET=Socket torchrun --nproc_per_node=8 train.py", NCCL) == [("NCCL_NET", "Socket")]
    assert scan_text("FI_PROVIDER=efa", EFA) == [("FI_PROVIDER", "efa")]


def test_every_setting_in_order_under_each_prefix():
    script = (
        "set -euo pipefail\nexport FI_PROVIDER=efa FI_EFA_USE_DEVICE_RDMA=1\n"
        "export NCCL_NET_PLUGIN=aws-ofi\nif [ \"$RANK\" = 0 ]; then\n  export FI_PROVIDER=tcp\n"
        "torchrun --nproc_per_node=8 train.py\n"
    )
    assert scan_text(script, EFA) == [
        ("FI_PROVIDER", "efa"),
        ("FI_EFA_USE_DEVICE_RDMA", "1"),
        ("NCCL_NET_PLUGIN", "aws-ofi"),
        ("FI_PROVIDER", "tcp"),
    ]
    assert scan_text("export I_MPI_FABRICS=shm:ofi I_MPI_OFI_PROVIDER=mlx\nmpiexec.hydra -n 16 ./a.out", INTEL) == [
        ("I_MPI_FABRICS", "shm:ofi"),
        ("I_MPI_OFI_PROVIDER", "mlx"),
    ]


def test_a_name_must_start_a_word():
    script = (
        "export MY_NCCL_NET=Socket XNCCL_IB_HCA=mlx5_1 prevNCCL_DEBUG=INFO 9NCCL_IB_DISABLE=1 OLD_FI_PROVIDER=tcp\n"
        "mpirun -x NCCL_NET=IB ./a.out"
    )
    assert scan_text(script, NCCL) == [("NCCL_NET", "IB")]
    assert scan_text(script, EFA) == []
    # a longer name that starts with a name asked about is not that name
    assert scan_text("export NCCL_NET_GDR_LEVEL=PHB NCCL_IB_HCA_X=1", NCCL) == []
    assert scan_text("export NCCL_NET_PLUGIN=none NCCL_NET=IB", EFA | NCCL) == [
        ("NCCL_NET_PLUGIN", "none"),
        ("NCCL_NET", "IB"),
    ]


def test_a_quoted_value_is_one_word_and_its_text_is_not_read_again():
    """After `NAME=` the whole shell word is the value: a `NAME=` inside its quotes is part of it."""
    script = 'export NCCL_DEBUG="INFO NCCL_IB_DISABLE=1" NCCL_NET=IB\n'
    assert scan_text(script, NCCL) == [("NCCL_DEBUG", "INFO NCCL_IB_DISABLE=1"), ("NCCL_NET", "IB")]


def test_a_value_with_an_expansion_is_not_known_and_the_next_one_still_is():
    script = 'export NCCL_IB_HCA=$HCA NCCL_NET="$(cat /etc/net)" NCCL_DEBUG=WARN\n'
    assert scan_text(script, NCCL) == [("NCCL_DEBUG", "WARN")]
    # a quote not closed: the text up to a blank, unless it expands something
    assert scan_text("NCCL_NET='$NET torchrun train.py", NCCL) == []
    assert scan_text("NCCL_NET='Socket; torchrun train.py", NCCL) == [("NCCL_NET", "'Socket")]
    assert scan_text("NCCL_IB_DISABLE=1 NCCL_NET=\"IB torchrun train.py", NCCL) == [
        ("NCCL_IB_DISABLE", "1"),
        ("NCCL_NET", '"IB'),
    ]


def test_environ_assignments_in_python_code_are_read_in_order():
    code = (
        "import os\nos.environ['NCCL_IB_DISABLE'] = '1'\nos.environ[ \"NCCL_NET\" ]=\"Socket\"\n"
        "os.environ['NCCL_IB_HCA'] = f'{x}'\nos.environ['NCCL_DEBUG'] = '$LEVEL'\n"
    )
    # an f-string is not a literal value, nor is one that expands $ in the shell around the code
    assert scan_text(code, NCCL) == [("NCCL_IB_DISABLE", "1"), ("NCCL_NET", "Socket")]
    # a text that says environ still reads the shell form
    assert scan_text("export NCCL_NET=IB; python -c 'import os; print(os.environ)'", NCCL) == [("NCCL_NET", "IB")]
    # without "environ" the Python form is not looked for: environ is the word it needs
    assert scan_text("env['NCCL_NET'] = 'Socket'", NCCL) == []


# -- launchers ----------------------------------------------------------------------------------


def test_mentions_launcher_finds_each_launcher_name_and_nothing_else():
    for cmd in ("mpirun", "/opt/openmpi/bin/mpirun.openmpi", "mpiexec.hydra", "orterun", "prterun", "prun", "oshrun"):
        assert mentions_launcher(argv(cmd, "-np", "16", "python", "train.py")), cmd
    assert mentions_launcher("bash -lc 'source /opt/env.sh && mpiexec -n 4 ./a.out'")
    for cmd in ("torchrun --nproc_per_node=8 train.py", "deepspeed --num_gpus 8 train.py", "srun python train.py"):
        assert not mentions_launcher(cmd), cmd


def test_launcher_use_reads_each_family_once_in_order():
    assert launcher_use(argv("mpirun", "-np", "16", "python", "train.py")) == (("either",), False, False, False)
    assert launcher_use(argv("mpiexec", "-n", "16", "./a.out")) == (("either",), False, False, False)
    assert launcher_use(argv("/usr/lib64/openmpi/bin/orterun", "-np", "2", "./a.out")) == (
        ("openmpi",),
        False,
        False,
        False,
    )
    assert launcher_use(argv("mpiexec.hydra", "-n", "2", "./a.out")) == (("hydra",), False, False, False)
    script = "mpirun.openmpi -np 2 ./warmup\nmpiexec.hydra -n 2 ./a.out\nmpirun.openmpi -np 2 ./a.out\n"
    assert launcher_use(script) == (("openmpi", "hydra"), False, False, False)
    assert launcher_use(argv("torchrun", "--nproc_per_node=8", "train.py")) == ((), False, False, False)
    # neither "mpi" nor "run": nothing, read no further (a launcher by label, `bash /opt/launch.sh`, gets here)
    assert launcher_use(argv("bash", "/opt/launch.sh")) == ((), False, False, False)
    assert launcher_use(argv("deepspeed", "--num_gpus", "8", "train.py")) == ((), False, False, False)
    assert launcher_use(argv("python", "-m", "torch.distributed.launch", "train.py")) == ((), False, False, False)


def test_launcher_use_reads_restrictions_the_env_list_and_export_flags():
    assert launcher_use(argv("mpiexec.hydra", "-genvnone", "-n", "2", "./a.out")) == (("hydra",), True, False, False)
    assert launcher_use("mpiexec -envlist NCCL_NET,NCCL_IB_HCA -n 2 ./a.out") == (("either",), True, False, False)
    assert launcher_use(
        argv("mpirun", "--mca", "mca_base_env_list", "NCCL_NET=IB;NCCL_DEBUG", "-np", "2", "./a.out")
    ) == (("either",), False, True, False)
    assert launcher_use(argv("mpirun", "-x", "NCCL_DEBUG=INFO", "-np", "2", "./a.out")) == (
        ("either",),
        False,
        False,
        True,
    )
    assert launcher_use("mpirun --x LD_LIBRARY_PATH -np 2 ./a.out") == (("either",), False, False, True)
    # all at once, in a script
    script = "mpirun -genvlist NCCL_NET --mca mca_base_env_list NCCL_DEBUG -x NCCL_IB_HCA -np 2 ./a.out"
    assert launcher_use(script) == (("either",), True, True, True)


def test_an_x_before_any_launcher_is_not_an_export_flag():
    """`set -x` traces the script: only an `-x` after a launcher's name exports."""
    assert launcher_use("set -x\nmpirun -np 16 python train.py") == (("either",), False, False, False)
    assert launcher_use("set -x\nmpirun -np 16 -x NCCL_DEBUG python train.py") == (("either",), False, False, True)
    # a second mention of a launcher already found still reads the words after it
    assert launcher_use("mpirun -np 1 hostname && mpirun -genvnone -np 2 ./a.out") == (("either",), True, False, False)


def test_launcher_use_of_a_text_that_names_no_launcher_by_word():
    """Textual: "mpi" or "run" in the text is only the way in; a launcher is a word's base name."""
    assert launcher_use("python /opt/mpi/train.py --run-name llama") == ((), False, False, False)
    assert launcher_use("mpirun_wrapper.sh -np 2") == ((), False, False, False)
    # the same text twice: the same answer (remembered by text)
    for _ in range(2):
        assert launcher_use(argv("bash", "-lc", "mpirun -genvnone -x NCCL_NET ./a.out")) == (
            ("either",),
            True,
            False,
            True,
        )


# -- python -c ----------------------------------------------------------------------------------


def test_the_last_value_on_the_straight_line_wins():
    code = "import os\nos.environ['NCCL_NET'] = 'IB'\nos.environ['NCCL_NET'] = 'Socket'\nimport torch"
    assert python_settings(code, NCCL) == [("NCCL_NET", "Socket")]
    # remembered by code: the same answer again
    assert python_settings(code, NCCL) == [("NCCL_NET", "Socket")]


def test_a_value_set_in_a_branch_loop_or_function_is_one_more_possible_value():
    code = (
        "import os\nos.environ['NCCL_IB_DISABLE'] = '0'\n"
        "if int(os.environ.get('RANK', 0)) == 0:\n    os.environ['NCCL_IB_DISABLE'] = '1'\n"
        "for k in ('NCCL_DEBUG',):\n    os.environ['NCCL_DEBUG'] = 'INFO'\n"
        "def setup():\n    os.environ['NCCL_NET'] = 'Socket'\n"
    )
    assert python_settings(code, NCCL) == [
        ("NCCL_IB_DISABLE", "0"),
        ("NCCL_IB_DISABLE", "1"),
        ("NCCL_DEBUG", "INFO"),
        ("NCCL_NET", "Socket"),
    ]
    # a value assigned on the straight line after a branch replaces the branch's
    code2 = "import os\nif os.getenv('DEBUG'):\n    os.environ['NCCL_NET'] = 'Socket'\nos.environ['NCCL_NET'] = 'IB'\n"
    assert python_settings(code2, NCCL) == [("NCCL_NET", "IB")]
    # the same value in two branches is reported once
    code3 = "import os\nif a:\n    os.environ['NCCL_NET'] = 'Socket'\nelse:\n    os.environ['NCCL_NET'] = 'Socket'\n"
    assert python_settings(code3, NCCL) == [("NCCL_NET", "Socket")]


def test_other_variables_and_other_mappings_are_not_read():
    code = (
        "import os, json\nos.environ['MASTER_ADDR'] = 'trainer-0'\ncfg = {}\ncfg['NCCL_IB_HCA'] = 'mlx5_9'\n"
        "args.environ = None\nos.environ['NCCL_IB_HCA'] = 'mlx5_0'\n"
    )
    assert python_settings(code, NCCL) == [("NCCL_IB_HCA", "mlx5_0")]
    assert python_settings("import os\nsettings.env['NCCL_NET'] = 'Socket'\n", NCCL) == []
    assert python_settings("import os\nos.environ['NCCL_NET'] = 'Socket'\n", EFA) == []


def test_reading_a_variable_sets_nothing():
    """`os.environ.get(NAME, default)`, `os.getenv`, a plain variable deleted: no setting."""
    code = (
        "import os\nos.environ['NCCL_NET'] = 'IB'\nnet = os.environ.get('NCCL_NET', 'Socket')\n"
        "hca = os.getenv('NCCL_IB_HCA', 'mlx5_0')\ndel net\nprint(os.environ.get('NCCL_NET'))\n"
    )
    assert python_settings(code, NCCL) == [("NCCL_NET", "IB")]


def test_environ_imported_by_name_counts():
    code = "from os import environ\nenviron['NCCL_NET'] = 'Socket'\nenviron.update(NCCL_DEBUG='INFO')\n"
    assert python_settings(code, NCCL) == [("NCCL_NET", "Socket"), ("NCCL_DEBUG", "INFO")]


def test_a_deletion_or_pop_on_the_straight_line_leaves_no_value():
    code = "import os\nos.environ['NCCL_NET'] = 'Socket'\nos.environ['NCCL_IB_HCA'] = 'mlx5_0'\ndel os.environ['NCCL_NET']\n"
    assert python_settings(code, NCCL) == [("NCCL_IB_HCA", "mlx5_0")]
    code = "import os\nos.environ['NCCL_NET'] = 'Socket'\nos.environ.pop('NCCL_NET', None)\n"
    assert python_settings(code, NCCL) == []
    # in a branch a deletion may not happen: the value stays possible
    code = "import os\nos.environ['NCCL_NET'] = 'Socket'\nif fallback:\n    del os.environ['NCCL_NET']\n"
    assert python_settings(code, NCCL) == [("NCCL_NET", "Socket")]
    code = "import os\nos.environ['NCCL_NET'] = 'Socket'\ntry:\n    os.environ.pop('NCCL_NET')\nexcept KeyError:\n    pass\n"
    assert python_settings(code, NCCL) == [("NCCL_NET", "Socket")]
    # several targets in one del
    code = "import os\nos.environ.update(NCCL_NET='IB', NCCL_DEBUG='INFO')\ndel os.environ['NCCL_NET'], os.environ['NCCL_DEBUG']\n"
    assert python_settings(code, NCCL) == []


def test_update_setdefault_setitem_and_putenv():
    code = (
        "import os\nos.environ.update({'NCCL_NET': 'IB', **extra, 'NCCL_IB_HCA': 'mlx5_0'}, NCCL_DEBUG='WARN', **more)\n"
        "os.environ.__setitem__('NCCL_NET', 'Socket')\nos.putenv('NCCL_IB_DISABLE', '1')\n"
    )
    assert python_settings(code, NCCL) == [
        ("NCCL_NET", "Socket"),
        ("NCCL_IB_HCA", "mlx5_0"),
        ("NCCL_DEBUG", "WARN"),
        ("NCCL_IB_DISABLE", "1"),
    ]
    # setdefault does not replace a value already set: both stay possible
    code = "import os\nos.environ['NCCL_NET'] = 'IB'\nos.environ.setdefault('NCCL_NET', 'Socket')\n"
    assert python_settings(code, NCCL) == [("NCCL_NET", "IB"), ("NCCL_NET", "Socket")]
    # a value that is not a literal is not known, and replaces the one before on the straight line
    code = "import os\nos.environ['NCCL_NET'] = 'IB'\nos.environ['NCCL_NET'] = net\nos.putenv('NCCL_DEBUG', level)\n"
    assert python_settings(code, NCCL) == []


def test_calls_inside_a_statement_on_the_straight_line_are_on_it():
    """`x = f(os.environ.update(...))`, `n += ...`: the statement runs, so do the calls in it."""
    code = "import os\nos.environ['NCCL_NET'] = 'IB'\nok = os.environ.update(NCCL_NET='Socket') is None\n"
    assert python_settings(code, NCCL) == [("NCCL_NET", "Socket")]
    code = "import os\nos.environ['NCCL_NET'] = 'IB'\nn = 0\nn += os.putenv('NCCL_NET', 'Socket') or 1\n"
    assert python_settings(code, NCCL) == [("NCCL_NET", "Socket")]
    code = "import os\nos.environ['NCCL_NET'] = 'IB'\nos.environ.update(NCCL_NET='Socket')\n"
    assert python_settings(code, NCCL) == [("NCCL_NET", "Socket")]


def test_numbers_are_values_and_booleans_are_not():
    code = (
        "import os\nos.environ['NCCL_IB_DISABLE'] = 1\nos.environ['NCCL_DEBUG'] = True\nos.putenv('NCCL_NET', None)\n"
    )
    assert python_settings(code, NCCL) == [("NCCL_IB_DISABLE", "1")]


def test_too_few_arguments_set_nothing():
    code = (
        "import os\nos.environ.setdefault('NCCL_NET')\nos.putenv('NCCL_DEBUG')\nos.environ.__setitem__('NCCL_IB_HCA')\n"
    )
    assert python_settings(code, NCCL) == []


def test_code_python_cannot_parse_gets_the_textual_reading():
    code = "import os\nos.environ['NCCL_NET'] = 'IB'\nif True\n    os.environ['NCCL_NET'] = 'Socket'\n"
    assert python_settings(code, NCCL) == [("NCCL_NET", "IB"), ("NCCL_NET", "Socket")]
    assert python_settings(code, NCCL) == [("NCCL_NET", "IB"), ("NCCL_NET", "Socket")]  # remembered as unreadable


def test_code_up_to_max_parsed_is_parsed_and_longer_code_is_read_as_text():
    head = "import os\nos.environ['NCCL_NET'] = 'IB'\n"
    tail = "os.environ['NCCL_NET'] = 'Socket'\n"
    pad = MAX_PARSED - len(head) - len(tail)
    at_limit = head + "#" * (pad - 1) + "\n" + tail
    assert len(at_limit) == MAX_PARSED
    assert python_settings(at_limit, NCCL) == [("NCCL_NET", "Socket")]
    over = head + "#" * pad + "\n" + tail
    assert python_settings(over, NCCL) == [("NCCL_NET", "IB"), ("NCCL_NET", "Socket")]


def test_python_c_in_a_pod_command_through_the_reader():
    """The container's command as the kubelet runs it: `python -c`, also inside `bash -lc`."""
    code = "import os; os.environ['NCCL_IB_DISABLE'] = '1'; import runpy; runpy.run_path('train.py')"
    assert reader.settings(["python", "-c", code], NCCL) == [("NCCL_IB_DISABLE", "1")]
    script = f"export NCCL_DEBUG=INFO\npython3 -c \"{code}\"\n"
    assert reader.settings(["bash", "-lc", script], NCCL) == [("NCCL_DEBUG", "INFO"), ("NCCL_IB_DISABLE", "1")]


# -- calls that may not run (found by this part's run, fixed in webhook/commands/python.py) -----------

DISABLED_THEN = "import os; os.environ['NCCL_IB_DISABLE'] = '1'; "
MAY_NOT_RUN = {
    # rank 0 turns IB back on; every other rank keeps NCCL_IB_DISABLE=1
    "and": "int(os.environ.get('RANK', '0')) == 0 and os.environ.update(NCCL_IB_DISABLE='0')",
    "or": "os.environ.get('RANK') or os.environ.update(NCCL_IB_DISABLE='0')",
    "if-else": "os.environ.pop('NCCL_IB_DISABLE') if os.getenv('RANK') == '0' else None",
    "else": "None if os.getenv('RANK') == '0' else os.environ.pop('NCCL_IB_DISABLE')",
    "lambda": "cleanup = lambda: os.environ.pop('NCCL_IB_DISABLE', None)",
    "comprehension": "[os.environ.pop('NCCL_IB_DISABLE') for _ in []]",
    "generator": "any(os.environ.update(NCCL_IB_DISABLE='0') for r in ranks if r == 0)",
}


@pytest.mark.parametrize("where", sorted(MAY_NOT_RUN))
def test_a_call_that_may_not_run_adds_a_possible_value_and_takes_none_away(where):
    """Past the first operand of `and`/`or`, in a branch of `x if c else y`, in a lambda or a
    comprehension, a call runs on some ranks, later or never: what it sets is one more possible
    value, as inside an `if`, and the value the straight line set stays possible (before: it was
    replaced, and a job whose ranks but rank 0 run with IB off was admitted)."""
    code = DISABLED_THEN + MAY_NOT_RUN[where] + "; import runpy; runpy.run_path('train.py')"
    got = python_settings(code, NCCL)
    assert ("NCCL_IB_DISABLE", "1") in got, got
    assert set(got) <= {("NCCL_IB_DISABLE", "1"), ("NCCL_IB_DISABLE", "0")}, got
    assert reader.settings(["python", "-c", code], NCCL) == got


def test_the_first_operand_and_the_condition_are_on_the_straight_line():
    """What runs whenever the statement runs still replaces: the first operand of `or`, the
    condition of `x if c else y`."""
    code = DISABLED_THEN + "os.environ.update(NCCL_IB_DISABLE='0') or print('set')"
    assert python_settings(code, NCCL) == [("NCCL_IB_DISABLE", "0")]
    code = DISABLED_THEN + "x = 1 if os.environ.pop('NCCL_IB_DISABLE') else 2"
    assert python_settings(code, NCCL) == []


def test_a_pod_whose_ranks_but_rank_0_run_with_ib_off_is_denied(policies):
    """The decision on the whole pod: under erdma, the `and` form is a TCP fallback."""
    from kube_objects import container, pod
    from webhook.core import keys
    from webhook.core.decision import DENIED, Namespace, decide

    ns = Namespace("ml-training", {keys.NS_INJECTION: keys.NS_INJECTION_ENABLED, keys.NS_POLICY: "erdma"})
    code = DISABLED_THEN + MAY_NOT_RUN["and"] + "; import runpy; runpy.run_path('train.py')"
    decision = decide(pod([container("trainer", command=["python", "-c", code])]), ns, policies, None, "CREATE")
    assert decision.outcome == DENIED and [f.rule for f in decision.denials] == ["command-fallback"], decision.denials


def test_plus_equals_appends_to_the_value_before_and_is_unknown_without_one():
    """`os.environ[NAME] += "x"` (before: not read, so the value before it was reported)."""
    code = "import os\nos.environ['NCCL_IB_HCA'] = 'mlx5_0'\nos.environ['NCCL_IB_HCA'] += ',mlx5_1'\n"
    assert python_settings(code, NCCL) == [("NCCL_IB_HCA", "mlx5_0,mlx5_1")]
    # '1' then += '0': "10", still non-zero (IB off), not the "1" alone nor the "0"
    code = "import os\nos.environ['NCCL_IB_DISABLE'] = '1'\nos.environ['NCCL_IB_DISABLE'] += '0'\n"
    assert python_settings(code, NCCL) == [("NCCL_IB_DISABLE", "10")]
    # every possible value gets the suffix; in a branch the values before stay possible too
    code = (
        "import os\nif a:\n    os.environ['NCCL_IB_HCA'] = 'mlx5_0'\nelse:\n    os.environ['NCCL_IB_HCA'] = 'mlx5_2'\n"
        "os.environ['NCCL_IB_HCA'] = 'mlx5_4'\nif b:\n    os.environ['NCCL_IB_HCA'] += ',mlx5_5'\n"
    )
    assert python_settings(code, NCCL) == [("NCCL_IB_HCA", "mlx5_4"), ("NCCL_IB_HCA", "mlx5_4,mlx5_5")]
    # appended to a value this code did not set (the container's), or a suffix not known: unknown
    assert python_settings("import os\nos.environ['NCCL_IB_HCA'] += ',mlx5_1'\n", NCCL) == []
    code = "import os\nos.environ['NCCL_IB_HCA'] = 'mlx5_0'\nos.environ['NCCL_IB_HCA'] += extra\n"
    assert python_settings(code, NCCL) == []
    code = "import os\nos.environ['NCCL_IB_DISABLE'] = '1'\nos.environ['NCCL_IB_DISABLE'] *= 2\n"
    assert python_settings(code, NCCL) == []
