"""The pure decision: `decide(pod, namespace, policies)` -> mutated pod, denials, warnings, with
no I/O. `model` holds a loaded policy as the decision reads it, `targets` who gets RDMA and who
is checked, `subject` what the rules look at, `fallback` the TCP-fallback rules, `pod_warnings`
what an admitted pod is warned about, `mutation` what a policy adds, `patch` the JSON Patch
derived from the pod as sent. Imports nothing from kinds, policy loading, cluster state,
serving or the CLI."""
