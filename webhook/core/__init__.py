"""The pure decision: `decide(pod, namespace, policies)` -> mutated pod, denials, warnings, with
no I/O. `model` holds a loaded policy as the decision reads it, `fallback` the TCP-fallback
rules, `mutation` what a policy adds, `patch` the JSON Patch derived from the pod as sent.
Imports nothing from kinds, policy loading, cluster state, serving or the CLI."""
