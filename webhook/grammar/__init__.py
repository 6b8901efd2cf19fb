"""Other people's languages, read as they read them: Kubernetes quantities, names and selectors
(`k8s`), and NCCL's own parsing of its environment (`nccl`). No policy, no decision."""
