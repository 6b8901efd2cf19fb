"""What the declaring builtins do to the variables a reading tracks (webhook/commands/shell_builtins.py),
as bash does them: `unset` of several names, `export` of a name nobody set, `declare -x` before the
assignment, `export -n`. Each script is a line of a launch script such as the Kubeflow PyTorchJob
examples run (`torchrun ...` after the settings); its comment makes it new to the reader, which
remembers the scripts it has read."""

from __future__ import annotations

import itertools

import pytest

from webhook.commands import reader

NAMES = frozenset({"NCCL_NET", "NCCL_DEBUG", "NCCL_IB_HCA"})
_FRESH = itertools.count()


def settings(script: str) -> list[tuple[str, str | None]]:
    return reader.settings(f"{script} # {next(_FRESH)}", NAMES, None)


@pytest.mark.parametrize("unset", ["unset", "unset -v"])
def test_unset_removes_every_name_it_is_given(unset):
    script = f"export NCCL_NET=Socket NCCL_DEBUG=INFO NCCL_IB_HCA=mlx5; {unset} NCCL_DEBUG NCCL_NET; torchrun train.py"
    assert settings(script) == [("NCCL_IB_HCA", "mlx5")]


def test_unset_f_leaves_the_variable_of_that_name():
    script = "export NCCL_NET=Socket; unset -f NCCL_NET; torchrun train.py"
    assert settings(script) == [("NCCL_NET", "Socket")]


def test_exporting_a_name_nobody_set_gives_the_process_nothing():
    assert settings("export NCCL_NET; torchrun train.py") == []
    assert settings("declare -x NCCL_DEBUG NCCL_NET; NCCL_NET=Socket; torchrun train.py") == [("NCCL_NET", "Socket")]


def test_export_n_and_declare_plus_x_take_the_export_back():
    assert settings("export NCCL_NET=Socket; export -n NCCL_NET; torchrun train.py") == []
    assert settings("export NCCL_NET=Socket; declare +x NCCL_NET=IB; torchrun train.py") == []
    assert settings("declare -x NCCL_NET=IB NCCL_DEBUG=WARN; torchrun train.py") == [
        ("NCCL_NET", "IB"),
        ("NCCL_DEBUG", "WARN"),
    ]
