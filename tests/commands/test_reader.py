"""Edges of webhook/commands/reader.py that the mutation run of the part commands.reader
(mutation/MUTATION.md) found untested.

reader.py walks what shell.py parsed (and the argv of a container's command) as the shell and
the launchers run it: which values of the asked names (NCCL's here, as the fallback rules ask)
each process it starts sees. The tests read realistic container commands and `bash -lc`
scripts (torchrun, mpirun, deepspeed, horovodrun launch lines, exports, env files from
ConfigMaps) and check the exact settings, their origins, the scripts left unread, the
budget a reading spends and what is remembered.

reader.py remembers readings by text (`reader._READ`), shell.py parses (`shell.PARSED`),
text.py and python.py their own answers; mutmut forks each mutant's worker from the process
that ran the clean tests, which hands the original code's answers down: the fixture below
empties every cache before each test, so each answer here is computed by the code under test.
"""

from __future__ import annotations

import shlex

import pytest

from webhook.commands import reader, record, shell
from webhook.commands.files import Budget, Files
from webhook.commands.shell import CACHE_MAX, MAX_DEPTH, MAX_PARSED

NAMES = frozenset({"NCCL_IB_DISABLE", "NCCL_NET", "NCCL_IB_HCA", "NCCL_DEBUG"})


pytestmark = pytest.mark.usefixtures("command_caches_emptied")  # conftest: each test reads afresh


class Env(dict):
    """A container env as the reader looks it up, recording what was asked."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.asked: list[str] = []

    def get(self, name, default=None):
        self.asked.append(name)
        return dict.get(self, name, default)


class Asked:
    """A FileSource that counts the questions put to it."""

    def __init__(self, files):
        self.inner, self.lookups, self.mentions = files, [], []

    def lookup(self, path):
        self.lookups.append(path)
        return self.inner.lookup(path)

    def mentioned(self, text_):
        self.mentions.append(text_)
        return self.inner.mentioned(text_)


def argv(*words: str | None, env: dict | None = None) -> list[tuple[str, str]]:
    """What the processes a container's command starts see of NAMES, made by the command."""
    return reader.settings(list(words), NAMES, Env(env or {}))


def seen(script: str, **env: str) -> list[tuple[str, str]]:
    """The same for `bash -lc script`, as a training pod's command carries it."""
    return reader.settings(["bash", "-lc", script], NAMES, Env(env))


def files(**scripts: str | None) -> Files:
    """ConfigMap files under /scripts (key: file name, value: its text, None when the ConfigMap is
    not at hand), from the ConfigMap `train-scripts`."""
    f = Files("/workspace")
    for name, body in scripts.items():
        f.add_file("/scripts/" + name.replace("_sh", ".sh").replace("_py", ".py"), body, "train-scripts")
    return f


# -- report: each setting once, in order, with its origin -------------------------------------------


def test_only_the_asked_names_with_known_values_are_reported_each_once_in_order():
    script = (
        "export MASTER_PORT=29500 NCCL_DEBUG=INFO NCCL_NET=$(cat /etc/net)\n"
        "export NCCL_IB_HCA=mlx5_0\n"
        "torchrun --nproc_per_node=8 train.py\n"
        "NCCL_DEBUG=INFO torchrun eval.py"
    )
    assert seen(script) == [("NCCL_DEBUG", "INFO"), ("NCCL_IB_HCA", "mlx5_0")]
    assert reader.settings(["bash", "-lc", script], frozenset({"MASTER_PORT"})) == [("MASTER_PORT", "29500")]


def test_settings_is_the_found_of_read():
    command = ["bash", "-c", "export NCCL_IB_DISABLE=1; torchrun t.py"]
    assert reader.settings(command, NAMES) == [("NCCL_IB_DISABLE", "1")]
    assert reader.settings(command, NAMES, Env(), Budget()) == [("NCCL_IB_DISABLE", "1")]
    budget = Budget()
    assert reader.settings(["bash", "-c", "export NCCL_NET=Socket; torchrun t.py"], NAMES, None, budget) == [
        ("NCCL_NET", "Socket")
    ]
    assert budget.steps < Budget().steps  # the budget handed in is the one spent


def test_origins_name_the_configmap_file_that_made_each_setting():
    f = files(
        env_sh="export NCCL_IB_HCA=mlx5_0\nexport NCCL_DEBUG=WARN",
        train_sh="source /scripts/env.sh\nNCCL_NET=IB torchrun --nproc_per_node=8 train.py",
    )
    r = reader.read(["bash", "-c", "bash /scripts/train.sh"], NAMES, Env(), None, f)
    assert r.found == [("NCCL_IB_HCA", "mlx5_0"), ("NCCL_DEBUG", "WARN"), ("NCCL_NET", "IB")]
    assert r.origins == {
        ("NCCL_IB_HCA", "mlx5_0"): "/scripts/env.sh",
        ("NCCL_DEBUG", "WARN"): "/scripts/env.sh",
        ("NCCL_NET", "IB"): "/scripts/train.sh",
    }
    assert r.unread == []


def test_an_origin_stays_the_first_files_and_the_command_itself_has_none():
    f = files(a_sh="export NCCL_NET=IB\ntorchrun a.py", b_sh="export NCCL_NET=IB\ntorchrun b.py")
    r = reader.read(
        ["bash", "-c", "bash /scripts/a.sh; bash /scripts/b.sh; NCCL_DEBUG=INFO torchrun c.py"], NAMES, None, None, f
    )
    assert r.found == [("NCCL_NET", "IB"), ("NCCL_DEBUG", "INFO")]
    assert r.origins == {("NCCL_NET", "IB"): "/scripts/a.sh"}


def test_a_launcher_flag_in_a_file_has_the_file_as_origin():
    f = files(launch_sh="mpirun -np 16 -x NCCL_IB_HCA=mlx5_0 -genv NCCL_NET IB python train.py")
    r = reader.read(["bash", "/scripts/launch.sh"], NAMES, None, None, f)
    assert r.found == [("NCCL_IB_HCA", "mlx5_0"), ("NCCL_NET", "IB")]
    assert r.origins == {("NCCL_IB_HCA", "mlx5_0"): "/scripts/launch.sh", ("NCCL_NET", "IB"): "/scripts/launch.sh"}


def test_env_in_a_file_has_the_file_as_origin():
    f = files(run_sh="env NCCL_DEBUG=INFO deepspeed --num_gpus 8 train.py")
    r = reader.read(["/scripts/run.sh"], NAMES, None, None, f)
    assert r.found == [("NCCL_DEBUG", "INFO")]
    assert r.origins == {("NCCL_DEBUG", "INFO"): "/scripts/run.sh"}


def test_a_prefix_assignment_in_a_file_has_the_file_as_origin():
    f = files(run_sh="NCCL_IB_DISABLE=1 horovodrun -np 4 python train.py")
    r = reader.read(["bash", "/scripts/run.sh"], NAMES, None, None, f)
    assert r.found == [("NCCL_IB_DISABLE", "1")] and r.origins == {("NCCL_IB_DISABLE", "1"): "/scripts/run.sh"}


def test_a_plain_assignment_in_a_file_keeps_the_file_as_origin_after_it():
    f = files(env_sh="NCCL_NET=Socket\nNCCL_DEBUG=$LEVEL")
    r = reader.read(["bash", "-c", "source /scripts/env.sh; torchrun t.py"], NAMES, Env(LEVEL="INFO"), None, f)
    assert r.found == [("NCCL_NET", "Socket"), ("NCCL_DEBUG", "INFO")]
    assert r.origins == {("NCCL_NET", "Socket"): "/scripts/env.sh", ("NCCL_DEBUG", "INFO"): "/scripts/env.sh"}


# -- files: ConfigMap scripts run, sourced, or not at hand -------------------------------------------


def test_a_configmap_script_not_at_hand_is_listed_once_and_the_shells_view_stands():
    f = Files()
    f.add_file("/scripts/train.sh", None, "train-scripts")
    r = reader.read(
        ["bash", "-c", "export NCCL_DEBUG=INFO; bash /scripts/train.sh; bash /scripts/train.sh"], NAMES, None, None, f
    )
    assert r.found == [("NCCL_DEBUG", "INFO")]
    assert r.unread == [("/scripts/train.sh", "train-scripts")]
    assert r.origins == {}


def test_a_directory_mount_without_its_configmap_lists_each_script_run():
    f = Files()
    f.add_dir("/opt/launch", "launch-cm")
    r = reader.read(["sh", "-c", "/opt/launch/a.sh && /opt/launch/b.sh"], NAMES, None, None, f)
    assert r.found == [] and r.unread == [("/opt/launch/a.sh", "launch-cm"), ("/opt/launch/b.sh", "launch-cm")]


def test_a_script_run_directly_reports_what_its_processes_see():
    f = files(run_sh="#!/bin/bash\nset -e\nexport NCCL_IB_HCA=mlx5_0,mlx5_1\nexec torchrun --nnodes=2 train.py")
    assert reader.read(["/scripts/run.sh"], NAMES, None, None, f).found == [("NCCL_IB_HCA", "mlx5_0,mlx5_1")]
    # and by a path relative to the working dir
    assert reader.read(["bash", "-c", "cd /workspace && ../scripts/run.sh"], NAMES, None, None, f).found == [
        ("NCCL_IB_HCA", "mlx5_0,mlx5_1")
    ]


def test_a_script_that_changes_nothing_leaves_the_callers_exports_to_its_processes():
    f = files(run_sh="#!/bin/bash\ncd /workspace\nexec torchrun train.py")
    assert reader.read(["env", "NCCL_DEBUG=INFO", "/scripts/run.sh"], NAMES, None, None, f).found == [
        ("NCCL_DEBUG", "INFO")
    ]
    assert reader.read(["bash", "-c", "export NCCL_DEBUG=INFO; /scripts/run.sh"], NAMES, None, None, f).found == [
        ("NCCL_DEBUG", "INFO")
    ]
    # bash FILE: the same
    assert reader.read(["env", "NCCL_DEBUG=INFO", "bash", "/scripts/run.sh"], NAMES, None, None, f).found == [
        ("NCCL_DEBUG", "INFO")
    ]


def test_a_script_that_unsets_a_callers_export_hides_it():
    f = files(run_sh="unset NCCL_IB_DISABLE\nexec torchrun train.py")
    assert reader.read(["env", "NCCL_IB_DISABLE=1", "/scripts/run.sh"], NAMES, None, None, f).found == []
    assert reader.read(["env", "NCCL_IB_DISABLE=1", "bash", "/scripts/run.sh"], NAMES, None, None, f).found == []


def test_a_python_configmap_script_is_read_as_python():
    body = "#!/usr/bin/env python3\nimport os\nos.environ['NCCL_IB_DISABLE'] = '1'\nimport train\n"
    f = files(launch_py=body)
    r = reader.read(["/scripts/launch.py"], NAMES, None, None, f)
    assert r.found == [("NCCL_IB_DISABLE", "1")] and r.origins == {("NCCL_IB_DISABLE", "1"): "/scripts/launch.py"}
    r = reader.read(["python3", "-u", "/scripts/launch.py"], NAMES, None, None, f)
    assert r.found == [("NCCL_IB_DISABLE", "1")] and r.origins == {("NCCL_IB_DISABLE", "1"): "/scripts/launch.py"}
    # python FILE reads the file as python whatever its first line
    g = files(launch_py="import os\nos.environ['NCCL_NET'] = 'Socket'\n")
    assert reader.read(["python", "/scripts/launch.py"], NAMES, None, None, g).found == [("NCCL_NET", "Socket")]
    # run directly without a python shebang it is a shell script: `os.environ[...] = ...` is no assignment
    assert reader.read(["/scripts/launch.py"], NAMES, None, None, g).found == []


def test_a_python_file_that_does_not_mention_the_names_reports_nothing():
    f = files(launch_py="#!/usr/bin/python3\nimport os\nos.environ['MASTER_ADDR'] = 'x'\n")
    assert reader.read(["env", "NCCL_DEBUG=INFO", "python3", "/scripts/launch.py"], NAMES, None, None, f).found == [
        ("NCCL_DEBUG", "INFO")
    ]


def test_a_shebang_without_python_is_a_shell_script():
    f = files(run_sh="#!/bin/sh\n# python launcher\nexport NCCL_NET=IB\nexec python train.py")
    assert reader.read(["/scripts/run.sh"], NAMES, None, None, f).found == [("NCCL_NET", "IB")]


def chain(n: int, run: str) -> list[tuple[str, str]]:
    """Scripts /s/0.sh ... /s/n.sh, each running the next (`run` + path), the last an echo (no
    setting) and torchrun: what the first one's processes see."""
    f = Files()
    for i in range(n):
        f.add_file(f"/s/{i}.sh", f"{run}/s/{i + 1}.sh", "cm")
    f.add_file(f"/s/{n}.sh", "echo NCCL_NET=Socket\ntorchrun t.py", "cm")
    return reader.read([*run.split(), "/s/0.sh"], NAMES, None, None, f).found


@pytest.mark.parametrize("run", ["", "bash ", "sh -e "])
def test_scripts_nested_past_max_depth_get_the_textual_reading(run):
    # process (depth 0) -> from_file -> the script of /s/0.sh parsed at depth 1 -> its command ->
    # process (depth 2) -> ...: /s/n.sh is parsed at depth 2n + 1, past MAX_DEPTH read as text
    bound = MAX_DEPTH // 2
    assert chain(bound - 1, run) == []
    assert chain(bound, run) == [("NCCL_NET", "Socket")]


def test_a_file_sourced_past_max_depth_gets_the_textual_reading():
    # bash -c nested 6 times reaches a script at depth 12: a file sourced there is read as text
    f = Files()
    f.add_file("/s/env.sh", "echo NCCL_NET=Socket", "cm")
    script = "source /s/env.sh; torchrun t.py"
    for _ in range(MAX_DEPTH // 2):
        script = "bash -c " + shlex.quote(script)
    assert reader.read(script, NAMES, None, None, f).found == [("NCCL_NET", "Socket")]
    assert reader.read(script[len("bash -c ") :], NAMES, None, None, f).found == []


def test_a_unreadable_script_file_falls_back_to_the_textual_reading():
    f = files(run_sh='echo "start\nexport NCCL_NET=Socket\ntorchrun t.py')  # a quote left open
    r = reader.read(["bash", "/scripts/run.sh"], NAMES, None, None, f)
    assert r.found == [("NCCL_NET", "Socket")] and r.origins == {("NCCL_NET", "Socket"): "/scripts/run.sh"}


def test_a_sourced_env_file_keeps_its_assignments_in_this_shell():
    f = files(env_sh="export NCCL_IB_HCA=mlx5_0\nNCCL_DEBUG=WARN")
    assert reader.read(["bash", "-c", ". /scripts/env.sh; torchrun t.py"], NAMES, None, None, f).found == [
        ("NCCL_IB_HCA", "mlx5_0"),
        ("NCCL_DEBUG", "WARN"),
    ]
    assert reader.read(["bash", "-c", "source /scripts/env.sh && torchrun t.py"], NAMES, None, None, f).found == [
        ("NCCL_IB_HCA", "mlx5_0"),
        ("NCCL_DEBUG", "WARN"),
    ]
    # a sourced file that is not one of the ConfigMaps' is out of reach
    assert reader.read(["bash", "-c", "source /etc/profile; torchrun t.py"], NAMES, None, None, f).found == []
    # `source` alone sources nothing
    assert reader.read(["bash", "-c", "source; NCCL_NET=IB torchrun t.py"], NAMES, None, None, f).found == [
        ("NCCL_NET", "IB")
    ]


def test_a_program_found_after_an_unknown_wrapper_by_its_configmap_path():
    f = files(run_sh="export NCCL_NET=IB\nexec torchrun train.py")
    assert reader.read(["dumb-init", "--", "/scripts/run.sh"], NAMES, None, None, f).found == [("NCCL_NET", "IB")]
    assert reader.read(["/usr/bin/tini", "-s", "/scripts/run.sh", "--rdzv"], NAMES, None, None, f).found == [
        ("NCCL_NET", "IB")
    ]
    # a path that is no ConfigMap's file is skipped, a later known program is read
    assert reader.read(
        ["tini", "/opt/bin/entry", "env", "NCCL_DEBUG=INFO", "torchrun", "t.py"], NAMES, None, None, f
    ).found == [("NCCL_DEBUG", "INFO")]


def test_launchers_and_python_are_not_looked_up_as_files():
    f = Files()
    f.add_dir("/opt/conda/bin", "tools")  # everything under it would be a file not at hand
    r = reader.read(
        [
            "/opt/conda/bin/mpirun",
            "-x",
            "NCCL_NET=IB",
            "/opt/conda/bin/python3.10",
            "-c",
            "import os; os.environ['NCCL_DEBUG'] = 'INFO'",
        ],
        NAMES,
        None,
        None,
        f,
    )
    assert r.found == [("NCCL_NET", "IB"), ("NCCL_DEBUG", "INFO")] and r.unread == []
    r = reader.read(
        ["/opt/conda/bin/bash", "-c", "export NCCL_NET=IB; /opt/conda/bin/env torchrun t.py"], NAMES, None, None, f
    )
    assert r.found == [("NCCL_NET", "IB")] and r.unread == []


def test_without_files_nothing_is_looked_up_and_a_path_program_is_an_unknown_program():
    assert argv("/opt/entry.sh", "bash", "-c", "export NCCL_NET=IB; torchrun t.py") == [("NCCL_NET", "IB")]
    assert argv("/usr/local/bin/torchrun", "--nproc_per_node=8", "train.py", env={}) == []
    assert reader.read(["bash", "-c", "export NCCL_NET=IB; source /scripts/env.sh; torchrun t.py"], NAMES).found == [
        ("NCCL_NET", "IB")
    ]


def test_the_files_are_asked_only_what_the_reading_needs():
    f = Asked(files(run_sh="export NCCL_NET=IB\ntorchrun t.py"))
    r = reader.read(["bash", "-c", "bash /scripts/run.sh"], NAMES, None, None, f)
    assert r.found == [("NCCL_NET", "IB")]
    assert f.lookups == ["/scripts/run.sh"]
    assert f.mentions == ["bash\0-c\0bash /scripts/run.sh", "bash /scripts/run.sh"]


def test_a_command_that_mentions_no_name_and_no_file_is_not_read():
    f = Asked(files(run_sh="export NCCL_NET=IB"))
    r = reader.read(["python", "train.py", "--lr", "0.1"], NAMES, None, None, f)
    assert (r.found, r.origins, r.unread) == ([], {}, [])
    assert f.lookups == [] and f.mentions == ["python\0train.py\0--lr\x000.1"]
    assert reader._READ == {}
    r = reader.read("python train.py", NAMES)
    assert (r.found, r.origins, r.unread) == ([], {}, [])


# -- the remembered reading --------------------------------------------------------------------------


def test_a_reading_is_remembered_with_the_env_values_it_used_and_reused_only_while_they_hold():
    command = ["bash", "-c", "export NCCL_IB_HCA=$HCA; mpirun -x NCCL_NET python train.py"]
    first = Env(HCA="mlx5_0", NCCL_NET="IB")
    assert reader.settings(command, NAMES, first) == [("NCCL_IB_HCA", "mlx5_0"), ("NCCL_NET", "IB")]
    key = (False, "\0".join(command), NAMES, False)
    assert list(reader._READ) == [key]
    deps, file_deps, was = reader._READ[key]
    assert deps == (("HCA", "mlx5_0"), ("NCCL_NET", "IB")) and file_deps == ()
    assert was.found == [("NCCL_IB_HCA", "mlx5_0"), ("NCCL_NET", "IB")]
    # the same values: reused (the env is only asked for the dependencies)
    again = Env(HCA="mlx5_0", NCCL_NET="IB")
    assert reader.settings(command, NAMES, again) == [("NCCL_IB_HCA", "mlx5_0"), ("NCCL_NET", "IB")]
    assert again.asked == ["HCA", "NCCL_NET"]
    # another value of either: read again
    assert reader.settings(command, NAMES, Env(HCA="mlx5_1", NCCL_NET="IB")) == [
        ("NCCL_IB_HCA", "mlx5_1"),
        ("NCCL_NET", "IB"),
    ]
    assert reader.settings(command, NAMES, Env(HCA="mlx5_1", NCCL_NET="Socket")) == [
        ("NCCL_IB_HCA", "mlx5_1"),
        ("NCCL_NET", "Socket"),
    ]


def test_a_reused_reading_is_a_copy():
    command = ["bash", "-c", "export NCCL_NET=IB; torchrun t.py"]
    f = files(x_sh="true")
    r = reader.read(command, NAMES, None, None, f)
    r.found.append(("NCCL_DEBUG", "x"))
    r.origins[("NCCL_DEBUG", "x")] = "y"
    r.unread.append(("a", "b"))
    again = reader.read(command, NAMES, None, None, f)
    assert (again.found, again.origins, again.unread) == ([("NCCL_NET", "IB")], {}, [])
    again.found.append(("NCCL_DEBUG", "x"))
    again.origins[("NCCL_DEBUG", "x")] = "y"
    again.unread.append(("a", "b"))
    third = reader.read(command, NAMES, None, None, f)
    assert (third.found, third.origins, third.unread) == ([("NCCL_NET", "IB")], {}, [])


def test_the_key_tells_a_script_from_an_argv_names_and_files():
    # the same text as a script and as a one-word argv
    script = "NCCL_NET=IB torchrun t.py"
    assert reader.settings(script, NAMES) == [("NCCL_NET", "IB")]
    assert reader.settings([script], NAMES) == []  # a program named so: not found, nothing started
    assert reader.settings(script, frozenset({"NCCL_NET", "NCCL_DEBUG"})) == [("NCCL_NET", "IB")]
    assert reader.settings(script, frozenset({"NCCL_DEBUG", "NCCL_NET"} - {"NCCL_NET"})) == []
    assert set(reader._READ) == {
        (True, script, NAMES, False),
        (False, script, NAMES, False),
        (True, script, frozenset({"NCCL_NET", "NCCL_DEBUG"}), False),
    }
    f = files(x_sh="true")
    assert reader.read(script, NAMES, None, None, f).found == [("NCCL_NET", "IB")]
    assert (True, script, NAMES, True) in reader._READ


def test_a_remembered_reading_with_files_is_reused_while_they_answer_the_same():
    command = ["bash", "-c", "[ -f /scripts/env.sh ] && . /scripts/env.sh; torchrun t.py"]
    a = files(env_sh="export NCCL_NET=IB")
    assert reader.read(command, NAMES, None, None, a).found == [("NCCL_NET", "IB")]
    ((deps, file_deps, _),) = reader._READ.values()
    assert deps == () and file_deps == (
        (False, "[ -f /scripts/env.sh ] && . /scripts/env.sh; torchrun t.py", True),
        (True, "/scripts/env.sh", ("export NCCL_NET=IB", "train-scripts")),
    )
    same = Asked(files(env_sh="export NCCL_NET=IB"))
    assert reader.read(command, NAMES, None, None, same).found == [("NCCL_NET", "IB")]
    assert same.lookups == ["/scripts/env.sh"]
    other = files(env_sh="export NCCL_NET=Socket")
    assert reader.read(command, NAMES, None, None, other).found == [("NCCL_NET", "Socket")]
    gone = Files()
    gone.add_file("/scripts/env.sh", None, "train-scripts")
    r = reader.read(command, NAMES, None, None, gone)
    assert r.found == [] and r.unread == [("/scripts/env.sh", "train-scripts")]


def test_the_mentioned_answer_is_a_dependency_too():
    command = ["bash", "-c", "export NCCL_DEBUG=INFO; bash run.sh"]
    here = Files("/scripts")
    here.add_file("/scripts/run.sh", "export NCCL_NET=IB; torchrun t.py", "cm")
    assert reader.read(command, NAMES, None, None, here).found == [("NCCL_DEBUG", "INFO"), ("NCCL_NET", "IB")]
    elsewhere = Files("/data")
    elsewhere.add_file("/scripts/run.sh", "export NCCL_NET=IB; torchrun t.py", "cm")
    assert reader.read(command, NAMES, None, None, elsewhere).found == [("NCCL_DEBUG", "INFO")]


def test_a_reading_cut_short_by_the_budget_or_too_long_is_not_remembered():
    script = "export NCCL_NET=IB; torchrun t.py"
    assert reader.read(["bash", "-c", script], NAMES, None, Budget(steps=0)).found == [("NCCL_NET", "IB")]
    assert reader._READ == {}
    assert reader.read(["bash", "-c", script], NAMES, None, Budget(parse_bytes=3)).found == [("NCCL_NET", "IB")]
    assert reader._READ == {}
    pad = "#" * (MAX_PARSED - len(script) - 1)
    exact = script + "\n" + pad
    assert len(exact) == MAX_PARSED
    assert reader.read(exact, NAMES, None, Budget(parse_bytes=10**6)).found == [("NCCL_NET", "IB")]
    assert list(reader._READ) == [(True, exact, NAMES, False)]
    longer = exact + "#"
    assert reader.read(longer, NAMES, None, Budget(parse_bytes=10**6)).found == [("NCCL_NET", "IB")]
    assert list(reader._READ) == [(True, exact, NAMES, False)]


def test_the_remembered_readings_are_emptied_when_full():
    for i in range(CACHE_MAX - 1):
        reader.settings(f"export NCCL_DEBUG=INFO; sleep {i}", NAMES)
    assert len(reader._READ) == CACHE_MAX - 1
    reader.settings("export NCCL_DEBUG=INFO; sleep x", NAMES)
    assert len(reader._READ) == CACHE_MAX
    reader.settings("export NCCL_NET=IB; torchrun t.py", NAMES)
    assert list(reader._READ) == [(True, "export NCCL_NET=IB; torchrun t.py", NAMES, False)]


# -- the budget ----------------------------------------------------------------------------------------

SPEND = (
    "export NCCL_IB_HCA=mlx5_0\n"
    "if [ -e /dev/infiniband ]; then export NCCL_NET=IB; fi\n"
    "(cd /w; torchrun a.py)\n"
    "N=$(nproc) torchrun b.py"
)


def test_the_steps_and_bytes_a_reading_spends():
    # bash 1 (a process: 1 + its 0 variables); the script's 4 items 4; the branch 2 x 1 variable and
    # its 1 item; the subshell 2 variables, its 2 items, torchrun a.py 1 + 2; the substitution 2
    # variables, its 1 item, nproc 1 + 2; torchrun b.py 1 + 3 (N as well): 25
    budget = Budget()
    assert reader.read(["bash", "-c", SPEND], NAMES, None, budget).found == [
        ("NCCL_IB_HCA", "mlx5_0"),
        ("NCCL_NET", "IB"),
    ]
    assert budget.steps == 200_000 - 25
    assert budget.parse_bytes == 64 * 1024 - len(SPEND)
    # mpirun 1; bash 1 + 1 (the ranks' NCCL_NET); the script's 1 item; python 1 + 2: 7, with the top bash 2 more
    budget = Budget()
    script = "mpirun -np 2 -x NCCL_NET=IB bash -c 'NCCL_DEBUG=INFO python t.py'"
    assert reader.read(["bash", "-c", script], NAMES, None, budget).found == [
        ("NCCL_NET", "IB"),
        ("NCCL_DEBUG", "INFO"),
    ]
    assert budget.steps == 200_000 - 9
    assert budget.parse_bytes == 64 * 1024 - len(script) - len("NCCL_DEBUG=INFO python t.py")


BOUNDARY = "echo NCCL_NET=Socket; export NCCL_NET=IB; torchrun t.py"  # bash 1, 3 items, torchrun 2: 6 steps


def test_the_step_budget_is_exact():
    exact = Budget(steps=6)
    assert reader.read(["bash", "-c", BOUNDARY], NAMES, None, exact).found == [("NCCL_NET", "IB")]
    assert exact.steps == 0 and len(reader._READ) == 1
    reader._READ.clear()
    short = Budget(steps=5)
    r = reader.read(["bash", "-c", BOUNDARY], NAMES, None, short)
    # cut short: the textual reading of the whole command, the echo's text included
    assert r.found == [("NCCL_NET", "Socket"), ("NCCL_NET", "IB")] and r.origins == {} and r.unread == []
    assert short.steps == -1 and reader._READ == {}


def test_a_cut_reading_keeps_the_scripts_it_could_not_read():
    f = Files()
    f.add_file("/scripts/a.sh", None, "cm-a")
    r = reader.read(
        ["bash", "-c", "bash /scripts/a.sh; echo NCCL_NET=Socket; export NCCL_NET=IB; torchrun t.py"],
        NAMES,
        None,
        Budget(steps=6),
        f,
    )
    assert r.found == [("NCCL_NET", "Socket"), ("NCCL_NET", "IB")] and r.unread == [("/scripts/a.sh", "cm-a")]


def test_the_parse_budget_is_exact_and_a_script_past_it_gets_the_textual_reading():
    exact = Budget(parse_bytes=len(BOUNDARY))
    assert reader.read(["bash", "-c", BOUNDARY], NAMES, None, exact).found == [("NCCL_NET", "IB")]
    assert exact.parse_bytes == 0 and len(reader._READ) == 1
    reader._READ.clear()
    shell.PARSED.clear()
    short = Budget(parse_bytes=len(BOUNDARY) - 1)
    assert reader.read(["bash", "-c", BOUNDARY], NAMES, None, short).found == [
        ("NCCL_NET", "Socket"),
        ("NCCL_NET", "IB"),
    ]
    assert short.parse_bytes == len(BOUNDARY) - 1 and reader._READ == {}
    assert BOUNDARY not in shell.PARSED


def test_a_script_parsed_before_costs_no_parse_bytes():
    shell.parse_script(BOUNDARY)
    budget = Budget(parse_bytes=0)
    assert reader.read(["bash", "-c", BOUNDARY], NAMES, None, budget).found == [("NCCL_NET", "IB")]
    assert budget.parse_bytes == 0


def test_a_script_known_unreadable_is_not_parsed_again():
    bad = 'echo "x\nexport NCCL_NET=Socket\ntorchrun t.py'
    assert shell.parse_script(bad) is None
    budget = Budget()
    assert reader.read(["bash", "-c", bad], NAMES, None, budget).found == [("NCCL_NET", "Socket")]
    assert budget.parse_bytes == 64 * 1024


# -- values: expansion, the container env, what is not known ------------------------------------------


@pytest.mark.parametrize(
    "script, env, expected",
    [
        ("H=mlx5; export NCCL_IB_HCA=${H}_0,${H}_1; torchrun t.py", {}, [("NCCL_IB_HCA", "mlx5_0,mlx5_1")]),
        ("export NCCL_IB_HCA=$HCA; torchrun t.py", {"HCA": "mlx5_2"}, [("NCCL_IB_HCA", "mlx5_2")]),
        ("export NCCL_IB_HCA=$HCA; torchrun t.py", {}, []),  # neither the script nor the env knows it
        ("export NCCL_IB_HCA=$(ls /sys/class/infiniband | head -1); torchrun t.py", {}, []),
        ("export NCCL_IB_HCA=mlx5_$(cat /rank); torchrun t.py", {}, []),
        ("export NCCL_IB_HCA=${HCA:-mlx5_0}; torchrun t.py", {"HCA": "x"}, []),  # not followed
        # one known value: a branch leaves two, then it is not known
        ("if [ $R = 0 ]; then H=mlx5_0; else H=mlx5_1; fi; export NCCL_IB_HCA=$H; torchrun t.py", {}, []),
        (
            "H=mlx5_0; if [ $R = 0 ]; then H=mlx5_0; fi; export NCCL_IB_HCA=$H; torchrun t.py",
            {},
            [("NCCL_IB_HCA", "mlx5_0")],
        ),
        ("H=mlx5_0; if [ $R = 0 ]; then H=mlx5_1; fi; export NCCL_IB_HCA=$H; torchrun t.py", {}, []),
        # a branch that may not run keeps the inherited value possible: not known
        ("if [ $R = 0 ]; then H=mlx5_1; fi; export NCCL_IB_HCA=$H; torchrun t.py", {"H": "mlx5_1"}, []),
        ("unset H; export NCCL_IB_HCA=${H}x; torchrun t.py", {"H": "mlx5_1"}, []),
        # env -i: nothing inherited
        ("env -i bash -c 'export NCCL_IB_HCA=$HCA; torchrun t.py'", {"HCA": "mlx5_0"}, []),
        (
            "env -i HCA=mlx5_3 bash -c 'export NCCL_IB_HCA=$HCA; torchrun t.py'",
            {"HCA": "mlx5_0"},
            [("NCCL_IB_HCA", "mlx5_3")],
        ),
        (
            "env HCA=mlx5_3 bash -c 'export NCCL_IB_HCA=$HCA; torchrun t.py'",
            {"HCA": "mlx5_0"},
            [("NCCL_IB_HCA", "mlx5_3")],
        ),
        ("env bash -c 'export NCCL_IB_HCA=$HCA; torchrun t.py'", {"HCA": "mlx5_0"}, [("NCCL_IB_HCA", "mlx5_0")]),
    ],
)
def test_values(script, env, expected):
    assert seen(script, **env) == expected


def test_a_value_up_to_the_limit_is_known_and_one_longer_is_not():
    half = "x" * (record._MAX_VALUE // 2)
    assert seen(f"H={half}; NCCL_IB_HCA=$H$H torchrun t.py") == [("NCCL_IB_HCA", half * 2)]
    assert seen(f"H={half}; NCCL_IB_HCA=$H${{H}}y torchrun t.py") == []
    # the limit is on the whole word: `export NAME=` counts
    assert seen(f"H={half[:-6]}; export NCCL_IB_HCA=$H$H; torchrun t.py") == [("NCCL_IB_HCA", half[:-6] * 2)]
    assert seen(f"H={half[:-6]}; export NCCL_IB_HCA=$H${{H}}y; torchrun t.py") == []
    # a word with no expansion is kept as written, whatever its length
    assert seen(f"NCCL_IB_HCA={half}{half}y torchrun t.py") == [("NCCL_IB_HCA", half * 2 + "y")]


def test_the_env_is_asked_once_per_reference_and_not_after_env_i():
    env = Env(HCA="mlx5_0")
    assert reader.settings(["bash", "-c", "export NCCL_IB_HCA=$HCA; torchrun t.py"], NAMES, env) == [
        ("NCCL_IB_HCA", "mlx5_0")
    ]
    assert env.asked == ["HCA"]
    env = Env(HCA="mlx5_0")
    assert reader.settings(["env", "-i", "bash", "-c", "export NCCL_IB_HCA=$HCA; torchrun t.py"], NAMES, env) == []
    assert env.asked == []


# -- assignments: which later processes see them ----------------------------------------------------


@pytest.mark.parametrize(
    "script, env, expected",
    [
        # a plain assignment of an asked name: the policy may export it, counted
        ("NCCL_NET=Socket\ntorchrun t.py", {}, [("NCCL_NET", "Socket")]),
        # another variable: seen by a child shell only when exported
        ("H=mlx5_0; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'", {}, []),
        ("export H; H=mlx5_0; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'", {}, [("NCCL_IB_HCA", "mlx5_0")]),
        ("H=mlx5_0; export H; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'", {}, [("NCCL_IB_HCA", "mlx5_0")]),
        (
            "H=mlx5_0; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'",
            {"H": "mlx5_9"},
            [("NCCL_IB_HCA", "mlx5_0")],
        ),  # in the env: exported
        ("set -a; H=mlx5_0; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'", {}, [("NCCL_IB_HCA", "mlx5_0")]),
        ("set -a; set +a; H=mlx5_0; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'", {}, []),
        ("set -o allexport; H=mlx5_0; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'", {}, [("NCCL_IB_HCA", "mlx5_0")]),
        ("set -a; set +o allexport; H=mlx5_0; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'", {}, []),
        ("set -euxo pipefail; H=mlx5_0; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'", {}, []),
        ("set -eax; H=mlx5_0; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'", {}, [("NCCL_IB_HCA", "mlx5_0")]),
        ("set --all x; H=mlx5_0; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'", {}, []),  # positional words
        ("set -a; set +x; H=mlx5_0; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'", {}, [("NCCL_IB_HCA", "mlx5_0")]),
        ("set -o errexit; H=mlx5_0; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'", {}, []),
        ("set allexport; H=mlx5_0; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'", {}, []),  # a positional word
        # set -a in a branch may have run: later plain assignments may be exported
        (
            "[ -n \"$DEBUG\" ] && set -a; H=mlx5_0; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'",
            {},
            [("NCCL_IB_HCA", "mlx5_0")],
        ),
        # the last value before the process; a process before it does not see it
        (
            "export NCCL_DEBUG=WARN; torchrun a.py; export NCCL_DEBUG=INFO; export NCCL_DEBUG=TRACE; torchrun b.py",
            {},
            [("NCCL_DEBUG", "WARN"), ("NCCL_DEBUG", "TRACE")],
        ),
        ("export NCCL_DEBUG=INFO", {}, []),
        # a prefix assignment is this process's only
        (
            "NCCL_DEBUG=INFO torchrun a.py; torchrun b.py; H=x NCCL_NET=IB torchrun c.py",
            {},
            [("NCCL_DEBUG", "INFO"), ("NCCL_NET", "IB")],
        ),
        ("NCCL_IB_HCA=$H torchrun a.py", {"H": "mlx5_4"}, [("NCCL_IB_HCA", "mlx5_4")]),
        ("H=mlx5_5 bash -c 'NCCL_IB_HCA=$H torchrun a.py'", {}, [("NCCL_IB_HCA", "mlx5_5")]),
        ("NCCL_DEBUG=INFO printf x; NCCL_NET=IB cd /w; torchrun t.py", {}, []),
    ],
)
def test_assignments(script, env, expected):
    assert seen(script, **env) == expected


# -- declarations --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "script, env, expected",
    [
        (
            "declare -x NCCL_NET=IB $(cat /x) NCCL_DEBUG=INFO; torchrun t.py",
            {},
            [("NCCL_NET", "IB"), ("NCCL_DEBUG", "INFO")],
        ),
        ("declare -x NCCL_NET=IB; torchrun t.py", {}, [("NCCL_NET", "IB")]),
        ("typeset -x NCCL_NET=IB; torchrun t.py", {}, [("NCCL_NET", "IB")]),
        ("readonly NCCL_NET=IB; torchrun t.py", {}, [("NCCL_NET", "IB")]),
        ("local NCCL_NET=IB; torchrun t.py", {}, [("NCCL_NET", "IB")]),
        ("declare -r NCCL_NET=IB; torchrun t.py", {}, [("NCCL_NET", "IB")]),
        # other variables: declare -x exports, declare does not, +x takes the export away
        ("declare -x H=mlx5_0; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'", {}, [("NCCL_IB_HCA", "mlx5_0")]),
        ("declare H=mlx5_0; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'", {}, []),
        ("declare -rx H=mlx5_0; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'", {}, [("NCCL_IB_HCA", "mlx5_0")]),
        ("export H=mlx5_0; declare +x H; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'", {}, []),
        ("export H=mlx5_0; declare +x H=mlx5_1; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'", {}, []),
        ("declare -x H=mlx5_0; export -n H; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'", {}, []),
        ("export NCCL_NET=IB; export -n NCCL_NET; torchrun t.py", {}, []),
        ("export NCCL_NET=IB; declare +x NCCL_NET; torchrun t.py", {}, []),
        ("export -n NCCL_NET=IB; torchrun t.py", {}, []),
        ("declare +x NCCL_NET=IB; torchrun t.py", {}, []),
        # declare's -n is a name reference, no unexport: H stays exported
        (
            "export H=mlx5_0; declare -n H2=H; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'",
            {},
            [("NCCL_IB_HCA", "mlx5_0")],
        ),
        ("export H=mlx5_0; declare -n H=x; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'", {}, [("NCCL_IB_HCA", "x")]),
        # export NAME: the variable's value, the env's own is not the command's
        ("H=mlx5_0; export H; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'", {}, [("NCCL_IB_HCA", "mlx5_0")]),
        ("export NCCL_IB_HCA; torchrun t.py", {"NCCL_IB_HCA": "mlx5_0"}, []),
        ("export H; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'", {"H": "mlx5_7"}, [("NCCL_IB_HCA", "mlx5_7")]),
        ("export H; bash -c 'export NCCL_IB_HCA=${H}x; torchrun t.py'", {}, []),
        ("declare H; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'", {"H": "mlx5_7"}, [("NCCL_IB_HCA", "mlx5_7")]),
        # functions: export -f / declare -f name no variable
        ("export -f NCCL_NET; torchrun t.py", {"NCCL_NET": "IB"}, []),
        ("declare -f NCCL_NET=IB; torchrun t.py", {}, []),
        ("declare -fx NCCL_NET=IB; torchrun t.py", {}, []),
        # names that are no variable names, -p
        ("export 1NCCL_NET=IB NCCL_DEBUG=INFO; torchrun t.py", {}, [("NCCL_DEBUG", "INFO")]),
        ("export -p; export NCCL_DEBUG=INFO; torchrun t.py", {}, [("NCCL_DEBUG", "INFO")]),
        (
            "export NCCL_NET=IB $(cat /etc/extra) NCCL_DEBUG=INFO; torchrun t.py",
            {},
            [("NCCL_NET", "IB"), ("NCCL_DEBUG", "INFO")],
        ),
        # unset: nothing to see, nothing inherited; -f unsets a function; -v and -n a variable
        ("export NCCL_NET=IB; unset NCCL_NET; torchrun t.py", {}, []),
        ("export NCCL_NET=IB; unset -v NCCL_NET; torchrun t.py", {}, []),
        ("export NCCL_NET=IB; unset -n NCCL_NET; torchrun t.py", {}, []),
        ("export NCCL_NET=IB; unset -f NCCL_NET; torchrun t.py", {}, [("NCCL_NET", "IB")]),
        ("export NCCL_NET=IB; unset -f setup NCCL_DEBUG; unset -v NCCL_NET; torchrun t.py", {}, []),
        (
            "export NCCL_NET=IB NCCL_DEBUG=INFO; unset -f setup; unset NCCL_DEBUG; torchrun t.py",
            {},
            [("NCCL_NET", "IB")],
        ),
        ("export NCCL_NET=IB; unset -x NCCL_NET; torchrun t.py", {}, []),
    ],
)
def test_declarations(script, env, expected):
    assert seen(script, **env) == expected


# -- processes: the shells, env, wrappers, what starts no process -------------------------------------


@pytest.mark.parametrize(
    "words, env, expected",
    [
        # bash's options before -c, the script after them
        (["bash", "-lc", "export NCCL_NET=IB; torchrun t.py"], {}, [("NCCL_NET", "IB")]),
        (["/bin/bash", "-l", "-c", "export NCCL_NET=IB; torchrun t.py"], {}, [("NCCL_NET", "IB")]),
        (["bash", "-e", "-o", "pipefail", "-c", "export NCCL_NET=IB; torchrun t.py"], {}, [("NCCL_NET", "IB")]),
        (
            ["bash", "+o", "history", "-O", "extglob", "+O", "nullglob", "-c", "export NCCL_NET=IB; torchrun t.py"],
            {},
            [("NCCL_NET", "IB")],
        ),
        (["bash", "--rcfile", "/etc/rc", "-c", "export NCCL_NET=IB; torchrun t.py"], {}, [("NCCL_NET", "IB")]),
        (["bash", "--init-file", "/etc/rc", "-xc", "export NCCL_NET=IB; torchrun t.py"], {}, [("NCCL_NET", "IB")]),
        (["bash", "--norc", "--noprofile", "-c", "export NCCL_NET=IB; torchrun t.py"], {}, [("NCCL_NET", "IB")]),
        (["sh", "-ec", "export NCCL_NET=IB; torchrun t.py", "sh", "arg"], {}, [("NCCL_NET", "IB")]),
        (["bash", "-c", "--", "export NCCL_NET=IB; torchrun t.py"], {}, [("NCCL_NET", "IB")]),
        (["zsh", "-c", "export NCCL_NET=IB; torchrun t.py"], {}, [("NCCL_NET", "IB")]),
        # no -c: a script file or stdin, out of reach without files: the shell's own view stands
        (["env", "NCCL_DEBUG=INFO", "bash", "/opt/train.sh", "-c"], {}, [("NCCL_DEBUG", "INFO")]),
        (["env", "NCCL_DEBUG=INFO", "bash", "-s"], {}, [("NCCL_DEBUG", "INFO")]),
        (["env", "NCCL_DEBUG=INFO", "bash", "-c"], {}, [("NCCL_DEBUG", "INFO")]),
        (["env", "NCCL_DEBUG=INFO", "bash"], {}, [("NCCL_DEBUG", "INFO")]),
        (["env", "NCCL_DEBUG=INFO", "bash", "--", "export NCCL_NET=IB"], {}, [("NCCL_DEBUG", "INFO")]),
        (["env", "NCCL_DEBUG=INFO", "bash", "-", "export NCCL_NET=IB"], {}, [("NCCL_DEBUG", "INFO")]),
        # a script that does not mention the names: the shell's own view
        (["env", "NCCL_DEBUG=INFO", "bash", "-c", "cd /w && torchrun t.py"], {}, [("NCCL_DEBUG", "INFO")]),
        # env: NAME=value, -i, -u, -C, -S, --
        (["/usr/bin/env", "NCCL_NET=IB", "torchrun", "t.py"], {}, [("NCCL_NET", "IB")]),
        (["env", "-i", "PATH=/usr/bin", "torchrun", "t.py"], {}, []),
        (["env", "--ignore-environment", "bash", "-c", "export NCCL_IB_HCA=$H; torchrun t.py"], {"H": "mlx5_0"}, []),
        (["env", "-", "bash", "-c", "export NCCL_IB_HCA=$H; torchrun t.py"], {"H": "mlx5_0"}, []),
        (
            ["env", "-0", "bash", "-c", "export NCCL_IB_HCA=$H; torchrun t.py"],
            {"H": "mlx5_0"},
            [("NCCL_IB_HCA", "mlx5_0")],
        ),
        (["env", "NCCL_NET=IB", "-i", "NCCL_DEBUG=INFO", "torchrun", "t.py"], {}, [("NCCL_DEBUG", "INFO")]),
        (["env", "NCCL_NET=IB", "-u", "NCCL_NET", "torchrun", "t.py"], {}, []),
        (
            ["env", "NCCL_NET=IB", "--unset", "NCCL_NET", "NCCL_DEBUG=INFO", "torchrun", "t.py"],
            {},
            [("NCCL_DEBUG", "INFO")],
        ),
        (["env", "NCCL_NET=IB", "--unset=NCCL_NET", "torchrun", "t.py"], {}, []),
        (["env", "NCCL_NET=IB", "-uNCCL_NET", "torchrun", "t.py"], {}, []),
        (["env", "NCCL_NET=IB", "-u"], {}, []),
        (["env", "-u", "H", "bash", "-c", "export NCCL_IB_HCA=$H; torchrun t.py"], {"H": "mlx5_0"}, []),
        (["env", "-C", "/workspace", "NCCL_NET=IB", "torchrun", "t.py"], {}, [("NCCL_NET", "IB")]),
        (["env", "--chdir", "/workspace", "NCCL_NET=IB", "torchrun", "t.py"], {}, [("NCCL_NET", "IB")]),
        (["env", "-S", "NCCL_NET=IB torchrun", "t.py"], {}, [("NCCL_NET", "IB")]),
        (
            ["env", "--split-string", "NCCL_NET=IB NCCL_DEBUG=INFO", "torchrun", "t.py"],
            {},
            [("NCCL_NET", "IB"), ("NCCL_DEBUG", "INFO")],
        ),
        (["env", "--split-string=NCCL_NET='IB' torchrun", "t.py"], {}, [("NCCL_NET", "IB")]),
        (["env", "-SNCCL_NET=IB torchrun", "t.py"], {}, [("NCCL_NET", "IB")]),
        (["env", "-S", "-u NCCL_NET torchrun", "t.py"], {}, []),
        (["env", "-S", "NCCL_NET='IB torchrun", "t.py"], {}, []),  # shlex cannot split it: env fails
        (["env", "-S"], {}, []),
        (
            ["env", "NCCL_NET=IB", "-S", "NCCL_DEBUG=INFO", "-S", "NCCL_IB_HCA=mlx5_0 torchrun", "t.py"],
            {},
            [("NCCL_NET", "IB"), ("NCCL_DEBUG", "INFO"), ("NCCL_IB_HCA", "mlx5_0")],
        ),
        (["env", "--", "NCCL_NET=IB", "torchrun", "t.py"], {}, []),  # after --, the program
        (["env", "-v", "--debug", "NCCL_NET=IB", "torchrun", "t.py"], {}, [("NCCL_NET", "IB")]),
        (["env", "1NCCL_NET=IB", "torchrun", "t.py"], {}, []),  # no name: the program
        (["env", "NCCL_NET=IB"], {}, []),  # env prints the environment: no process of ours
        (["env", "NCCL_NET=a=b", "torchrun", "t.py"], {}, [("NCCL_NET", "a=b")]),
        # wrappers: read on from the first later word that is a program known here
        (["tini", "-g", "--", "env", "NCCL_NET=IB", "torchrun", "t.py"], {}, [("NCCL_NET", "IB")]),
        (
            ["timeout", "3600", "torchrun", "python", "-c", "import os; os.environ['NCCL_NET'] = 'IB'"],
            {},
            [("NCCL_NET", "IB")],
        ),
        (["nohup", "mpirun", "-x", "NCCL_NET=IB", "a.out"], {}, [("NCCL_NET", "IB")]),
        (["dumb-init", "/bin/sh", "-c", "export NCCL_NET=IB; torchrun t.py"], {}, [("NCCL_NET", "IB")]),
        (["accelerate", "launch", "--config_file", "c.yaml", "t.py"], {}, []),
        (["deepspeed", "--num_gpus", "8", "--env", "-", "t.py", "NCCL_NET=IB"], {}, []),
        (
            ["torchrun", "--no-python", "/usr/bin/python3.11", "-c", "import os; os.environ['NCCL_NET'] = 'IB'"],
            {},
            [("NCCL_NET", "IB")],
        ),
        # builtins and plain programs start nothing of ours: their arguments are data
        (["echo", "bash", "-c", "export NCCL_NET=IB; torchrun t.py"], {}, []),
        (["/bin/sleep", "infinity", "env", "NCCL_NET=IB", "torchrun"], {}, []),
    ],
)
def test_processes(words, env, expected):
    assert argv(*words, env=env) == expected


@pytest.mark.parametrize(
    "script, env, expected",
    [
        # words not known here ($(...)): a shell script not known, an env or launcher word, a program
        ("env NCCL_DEBUG=INFO bash -c $(cat /etc/cmd)", {}, [("NCCL_DEBUG", "INFO")]),
        (
            "env NCCL_DEBUG=INFO bash $(cat /etc/opt) -c 'export NCCL_NET=IB; torchrun t.py'",
            {},
            [("NCCL_DEBUG", "INFO")],
        ),
        ("env NCCL_NET=IB -u $(cat /etc/name) torchrun t.py", {}, [("NCCL_NET", "IB")]),
        ("env NCCL_NET=IB $(cat /etc/name) torchrun t.py", {}, []),
        (
            "horovodrun -np 4 $(cat /etc/x) python -c \"import os; os.environ['NCCL_NET'] = 'IB'\"",
            {},
            [("NCCL_NET", "IB")],
        ),
        ("$(cat /etc/cmd) env NCCL_NET=IB torchrun t.py", {}, []),
        ("NCCL_DEBUG=INFO $(cat /etc/cmd) env NCCL_NET=IB torchrun t.py", {}, [("NCCL_DEBUG", "INFO")]),
        ("mpiexec.hydra -genv $(cat /n) IB ./a.out", {}, []),
        ("mpiexec.hydra -genv NCCL_NET $(cat /v) ./a.out", {}, []),
        ("mpirun -genv $(cat /n) IB -x NCCL_DEBUG=INFO ./a.out", {}, [("NCCL_DEBUG", "INFO")]),
        ("mpiexec.hydra -envlist $(cat /n) ./a.out", {"NCCL_NET": "IB"}, []),
        ("mpirun --mca mca_base_env_list $(cat /l) -x NCCL_DEBUG=INFO a.out", {}, [("NCCL_DEBUG", "INFO")]),
        ("mpirun --mca $(cat /k) NCCL_NET=IB -x NCCL_DEBUG=INFO a.out", {}, [("NCCL_DEBUG", "INFO")]),
        ("mpirun -np 2 $(cat /x) -x NCCL_NET=IB a.out", {}, [("NCCL_NET", "IB")]),
        ("mpirun -x NCCL_DEBUG=INFO -x $(cat /x) a.out", {}, [("NCCL_DEBUG", "INFO")]),
        ("python -c $(cat /code)", {}, []),
        ("python $(cat /f) -c \"import os; os.environ['NCCL_NET'] = 'IB'\"", {}, []),
        ("exec $(cat /f) env NCCL_NET=IB torchrun t.py", {}, []),
        ("NCCL_DEBUG=INFO exec $(cat /f) env NCCL_NET=IB torchrun t.py", {}, [("NCCL_DEBUG", "INFO")]),
        ("export NCCL_NET=IB; unset $(cat /n); torchrun t.py", {}, [("NCCL_NET", "IB")]),
    ],
)
def test_words_not_known_here(script, env, expected):
    assert seen(script, **env) == expected


def test_a_wrapper_reports_what_it_sees_and_reads_on_once():
    assert argv("env", "NCCL_DEBUG=INFO", "tini", "--", "bash", "-c", "export NCCL_NET=IB; torchrun t.py") == [
        ("NCCL_DEBUG", "INFO"),
        ("NCCL_NET", "IB"),
    ]
    assert argv(
        "tini", "-e", "143", "--", "mpirun", "-x", "NCCL_NET=IB", "env", "NCCL_DEBUG=INFO", "python", "t.py"
    ) == [("NCCL_NET", "IB"), ("NCCL_DEBUG", "INFO")]


def test_the_process_depth_bound():
    # nested `env` words, each one process deeper: the k-th env runs at depth k - 1; past MAX_DEPTH
    # a process reports what it has without reading its words
    at = ["env"] * (MAX_DEPTH + 1) + ["NCCL_NET=IB", "torchrun", "t.py"]
    assert argv(*at) == [("NCCL_NET", "IB")]
    past = ["env"] * (MAX_DEPTH + 2) + ["NCCL_NET=IB", "torchrun", "t.py"]
    assert argv(*past) == []
    # bash -c at depth k + 1 parses its script at k + 2: within MAX_DEPTH as the shell reads it, one
    # deeper the textual reading (the echo's text too) and the shell's own view, deeper still only the latter
    script = "echo NCCL_DEBUG=TRACE; export NCCL_DEBUG=INFO; torchrun t.py"

    def nested(k):
        return argv("env", "NCCL_NET=IB", *["env"] * k, "bash", "-c", script)

    assert nested(MAX_DEPTH - 2) == [("NCCL_NET", "IB"), ("NCCL_DEBUG", "INFO")]
    assert nested(MAX_DEPTH - 1) == [("NCCL_DEBUG", "TRACE"), ("NCCL_DEBUG", "INFO"), ("NCCL_NET", "IB")]
    assert nested(MAX_DEPTH) == [("NCCL_NET", "IB")]


# -- launchers ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "words, env, expected",
    [
        (
            [
                "mpirun",
                "--allow-run-as-root",
                "-np",
                "16",
                "-x",
                "NCCL_IB_HCA=mlx5_0",
                "-x",
                "NCCL_DEBUG",
                "python",
                "t.py",
            ],
            {"NCCL_DEBUG": "INFO"},
            [("NCCL_IB_HCA", "mlx5_0"), ("NCCL_DEBUG", "INFO")],
        ),
        (["mpirun", "-x", "NCCL_DEBUG", "python", "t.py"], {}, []),  # forwarded, no value known
        (["mpirun", "--x", "NCCL_NET=IB", "a.out"], {}, [("NCCL_NET", "IB")]),
        (["mpiexec.hydra", "-genv", "NCCL_NET", "IB", "-n", "8", "./a.out"], {}, [("NCCL_NET", "IB")]),
        (["mpiexec.hydra", "-genv", "NCCL_NET=IB", "-n", "8", "./a.out"], {}, [("NCCL_NET", "IB")]),
        (["mpiexec.hydra", "-env", "NCCL_NET", "IB", "./a.out"], {}, [("NCCL_NET", "IB")]),
        (["mpiexec.hydra", "-genv", "NCCL_NET"], {}, []),
        (["mpiexec.hydra", "-genv", "NCCL_NET", "IB"], {}, [("NCCL_NET", "IB")]),
        (["mpiexec.hydra", "-genv", "NCCL_NET=IB"], {}, [("NCCL_NET", "IB")]),
        (["mpirun", "-x", "NCCL_NET=IB"], {}, [("NCCL_NET", "IB")]),
        (["mpirun", "-x"], {}, []),
        (
            ["mpirun", "-genvlist", "NCCL_NET, NCCL_DEBUG", "./a.out"],
            {"NCCL_NET": "IB", "NCCL_DEBUG": "WARN"},
            [("NCCL_NET", "IB"), ("NCCL_DEBUG", "WARN")],
        ),
        (["mpiexec.hydra", "-envlist", "NCCL_NET", "./a.out"], {"NCCL_NET": "IB"}, [("NCCL_NET", "IB")]),
        (["mpiexec.hydra", "-envlist", "NCCL_NET"], {"NCCL_NET": "IB"}, [("NCCL_NET", "IB")]),
        (["mpiexec.hydra", "-envlist"], {"NCCL_NET": "IB"}, []),
        (
            ["mpirun", "--mca", "mca_base_env_list", "NCCL_NET=IB; NCCL_DEBUG", "python", "t.py"],
            {"NCCL_DEBUG": "WARN"},
            [("NCCL_NET", "IB"), ("NCCL_DEBUG", "WARN")],
        ),
        (["mpirun", "-mca", "mca_base_env_list", "NCCL_NET=IB"], {}, [("NCCL_NET", "IB")]),
        (["mpirun", "-mca", "mca_base_env_list", "NCCL_NET=IB", "a.out"], {}, [("NCCL_NET", "IB")]),
        (["mpirun", "--mca", "btl", "NCCL_NET=IB", "-x", "NCCL_DEBUG=INFO", "a.out"], {}, [("NCCL_DEBUG", "INFO")]),
        (["mpirun", "--mca", "mca_base_env_list"], {}, []),
        # an argument flag's value is no program, --flag=value takes none
        (["mpirun", "-np", "bash", "-x", "NCCL_NET=IB", "a.out"], {}, [("NCCL_NET", "IB")]),
        (["mpirun", "--host=a,b", "env", "NCCL_NET=IB", "a.out"], {}, [("NCCL_NET", "IB")]),
        (["mpirun", "--map-by=ppr:8:node", "-x", "NCCL_NET=IB", "a.out"], {}, [("NCCL_NET", "IB")]),
        (["mpirun", "--bind-to", "none", "--report-bindings", "-x", "NCCL_NET=IB", "a.out"], {}, [("NCCL_NET", "IB")]),
        # the program of each argument set, read as any command with the ranks' environment
        (
            ["mpirun", "-np", "8", "-x", "NCCL_NET=IB", "bash", "-c", "export NCCL_DEBUG=INFO; python t.py"],
            {},
            [("NCCL_NET", "IB"), ("NCCL_DEBUG", "INFO")],
        ),
        (
            ["mpirun", "-np", "8", "-x", "NCCL_NET=IB", "bash", "-c", "unset NCCL_NET; python t.py"],
            {},
            [("NCCL_NET", "IB")],
        ),
        (
            ["mpirun", "-np", "8", "env", "NCCL_NET=IB", "a.out", ":", "-np", "1", "env", "NCCL_DEBUG=INFO", "b.out"],
            {},
            [("NCCL_NET", "IB"), ("NCCL_DEBUG", "INFO")],
        ),
        (
            ["mpirun", "-np", "8", "a.out", ":", "-np", "1", "-x", "NCCL_DEBUG=INFO", "b.out"],
            {},
            [("NCCL_DEBUG", "INFO")],
        ),
        (["mpirun", ":", "-x", "NCCL_DEBUG=INFO"], {}, [("NCCL_DEBUG", "INFO")]),
        # the first set's program does not see the second set's flags' assignment made later
        (
            ["mpirun", "-np", "1", "env", "NCCL_NET=IB", "a.out", ":", "env", "-u", "NCCL_NET", "b.out"],
            {},
            [("NCCL_NET", "IB")],
        ),
        # the launcher's flags set values even for a program not known
        (
            ["mpiexec", "-n", "2", "-genv", "NCCL_IB_HCA", "mlx5_0", "/opt/bench/all_reduce_perf", "-b", "8"],
            {},
            [("NCCL_IB_HCA", "mlx5_0")],
        ),
    ],
)
def test_launchers(words, env, expected):
    assert argv(*words, env=env) == expected


def test_a_forwarded_name_takes_the_launchers_value_at_that_point():
    assert seen("export NCCL_IB_HCA=mlx5_0; mpirun -x NCCL_IB_HCA python t.py", NCCL_IB_HCA="mlx5_9") == [
        ("NCCL_IB_HCA", "mlx5_0")
    ]
    # after a branch: each value the launcher may have, the inherited one taken from the env
    # (the launcher itself sees the script's own value first: mlx5_0; the ranks the env's as well)
    assert seen(
        "[ -n \"$R\" ] && export NCCL_IB_HCA=mlx5_0; mpirun -x NCCL_IB_HCA python t.py", NCCL_IB_HCA="mlx5_9"
    ) == [("NCCL_IB_HCA", "mlx5_0"), ("NCCL_IB_HCA", "mlx5_9")]
    assert seen("[ -n \"$R\" ] && export NCCL_IB_HCA=mlx5_0; mpirun -x NCCL_IB_HCA python t.py") == [
        ("NCCL_IB_HCA", "mlx5_0")
    ]
    assert seen("mpirun -genvlist NCCL_IB_HCA,NCCL_NET -x NCCL_DEBUG=INFO python t.py", NCCL_NET="IB") == [
        ("NCCL_NET", "IB"),
        ("NCCL_DEBUG", "INFO"),
    ]
    # env -i before the launcher: the env's value is gone too
    assert seen("env -i mpirun -x NCCL_IB_HCA python t.py", NCCL_IB_HCA="mlx5_9") == []


def test_the_launcher_flags_are_the_ranks_not_the_launchers():
    # a -x flag's value is not the launcher's own: an assignment in the ranks' program sees it
    assert argv("mpirun", "-x", "H=mlx5_3", "bash", "-c", "export NCCL_IB_HCA=$H; python t.py") == [
        ("NCCL_IB_HCA", "mlx5_3")
    ]
    # the ranks see the launcher's exported values as well
    assert seen("export H=mlx5_4; mpirun -np 2 bash -c 'export NCCL_IB_HCA=$H; python t.py'") == [
        ("NCCL_IB_HCA", "mlx5_4")
    ]
    # a later -x after the program's words belongs to the program, not the launcher
    assert argv("mpirun", "python", "t.py", "-x", "NCCL_NET=IB") == []
    # a -x of one argument set is not the next set's... they share the launcher's list here
    assert argv("mpirun", "-x", "NCCL_NET=IB", "a.out", ":", "bash", "-c", "export NCCL_DEBUG=$NCCL_NET; b") == [
        ("NCCL_NET", "IB"),
        ("NCCL_DEBUG", "IB"),
    ]


# -- python ----------------------------------------------------------------------------------------------

SET_NET = "import os; os.environ['NCCL_NET'] = 'IB'"


@pytest.mark.parametrize(
    "words, expected",
    [
        (["python", "-c", SET_NET], [("NCCL_NET", "IB")]),
        (["python3", "-u", "-B", "-c", SET_NET], [("NCCL_NET", "IB")]),
        (["python3.10", "-uc", SET_NET], [("NCCL_NET", "IB")]),
        (["python", "-c" + SET_NET], [("NCCL_NET", "IB")]),
        (["python", "-uc" + SET_NET], [("NCCL_NET", "IB")]),
        (["python", "-Bcimport os; os.environ['NCCL_NET'] = 'IB'"], [("NCCL_NET", "IB")]),
        (["python", "-W", "ignore", "-c", SET_NET], [("NCCL_NET", "IB")]),
        (["python", "-X", "faulthandler", "-c", SET_NET], [("NCCL_NET", "IB")]),
        (["python", "--check-hash-based-pycs", "never", "-c", SET_NET], [("NCCL_NET", "IB")]),
        (["python", "-Wignore", "-Xdev", "-c", SET_NET], [("NCCL_NET", "IB")]),
        (["python", "--version", "-c", SET_NET], [("NCCL_NET", "IB")]),
        (["python", "-c"], []),
        (["python", "-c", "import os; os.environ['MASTER_PORT'] = 'NCCL_NET'"], []),
        (["python", "-m", "torch.distributed.run", "-c", SET_NET], []),
        (["python", "-mtorch.distributed.run", "-c", SET_NET], []),
        (["python", "-", "-c", SET_NET], []),
        (["python", "train.py", "-c", SET_NET], []),
        (["python", "-u", "train.py", "-c", SET_NET], []),
        (["python", "-I", "-E", "-s", "-S", "-c", SET_NET], [("NCCL_NET", "IB")]),
    ],
)
def test_python(words, expected):
    assert argv(*words) == expected


def test_python_sees_the_exports_and_a_configmap_file_is_read():
    assert seen(f"export NCCL_DEBUG=INFO; python -c \"{SET_NET}\"") == [("NCCL_DEBUG", "INFO"), ("NCCL_NET", "IB")]
    f = files(train_py="import os\nos.environ['NCCL_IB_HCA'] = 'mlx5_0'\n")
    r = reader.read(["python", "-u", "-X", "dev", "/scripts/train.py", "--epochs", "3"], NAMES, None, None, f)
    assert r.found == [("NCCL_IB_HCA", "mlx5_0")] and r.origins == {("NCCL_IB_HCA", "mlx5_0"): "/scripts/train.py"}
    r = reader.read(["python", "-m", "/scripts/train.py"], NAMES, None, None, f)
    assert r.found == []
    r = reader.read(["python", "-", "/scripts/train.py"], NAMES, None, None, f)
    assert r.found == []
    g = Files()
    g.add_file("/scripts/train.py", None, "cm")
    r = reader.read(["python", "/scripts/train.py"], NAMES, None, None, g)
    assert r.found == [] and r.unread == [("/scripts/train.py", "cm")]


# -- the shell: blocks, commands, eval, exec ----------------------------------------------------------------


@pytest.mark.parametrize(
    "script, expected",
    [
        # a group runs in this shell, a subshell not, a branch may
        ("{ export NCCL_NET=IB; }; torchrun t.py", [("NCCL_NET", "IB")]),
        ("(export NCCL_NET=IB); torchrun t.py", []),
        (
            "export NCCL_NET=Socket; (export NCCL_NET=IB; torchrun a.py); torchrun b.py",
            [("NCCL_NET", "IB"), ("NCCL_NET", "Socket")],
        ),
        (
            "export NCCL_NET=Socket; if [ -e /dev/infiniband ]; then export NCCL_NET=IB; fi; torchrun t.py",
            [("NCCL_NET", "Socket"), ("NCCL_NET", "IB")],
        ),
        (
            "if [ -e /dev/infiniband ]; then export NCCL_NET=IB; else export NCCL_NET=Socket; fi; torchrun t.py",
            [("NCCL_NET", "IB"), ("NCCL_NET", "Socket")],
        ),
        ("for i in 1 2; do export NCCL_DEBUG=INFO; done; torchrun t.py", [("NCCL_DEBUG", "INFO")]),
        (
            "export NCCL_DEBUG=WARN; while false; do export NCCL_DEBUG=INFO; done; torchrun t.py",
            [("NCCL_DEBUG", "WARN"), ("NCCL_DEBUG", "INFO")],
        ),
        # a branch's set -a may be on afterwards
        (
            "if [ -n \"$X\" ]; then set -a; fi; H=mlx5_0; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'",
            [("NCCL_IB_HCA", "mlx5_0")],
        ),
        # a command substitution runs in a subshell with the exports before it
        ("export NCCL_DEBUG=INFO; HOSTS=$(mpirun -np 1 hostname); torchrun t.py", [("NCCL_DEBUG", "INFO")]),
        ("HOSTS=$(NCCL_NET=IB mpirun -np 1 hostname); torchrun t.py", [("NCCL_NET", "IB")]),
        ("X=$(export NCCL_NET=IB); torchrun t.py", []),
        ("torchrun $(export NCCL_NET=IB; echo t.py)", []),
        ("export NCCL_DEBUG=$(NCCL_NET=IB python -c 'print(1)'); torchrun t.py", [("NCCL_NET", "IB")]),
        # exec, command, builtin, nohup, time run the rest as the command, with its prefix assignments
        ("NCCL_NET=IB exec torchrun t.py", [("NCCL_NET", "IB")]),
        ("exec env NCCL_NET=IB torchrun t.py", [("NCCL_NET", "IB")]),
        ("exec -a trainer env NCCL_NET=IB torchrun t.py", [("NCCL_NET", "IB")]),
        ("exec -c env NCCL_NET=IB torchrun t.py", [("NCCL_NET", "IB")]),
        ("command -p env NCCL_NET=IB torchrun t.py", [("NCCL_NET", "IB")]),
        ("builtin export NCCL_NET=IB; torchrun t.py", [("NCCL_NET", "IB")]),
        ("nohup env NCCL_NET=IB torchrun t.py &", [("NCCL_NET", "IB")]),
        ("NCCL_NET=IB nohup", [("NCCL_NET", "IB")]),
        ("exec -l", []),
        ("NCCL_NET=IB command echo x; torchrun t.py", []),
        # eval: its words are a script, read as such
        ("eval 'export NCCL_NET=IB'; torchrun t.py", [("NCCL_NET", "IB")]),
        ("eval export NCCL_NET=IB; torchrun t.py", [("NCCL_NET", "IB")]),
        ("eval 'echo NCCL_NET=Socket'; torchrun t.py", []),
        ("eval \"$(cat /etc/env)\"; torchrun t.py", []),
        (
            "eval echo NCCL_NET=Socket $(hostname); torchrun t.py",
            [("NCCL_NET", "Socket")],
        ),  # not known: the textual reading
        ("eval; torchrun t.py", []),
        ("H=mlx5_0; eval export NCCL_IB_HCA=\\$H; torchrun t.py", [("NCCL_IB_HCA", "mlx5_0")]),
        # set: -a and +a, -o allexport and +o allexport
        ("set -o allexport; set +a; H=x; bash -c 'export NCCL_IB_HCA=$H; t'", []),
        ("set +o allexport -a; H=x; bash -c 'export NCCL_IB_HCA=$H; t'", []),
        ("set -a -o allexport; H=x; bash -c 'export NCCL_IB_HCA=$H; t'", [("NCCL_IB_HCA", "x")]),
        ("set -a; set +ex; H=x; bash -c 'export NCCL_IB_HCA=$H; t'", [("NCCL_IB_HCA", "x")]),
        ("set -a; set +eax; H=x; bash -c 'export NCCL_IB_HCA=$H; t'", []),
        ("set -a; set $UNKNOWN; H=x; bash -c 'export NCCL_IB_HCA=$H; t'", [("NCCL_IB_HCA", "x")]),
        ("set $UNKNOWN -a; H=x; bash -c 'export NCCL_IB_HCA=$H; t'", [("NCCL_IB_HCA", "x")]),
        ("set -a; set $UNKNOWN +a; H=x; bash -c 'export NCCL_IB_HCA=$H; t'", []),
    ],
)
def test_the_shell(script, expected):
    assert seen(script) == expected


def test_eval_nesting_is_bounded():
    # the k-th eval reads its words at depth k; one past MAX_DEPTH is not read
    def evals(k):
        return reader.settings(" ".join(["eval"] * k + ["export", "NCCL_NET=IB"]) + "; torchrun t.py", NAMES)

    assert evals(MAX_DEPTH) == [("NCCL_NET", "IB")]
    assert evals(MAX_DEPTH + 1) == []


def test_a_script_read_at_depth_zero_is_the_container_scripts():
    assert reader.settings("export NCCL_NET=IB\ntorchrun t.py", NAMES) == [("NCCL_NET", "IB")]
    assert reader.settings("echo NCCL_NET=Socket", NAMES) == []
    assert reader.read('echo "x\nexport NCCL_NET=Socket', NAMES).found == [("NCCL_NET", "Socket")]


# -- depth bounds, construct by construct --------------------------------------------------------------


def at_depth(script: str, depth: int) -> list[str] | str:
    """`script` as the reader reaches it at `depth`: a container's script string is read at depth 0
    and `bash -c` as an argv at 1; each `bash -c` around it adds 2."""
    for _ in range(depth // 2):
        script = "bash -c " + shlex.quote(script)
    return ["bash", "-c", script] if depth % 2 else script


ECHO_FILES = Files()
ECHO_FILES.add_file("/s/e.sh", "echo NCCL_NET=Socket; torchrun t.py", "cm")


@pytest.mark.parametrize(
    "script, last, read, past",
    [
        # exec, nohup, time and command run their words as the command itself: env one level deeper
        ("nohup env NCCL_NET=IB torchrun t.py", 11, [("NCCL_NET", "IB")], []),
        ("time env NCCL_NET=IB torchrun t.py", 11, [("NCCL_NET", "IB")], []),
        ("exec env NCCL_NET=IB torchrun t.py", 11, [("NCCL_NET", "IB")], []),
        ("command -p env NCCL_NET=IB torchrun t.py", 11, [("NCCL_NET", "IB")], []),
        ("exec -c env NCCL_NET=IB torchrun t.py", 11, [("NCCL_NET", "IB")], []),
        # a wrapper, a launcher, env -- : the program they run is a process of its own
        ("tini -- env NCCL_NET=IB torchrun t.py", 10, [("NCCL_NET", "IB")], []),
        ("mpirun -np 2 env NCCL_NET=IB torchrun t.py", 10, [("NCCL_NET", "IB")], []),
        ("env -- env NCCL_NET=IB torchrun t.py", 10, [("NCCL_NET", "IB")], []),
        (
            "env -S 'NCCL_DEBUG=INFO env NCCL_NET=IB torchrun' t.py",
            9,
            [("NCCL_DEBUG", "INFO"), ("NCCL_NET", "IB")],
            [("NCCL_DEBUG", "INFO")],
        ),
        # files: sourced in this shell, run with exec or directly (a too deep file gets the textual reading)
        ("source /s/e.sh", 10, [], [("NCCL_NET", "Socket")]),
        ("exec /s/e.sh", 10, [], [("NCCL_NET", "Socket")]),
        ("/s/e.sh", 10, [], [("NCCL_NET", "Socket")]),
    ],
)
def test_depth_bounds(script, last, read, past):
    assert reader.read(at_depth(script, last), NAMES, None, None, ECHO_FILES).found == read
    assert reader.read(at_depth(script, last + 1), NAMES, None, None, ECHO_FILES).found == past


def test_a_file_too_deep_is_read_as_text_with_its_own_name_as_origin():
    r = reader.read(at_depth("/s/e.sh", 11), NAMES, None, None, ECHO_FILES)
    assert r.found == [("NCCL_NET", "Socket")] and r.origins == {("NCCL_NET", "Socket"): "/s/e.sh"}
    # in a chain of files, the one read as text is the origin, not the one that ran it
    f = Files()
    for i in range(6):
        f.add_file(f"/s/{i}.sh", f"/s/{i + 1}.sh", "cm")
    f.add_file("/s/6.sh", "echo NCCL_NET=Socket\ntorchrun t.py", "cm")
    r = reader.read(["/s/0.sh"], NAMES, None, None, f)
    assert r.found == [("NCCL_NET", "Socket")] and r.origins == {("NCCL_NET", "Socket"): "/s/6.sh"}


# -- origins through a second file ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "env NCCL_DEBUG=INFO /scripts/b.sh",
        "NCCL_DEBUG=INFO /scripts/b.sh",
        "mpirun -x NCCL_DEBUG=INFO /scripts/b.sh",
        "mpirun -genv NCCL_DEBUG INFO /scripts/b.sh",
        "mpiexec -genv NCCL_DEBUG=INFO /scripts/b.sh",
        "env -S 'NCCL_DEBUG=INFO' /scripts/b.sh",
    ],
)
def test_a_setting_made_in_one_file_and_seen_in_the_next_keeps_the_first_as_origin(line):
    f = files(a_sh=line, b_sh="export NCCL_NET=IB\nexec torchrun t.py")
    r = reader.read(["bash", "/scripts/a.sh"], NAMES, None, None, f)
    assert r.found == [("NCCL_DEBUG", "INFO"), ("NCCL_NET", "IB")]
    assert r.origins == {("NCCL_DEBUG", "INFO"): "/scripts/a.sh", ("NCCL_NET", "IB"): "/scripts/b.sh"}


# -- more edges of the words --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "words, env, expected",
    [
        # bash: `--` and `-` end the options, the next word is the script file, even `-c`
        (
            ["env", "NCCL_DEBUG=INFO", "bash", "--", "-c", "export NCCL_NET=IB; torchrun t.py"],
            {},
            [("NCCL_DEBUG", "INFO")],
        ),
        (
            ["env", "NCCL_DEBUG=INFO", "bash", "-", "-c", "export NCCL_NET=IB; torchrun t.py"],
            {},
            [("NCCL_DEBUG", "INFO")],
        ),
        # a long option with a c in it is no -c
        (
            ["env", "NCCL_DEBUG=INFO", "bash", "--norc", "export NCCL_NET=IB; torchrun t.py"],
            {},
            [("NCCL_DEBUG", "INFO")],
        ),
        (
            ["env", "NCCL_DEBUG=INFO", "bash", "--noprofile", "--norc", "-e", "/opt/run.sh"],
            {},
            [("NCCL_DEBUG", "INFO")],
        ),
        # env: -S at the end, an empty split string, -S- (env -), -uH, --unset= read later
        (["env", "NCCL_NET=IB", "-S"], {}, []),
        (["env", "-S", "NCCL_NET=IB torchrun"], {}, [("NCCL_NET", "IB")]),
        (["env", "-S", "", "NCCL_DEBUG=INFO", "torchrun", "t.py"], {}, [("NCCL_DEBUG", "INFO")]),
        (["env", "-S-", "bash", "-c", "export NCCL_IB_HCA=$H; torchrun t.py"], {"H": "mlx5_0"}, []),
        (["env", "-uH", "bash", "-c", "export NCCL_IB_HCA=$H; torchrun t.py"], {"H": "mlx5_0"}, []),
        (["env", "--unset=H", "bash", "-c", "export NCCL_IB_HCA=$H; torchrun t.py"], {"H": "mlx5_0"}, []),
        (["env", "-SNCCL_NET=IB", "NCCL_DEBUG=INFO", "torchrun"], {}, [("NCCL_NET", "IB"), ("NCCL_DEBUG", "INFO")]),
        (
            ["env", "--split-string=NCCL_NET=IB", "NCCL_DEBUG=INFO", "torchrun"],
            {},
            [("NCCL_NET", "IB"), ("NCCL_DEBUG", "INFO")],
        ),
        (["env", "NCCL_DEBUG=INFO", "-SNCCL_NET=IB", "torchrun"], {}, [("NCCL_DEBUG", "INFO"), ("NCCL_NET", "IB")]),
        (["env", "-S", "bash -c", "export NCCL_NET=IB; torchrun t.py"], {}, [("NCCL_NET", "IB")]),
        (["env", "--", "bash", "-c", "export NCCL_NET=IB; torchrun t.py"], {}, [("NCCL_NET", "IB")]),
        # env -i: allexport starts off in the new shell
        (["env", "-i", "bash", "-c", "H=mlx5_0; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'"], {}, []),
        # env -u / --unset / -uNAME: the name is gone, a plain assignment afterwards is not exported
        (["env", "-u", "H", "bash", "-c", "H=mlx5_0; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'"], {}, []),
        (["env", "-uH", "bash", "-c", "H=mlx5_0; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'"], {}, []),
        (["env", "--unset=H", "bash", "-c", "H=mlx5_0; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'"], {}, []),
        # launchers: a flag at the end takes nothing, each flag's words are consumed exactly
        (["mpirun", "-x", "NCCL_NET=IB", "-genv"], {}, [("NCCL_NET", "IB")]),
        (["mpirun", "-genv", "NCCL_NET", "IB", "-x"], {}, [("NCCL_NET", "IB")]),
        (["mpirun", "-x", "NCCL_NET=IB", "-genvlist"], {}, [("NCCL_NET", "IB")]),
        (["mpirun", "-x", "NCCL_DEBUG=INFO", "--mca", "mca_base_env_list"], {}, [("NCCL_DEBUG", "INFO")]),
        (
            ["mpirun", "-genv", "NCCL_NET=IB", "-x", "NCCL_DEBUG=INFO", "a.out"],
            {},
            [("NCCL_NET", "IB"), ("NCCL_DEBUG", "INFO")],
        ),
        (
            ["mpirun", "-np", "2", "-genv", "NCCL_NET=IB", "-x", "NCCL_DEBUG=INFO", "a.out"],
            {},
            [("NCCL_NET", "IB"), ("NCCL_DEBUG", "INFO")],
        ),
        (["mpirun", "-x", "NCCL_IB_HCA==mlx5_0", "a.out"], {}, [("NCCL_IB_HCA", "=mlx5_0")]),  # NCCL's exact-match form
        (["mpirun", "-x", "NCCL_IB_HCA=^mlx5_1=x", "a.out"], {}, [("NCCL_IB_HCA", "^mlx5_1=x")]),
        # python: flags at the end, -m attached, -W/-X with a c in their value, -c attached with more words
        (["env", "NCCL_NET=IB", "python", "-u"], {}, [("NCCL_NET", "IB")]),
        (["env", "NCCL_NET=IB", "python", "-c"], {}, [("NCCL_NET", "IB")]),
        (["python", "-mtrain", "-c", SET_NET], {}, []),
        (["python", "-Wignore::DeprecationWarning", "-c", SET_NET], {}, [("NCCL_NET", "IB")]),
        (["python", "-Xpycache_prefix=/tmp/pyc", "-c", SET_NET], {}, [("NCCL_NET", "IB")]),
        (["python", "-c" + SET_NET, "--rank", "0"], {}, [("NCCL_NET", "IB")]),
    ],
)
def test_more_words(words, env, expected):
    assert argv(*words, env=env) == expected


PY_TWICE = "import os; os.environ['NCCL_NET'] = 'Socket'; os.environ['NCCL_NET'] = 'IB'"  # parsed: IB; as text: both


@pytest.mark.parametrize(
    "words",
    [
        ["python", "-c" + PY_TWICE],
        ["python", "-uc" + PY_TWICE],
        ["python", "-c", PY_TWICE],
        ["python", "-Ic", PY_TWICE],
        ["python", "-c" + SET_NET + "; os.chdir('/workspace')"],
    ],
)
def test_python_code_is_parsed_from_the_right_place(words):
    assert argv(*words) == [("NCCL_NET", "IB")]


@pytest.mark.parametrize(
    "script, env, expected",
    [
        # unset several, declare then assign
        ("export NCCL_NET=IB NCCL_DEBUG=INFO; unset NCCL_DEBUG NCCL_NET; torchrun t.py", {}, []),
        ("unset H; H=mlx5_1; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'", {}, []),
        ("declare H; H=mlx5_1; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'", {}, []),
        (
            "declare H; H=mlx5_1; bash -c 'export NCCL_IB_HCA=$H; torchrun t.py'",
            {"H": "mlx5_0"},
            [("NCCL_IB_HCA", "mlx5_1")],
        ),
        # eval with a word not known: the textual reading of the rest
        ("eval \"$(cat /etc/env)\" echo NCCL_NET=Socket; torchrun t.py", {}, [("NCCL_NET", "Socket")]),
        # exec with one word
        ("export NCCL_NET=IB; exec torchrun", {}, [("NCCL_NET", "IB")]),
        ("NCCL_NET=IB exec -l torchrun", {}, [("NCCL_NET", "IB")]),
        ("export NCCL_NET=IB; source $(cat /etc/which); torchrun t.py", {}, [("NCCL_NET", "IB")]),
    ],
)
def test_more_scripts(script, env, expected):
    assert seen(script, **env) == expected


def test_a_script_that_mentions_no_name_is_not_parsed():
    budget = Budget()
    command = ["env", "NCCL_DEBUG=INFO", "bash", "-c", "cd /workspace && torchrun --nproc_per_node=8 train.py"]
    assert reader.read(command, NAMES, None, budget).found == [("NCCL_DEBUG", "INFO")]
    assert budget.parse_bytes == 64 * 1024 and shell.PARSED == {}


def test_what_the_files_are_asked():
    f = Asked(files(run_sh="export NCCL_NET=IB\ntorchrun t.py"))
    # a program path that is no file is looked up once; flags and a source of a word not known never
    r = reader.read(
        ["/opt/bin/entry", "--config=/etc/x.yaml", "torchrun", "t.py", "NCCL_DEBUG=INFO"], NAMES, None, None, f
    )
    assert r.found == [] and f.lookups == ["/opt/bin/entry"]
    g = Asked(files(run_sh="export NCCL_NET=IB\ntorchrun t.py"))
    assert reader.read(
        ["bash", "-c", "export NCCL_DEBUG=INFO; source $(cat /etc/which); torchrun t.py"], NAMES, None, None, g
    ).found == [("NCCL_DEBUG", "INFO")]
    assert g.lookups == []
    h = Asked(files(run_sh="export NCCL_NET=IB\ntorchrun t.py"))
    assert reader.read(["python", "-m", "train", "NCCL_NET"], NAMES, None, None, h).found == []
    assert h.lookups == []
    # bash + FILE: `+` is the script's name
    k = files(run_sh="export NCCL_NET=IB\ntorchrun t.py")
    assert reader.read(["env", "NCCL_DEBUG=INFO", "bash", "+", "/scripts/run.sh"], NAMES, None, None, k).found == [
        ("NCCL_DEBUG", "INFO")
    ]
    assert reader.read(["env", "NCCL_DEBUG=INFO", "bash", "-", "/scripts/run.sh"], NAMES, None, None, k).found == [
        ("NCCL_DEBUG", "INFO"),
        ("NCCL_NET", "IB"),
    ]


def test_a_shebang_is_read_from_the_first_line_only():
    f = files(
        run_sh="#!/bin/sh\n# starts the python trainer\necho NCCL_NET=Socket\nexport NCCL_NET=IB\nexec python train.py\n"
    )
    assert reader.read(["/scripts/run.sh"], NAMES, None, None, f).found == [("NCCL_NET", "IB")]
    g = files(run_sh="#!/bin/bash\necho NCCL_NET=Socket\nexport NCCL_NET=IB\nexec python3 train.py")
    assert reader.read(["/scripts/run.sh"], NAMES, None, None, g).found == [("NCCL_NET", "IB")]


def test_a_reused_reading_spends_no_budget_and_a_changed_env_reads_again():
    command = ["bash", "-c", "export NCCL_IB_HCA=$HCA; mpirun -x NCCL_NET python train.py"]
    budget = Budget()
    assert reader.read(command, NAMES, Env(HCA="mlx5_0", NCCL_NET="IB"), budget).found == [
        ("NCCL_IB_HCA", "mlx5_0"),
        ("NCCL_NET", "IB"),
    ]
    spent = 200_000 - budget.steps
    assert spent > 0
    assert reader.read(command, NAMES, Env(HCA="mlx5_0", NCCL_NET="IB"), budget).found == [
        ("NCCL_IB_HCA", "mlx5_0"),
        ("NCCL_NET", "IB"),
    ]
    assert budget.steps == 200_000 - spent
    left = budget.steps
    assert reader.read(command, NAMES, Env(HCA="mlx5_0", NCCL_NET="Socket"), budget).found == [
        ("NCCL_IB_HCA", "mlx5_0"),
        ("NCCL_NET", "Socket"),
    ]
    assert budget.steps == left - spent
    # without an env: read again, nothing forwarded or expanded is known
    assert reader.read(command, NAMES, None, budget).found == []
    assert budget.steps < left - spent


def test_a_reused_reading_with_files_asks_them_only_for_its_dependencies():
    command = ["bash", "-c", "[ -f /scripts/env.sh ] && . /scripts/env.sh; torchrun t.py"]
    assert reader.read(command, NAMES, Env(), None, files(env_sh="export NCCL_NET=IB")).found == [("NCCL_NET", "IB")]
    same = Asked(files(env_sh="export NCCL_NET=IB"))
    budget = Budget()
    assert reader.read(command, NAMES, Env(), budget, same).found == [("NCCL_NET", "IB")]
    assert budget.steps == 200_000
    # the command mentions no name: read only because it may name a file (asked first), then its dependencies
    assert same.mentions == [
        "bash\0-c\0[ -f /scripts/env.sh ] && . /scripts/env.sh; torchrun t.py",
        "[ -f /scripts/env.sh ] && . /scripts/env.sh; torchrun t.py",
    ]
    assert same.lookups == ["/scripts/env.sh"]
    # another env value that the reading depended on: read again, the files asked only by the reading
    command = ["bash", "-c", "export NCCL_IB_HCA=$H; . /scripts/env.sh; torchrun t.py"]
    assert reader.read(command, NAMES, Env(H="mlx5_0"), None, files(env_sh="export NCCL_NET=IB")).found == [
        ("NCCL_IB_HCA", "mlx5_0"),
        ("NCCL_NET", "IB"),
    ]
    other = Asked(files(env_sh="export NCCL_NET=IB"))
    assert reader.read(command, NAMES, Env(H="mlx5_1"), None, other).found == [
        ("NCCL_IB_HCA", "mlx5_1"),
        ("NCCL_NET", "IB"),
    ]
    assert other.lookups == ["/scripts/env.sh"]


def test_a_launcher_list_not_known_here_asks_the_env_nothing():
    env = Env(NCCL_NET="IB")
    assert reader.settings(["bash", "-c", "mpirun -genvlist $(cat /n) -x NCCL_DEBUG=INFO a.out"], NAMES, env) == [
        ("NCCL_DEBUG", "INFO")
    ]
    assert env.asked == []
    env = Env(NCCL_NET="IB")
    assert reader.settings(
        ["bash", "-c", "mpirun --mca mca_base_env_list \"$(cat /l)\" -x NCCL_DEBUG=INFO a.out"], NAMES, env
    ) == [("NCCL_DEBUG", "INFO")]
    assert env.asked == []


def test_a_cut_argv_gets_the_textual_reading_word_by_word():
    r = reader.read(["env", "NCCL_NET=IB", "torchrun", "t.py"], NAMES, None, Budget(steps=0))
    assert r.found == [("NCCL_NET", "IB")]


# -- found by this part and fixed in reader.py (these fail on the code before) ------------------------------

PY_TRAIN = "#!/usr/bin/env python3\nimport os\nos.environ.setdefault('MASTER_PORT', '29500')\nimport train\n"


@pytest.mark.parametrize(
    "command",
    [
        ["env", "NCCL_IB_DISABLE=1", "/scripts/train.py"],
        ["bash", "-c", "export NCCL_IB_DISABLE=1; exec /scripts/train.py"],
        ["bash", "-c", "NCCL_IB_DISABLE=1 /scripts/train.py --epochs 3"],
        ["env", "NCCL_IB_DISABLE=1", "python3", "/scripts/train.py"],  # read right before the fix as well
    ],
)
def test_a_python_configmap_script_run_directly_sees_the_callers_exports(command):
    """A python script from a ConfigMap run by its path (shebang): the interpreter and what it starts
    see what the caller exported. It was read for its own os.environ only, and the pod admitted."""
    r = reader.read(command, NAMES, None, None, files(train_py=PY_TRAIN))
    assert r.found == [("NCCL_IB_DISABLE", "1")] and r.origins == {}
    both = files(train_py=PY_TRAIN.replace("import train", "os.environ['NCCL_DEBUG'] = 'INFO'\nimport train"))
    r = reader.read(command, NAMES, None, None, both)
    assert sorted(r.found) == [("NCCL_DEBUG", "INFO"), ("NCCL_IB_DISABLE", "1")]
    assert r.origins == {("NCCL_DEBUG", "INFO"): "/scripts/train.py"}


def test_the_pod_of_a_python_configmap_script_run_with_env_is_denied(policies):
    from core.test_scripts import NS, Maps, job_pod
    from webhook.core.decision import DENIED, decide

    pod = job_pod()
    pod["spec"]["containers"][0]["command"] = ["env", "NCCL_IB_DISABLE=1", "/scripts/train.py"]
    maps = Maps(
        [
            {
                "kind": "ConfigMap",
                "metadata": {"name": "llama-train-scripts", "namespace": "ml-training"},
                "data": {"train.py": PY_TRAIN},
            }
        ]
    )
    d = decide(pod, NS, policies, None, "CREATE", maps)
    assert d.outcome == DENIED and [f.rule for f in d.denials] == ["command-fallback"]
    assert "NCCL_IB_DISABLE='1'" in d.denials[0].message


def test_a_reading_made_without_an_env_is_not_reused_for_a_container_with_one():
    """`settings(command, names)` without an env recorded no dependencies, so a later container whose
    env gives the variable got the remembered empty reading."""
    command = ["bash", "-c", "export NCCL_IB_HCA=$HCA; mpirun -x NCCL_NET python train.py"]
    assert reader.settings(command, NAMES) == []
    assert reader.settings(command, NAMES, Env(HCA="mlx5_0", NCCL_NET="IB")) == [
        ("NCCL_IB_HCA", "mlx5_0"),
        ("NCCL_NET", "IB"),
    ]
    assert reader.settings(command, NAMES) == []
    budget = Budget()
    assert reader.settings(command, NAMES, Env(), budget) == []  # an env without them: the same reading, reused
    assert budget.steps == 200_000
