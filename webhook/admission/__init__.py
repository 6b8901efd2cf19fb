"""The AdmissionReview envelope: a request body in, the core's (or a workload's) decision, the
response out with its patch, warnings and status. No I/O: the HTTP layer and `review` call it."""
