"""Edges of webhook/core/ranks.py that the mutation run of core.ranks (mutation/MUTATION.md) found
untested: each operator label alone, a launcher container that is not the first or has no
command, a launcher named by an Open MPI-only or Hydra-only name, `--x`, `-x` words inside
`command`, values with several `=`, an env list entry without a value, from valueFrom, with
empty and repeated items, and the exact wording of each forwarding warning (the names joined
by ", "). Pods as the API server sends them (kube_objects), through the decision and the
AdmissionReview envelope, the patch applied and a second pass empty (mutate_twice)."""

from __future__ import annotations

import kube_objects as k
from core.test_decision import ML, mutate_twice
from core.test_ranks import BLOCK, ENV_LIST, X_BLOCK, env_of, launcher

NAMES = ", ".join(BLOCK)  # the policy's block as the warnings list it
PLAIN = ["-np", "16", "python", "train.py"]


def words_of(pod, i=0):
    c = pod["spec"]["containers"][i]
    return [*c.get("command", []), *c.get("args", [])]


def test_each_operator_label_alone_makes_a_launcher(policies):
    """The MPI Operator's job-role, the training-operator's replica-type, JobSet's
    replicatedjob-name: any one of them, with an image entrypoint (no command), is a launcher."""
    for key in (
        "training.kubeflow.org/job-role",
        "training.kubeflow.org/replica-type",
        "jobset.sigs.k8s.io/replicatedjob-name",
    ):
        pod = launcher([], labels={key: "launcher", "rdma-webhook.io/inject": "true"})
        c = pod["spec"]["containers"][0]
        del c["command"], c["args"]
        _, out, d = mutate_twice(pod, ML, policies)
        assert env_of(out)[ENV_LIST] == ";".join(BLOCK), key
        assert d.warnings == [], (key, d.warnings)  # nothing read from a command that is not there
        pod["metadata"]["labels"][key] = "worker"
        assert env_of(mutate_twice(pod, ML, policies)[1]).get(ENV_LIST) is None


def test_the_launcher_container_is_found_after_sidecars(policies):
    """A sidecar without a command and one with a command that runs no launcher come first: the
    launcher is the third container, and it alone gets the block."""
    pod = launcher(PLAIN, labels={"rdma-webhook.io/inject": "true"})
    main = pod["spec"]["containers"][0]
    quiet = k.container("istio-proxy", "istio/proxyv2:1.24", gpus=None)
    busy = k.container(
        "log-shipper", "fluent/fluent-bit:3.1", gpus=None, command=["/fluent-bit/bin/fluent-bit"], args=["-c", "/cfg"]
    )
    pod["spec"]["containers"] = [quiet, busy, main]
    _, out, _ = mutate_twice(pod, ML, policies)
    assert env_of(out, 2)[ENV_LIST] == ";".join(BLOCK)
    assert ENV_LIST not in env_of(out, 0) and ENV_LIST not in env_of(out, 1)


def test_an_open_mpi_only_launcher_forwards_by_list_or_by_x(policies):
    for name in ("orterun", "/opt/openmpi/bin/prterun", "mpirun.openmpi"):
        _, out, _ = mutate_twice(launcher(PLAIN, command=(name,)), ML, policies)
        assert env_of(out)[ENV_LIST] == ";".join(BLOCK), name
        _, out, _ = mutate_twice(launcher(["-x", "LD_LIBRARY_PATH", *PLAIN], command=(name,)), ML, policies)
        assert words_of(out) == [name, *X_BLOCK, "-x", "LD_LIBRARY_PATH", *PLAIN], name


def test_a_hydra_only_launcher_that_restricts_forwarding_is_warned_about(policies):
    _, _, d = mutate_twice(
        launcher(["-n", "16", "-genvnone", "python", "train.py"], command=("mpiexec.hydra",)), ML, policies
    )
    assert (
        f"launcher: the command's -genvnone/-genvlist keeps the launcher's environment from the ranks of MPICH and "
        f"Intel MPI, so the policy's {NAMES} reach them only if listed: add them to -genvlist"
    ) in d.warnings


def test_the_double_dash_x_and_x_inside_command_count_as_exported(policies):
    """`--x NAME` is Open MPI's long form; flags may sit in `command` with the launcher: a name
    already exported is not exported again, and a value with `=` in it names the part before
    the first `=`."""
    args = ["--x", "NCCL_NET", "-x", "NCCL_DEBUG=a=b", *PLAIN]
    _, out, _ = mutate_twice(launcher(args), ML, policies)
    assert words_of(out) == ["mpirun", "-x", "NCCL_IB_HCA", *args]
    pod = launcher([], command=("mpirun", "-x", "NCCL_IB_HCA", *PLAIN))
    del pod["spec"]["containers"][0]["args"]
    _, out, _ = mutate_twice(pod, ML, policies)
    assert words_of(out) == [
        "mpirun",
        *("-x", "NCCL_NET", "-x", "NCCL_DEBUG", "-x", "NCCL_DEBUG_SUBSYS"),
        *("-x", "NCCL_IB_HCA", *PLAIN),
    ]


def test_x_in_a_script_warning_names_every_variable(policies):
    pod = launcher([], command=("bash", "-c", "mpirun -np 16 -x LD_LIBRARY_PATH python train.py"))
    del pod["spec"]["containers"][0]["args"]
    _, _, d = mutate_twice(pod, ML, policies)
    assert (
        f"launcher: the command's script runs an Open MPI launcher with -x, which Open MPI 4 refuses together with "
        f"{ENV_LIST}, so the policy's {NAMES} reach the ranks only where the script names them: add -x NAME for each"
    ) in d.warnings


def test_a_command_env_list_warning_names_every_variable(policies):
    _, _, d = mutate_twice(
        launcher(["-np", "16", "--mca", "mca_base_env_list", "A=1", "python", "train.py"]), ML, policies
    )
    assert (
        f"launcher: the command's --mca mca_base_env_list replaces {ENV_LIST}, so Open MPI forwards the policy's "
        f"{NAMES} only where the command names them: add -x NAME for each"
    ) in d.warnings


def test_an_env_list_from_value_from_is_left_and_warned_about(policies):
    ref = {"configMapKeyRef": {"name": "mpi", "key": "env-list"}}
    _, out, d = mutate_twice(launcher(PLAIN, env=[{"name": ENV_LIST, "valueFrom": ref}]), ML, policies)
    entry = [e for e in out["spec"]["containers"][0]["env"] if e["name"] == ENV_LIST]
    assert entry == [{"name": ENV_LIST, "valueFrom": ref}]
    assert (
        f"launcher: {ENV_LIST} comes from valueFrom, so the policy's {NAMES} cannot be added to it; "
        f"Open MPI forwards them only if it names them"
    ) in d.warnings


def test_env_list_items_empty_repeated_without_value_or_with_several_equals(policies):
    cases = [
        ({"name": ENV_LIST}, ";".join(BLOCK)),  # no value: an empty list
        ({"name": ENV_LIST, "value": "A=1;;B"}, "A=1;B;" + ";".join(BLOCK)),  # an empty item is dropped, B kept
        ({"name": ENV_LIST, "value": "A;A;B"}, "A;B;" + ";".join(BLOCK)),  # a repeat is dropped, B kept
        (
            {"name": ENV_LIST, "value": "NCCL_DEBUG=x=y"},
            "NCCL_DEBUG=x=y;NCCL_NET;NCCL_IB_HCA",
        ),  # named by the part before the first =
    ]
    for entry, want in cases:
        _, out, _ = mutate_twice(launcher(PLAIN, env=[entry]), ML, policies)
        assert env_of(out)[ENV_LIST] == want, (entry, env_of(out)[ENV_LIST])


def test_a_launcher_with_env_from_says_its_values_are_not_checked(policies):
    pod = launcher(PLAIN)
    pod["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "nccl-settings"}}]
    _, _, d = mutate_twice(pod, ML, policies)
    assert any(w.startswith("launcher: envFrom values cannot be checked") for w in d.warnings), d.warnings


def _forwarded(pod) -> list[str]:
    """The names Open MPI forwards to the ranks from a mutated launcher: its env list's items
    (named by the part before `=`) and its `-x` flags' names, as `mpirun` reads them."""
    env = env_of(pod)
    out = [item.split("=", 1)[0] for item in (env.get(ENV_LIST) or "").split(";") if item]
    words = words_of(pod)
    out += [w.split("=", 1)[0] for flag, w in zip(words, words[1:]) if flag in ("-x", "--x")]
    return out


def test_a_user_variable_whose_name_begins_with_a_block_name_does_not_stand_for_it(policies):
    """A user's env list or `-x` already names NCCL_NET_GDR_LEVEL and NCCL_DEBUG_SUBSYS (real
    NCCL variables whose names begin with the block's NCCL_NET and NCCL_DEBUG): each block name
    is still forwarded, once, and the user's items are kept. A membership test turned into a
    substring or prefix test would take NCCL_NET for listed and lose it for every rank."""
    users = ["NCCL_NET_GDR_LEVEL=2", "NCCL_DEBUG_SUBSYS=INIT,NET"]
    _, out, _ = mutate_twice(launcher(PLAIN, env=[{"name": ENV_LIST, "value": ";".join(users)}]), ML, policies)
    # (NCCL_DEBUG_SUBSYS itself, named by the user, is the user's: not forwarded a second time)
    assert env_of(out)[ENV_LIST].split(";") == [*users, *[b for b in BLOCK if b != "NCCL_DEBUG_SUBSYS"]]
    assert sorted(_forwarded(out)) == sorted(["NCCL_NET_GDR_LEVEL", *BLOCK])
    # the same names given with -x (Open MPI 4 refuses -x beside the env list: the block goes out as -x)
    args = ["-x", users[0], "-x", "NCCL_DEBUG_SUBSYS", *PLAIN]
    _, out, _ = mutate_twice(launcher(args), ML, policies)
    assert words_of(out) == ["mpirun", *X_BLOCK[:-2], *args]  # the user's own -x NCCL_DEBUG_SUBSYS stands
    assert ENV_LIST not in env_of(out)
    # a name that merely contains a block name (no prefix) is no stand-in either
    _, out, _ = mutate_twice(launcher(PLAIN, env=[{"name": ENV_LIST, "value": "MY_NCCL_IB_HCA"}]), ML, policies)
    assert env_of(out)[ENV_LIST].split(";") == ["MY_NCCL_IB_HCA", *BLOCK]
