"""A short soak (tests/soak.py for 30 s): mixed valid, invalid and denied reviews from 16
clients over keep-alive and fresh TLS connections, while a policy file is rewritten every 3 s
(alternately valid and invalid) and the serving certificate is rotated every 4 s. Every request
is answered, none with a 5xx, the server's counters match the clients', no worker is replaced,
and the RSS of each server process grows by less than 20 MiB. The long run:
`.venv/bin/python -m tests.soak --minutes 10`."""

from __future__ import annotations

import soak

SECONDS = 30


def test_soak_short(tmp_path, capsys):
    summary = soak.run(SECONDS, tmp_path, clients=16, reload_every=3.0, rotate_every=4.0, log=lambda *_: None)
    with capsys.disabled():
        print("\n" + soak.format_summary(summary))
    assert summary["problems"] == [], soak.format_summary(summary)
    assert summary["sent"] == summary["answered"] > 1000
    assert summary["5xx"] == 0
    assert summary["rotations"] >= 5 and summary["serving_certificates_seen"] >= 3
    assert summary["server_reloads"]["success"] >= 2 and summary["server_reloads"]["failure"] >= 2
    assert set(summary["by_kind"]) == {"mutated", "denied", "skipped", "malformed", "envelope", "not-json", "healthz"}
