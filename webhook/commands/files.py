"""Script files a container sees from ConfigMap volumes, as the reading takes them (`Files`),
what a reading found (`Reading`), and the rest of what it takes (the env `Lookup`, a `Budget`). No I/O: the files' text is handed in already resolved
(`webhook.core.scripts` builds them from the pod and the ConfigMaps at hand)."""

from __future__ import annotations

import posixpath
from typing import Protocol


class Lookup(Protocol):
    """The container's own env: a variable's value, None when it has none that is known."""

    def get(self, name: str) -> str | None: ...


class Budget:
    """What one decision may spend on reading commands: bytes of script parsed (the rest get the
    textual reading) and steps of the reading (each variable copied or command read is one), so
    that a decision stays linear in its input whatever a pod's scripts hold."""

    __slots__ = ("parse_bytes", "steps")

    def __init__(self, parse_bytes: int = 64 * 1024, steps: int = 200_000):
        self.parse_bytes = parse_bytes
        self.steps = steps


class FileSource(Protocol):
    """Where the reading looks a script file up: `Files`, or something that builds them only
    when first asked (`webhook.core.scripts.MountedFiles`: most readings never ask)."""

    def lookup(self, path: str) -> tuple[str | None, str] | None: ...

    def mentioned(self, text: str) -> bool: ...


def normal_path(path: str) -> str:
    """`posixpath.normpath`, called only for a path that needs it (it is interpreted code), with
    a leading `//` made `/` as Linux reads it (normpath keeps exactly two, which POSIX leaves to
    the implementation: `//etc` stayed `//etc`, and a mount there never matched `/etc`)."""
    if not ("//" in path or "/." in path or path.endswith("/")):
        return path
    out = posixpath.normpath(path)
    return "/" + out.lstrip("/") if out.startswith("//") else out


class Files:
    """The files a container sees from ConfigMap volumes, handed in already resolved (the
    reading does no I/O): a path's text, or None when the ConfigMap is not at hand (then the
    script is named as not read), and the ConfigMap it comes from. `add_dir`: a mount whose
    keys are not known (its ConfigMap is not at hand), every path under it is such a file."""

    def __init__(self, working_dir: str = ""):
        self.files: dict[str, tuple[str | None, str]] = {}
        self.dirs: list[tuple[str, str]] = []
        self.working_dir = working_dir

    def add_file(self, path: str, text: str | None, source: str) -> None:
        self.files[normal_path(path)] = (text, source)

    def add_dir(self, path: str, source: str) -> None:
        self.dirs.append((normal_path(path).rstrip("/") + "/", source))

    def __bool__(self) -> bool:
        return bool(self.files) or bool(self.dirs)

    def lookup(self, path: str) -> tuple[str | None, str] | None:
        """(text or None, ConfigMap) of the file at `path`, None when it is not one of these."""
        if not path or "$" in path:
            return None
        if not path.startswith("/"):
            if not self.working_dir:
                return None
            path = self.working_dir.rstrip("/") + "/" + path
        path = normal_path(path)
        found = self.files.get(path)
        if found is not None:
            return found
        for prefix, source in self.dirs:
            if path.startswith(prefix):
                return None, source
        return None

    def mentioned(self, text: str) -> bool:
        """Whether `text` may name one of the files (the pre-check before reading a command)."""
        if self.working_dir:
            wd = normal_path(self.working_dir)
            for prefix, _ in self.dirs:
                if (wd + "/").startswith(prefix):
                    return True
            for path in self.files:
                if path.startswith(wd + "/") and path[len(wd) + 1 :] in text:
                    return True
        for path in self.files:
            if path in text:
                return True
        for prefix, _ in self.dirs:
            if (prefix[:-1] or "/") in text:  # a mount at / holds only what an absolute path names
                return True
        return False


class Reading:
    """What `read` found: the settings in order, the script file each was made in (when it was
    one of `Files`), and the scripts that were run but could not be read (path, ConfigMap)."""

    def __init__(
        self, found: list[tuple[str, str]], origins: dict[tuple[str, str], str], unread: list[tuple[str, str]]
    ):
        self.found = found
        self.origins = origins
        self.unread = unread
