"""rdma-webhook: inject RDMA device, Multus network, /dev/shm, IPC_LOCK and NCCL settings into
GPU training pods, and refuse pods whose NCCL would silently fall back to TCP sockets."""

import sys

__version__ = "0.1.0"

# The decision core, compiled to C extensions with mypyc when the package is built (setup.py).
# Same source either way; compiled, a decision takes about half the time (benchmarks/README.md).
# Dotted names under `webhook`, in no particular order (setup.py builds them as one group).
COMPILED_MODULES = (
    "grammar.k8s",
    "grammar.nccl",
    "commands.launchers",
    "commands.invocation",
    "commands.shell",
    "commands.text",
    "commands.python",
    "commands.files",
    "commands.state",
    "commands.reader",
    "commands.record",
    "commands.source_words",
    "commands.shell_builtins",
    "fabrics.transports",
    "fabrics.multus",
    "fabrics.gke",
    "core.keys",
    "core.model",
    "core.scripts",
    "core.claims",
    "core.fallback",
    "core.families",
    "core.decision",
    "core.mutation",
    "core.ranks",
    "core.patch",
    "core.targets",
    "core.subject",
    "core.pod_warnings",
    "core.machines",
    "admission.judge",
    "admission.review",
)


# The layers, lowest first. A module may import from its own package and from packages of lower
# layers only, never upward nor sideways within a layer (tests/project/test_layers.py checks every import,
# lazy ones included); the compiled core is the lower half.
LAYERS = (
    ("telemetry",),  # metrics and logs
    ("grammar",),  # Kubernetes quantities and names, NCCL's env grammar
    ("commands", "fabrics"),  # how commands are read; what differs per transport and network mechanism
    ("core",),  # the pure decision: policy model, fallback rules, mutation, patch
    ("kinds", "proof"),  # workload kinds and their pod templates; NCCL's log read as proof of its transport
    ("admission", "policy"),  # the AdmissionReview envelope; policy files to a PolicySet
    ("cluster",),  # cluster state: file, list+watch
    ("serving", "verify"),  # HTTP, TLS, workers, the server; the verifier of NCCL's logs
    ("cli",),  # the commands
)


def compiled() -> list[str]:
    """Which of COMPILED_MODULES are imported as compiled extensions (for the startup log)."""
    out = []
    for name in COMPILED_MODULES:
        module = sys.modules.get(f"{__name__}.{name}")
        if module is not None and not str(getattr(module, "__file__", "")).endswith(".py"):
            out.append(name)
    return out
