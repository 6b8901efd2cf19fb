"""The label and annotation names that form the webhook's public contract.

Users, namespaces and other tools depend on these exact strings; they live in one place so that
no module spells them differently. `Final`, so the compiled core inlines each string instead of
looking it up in this module at every use.
"""

from typing import Final

PREFIX: Final = "rdma-webhook.io/"

# Namespace label that opts a namespace in; the webhook checks it itself.
NS_INJECTION: Final = PREFIX + "injection"
NS_INJECTION_ENABLED: Final = "enabled"
# Namespace label naming the namespace's default policy.
NS_POLICY: Final = PREFIX + "policy"

# Pod label that opts a pod in; only the exact value "true" counts.
POD_INJECT: Final = PREFIX + "inject"
POD_INJECT_TRUE: Final = "true"
# Pod annotation naming the policy the pod asks for.
POD_POLICY: Final = PREFIX + "policy"

# Annotations the webhook writes on every pod it mutates, and the policy it applied, also as a
# label: the generated ValidatingAdmissionPolicy of each policy selects its pods by that label
# (an objectSelector, matched before any CEL runs), so the API server evaluates the final-state
# check of one policy per pod instead of a match condition of every policy.
STATUS: Final = PREFIX + "status"
STATUS_INJECTED: Final = "injected"
APPLIED_POLICY: Final = PREFIX + "applied-policy"
APPLIED_POLICY_LABEL: Final = APPLIED_POLICY

# Multus: the pod annotation listing secondary networks, and the NetworkAttachmentDefinition
# annotation naming the device-plugin resource behind a network.
MULTUS_NETWORKS: Final = "k8s.v1.cni.cncf.io/networks"
NAD_RESOURCE_NAME: Final = "k8s.v1.cni.cncf.io/resourceName"

# Pod Security Admission level enforced on a namespace.
PSA_ENFORCE: Final = "pod-security.kubernetes.io/enforce"

SHM_PATH: Final = "/dev/shm"
IPC_LOCK: Final = "IPC_LOCK"

# MPI launcher pods, as the operators label them: the MPI Operator (v2beta1) sets both labels
# to `launcher` on the launcher pod; Kubeflow Trainer's MPI runtimes run the launcher as the
# JobSet replicated job named `launcher` (JobSet labels each pod with its replicated job).
MPI_JOB_ROLE: Final = "training.kubeflow.org/job-role"
MPI_REPLICA_TYPE: Final = "training.kubeflow.org/replica-type"
JOBSET_REPLICATED_JOB: Final = "jobset.sigs.k8s.io/replicatedjob-name"
MPI_LAUNCHER: Final = "launcher"
