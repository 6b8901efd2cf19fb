"""The policy's NCCL logging (policies/*.yaml: NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,NET, so that
NCCL prints the network it uses for `rdma-webhook nccl-log` and the verifier): added to a GPU
container that sets neither; a user's own NCCL_DEBUG wins wherever it is set (env, envFrom, the
command) and is never denied; the subsystems go only with the policy's NCCL_DEBUG; the final-state
guard does not call the policy's light INFO "heavy"."""

from __future__ import annotations

import kube_objects as k
from core.test_decision import ML, mutate_twice
from webhook.core import decision

IB_SHARED = {"rdma-webhook.io/policy": "ib-shared"}


def env_of(pod, i=0):
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][i].get("env", [])}


def test_a_gpu_container_gets_init_and_net_info_logging_without_a_heavy_logging_warning(policies):
    pod = k.pod([k.container("trainer")], annotations=IB_SHARED)
    _, out, d = mutate_twice(pod, ML, policies)
    env = env_of(out)
    assert (env["NCCL_DEBUG"], env["NCCL_DEBUG_SUBSYS"]) == ("INFO", "INIT,NET")
    assert not any("logs heavily" in w for w in d.warnings)
    final = decision.check_final(out, ML, policies)
    assert final.outcome == decision.UNCHANGED and not any("logs heavily" in w for w in final.warnings)


def test_the_users_own_nccl_debug_in_env_wins_alone(policies):
    for level in ("WARN", "INFO", "VERSION"):
        pod = k.pod([k.container("trainer", env=[{"name": "NCCL_DEBUG", "value": level}])], annotations=IB_SHARED)
        _, out, d = mutate_twice(pod, ML, policies)
        env = env_of(out)
        assert env["NCCL_DEBUG"] == level and "NCCL_DEBUG_SUBSYS" not in env
        assert env["NCCL_NET"] == "IB" and not d.denials  # the rest of the block as before; never denied


def test_an_env_from_container_gets_no_logging_setting_that_would_override_its_own(policies):
    """env wins over envFrom in Kubernetes: a policy NCCL_DEBUG in env would silently replace a
    user's NCCL_DEBUG from a ConfigMap, so none is added (the job may then be unverifiable)."""
    c = k.container("trainer", envFrom=[{"configMapRef": {"name": "nccl-settings"}}])
    _, out, d = mutate_twice(k.pod([c], annotations=IB_SHARED), ML, policies)
    env = env_of(out)
    assert "NCCL_DEBUG" not in env and "NCCL_DEBUG_SUBSYS" not in env
    assert env["NCCL_NET"] == "IB" and env["NCCL_IB_HCA"] == "mlx5"  # the fabric's settings still go in


def test_a_command_that_sets_nccl_debug_keeps_it_and_gets_no_subsystems(policies):
    c = k.container("trainer", command=["bash", "-c", "export NCCL_DEBUG=WARN; python train.py"])
    _, out, d = mutate_twice(k.pod([c], annotations=IB_SHARED), ML, policies)
    env = env_of(out)
    assert "NCCL_DEBUG_SUBSYS" not in env  # the command's own NCCL_DEBUG, read as the shell reads it
    assert not d.denials


def test_a_user_info_without_subsystems_is_still_called_heavy(policies):
    pod = k.pod([k.container("trainer", env=[{"name": "NCCL_DEBUG", "value": "INFO"}])], annotations=IB_SHARED)
    _, _, d = mutate_twice(pod, ML, policies)
    assert "trainer: NCCL_DEBUG=INFO logs heavily; use WARN outside debugging" in d.warnings
    narrowed = [{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "NCCL_DEBUG_SUBSYS", "value": "INIT,NET"}]
    _, _, d = mutate_twice(k.pod([k.container("trainer", env=narrowed)], annotations=IB_SHARED), ML, policies)
    assert not any("logs heavily" in w for w in d.warnings)
