"""rdma-webhook: inject RDMA device, Multus network, /dev/shm, IPC_LOCK and NCCL settings into
GPU training pods, and refuse pods whose NCCL would silently fall back to TCP sockets."""

import sys

__version__ = "0.1.0"

# The decision core, compiled to C extensions with mypyc when the package is built (setup.py).
# Same source either way; compiled, a decision takes about half the time (benchmarks/README.md).
COMPILED_MODULES = ("keys", "k8s", "nccl", "transports", "policy_model", "multus", "commands", "fallback", "decision", "mutation", "patch", "review")


def compiled() -> list[str]:
    """Which of COMPILED_MODULES are imported as compiled extensions (for the startup log)."""
    out = []
    for name in COMPILED_MODULES:
        module = sys.modules.get(f"{__name__}.{name}")
        if module is not None and not str(getattr(module, "__file__", "")).endswith(".py"):
            out.append(name)
    return out
