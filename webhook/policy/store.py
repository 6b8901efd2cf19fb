"""The policies in force while serving, reloaded atomically when the folder changes.

A mounted ConfigMap updates by swapping a `..data` symlink, so the folder is polled by the stat
of each policy file (through the symlinks) rather than by inotify events on the links. A change
is loaded whole (an empty folder too: no policy chosen yet, which every labelled pod is denied
for, is a valid configuration); if any file is invalid the reload is rejected, logged with file, policy and
field, counted, and the last good policies stay in force. Readers take `current` (one attribute
read, so a swap is atomic for them).
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from webhook.telemetry import metrics
from webhook.core.model import PolicySet
from webhook.policy.load import load_dir, policy_files

log = logging.getLogger("rdma_webhook.policies")


class PolicyStore:
    def __init__(self, directory: str | os.PathLike[str], interval: float = 2.0):
        self.directory = Path(directory)
        self.interval = interval
        self.current: PolicySet | None = None
        self.last_errors: list[str] = []
        self._signature: object = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _stat_signature(self) -> object:
        try:
            files = policy_files(self.directory)
        except OSError as exc:
            return ("error", str(exc))
        sig = []
        for path in files:
            try:
                st = os.stat(path)
            except OSError:
                continue
            sig.append((path.name, st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(sig)

    def reload(self, force: bool = False) -> bool:
        """Load the folder if it changed; returns whether the policies in force changed."""
        signature = self._stat_signature()
        if not force and signature == self._signature:
            return False
        self._signature = signature
        policies, errors = load_dir(self.directory, allow_empty=True)
        if policies is None:
            self.last_errors = [str(e) for e in errors]
            metrics.RELOADS.labels("failure").inc()
            metrics.RELOAD_OK.set(0)
            for err in errors:
                log.error(
                    "policy reload rejected; keeping the last good policies: %s",
                    err,
                    extra={"file": err.file, "policy": err.policy, "field": err.field},
                )
            return False
        self.current = policies
        self.last_errors = []
        metrics.RELOADS.labels("success").inc()
        metrics.RELOAD_OK.set(1)
        metrics.POLICIES.set(len(policies))
        if len(policies):
            log.info("policies loaded: %s", ", ".join(sorted(policies.by_name)))
        else:
            log.warning(
                "no policy in force (the folder holds none): labelled pods in opted-in namespaces are "
                "denied until the platform team chooses one"
            )
        return True

    def start(self) -> None:
        """Poll for changes in a daemon thread (call after fork, in each worker)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="policy-reload", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.reload()
            except Exception:  # never let the watcher die; the next tick tries again
                log.exception("policy reload crashed")

    def stop(self) -> None:
        self._stop.set()
