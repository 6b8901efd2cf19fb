"""rdma-webhook: inject RDMA device, Multus network, /dev/shm, IPC_LOCK and NCCL settings into
GPU training pods, and refuse pods whose NCCL would silently fall back to TCP sockets."""

__version__ = "0.1.0"
