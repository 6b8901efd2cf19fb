"""The AdmissionReview envelope and the judge inside it: a request body in, the judge's decision
on its pod or workload (`judge`), the response out with its patch, warnings and status (`review`).
No I/O: the HTTP layer calls `review`; `rdma-webhook review` calls the judge directly."""
