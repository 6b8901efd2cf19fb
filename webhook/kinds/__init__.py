"""Workload kinds: where each kind keeps its pod templates (`workloads`, one table entry per
kind), how controllers merge them (`merge`, `trainer`), and the verdict of the decision on
every labelled template (`verdict`)."""
