"""Commands read as the shell and the launchers read them (webhook/commands/reader.py): through the
decision (`webhook.core.decision.decide` inside the AdmissionReview envelope, the patch applied with
jsonpatch) and over TLS, on pods shaped as the API server sends them; the reader itself for the
names parameter, the launcher table and hostile input."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kube_objects as k
from core.test_decision import ML, mutate_twice, respond
from serving.test_server import apply
from webhook.commands import reader, shell, text
from webhook.admission import review
from webhook.core import subject
from webhook.core.decision import decide

NAMES = frozenset(
    {"NCCL_IB_DISABLE", "NCCL_NET", "NCCL_IB_HCA", "NCCL_DEBUG"}
)  # what an ib-verbs policy reads commands for


class Env(dict):
    """A container env as the reader looks it up."""

    def get(self, name, default=None):
        return dict.get(self, name, default)


def script_pod(script: str, env=None, gpus=8):
    return k.pod([k.container("trainer", command=["/bin/bash", "-c"], args=[script], env=env, gpus=gpus)])


def launcher_pod(args, env=None, command=("mpirun",)):
    pod = k.mpijob_launcher(args=list(args))
    c = pod["spec"]["containers"][0]
    c["command"] = list(command)
    c["env"] = c.get("env", []) + list(env or [])
    return pod


def denied(pod, policies, rule="command-fallback"):
    resp, _, d = respond(pod, ML, policies)
    assert not resp["allowed"], resp
    assert any(f.rule == rule for f in d.denials), d.denials
    return resp["status"]["message"]


# -- every example of issue 16's "Why" -----------------------------------------------------------


def test_commented_out_export_is_not_a_setting(policies):
    resp, out, d = mutate_twice(
        script_pod("# export NCCL_IB_DISABLE=1\ntorchrun --nproc_per_node=8 train.py"), ML, policies
    )
    assert d.outcome == "mutated" and not d.denials


def test_the_last_export_wins(policies):
    script = "export NCCL_IB_DISABLE=1\necho preparing\nexport NCCL_IB_DISABLE=0\ntorchrun --nproc_per_node=8 train.py"
    resp, out, d = mutate_twice(script_pod(script), ML, policies)
    assert d.outcome == "mutated"
    assert reader.settings(script, NAMES) == [("NCCL_IB_DISABLE", "0")]


def test_echo_text_is_not_a_setting(policies):
    mutate_twice(script_pod("echo 'never set NCCL_NET=Socket here'\ntorchrun train.py"), ML, policies)


def test_mpirun_x_name_takes_the_launchers_env_value(policies):
    """Open MPI's `-x NAME` exports the launcher's own value to every rank."""
    pod = launcher_pod(
        ["--allow-run-as-root", "-np", "16", "-x", "NCCL_IB_HCA", "-x", "LD_LIBRARY_PATH", "python", "train.py"],
        env=[{"name": "NCCL_IB_HCA", "value": "eth0"}],
    )
    msg = denied(pod, policies)
    assert "NCCL_IB_HCA='eth0'" in msg and "container 'launcher'" in msg and "mpirun -x exports it to every rank" in msg
    # the same name without a value anywhere: nothing to judge (the launcher gets the block)
    pod = launcher_pod(["-np", "16", "-x", "NCCL_IB_HCA", "python", "train.py"])
    resp, _, d = respond(pod, ML, policies)
    assert resp["allowed"] and d.outcome == "mutated" and not d.denials


def test_mpirun_x_name_takes_an_earlier_export(policies):
    pod = k.pod(
        [
            k.container(
                "launcher",
                gpus=None,
                command=["/bin/bash", "-c"],
                args=["export NCCL_IB_HCA=eth0\nmpirun -np 16 -x NCCL_IB_HCA -x PATH python train.py"],
            )
        ]
    )
    assert "NCCL_IB_HCA='eth0'" in denied(pod, policies)


@pytest.mark.parametrize("flag", ["-genv", "-env"])
def test_mpich_and_intel_mpi_env_flags(policies, flag):
    pod = launcher_pod(
        ["-n", "16", "-ppn", "8", flag, "NCCL_IB_HCA", "eth0", "python", "train.py"], command=("mpiexec",)
    )
    msg = denied(pod, policies)
    assert "NCCL_IB_HCA='eth0'" in msg and "(mpiexec exports it to every rank)" in msg


def test_examples_over_tls(server, policies):
    """The served webhook: a commented-out export is mutated (patch applied by jsonpatch), a
    `-genv` in an MPICH launcher and a `-x NAME` with the launcher's value are denied."""
    pod = script_pod(
        "# export NCCL_IB_DISABLE=1\nexport NCCL_IB_DISABLE=1\nexport NCCL_IB_DISABLE=0\n"
        "echo 'never set NCCL_NET=Socket here'\ntorchrun --nproc_per_node=8 train.py"
    )
    conn = server.connection()
    try:
        resp = server.review(k.admission_review(pod), conn)
        assert resp["response"]["allowed"] is True
        out = apply(resp, pod)
        assert out["metadata"]["annotations"]["rdma-webhook.io/status"] == "injected"
        assert {"name": "NCCL_NET", "value": "IB"} in out["spec"]["containers"][0]["env"]
        again = server.review(k.admission_review(out), conn)
        assert again["response"]["allowed"] and "patch" not in again["response"]
        for pod in (
            launcher_pod(["-n", "16", "-genv", "NCCL_IB_HCA", "eth0", "python", "train.py"], command=("mpiexec",)),
            launcher_pod(
                ["-np", "16", "-x", "NCCL_IB_HCA", "python", "train.py"], env=[{"name": "NCCL_IB_HCA", "value": "eth0"}]
            ),
        ):
            r = server.review(k.admission_review(pod), conn)["response"]
            assert r["allowed"] is False and "[command-fallback]" in r["status"]["message"]
            assert "NCCL_IB_HCA='eth0'" in r["status"]["message"] and "patch" not in r
    finally:
        conn.close()


# -- the launcher table and the rest of point 3 --------------------------------------------------


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["mpirun", "-x", "NCCL_NET=Socket", "python", "t.py"], [("NCCL_NET", "Socket")]),
        (
            ["mpirun", "--mca", "mca_base_env_list", "NCCL_NET=Socket;NCCL_IB_HCA", "./a"],
            [("NCCL_NET", "Socket"), ("NCCL_IB_HCA", "eth0")],
        ),
        (
            ["mpirun", "-mca", "btl", "^openib", "-mca", "mca_base_env_list", "NCCL_DEBUG=INFO", "./a"],
            [("NCCL_DEBUG", "INFO")],
        ),
        (["mpiexec", "-genvlist", "PATH,NCCL_IB_HCA", "./a"], [("NCCL_IB_HCA", "eth0")]),
        (
            ["mpiexec.hydra", "-n", "1", "-env", "NCCL_NET", "Socket", "./a", ":", "-n", "1", "./b"],
            [("NCCL_NET", "Socket")],
        ),
        (["mpiexec", "-genv", "NCCL_IB_DISABLE=1", "-n", "2", "./a"], [("NCCL_IB_DISABLE", "1")]),
        (["env", "NCCL_NET=Socket", "torchrun", "t.py"], [("NCCL_NET", "Socket")]),
        (["env", "-u", "NCCL_IB_HCA", "mpirun", "-x", "NCCL_IB_HCA", "./a"], []),  # unset before the launcher reads it
        (["env", "-i", "mpirun", "-x", "NCCL_IB_HCA", "./a"], []),
        (["sh", "-c", "bash -c 'export NCCL_IB_DISABLE=1; exec python t.py'"], [("NCCL_IB_DISABLE", "1")]),
        (["sh", "-c", "sh -c \"env NCCL_NET=Socket sh -c 'python t.py'\""], [("NCCL_NET", "Socket")]),
        (
            ["python3", "-u", "-c", "import os\nos.environ['NCCL_NET'] = 'Socket'\nimport train"],
            [("NCCL_NET", "Socket")],
        ),
        (["python", "-c", "import os\n# os.environ['NCCL_NET'] = 'Socket'\nprint('NCCL_NET=Socket')"], []),
        (
            ["python", "-c", "import os\nos.environ['NCCL_IB_DISABLE'] = '1'\nos.environ['NCCL_IB_DISABLE'] = '0'"],
            [("NCCL_IB_DISABLE", "0")],
        ),
        (
            ["python", "-c", "import os; os.environ.update({'NCCL_IB_HCA': 'eth0'}); os.putenv('NCCL_NET', 'Socket')"],
            [("NCCL_IB_HCA", "eth0"), ("NCCL_NET", "Socket")],
        ),
        (
            ["tini", "--", "mpirun", "-genv", "NCCL_NET", "Socket", "./a"],
            [("NCCL_NET", "Socket")],
        ),  # an entrypoint wrapper
        (["torchrun", "train.py", "NCCL_NET=Socket"], []),  # a program's argument is no setting
        (["echo", "bash", "-c", "export NCCL_NET=Socket; python t.py"], []),
    ],
)
def test_launchers_env_and_nested_commands(argv, expected):
    assert reader.settings(argv, NAMES, Env(NCCL_IB_HCA="eth0")) == expected


@pytest.mark.parametrize(
    "script, expected",
    [
        (
            "export NCCL_IB_DISABLE=1; python a.py; export NCCL_IB_DISABLE=0; python b.py",
            [("NCCL_IB_DISABLE", "1"), ("NCCL_IB_DISABLE", "0")],
        ),
        ("export NCCL_IB_DISABLE=1", []),  # no process sees it
        ("NCCL_IB_DISABLE=1 echo hi; python t.py", []),  # a builtin's prefix assignment
        ("printf 'export NCCL_NET=%s\\n' Socket > env.sh; python t.py", []),
        ("cat <<EOF > /tmp/env\nexport NCCL_IB_DISABLE=1\nEOF\npython t.py", []),
        ("X=mlx5; export NCCL_IB_HCA=\"${X}_0\"; python t.py", [("NCCL_IB_HCA", "mlx5_0")]),
        ("export NCCL_IB_HCA=$HCA; python t.py", [("NCCL_IB_HCA", "eth0")]),  # $HCA from the container env
        ("export NCCL_IB_HCA=$(cat /etc/hca); python t.py", []),  # not known here
        ("export NCCL_NET=Socket; unset NCCL_NET; python t.py", []),
        ("export NCCL_NET=Socket; ( export NCCL_NET=IB ); python t.py", [("NCCL_NET", "Socket")]),
        ("( export NCCL_NET=Socket ); python t.py", []),
        ("if [ -f /x ]; then export NCCL_NET=Socket; fi; python t.py", [("NCCL_NET", "Socket")]),  # a branch may run
        (
            "export NCCL_NET=IB; test -f /x && export NCCL_NET=Socket; python t.py",
            [("NCCL_NET", "IB"), ("NCCL_NET", "Socket")],
        ),
        ("run() { NCCL_NET=Socket python t.py; }; run", [("NCCL_NET", "Socket")]),  # read where it is defined
        ("set -a; NCCL_IB_HCA=eth0; python t.py", [("NCCL_IB_HCA", "eth0")]),
        ("NCCL_NET=Socket; python t.py", [("NCCL_NET", "Socket")]),  # the policy may export it: counted
        ("eval 'export NCCL_NET=Socket'; python t.py", [("NCCL_NET", "Socket")]),
        ("declare -x NCCL_NET=Socket; python t.py", [("NCCL_NET", "Socket")]),
        ("export NCCL_NET='Socket' # NCCL_NET=IB\npython t.py", [("NCCL_NET", "Socket")]),
        ("export NCCL_IB_HCA; python t.py", []),  # the env's own value: the env rules judge it
        (
            "bash -s <<EOF\nexport NCCL_IB_DISABLE=1\npython t.py\nEOF",
            [("NCCL_IB_DISABLE", "1")],
        ),  # a heredoc fed to a shell
        ("python3 <<'EOF'\nimport os\nos.environ['NCCL_NET'] = 'Socket'\nEOF", [("NCCL_NET", "Socket")]),
        ("export NCCL_NET=Socket; cat <<EOF | python t.py\nx\nEOF", [("NCCL_NET", "Socket")]),
    ],
)
def test_scripts(script, expected):
    assert reader.settings(script, NAMES, Env(HCA="eth0", NCCL_IB_HCA="mlx5_0")) == expected


def test_a_script_the_parser_cannot_read_gets_the_textual_reading(policies):
    """A syntax error (here an unterminated quote): the reading falls back to the text, which
    reports every NAME=value it finds, so such a script is denied rather than waved through."""
    script = 'echo "starting\nexport NCCL_NET=Socket\ntorchrun train.py'
    assert reader.settings(script, NAMES) == [("NCCL_NET", "Socket")]
    assert "NCCL_NET='Socket'" in denied(script_pod(script), policies)
    big = "export NCCL_NET=Socket # not set: NCCL_IB_DISABLE=1\n" + "true\n" * (shell.MAX_PARSED // 5) + "torchrun t.py"
    assert reader.settings(big, NAMES) == [("NCCL_NET", "Socket"), ("NCCL_IB_DISABLE", "1")]  # too long to parse


def test_the_textual_reading_removes_quotes_as_the_shell_does():
    """The textual reading takes the shell word after `NAME=` with bash's quote removal
    (`quoting.word_at`): `$'...'` escapes decoded, an escape after a quoted string and escaped
    blanks kept; an expansion or an array is not known; a quote left open is read up to a blank,
    as written."""
    line = "export NCCL_IB_DISABLE=$'\\x31' NCCL_NET='IB'\\; NCCL_IB_HCA=(a b) NCCL_SOCKET_IFNAME=\\ eth0$X\n"
    assert text.scan_text(line, NAMES) == [("NCCL_IB_DISABLE", "1"), ("NCCL_NET", "IB;")]
    assert text.scan_text("NCCL_NET=\\ \nNCCL_IB_HCA=0\\\t\n", NAMES) == [("NCCL_NET", " "), ("NCCL_IB_HCA", "0\t")]
    assert text.scan_text('echo x; NCCL_NET="Socket', NAMES) == [("NCCL_NET", '"Socket')]
    assert text.scan_text("NCCL_NET='So'cket", NAMES) == [("NCCL_NET", "Socket")]


def test_names_are_a_parameter():
    """Other transports' variables (issue 15): the names asked about, nothing else."""
    names = frozenset({"FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "NCCL_NET_PLUGIN"})
    assert text.prefixes(names) == ("FI_", "NCCL_")
    script = (
        "export NCCL_IB_DISABLE=1 FI_PROVIDER=tcp\n# export FI_EFA_USE_DEVICE_RDMA=1\n"
        "mpirun -x FI_PROVIDER -x FI_EFA_USE_DEVICE_RDMA -x NCCL_NET_PLUGIN=none python t.py"
    )
    assert reader.settings(script, names, Env(FI_EFA_USE_DEVICE_RDMA="0")) == [
        ("FI_PROVIDER", "tcp"),
        ("FI_EFA_USE_DEVICE_RDMA", "0"),
        ("NCCL_NET_PLUGIN", "none"),
    ]
    assert reader.settings(script, NAMES) == [("NCCL_IB_DISABLE", "1")]
    assert text.scan_text("FI_PROVIDER=tcp MY_FI_PROVIDER=x", names) == [("FI_PROVIDER", "tcp")]
    # the default names are what the rules read
    assert subject.command_settings("export NCCL_NET=Socket; python t.py") == [("NCCL_NET", "Socket")]


def test_only_a_script_that_mentions_a_name_is_parsed():
    shell.PARSED.clear()
    reader._READ.clear()
    quiet = "export NCCL_SOCKET_IFNAME=net1; export FOO=1; torchrun t.py"
    assert reader.settings(["bash", "-c", quiet], NAMES) == []
    assert quiet not in shell.PARSED  # NCCL_ is there, none of the names: no parse
    script = "export NCCL_NET=IB; torchrun t.py"
    assert reader.settings(["bash", "-c", script], NAMES) == [("NCCL_NET", "IB")]
    block = shell.PARSED[script]
    assert block is not None and list(shell.PARSED) == [script]
    for _ in range(3):  # the same script again (the next pod of the job): neither parsed nor read again
        assert reader.settings(["bash", "-c", script], NAMES) == [("NCCL_NET", "IB")]
    assert shell.PARSED[script] is block and len(reader._READ) == 1
    # a remembered reading is reused only while the env values it looked up are the same
    launcher = ["mpirun", "-x", "NCCL_IB_HCA", "./a"]
    assert reader.settings(launcher, NAMES, Env(NCCL_IB_HCA="eth0")) == [("NCCL_IB_HCA", "eth0")]
    assert reader.settings(launcher, NAMES, Env(NCCL_IB_HCA="mlx5_0")) == [("NCCL_IB_HCA", "mlx5_0")]
    assert reader.settings(launcher, NAMES, Env()) == []


# -- properties ----------------------------------------------------------------------------------

_FALLBACK = ["NCCL_IB_DISABLE=1", "NCCL_NET=Socket", "NCCL_IB_HCA=eth0", "NCCL_NET=socket", "NCCL_IB_DISABLE=0x1"]
_HIDE = [  # ways to write a setting that set nothing
    "# export {s}",
    "#{s}",
    "echo {s}",
    "echo 'export {s}'",
    'echo "never set {s} here"',
    "printf '%s\\n' '{s}'",
    "cat <<'EOF'\nexport {s}\nEOF",
    "cat <<EOF >> /tmp/notes\n{s}\nEOF",
    ": '{s}'",
    "true # {s}",
    "python -c \"print('{s}')\"",
    "echo {s} > /dev/null",
    "logger -t job '{s}'  # not exported",
]
_BENIGN = [
    "export NCCL_DEBUG=WARN",
    "cd /workspace",
    "export NCCL_IB_DISABLE=0",
    "export NCCL_NET=IB",
    "torchrun --nproc_per_node=8 train.py",
    "mpirun -np 2 -x NCCL_DEBUG python x.py",
    "sleep 1",
    "set -e",
]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(_BENIGN),
            st.builds(lambda h, s: h.format(s=s), st.sampled_from(_HIDE), st.sampled_from(_FALLBACK)),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_a_setting_in_a_comment_or_an_echo_never_denies(policies, lines):
    script = "\n".join(lines + ["torchrun train.py"])
    assert reader.settings(script, NAMES) in (
        [],
        [("NCCL_DEBUG", "WARN")],
        [("NCCL_IB_DISABLE", "0")],
        [("NCCL_NET", "IB")],
    ) or all(value in ("WARN", "0", "IB") for _, value in reader.settings(script, NAMES)), script
    d = decide(script_pod(script), ML, policies)
    assert not any(f.rule == "command-fallback" for f in d.denials), (script, d.denials)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(_HIDE),
    st.sampled_from(_FALLBACK),
    st.sampled_from(["export {s}", "env {s} torchrun t.py", "{s} torchrun t.py"]),
)
def test_the_same_setting_made_for_real_denies(policies, hide, setting, real):
    """The other side of the property: the generator's settings do deny when really made."""
    script = "\n".join([hide.format(s=setting), real.format(s=setting), "torchrun train.py"])
    d = decide(script_pod(script), ML, policies)
    assert any(f.rule == "command-fallback" for f in d.denials), script


# -- hostile input -------------------------------------------------------------------------------

HOSTILE = [
    "$(" * 5000 + "NCCL_NET=Socket",
    "export NCCL_NET=Socket; " + "bash -c '" * 200 + "python",
    "eval " * 3000 + "NCCL_NET=Socket python",
    "NCCL_NET=x\n" + "A=$A$A$A$A\n" * 400 + "export NCCL_IB_HCA=$A; python t.py",
    "echo \"unterminated NCCL_NET=Socket",
    "cat <<EOF\nNCCL_IB_DISABLE=1 python t.py",
    "export NCCL_NET=\0Socket\x00; python",
    "export NCCL_NET=\ud800; python t.py",  # a lone surrogate: JSON can carry one
    "for x in $(seq 1 9); do " * 300 + "NCCL_NET=Socket python" + "; done" * 300,
    "{ " * 4000 + "NCCL_NET=Socket python" + "; }" * 4000,
    "case $x in " + "a) NCCL_NET=Socket python;; " * 3000 + "esac",
    "python -c \"" + "(" * 10000 + "\" NCCL_NET=1",
    "mpirun " + "-x NCCL_IB_HCA " * 20000 + "-genv",
    "mpirun -genv",
    "env -S 'NCCL_NET=Socket \"unbalanced' python",
    "env -u",
    "bash -c",
    "\\" * 1000 + "NCCL_NET=Socket",
    "NCCL_NET=Socket " * 20000,
    "export NCCL_NET=Socket\n" + "x\n" * 30000,
]


@pytest.mark.parametrize("script", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_scripts_never_raise_and_stay_fast(policies, script):
    t0 = time.process_time()
    for argv in (script, ["bash", "-c", script], ["python", "-c", script], script.split(" ")):
        found = reader.settings(argv, NAMES, Env(NCCL_IB_HCA="eth0"))
        assert isinstance(found, list)
    decide(script_pod(script), ML, policies)
    assert time.process_time() - t0 < 20


def test_a_pod_full_of_large_distinct_scripts_stays_linear(policies):
    """Each decision parses at most `Budget.parse_bytes` of script; the rest gets the textual
    reading, so a 3 MiB pod of distinct scripts costs what its regex scan costs."""
    shell.PARSED.clear()
    reader._READ.clear()
    body = "export NCCL_DEBUG=WARN\n" + "".join(f"echo step {i}; torchrun t.py --seed {i}\n" for i in range(700))
    assert len(body) < shell.MAX_PARSED
    containers = [k.container(f"c{i}", gpus=None, command=["/bin/bash", "-c", f"# {i}\n" + body]) for i in range(100)]
    pod = k.pod(containers)
    assert len(json.dumps(pod)) > 2_500_000
    t0 = time.process_time()
    d = decide(pod, ML, policies)
    assert time.process_time() - t0 < 15
    assert d.allowed
    parsed = [t for t in shell.PARSED if t.startswith("# ")]
    assert 1 <= len(parsed) <= reader.Budget().parse_bytes // len(body)


@settings(max_examples=300, deadline=None)
@given(
    st.text(
        alphabet=st.sampled_from(
            list("NCCL_NET=IB_DISABLE HCA1 Socket'\"$(){}[];&|<>#\\\n`-xenvbashc mpirun") + ["\ud800", "\0"]
        ),
        max_size=120,
    )
)
def test_any_string_in_command_or_args_never_raises(policies, text):
    for argv in (["bash", "-c", text], ["mpirun", *text.split(" ")], ["python", "-c", text], ["env", *text.split()]):
        assert isinstance(reader.settings(argv, NAMES, Env(NCCL_IB_HCA="eth0")), list)
    decide(script_pod(text), ML, policies)
    # over the envelope (a lone surrogate is not valid JSON for orjson: the request is refused)
    body = k.body(k.admission_review(script_pod(text.replace("\ud800", "?"))))
    code, doc, _, _ = review.handle(body, policies, {ML.name: ML}.get, None)
    assert code == 200 and doc["response"]["uid"]


# -- which commands of a pod are read, and against which env --------------------------------------


def _command_denials(pod, policies):
    d = decide(pod, ML, policies)
    return [(f.rule, f.container) for f in d.denials]


def test_init_containers_and_args_alone_are_read_after_a_container_without_a_command(policies):
    init = k.container("setup", gpus=None, command=["sh", "-c", "export NCCL_IB_DISABLE=1; ./prepare.sh"])
    pod = k.pod(
        [
            k.container("sidecar", gpus=None),
            k.container("trainer", args=["bash", "-c", "NCCL_NET=Socket torchrun t.py"]),
        ],
        init_containers=[init],
    )
    assert _command_denials(pod, policies) == [("command-fallback", "setup"), ("command-fallback", "trainer")]


def test_each_container_expands_its_command_against_its_own_env(policies):
    """`$(OFF)` in a command is the env of that container: the init container's own, not the
    target's at the same index; the second target's, not the first's."""
    script = ["sh", "-c", "export NCCL_IB_DISABLE=$(OFF); torchrun t.py"]
    init = k.container("setup", gpus=None, command=script, env=[{"name": "OFF", "value": "1"}])
    first = k.container("first", env=[{"name": "OFF", "value": "0"}], command=script)
    second = k.container("second", env=[{"name": "OFF", "value": "1"}], command=script)
    pod = k.pod([first, second], init_containers=[init])
    assert _command_denials(pod, policies) == [("command-fallback", "setup"), ("command-fallback", "second")]
    first["env"][0]["value"] = "1"
    init["env"][0]["value"] = "0"
    assert _command_denials(k.pod([first, second], init_containers=[init]), policies) == [
        ("command-fallback", "first"),
        ("command-fallback", "second"),
    ]


def test_the_parse_budget_is_shared_by_the_containers_of_a_pod(policies):
    """One decision parses at most `Budget.parse_bytes` of script in all: the third container's
    script, which would fit alone, gets the textual reading once the first two have spent the
    budget."""
    shell.PARSED.clear()
    reader._READ.clear()
    body = "export NCCL_DEBUG=WARN\n" + ("echo " + "training-step-" * 13 + "\n") * 132
    scripts = [f"# {name}\n{body}" for name in "abc"]
    size = len(scripts[0])
    assert size <= shell.MAX_PARSED and 2 * size <= reader.Budget().parse_bytes < 3 * size
    pod = k.pod([k.container(name, command=["bash", "-c", script]) for name, script in zip("abc", scripts)])
    assert decide(pod, ML, policies).allowed
    assert [shell.PARSED.get(s) is not None for s in scripts[:2]] == [True, True] and scripts[2] not in shell.PARSED


def test_command_settings_forwards_what_the_env_gives():
    env = subject.k8s.Env([{"name": "NCCL_IB_HCA", "value": "mlx5_0"}])
    assert subject.command_settings("mpirun -x NCCL_IB_HCA -np 8 python t.py", env=env) == [("NCCL_IB_HCA", "mlx5_0")]
    assert subject.command_settings("mpirun -x NCCL_IB_HCA -np 8 python t.py") == []
