"""Proof at run time: NCCL's own log read (nccl_log), what a policy promised in its terms
(expectation), and the verdict (verdict). Pure functions of text and a policy, no I/O beyond the
stream handed in: the `nccl-log` command and the verifier both call them."""
