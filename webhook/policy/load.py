"""Policy files to a `PolicySet`: every *.yaml of a folder read (duplicate keys refused),
compiled, and loaded all or nothing, so that a reload never half-applies."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

import yaml

from webhook.core.model import Policy, PolicySet
from webhook.policy.compiler import PolicyError, compile_policy


class _StrictLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key given twice in one mapping (SafeLoader keeps the last
    silently, so a second `nccl:` block would drop the first without a word)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            keys_seen: set[Any] = set()
            for key_node, _ in node.value:  # the keys as written: a `<<` merge may be overridden
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=deep)
                if isinstance(key, (str, int, float, bool)) and key in keys_seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found duplicate key {key!r}",
                        key_node.start_mark,
                    )
                keys_seen.add(key)
        return super().construct_mapping(node, deep=deep)


def policy_files(directory: str | os.PathLike[str]) -> list[Path]:
    """The policy files of a folder: *.yaml and *.yml, not hidden (a mounted ConfigMap keeps its
    real files in hidden `..data` folders and exposes them through symlinks)."""
    root = Path(directory)
    return sorted(
        p for p in root.iterdir() if p.suffix in (".yaml", ".yml") and not p.name.startswith(".") and p.is_file()
    )


def read_documents(path: str) -> tuple[list[Any], list[PolicyError]]:
    """The YAML documents of one policy file (not null), or why it cannot be read."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [], [PolicyError(path, None, None, f"cannot read: {exc}")]
    try:
        return [d for d in yaml.load_all(text, Loader=_StrictLoader) if d is not None], []
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else None
        return [], [PolicyError(path, None, where, f"not valid YAML: {getattr(exc, 'problem', None) or exc}")]


def load_texts(
    texts: Iterable[tuple[str, str]], allow_empty: bool = False
) -> tuple[PolicySet | None, list[PolicyError]]:
    """Compile (file name, YAML text) pairs into a PolicySet, or return every error found. No
    policy at all is an error unless `allow_empty` (the server: an install with none chosen)."""
    errors: list[PolicyError] = []
    policies: list[Policy] = []
    seen: dict[str, str] = {}
    for file, text in texts:
        try:
            docs = [d for d in yaml.load_all(text, Loader=_StrictLoader) if d is not None]
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
            errors.append(
                PolicyError(file, None, None, f"{where}not valid YAML: {getattr(exc, 'problem', None) or exc}")
            )
            continue
        for doc in docs:
            if not isinstance(doc, dict):
                errors.append(
                    PolicyError(
                        file, None, None, f"each YAML document must be a policy mapping, not {type(doc).__name__}"
                    )
                )
                continue
            policy, errs = compile_policy(doc, file)
            errors.extend(errs)
            if policy is None:
                continue
            if policy.name in seen:
                errors.append(
                    PolicyError(
                        file, policy.name, "name", f"duplicate policy name, also defined in {seen[policy.name]}"
                    )
                )
                continue
            seen[policy.name] = file
            policies.append(policy)
    if errors:
        return None, errors
    if not policies and not allow_empty:
        return None, [PolicyError("(policies)", None, None, "no policies found")]
    return PolicySet(policies), []


def load_dir(
    directory: str | os.PathLike[str], allow_empty: bool = False
) -> tuple[PolicySet | None, list[PolicyError]]:
    """Load every policy file of a folder, all or nothing. An empty folder is an error unless
    `allow_empty`: the server's folder is empty until the platform team chooses a policy (the
    shipped ones are a catalogue), and that is a configuration, not a broken one."""
    try:
        files = policy_files(directory)
    except OSError as exc:
        return None, [
            PolicyError(str(directory), None, None, f"cannot read the policies folder: {exc.strerror or exc}")
        ]
    texts = []
    errors = []
    for path in files:
        try:
            texts.append((str(path), path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as exc:
            errors.append(PolicyError(str(path), None, None, f"cannot read: {exc}"))
    if not files and not allow_empty:
        return None, [PolicyError(str(directory), None, None, "no *.yaml policy files in the folder")]
    policies, more = load_texts(texts, allow_empty)
    errors.extend(more)
    return (None, errors) if errors else (policies, [])


IMAGE_CATALOGUE = Path("/usr/share/rdma-webhook/catalogue")  # where the Containerfile puts the catalogue


def default_policies_dir() -> Path:
    """The shipped policy catalogue: the repository's policies/ folder (beside the package), or
    the image's copy."""
    here = Path(__file__).resolve().parents[2] / "policies"
    return here if here.is_dir() else IMAGE_CATALOGUE
