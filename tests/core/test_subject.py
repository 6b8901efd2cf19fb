"""What the rules read of a pod's commands (webhook/core/subject.py): each container's command
line read with its own env (`$(VAR)` expanded from it, as the kubelet does), the words a
launcher was read as, and the settings of the policy's names it makes. Pods as the API server
sends them (tests/kube_objects.py); the commands are those of the Kubeflow PyTorchJob and
MPIJob examples (kubeflow/trainer examples/pytorch, kubeflow/mpi-operator examples/v2beta1),
with the NCCL variable set on the command line."""

from __future__ import annotations

import kube_objects as k
from conftest import POLICIES
from webhook.core import ranks
from webhook.core.subject import Subject, command_settings, command_words
from webhook.core.targets import find_targets
from webhook.grammar import k8s
from webhook.policy.load import load_dir

PS, _errors = load_dir(POLICIES)
assert PS is not None, _errors
ERDMA = PS.by_name["erdma"]
TORCHRUN = ["sh", "-c", "export NCCL_NET=$(NET_CHOICE) && torchrun --nproc-per-node=8 /workspace/train.py"]


def settings_of(subject: Subject) -> list[tuple[str, str, list[tuple[str, str]]]]:
    return [(c["name"], line, found) for c, line, found in subject.commands()]


def test_each_target_reads_its_command_with_its_own_env():
    a = k.container("rank-a", command=TORCHRUN, env=[{"name": "NET_CHOICE", "value": "Socket"}])
    b = k.container("rank-b", command=TORCHRUN, env=[{"name": "NET_CHOICE", "value": "IB"}])
    pod = k.pod([a, b], generate_name="pytorch-worker-")
    subject = Subject(pod, ERDMA, {}, find_targets(pod, ERDMA))
    line = "sh -c export NCCL_NET={} && torchrun --nproc-per-node=8 /workspace/train.py"
    assert settings_of(subject) == [
        ("rank-a", line.format("Socket"), [("NCCL_NET", "Socket")]),
        ("rank-b", line.format("IB"), [("NCCL_NET", "IB")]),
    ]
    assert subject.commands() is subject.commands()  # read once per decision


def test_each_launcher_reads_the_words_it_was_found_with():
    """Two launcher containers of an MPIJob launcher pod, each exporting its own NCCL_NET to the
    ranks (`mpirun -x`): each container's settings are its own."""
    first = k.container("launcher", gpus=None, command=["mpirun", "-x", "NCCL_NET=Socket", "python", "/train.py"])
    second = k.container("relauncher", gpus=None, command=["mpirun", "-x", "NCCL_NET=IB", "python", "/train.py"])
    pod = k.pod([first, second], generate_name="deepspeed-launcher-")
    subject = Subject(pod, ERDMA, {}, [])
    subject.launchers = ranks.find_launchers(pod, {}, [])
    assert [t.index for t in subject.launchers] == [0, 1]
    assert settings_of(subject) == [
        ("launcher", "mpirun -x NCCL_NET=Socket python /train.py", [("NCCL_NET", "Socket")]),
        ("relauncher", "mpirun -x NCCL_NET=IB python /train.py", [("NCCL_NET", "IB")]),
    ]


def test_command_words_expand_variables_of_the_containers_env():
    c = k.container("t", command=["torchrun", "$(SCRIPT)"], args=["--net", "$$(NET)", "$HOME"])
    c["env"] = [{"name": "SCRIPT", "value": "/w/train.py"}, {"name": "NET", "value": "IB"}]
    assert command_words(c) == ["torchrun", "/w/train.py", "--net", "$(NET)", "$HOME"]
    given = k8s.Env([{"name": "SCRIPT", "value": "/other.py"}])
    assert command_words(c, given) == ["torchrun", "/other.py", "--net", "$(NET)", "$HOME"]
    assert command_words({"command": ["python", 3, "$(X)"], "env": [{"name": "X", "value": "y"}]}) == ["python", "y"]


def test_command_settings_reads_variables_from_the_env_it_is_given():
    env = k8s.Env([{"name": "NET", "value": "Socket"}])
    script = "export NCCL_NET=$NET; torchrun /workspace/train.py"
    assert command_settings(script, env=env) == [("NCCL_NET", "Socket")]
    assert command_settings(script) == []  # $NET unknown: no value to judge
    assert command_settings("export NCCL_NET=IB NCCL_DEBUG=INFO; torchrun t.py", frozenset({"NCCL_DEBUG"})) == [
        ("NCCL_DEBUG", "INFO")
    ]
