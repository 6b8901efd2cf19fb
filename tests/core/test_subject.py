"""What the rules read of a pod's commands (webhook/core/subject.py): each container's command
line read with its own env (`$(VAR)` expanded from it, as the kubelet does), the words a
launcher was read as, and the settings of the policy's names it makes. Pods as the API server
sends them (tests/kube_objects.py); the commands are those of the Kubeflow PyTorchJob and
MPIJob examples (kubeflow/trainer examples/pytorch, kubeflow/mpi-operator examples/v2beta1),
with the NCCL variable set on the command line."""

from __future__ import annotations

import uuid

import kube_objects as k
from conftest import POLICIES
from webhook.core import ranks, scripts
from webhook.core.subject import Finding, Subject, command_settings, command_words
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


# The launch script of tests/manifests-scripts/job-script-ib-disable.yaml (shaped after public
# distributed-training Helm charts that ship it in a ConfigMap), mounted at /scripts.
SCRIPT = (
    "#!/bin/bash\nset -euo pipefail\nexport NCCL_IB_DISABLE=1\ncd /workspace\ntorchrun --nproc_per_node=8 train.py\n"
)
SCRIPTS_VOLUME = {"name": "scripts", "configMap": {"name": "llama-train-scripts", "defaultMode": 0o755}}
SCRIPTS_MOUNT = {"name": "scripts", "mountPath": "/scripts"}


def _scripted(name: str, script: str) -> dict:
    c = k.container(name, command=["bash", f"/scripts/{script}"])
    c["volumeMounts"] = [SCRIPTS_MOUNT, *c.get("volumeMounts", [])]
    return c


def _subject_with(pod: dict, config_maps=None) -> Subject:
    subject = Subject(pod, ERDMA, {}, find_targets(pod, ERDMA))
    subject.config_maps, subject.namespace = config_maps, "ml-training"
    return subject


def test_init_containers_are_read_first_each_with_its_own_command_and_env():
    """An init container that exports NCCL_NET itself (a setup step before torchrun), one
    without a command (its image's entrypoint: nothing to read, and the next is still read), and
    a target whose args alone hold the command (the image's ENTRYPOINT is tini): each is read
    with its own words and env, init containers first, as the kubelet runs them."""
    setup = k.container(
        "setup", gpus=None, command=["sh", "-c", "export NCCL_NET=$(NET) && python /workspace/prepare.py"]
    )
    setup["env"] = [{"name": "NET", "value": "Socket"}]
    fetch = k.container("fetch-dataset", gpus=None)
    hydrate = k.container("hydrate", gpus=None, command=["sh", "-c", "NCCL_DEBUG=$LEVEL python /workspace/hydrate.py"])
    hydrate["env"] = [{"name": "LEVEL", "value": "INFO"}]  # the shell's $LEVEL, from the container's env
    worker = k.container("worker", args=["bash", "-c", "NCCL_NET=IB torchrun --nproc-per-node=8 train.py"])
    pod = k.pod([worker], init_containers=[setup, fetch, hydrate], generate_name="pytorch-worker-")
    assert settings_of(Subject(pod, ERDMA, {}, find_targets(pod, ERDMA))) == [
        ("setup", "sh -c export NCCL_NET=Socket && python /workspace/prepare.py", [("NCCL_NET", "Socket")]),
        ("hydrate", "sh -c NCCL_DEBUG=$LEVEL python /workspace/hydrate.py", [("NCCL_DEBUG", "INFO")]),
        ("worker", "bash -c NCCL_NET=IB torchrun --nproc-per-node=8 train.py", [("NCCL_NET", "IB")]),
    ]


def test_the_words_and_env_the_decision_read_are_not_read_again():
    """A target's env and words, once resolved by the decision (`Target.env`, `Target.words`),
    are what its command is read as: the container is not read a second time."""
    c = k.container("worker", command=["sh", "-c", "export NCCL_NET=$(NET) && torchrun train.py"])
    c["env"] = [{"name": "NET", "value": "IB"}]
    pod = k.pod([c], generate_name="pytorch-worker-")
    subject = Subject(pod, ERDMA, {}, find_targets(pod, ERDMA))
    subject.targets[0].env = k8s.Env([{"name": "NET", "value": "Socket"}])
    assert settings_of(subject)[0][2] == [("NCCL_NET", "Socket")]
    again = Subject(pod, ERDMA, {}, find_targets(pod, ERDMA))
    again.targets[0].words = ["sh", "-c", "export NCCL_IB_DISABLE=1; torchrun train.py"]
    assert settings_of(again) == [
        ("worker", "sh -c export NCCL_IB_DISABLE=1; torchrun train.py", [("NCCL_IB_DISABLE", "1")])
    ]


def test_a_script_read_from_its_configmap_is_named_with_its_path_and_configmap():
    c = _scripted("trainer", "train.sh")
    pod = k.pod([c], generate_name="llama-finetune-", volumes=[SCRIPTS_VOLUME])
    store = scripts.ConfigMapStore()
    store.add(
        {"kind": "ConfigMap", "metadata": {"name": "llama-train-scripts"}, "data": {"train.sh": SCRIPT}}, "ml-training"
    )
    subject = _subject_with(pod, store)
    assert settings_of(subject) == [("trainer", "bash /scripts/train.sh", [("NCCL_IB_DISABLE", "1")])]
    assert subject.origins == {
        id(pod["spec"]["containers"][0]): {("NCCL_IB_DISABLE", "1"): ("/scripts/train.sh", "llama-train-scripts")}
    }
    assert subject.unread == []
    # a ConfigMap of that name in another namespace is not the pod's
    elsewhere = _subject_with(pod, store)
    elsewhere.namespace = "team-b"
    assert settings_of(elsewhere) == [] and elsewhere.unread == [
        ("trainer", "/scripts/train.sh", "llama-train-scripts")
    ]


def test_each_script_not_at_hand_is_named_once_with_the_first_container_that_runs_it():
    """At admission no ConfigMap is at hand (no API call on the hot path): every script a
    container runs from a ConfigMap volume is listed once, path and ConfigMap, for the warning."""
    a, b, c = _scripted("rank-0", "train.sh"), _scripted("rank-1", "train.sh"), _scripted("eval", "eval.sh")
    pod = k.pod([a, b, c], generate_name="llama-finetune-", volumes=[SCRIPTS_VOLUME])
    for config_maps in (None, scripts.ConfigMapStore()):
        subject = _subject_with(pod, config_maps)
        assert settings_of(subject) == []
        assert subject.unread == [
            ("rank-0", "/scripts/train.sh", "llama-train-scripts"),
            ("eval", "/scripts/eval.sh", "llama-train-scripts"),
        ]
    assert Subject(pod, ERDMA, {}, []).commands() == [] and Subject(pod, ERDMA, {}, []).unread == []


def test_one_budget_of_parsing_for_all_the_commands_of_a_pod():
    """The scripts of one pod share one budget of parsing (webhook.commands.files.Budget, 64 KiB):
    a pod of many long scripts costs what one would, and past the budget a script gets the
    textual reading, which does not follow `$NET` into NCCL_NET. Three ranks' inline scripts of
    some 23 KiB each (a long generated preamble; 32 KiB is the most one script is parsed for):
    the first two are parsed, the third is not."""
    preamble = "".join(f"# step {i}: stage shard {i} of the dataset\n" for i in range(560))
    assert 22 * 1024 < len(preamble) < 24 * 1024
    # a job id of its own each run: the reader remembers scripts it parsed, which then cost nothing
    script = f"# job {uuid.uuid4()}\n" + preamble + "NET=Socket; export NCCL_NET=$NET; torchrun train.py # rank {}"
    ranks = [k.container(f"rank-{i}", command=["bash", "-c", script.format(i)]) for i in range(3)]
    pod = k.pod(ranks, generate_name="pytorch-worker-")
    found = [(name, settings) for name, _, settings in settings_of(Subject(pod, ERDMA, {}, find_targets(pod, ERDMA)))]
    assert found == [("rank-0", [("NCCL_NET", "Socket")]), ("rank-1", [("NCCL_NET", "Socket")])]


def test_a_finding_names_its_container_when_it_has_one():
    assert Finding("ipc-lock", "worker", "drops IPC_LOCK").text() == "container 'worker': drops IPC_LOCK [ipc-lock]"
    assert Finding("multus-annotation", None, "cannot be read").text() == "cannot be read [multus-annotation]"


def test_a_subject_keeps_what_it_is_given_and_assumes_nothing_else():
    """What the decision hands over is kept as given; what it sets later starts empty (no
    other GPU containers, no own NIC claim, no policies, no ConfigMaps, no namespace): a subject
    built for a rule alone (as the tests of the rules build it) claims nothing it was not told."""
    pod = k.pod([k.container("worker")])
    problems = [Finding("multus-annotation", None, "cannot be read")]
    devices = list(ERDMA.devices)
    subject = Subject(pod, ERDMA, {}, [], devices, problems)
    assert subject.devices is devices and subject.problems is problems
    fresh = Subject(pod, ERDMA, {}, [])
    assert (fresh.devices, fresh.problems, fresh.others, fresh.launchers, fresh.unread) == ([], [], [], [], [])
    assert (fresh.own_claim, fresh.policies, fresh.config_maps, fresh.namespace) == (False, None, None, "")
