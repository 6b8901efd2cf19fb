"""Pods and AdmissionReviews shaped the way the API server sends them to a mutating webhook.

By the time a webhook sees a CREATE, the API server has applied defaults (restartPolicy,
dnsPolicy, terminationMessagePath, imagePullPolicy, ...), the built-in admission plugins have run
(ServiceAccount adds the projected `kube-api-access-*` token volume and its mount unless
automountServiceAccountToken is false; DefaultTolerationSeconds adds two tolerations), empty
fields are omitted, and a controller-made pod has `generateName` and no `name` yet. Pod shapes
for the training operators carry the labels and env those operators set.
"""

from __future__ import annotations

import copy
import itertools
import json
import uuid
from typing import Any

_TOKEN_SUFFIX = itertools.count(1)


def container(
    name: str,
    image: str = "nvcr.io/nvidia/pytorch:25.11-py3",
    *,
    gpus: int | None = 8,
    env: list[dict[str, Any]] | None = None,
    command: list[str] | None = None,
    args: list[str] | None = None,
    limits: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A container before API defaulting; `gpus=None` for a CPU container."""
    c: dict[str, Any] = {"name": name, "image": image}
    if command:
        c["command"] = command
    if args:
        c["args"] = args
    if env:
        c["env"] = env
    lim = dict(limits or {})
    if gpus:
        lim.setdefault("nvidia.com/gpu", str(gpus))
    resources: dict[str, Any] = {}
    if lim:
        resources["limits"] = lim
    if requests:
        resources["requests"] = dict(requests)
    c["resources"] = resources
    c.update(extra)
    return c


def _default_container(c: dict[str, Any], token_volume: str | None) -> dict[str, Any]:
    c = copy.deepcopy(c)
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    c.setdefault(
        "imagePullPolicy", "Always" if c["image"].endswith(":latest") or ":" not in c["image"] else "IfNotPresent"
    )
    c.setdefault("resources", {})
    res = c["resources"]
    # Defaulting copies limits into missing requests.
    if res.get("limits"):
        req = res.setdefault("requests", {})
        for k, v in res["limits"].items():
            req.setdefault(k, v)
    if token_volume:
        c.setdefault("volumeMounts", []).append(
            {"name": token_volume, "readOnly": True, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
        )
    return c


def pod(
    containers: list[dict[str, Any]],
    *,
    namespace: str = "ml-training",
    name: str | None = None,
    generate_name: str | None = "trainer-",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    inject: bool = True,
    automount: bool = True,
    init_containers: list[dict[str, Any]] | None = None,
    volumes: list[dict[str, Any]] | None = None,
    **spec_extra: Any,
) -> dict[str, Any]:
    """A pod as the API server hands it to a mutating webhook on CREATE."""
    meta: dict[str, Any] = {"namespace": namespace}
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = generate_name
    lab = dict(labels or {})
    if inject:
        lab["rdma-webhook.io/inject"] = "true"
    if lab:
        meta["labels"] = lab
    if annotations:
        meta["annotations"] = dict(annotations)
    token = f"kube-api-access-{next(_TOKEN_SUFFIX):05d}"[:22] if automount else None
    spec: dict[str, Any] = {}
    vols = list(volumes or [])
    if token:
        vols.append(
            {
                "name": token,
                "projected": {
                    "defaultMode": 420,
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {
                            "downwardAPI": {
                                "items": [
                                    {
                                        "path": "namespace",
                                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                    }
                                ]
                            }
                        },
                    ],
                },
            }
        )
    if vols:
        spec["volumes"] = vols
    if init_containers:
        spec["initContainers"] = [_default_container(c, token) for c in init_containers]
    spec["containers"] = [_default_container(c, token) for c in containers]
    spec.update(
        {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
        }
    )
    if not automount:
        spec["automountServiceAccountToken"] = False
    spec.update(spec_extra)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def admission_review(
    obj: Any,
    *,
    namespace: str | None = None,
    operation: str = "CREATE",
    uid: str | None = None,
    kind: str = "Pod",
    resource: str = "pods",
) -> dict[str, Any]:
    ns = namespace or ((obj.get("metadata") or {}).get("namespace") if isinstance(obj, dict) else None) or "default"
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid or str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": resource},
            "requestKind": {"group": "", "version": "v1", "kind": kind},
            "requestResource": {"group": "", "version": "v1", "resource": resource},
            "namespace": ns,
            "operation": operation,
            "userInfo": {
                "username": "system:serviceaccount:kubeflow:training-operator",
                "groups": ["system:serviceaccounts", "system:authenticated"],
            },
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def body(review: dict[str, Any]) -> bytes:
    return json.dumps(review).encode()


# -- training runtimes ----------------------------------------------------------------------------


def cluster_training_runtime(
    container: dict[str, Any], *, name: str = "torch-ib", num_nodes: int = 2, pod_labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A Kubeflow Trainer ClusterTrainingRuntime (kubeflow/trainer,
    manifests/base/runtimes/torch_distributed.yaml, trimmed to the replicated job a TrainJob's pods
    are made of): one job `node` whose pods run `container`, with `pod_labels` when given."""
    pod_template: dict[str, Any] = {"spec": {"containers": [container]}}
    if pod_labels is not None:
        pod_template = {"metadata": {"labels": dict(pod_labels)}, **pod_template}
    job = {
        "name": "node",
        "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {"template": pod_template},
        },
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name, "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {
            "mlPolicy": {"numNodes": num_nodes, "torch": {"numProcPerNode": "auto"}},
            "template": {"spec": {"replicatedJobs": [job]}},
        },
    }


# -- training operator pod shapes --------------------------------------------------------------


def pytorchjob_worker(
    job: str = "llama-finetune", index: int = 0, *, env: list[dict[str, Any]] | None = None, gpus: int = 4, **kw: Any
) -> dict[str, Any]:
    """A Kubeflow training-operator PyTorchJob worker pod (seed 003's llama-finetune)."""
    base_env = [
        {"name": "NCCL_SOCKET_IFNAME", "value": "net1"},
        {"name": "NCCL_DEBUG", "value": "INFO"},
        {"name": "NCCL_IB_DISABLE", "value": "0"},
        {"name": "MASTER_PORT", "value": "23456"},
        {"name": "MASTER_ADDR", "value": f"{job}-master-0"},
        {"name": "WORLD_SIZE", "value": "2"},
        {"name": "RANK", "value": str(index + 1)},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "PET_NPROC_PER_NODE", "value": str(gpus)},
        {"name": "PET_NNODES", "value": "2"},
    ]
    c = container(
        "pytorch",
        "my-registry/llama-trainer:v1.2",
        gpus=gpus,
        env=(env if env is not None else base_env),
        command=["torchrun"],
        args=[
            "--nnodes=2",
            f"--nproc_per_node={gpus}",
            "--rdzv_backend=c10d",
            "--rdzv_endpoint=$(MASTER_ADDR):$(MASTER_PORT)",
            "train.py",
            "--fp16",
        ],
        limits={"cpu": "32", "memory": "128Gi"},
        ports=[{"name": "pytorchjob-port", "containerPort": 23456, "protocol": "TCP"}],
    )
    labels = {
        "training.kubeflow.org/job-name": job,
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
        "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": str(index),
    }
    return pod([c], name=f"{job}-worker-{index}", generate_name=None, labels=labels, **kw)


def mpijob_launcher(job: str = "deepspeed-training", *, args: list[str] | None = None, **kw: Any) -> dict[str, Any]:
    """A Kubeflow MPIJob v2beta1 launcher: CPU only, mpirun exports NCCL settings with -x."""
    c = container(
        "launcher",
        "my-registry/deepspeed-trainer:v2.0",
        gpus=None,
        command=["mpirun"],
        args=args
        or [
            "--allow-run-as-root",
            "-np",
            "8",
            "-bind-to",
            "none",
            "-map-by",
            "slot",
            "-x",
            "NCCL_DEBUG=INFO",
            "-x",
            "NCCL_IB_DISABLE=0",
            "-x",
            "NCCL_SOCKET_IFNAME=net1",
            "-x",
            "LD_LIBRARY_PATH",
            "python",
            "train_deepspeed.py",
        ],
        limits={"cpu": "2", "memory": "4Gi"},
        env=[
            {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
            {"name": "OMPI_MCA_orte_default_hostfile", "value": "/etc/mpi/hostfile"},
        ],
    )
    labels = {
        "training.kubeflow.org/job-name": job,
        "training.kubeflow.org/job-role": "launcher",
        "training.kubeflow.org/operator-name": "mpi-operator",
    }
    return pod([c], generate_name=f"{job}-launcher-", labels=labels, **kw)


def mpijob_worker(job: str = "deepspeed-training", index: int = 0, **kw: Any) -> dict[str, Any]:
    c = container(
        "worker",
        "my-registry/deepspeed-trainer:v2.0",
        gpus=4,
        command=["/usr/sbin/sshd"],
        args=["-De"],
        limits={"cpu": "32", "memory": "128Gi"},
    )
    labels = {
        "training.kubeflow.org/job-name": job,
        "training.kubeflow.org/job-role": "worker",
        "training.kubeflow.org/replica-index": str(index),
        "training.kubeflow.org/operator-name": "mpi-operator",
    }
    return pod([c], name=f"{job}-worker-{index}", generate_name=None, labels=labels, **kw)


def lws_worker(group: int = 0, index: int = 1, **kw: Any) -> dict[str, Any]:
    """A LeaderWorkerSet worker (seed 002): the hand-written RDMA lines already present."""
    c = container(
        "training",
        gpus=8,
        command=["/bin/bash", "-c"],
        args=[
            "export NCCL_DEBUG=INFO\nexport NCCL_SOCKET_IFNAME=net1\nexport NCCL_NET=IB\n"
            "torchrun --nproc_per_node=8 --nnodes=2 --node_rank=1 --master_addr=${LWS_LEADER_ADDRESS} multinode.py"
        ],
        limits={"openshift.io/mellanoxrdma": "1"},
        securityContext={"capabilities": {"add": ["IPC_LOCK"]}},
        env=[
            {"name": "LWS_LEADER_ADDRESS", "value": "pytorch-training-0.pytorch-training.ai-training"},
            {"name": "LWS_GROUP_SIZE", "value": "2"},
            {"name": "LWS_WORKER_INDEX", "value": str(index)},
        ],
        volumeMounts=[{"name": "dshm", "mountPath": "/dev/shm"}],
    )
    labels = {
        "leaderworkerset.sigs.k8s.io/name": "pytorch-training",
        "leaderworkerset.sigs.k8s.io/group-index": str(group),
        "leaderworkerset.sigs.k8s.io/worker-index": str(index),
        "leaderworkerset.sigs.k8s.io/group-key": "5c0f2a",
        "apps.kubernetes.io/pod-index": str(index),
    }
    return pod(
        [c],
        name=f"pytorch-training-{group}-{index}",
        generate_name=None,
        namespace="ai-training",
        labels=labels,
        annotations={"k8s.v1.cni.cncf.io/networks": "rdma-network", "leaderworkerset.sigs.k8s.io/size": "2"},
        volumes=[{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}],
        **kw,
    )


def jobset_worker(index: int = 0, **kw: Any) -> dict[str, Any]:
    """A JobSet replicated-job pod (Indexed Job underneath): generateName, completion index."""
    c = container(
        "trainer",
        gpus=8,
        command=["torchrun"],
        args=["--nnodes=4", "train.py"],
        env=[
            {
                "name": "JOB_COMPLETION_INDEX",
                "valueFrom": {
                    "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
                },
            },
            {"name": "MASTER_ADDR", "value": "llm-workers-0-0.llm"},
        ],
    )
    labels = {
        "jobset.sigs.k8s.io/jobset-name": "llm",
        "jobset.sigs.k8s.io/replicatedjob-name": "workers",
        "jobset.sigs.k8s.io/job-index": "0",
        "batch.kubernetes.io/job-name": "llm-workers-0",
        "batch.kubernetes.io/controller-uid": "1f0c5d7e-0000-4000-8000-000000000001",
        "batch.kubernetes.io/job-completion-index": str(index),
    }
    return pod(
        [c],
        generate_name="llm-workers-0-0-",
        labels=labels,
        annotations={"batch.kubernetes.io/job-completion-index": str(index), "jobset.sigs.k8s.io/jobset-name": "llm"},
        subdomain="llm",
        hostname=f"llm-workers-0-{index}",
        **kw,
    )


def seed_sriov_pod(**kw: Any) -> dict[str, Any]:
    """Seed 002's hand-written SR-IOV pod (name set, Multus annotation, exports in a bash -c)."""
    c = container(
        "training",
        gpus=8,
        command=[
            "/bin/bash",
            "-c",
            (
                "export NCCL_DEBUG=INFO\nexport NCCL_SOCKET_IFNAME=net1\nexport NCCL_NET=IB\n"
                "export NCCL_NET_GDR_LEVEL=SYS\nexport NCCL_NET_GDR_READ=1\nexport NCCL_IB_QPS_PER_CONNECTION=4\n"
                "export NCCL_IB_GID_INDEX=3\ntorchrun --nproc_per_node=$NUM_GPUS multinode.py --batch_size 32 1000 25\n"
            ),
        ],
        env=[
            {"name": "NUM_GPUS", "value": "8"},
            {"name": "WORLD_SIZE", "value": "2"},
            {
                "name": "RANK",
                "valueFrom": {
                    "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
                },
            },
            {"name": "MASTER_ADDR", "value": "pytorch-nccl-training-0.training-headless"},
        ],
        limits={"openshift.io/mellanoxrdma": "1"},
        securityContext={"capabilities": {"add": ["IPC_LOCK"]}},
        volumeMounts=[{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "training-data", "mountPath": "/data"}],
    )
    return pod(
        [c],
        name="pytorch-nccl-training",
        generate_name=None,
        namespace="ai-training",
        annotations={"k8s.v1.cni.cncf.io/networks": "rdma-network", "rdma-webhook.io/policy": "sriov-roce"},
        volumes=[
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}},
            {"name": "training-data", "persistentVolumeClaim": {"claimName": "training-data-pvc"}},
        ],
        **kw,
    )
