"""The benchmarks: scripts run from the checkout's root as `python -m benchmarks.NAME` (README.md
here lists them and the results each stored). A package so that they import one another, the
e2e suite's helpers (`e2e.cluster`, `e2e.admission_policy_pods`) and tests/kube_objects.py by
their names, and never a test module. Not part of the shipped `webhook` package: what is
measured here and not served by `rdma-webhook serve` (granian, gunicorn's gthread worker, the
floors) lives here only.
"""
