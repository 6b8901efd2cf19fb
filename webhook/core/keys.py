"""The label and annotation names that form the webhook's public contract.

Users, namespaces and other tools depend on these exact strings; they live in one place so that
no module spells them differently.
"""

PREFIX = "rdma-webhook.io/"

# Namespace label that opts a namespace in; the webhook checks it itself.
NS_INJECTION = PREFIX + "injection"
NS_INJECTION_ENABLED = "enabled"
# Namespace label naming the namespace's default policy.
NS_POLICY = PREFIX + "policy"

# Pod label that opts a pod in; only the exact value "true" counts.
POD_INJECT = PREFIX + "inject"
POD_INJECT_TRUE = "true"
# Pod annotation naming the policy the pod asks for.
POD_POLICY = PREFIX + "policy"

# Annotations the webhook writes on every pod it mutates.
STATUS = PREFIX + "status"
STATUS_INJECTED = "injected"
APPLIED_POLICY = PREFIX + "applied-policy"

# Multus: the pod annotation listing secondary networks, and the NetworkAttachmentDefinition
# annotation naming the device-plugin resource behind a network.
MULTUS_NETWORKS = "k8s.v1.cni.cncf.io/networks"
NAD_RESOURCE_NAME = "k8s.v1.cni.cncf.io/resourceName"

# Pod Security Admission level enforced on a namespace.
PSA_ENFORCE = "pod-security.kubernetes.io/enforce"

SHM_PATH = "/dev/shm"
IPC_LOCK = "IPC_LOCK"

# MPI launcher pods, as the operators label them: the MPI Operator (v2beta1) sets both labels
# to `launcher` on the launcher pod; Kubeflow Trainer's MPI runtimes run the launcher as the
# JobSet replicated job named `launcher` (JobSet labels each pod with its replicated job).
MPI_JOB_ROLE = "training.kubeflow.org/job-role"
MPI_REPLICA_TYPE = "training.kubeflow.org/replica-type"
JOBSET_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
MPI_LAUNCHER = "launcher"
