"""The verifier: each admitted pod's NCCL transport read from its own log, once per container
start, and shown where people look (a pod condition, Events, a metric). docs/proof.md."""
