"""What `rdma-webhook review` reads, and what it refuses as bad input before any decision: files
and directories, kustomize trees that are not rendered yet, and in the pod templates that would
be checked, values the API server would refuse or that are not filled in yet (a number in a
command, an empty quantity, `{{ .Values.gpus }}`, `${NCCL_IB_HCA}`)."""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Iterator

import yaml


class InputError(Exception):
    pass


KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
KUSTOMIZE_GROUP = "kustomize.config.k8s.io"


def _walk(top: str) -> Iterator[tuple[str, list[str]]]:
    """(folder, file names) of `top` and every folder below it, sorted, hidden entries (a name
    starting with ".": .git, .github) left out; a symlink to a folder is followed like a folder,
    and each real folder is walked once, so a link back up the tree (`loop -> ..`) is no loop."""
    seen: set[str] = set()
    for root, dirs, files in os.walk(top, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        yield root, sorted(f for f in files if not f.startswith("."))


def input_files(paths: list[str]) -> tuple[list[str], dict[str, str]]:
    """The files to read: each argument, directories walked recursively for *.yaml, *.yml and
    *.json (hidden entries skipped unless named as an argument; symlinks followed, to files and to
    folders; a file reached twice through links is read once, under the first path found), `-`
    for stdin; and, for each file inside a kustomize tree (a folder holding a kustomization file,
    and everything below it), that tree's kustomization file: such files are bases and patches,
    not the objects the cluster gets."""
    out: list[str] = []
    trees: dict[str, str] = {}
    read: set[str] = set()  # real paths of the files found by walking
    for path in paths:
        if path != "-" and os.path.isdir(path):
            found = []
            roots: list[str] = []
            for root, files in _walk(path):
                marker = next((f for f in KUSTOMIZATION_FILES if f in files), None)
                if marker is not None and not any(root.startswith(r + os.sep) for r in roots):
                    roots.append(root)
                tree = next((r for r in roots if root == r or root.startswith(r + os.sep)), None)
                for f in files:
                    if not (f.endswith((".yaml", ".yml", ".json")) or f == "Kustomization"):
                        continue
                    full = os.path.join(root, f)
                    real = os.path.realpath(full)
                    if real in read:
                        continue
                    read.add(real)
                    found.append(full)
                    if tree is not None:
                        kfile = next(
                            os.path.join(tree, m) for m in KUSTOMIZATION_FILES if os.path.exists(os.path.join(tree, m))
                        )
                        trees[full] = kfile
            out.extend(sorted(found))
        else:
            out.append(path)
            if path != "-" and os.path.basename(path) in KUSTOMIZATION_FILES:
                trees[path] = path
    return out, trees


def documents(path: str) -> list[Any]:
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]  # JSON is YAML too
    except yaml.YAMLError as exc:
        hint = ""
        if PLACEHOLDER.search(text):
            hint = (
                " (it holds a template placeholder such as {{ ... }}: render the template first, "
                "e.g. helm template, or quote the value)"
            )
        raise InputError(f"{path}: not valid YAML or JSON: {exc}{hint}") from None
    out: list[Any] = []
    for doc in docs:
        if (
            isinstance(doc, dict)
            and isinstance(doc.get("kind"), str)
            and doc["kind"].endswith("List")
            and isinstance(doc.get("items"), list)
        ):
            out.extend(doc["items"])
        else:
            out.append(doc)
    return out


def is_kustomization(doc: Any) -> bool:
    """A kustomization file's document (kind Kustomization or Component of kustomize's group)."""
    if not isinstance(doc, dict):
        return False
    api = doc.get("apiVersion")
    return (
        doc.get("kind") in ("Kustomization", "Component") and isinstance(api, str) and api.startswith(KUSTOMIZE_GROUP)
    )


def kustomize_message(kfile: str) -> str:
    tree = os.path.dirname(kfile) or "."
    return (
        f"part of a kustomize tree ({kfile}): its files are bases and patches, not the objects the cluster "
        f"gets; render it first: kubectl kustomize {tree} | rdma-webhook review -"
    )


# -- values that are not what they look like ----------------------------------------------------

# `{{ .Values.gpus }}` (Helm, Argo, Jinja), `${GPUS}` (envsubst, Terraform), `$GPUS` alone.
PLACEHOLDER = re.compile(r"\{\{.*?\}\}|\$\{[^}]*\}")
_BARE_VARIABLE = re.compile(r"^\$[A-Za-z_][A-Za-z0-9_]*$")
# A command word that sets one of the variables the decision reads to a `{{ ... }}` value
# (`${X}` in a command is the shell's own expansion, read as such).
_COMMAND_PLACEHOLDER = re.compile(r"(?:NCCL_|FI_)[A-Za-z0-9_]*=['\"]?\{\{.*?\}\}")
# Environment variables whose values the decision reads.
READ_ENV_PREFIXES = ("NCCL_", "FI_", "NVIDIA_VISIBLE_DEVICES")
# Annotations and labels the decision reads.
READ_META = ("rdma-webhook.io/policy", "k8s.v1.cni.cncf.io/networks")


def _placeholder(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    m = PLACEHOLDER.search(value)
    if m:
        return m.group(0)
    return value if _BARE_VARIABLE.match(value.strip()) else None


def _quantity_problem(value: Any) -> str | None:
    from webhook.grammar import k8s

    if value is None or value == "":
        return "is empty: give a quantity such as 8 (an unrendered template?)"
    found = _placeholder(value)
    if found:
        return f"is {value!r}, a template placeholder ({found}) not filled in yet: render the manifest first"
    try:
        amount = k8s.parse_quantity(value)
    except ValueError:
        return f"is {value!r}, not a quantity (such as 8, 500m or 64Gi): fix the value"
    if not amount.is_finite():
        return f"is {value!r}, not a finite quantity: fix the value"
    return None


def _describe(value: Any) -> str:
    kind = (
        "a boolean"
        if isinstance(value, bool)
        else "a number"
        if isinstance(value, (int, float))
        else "null"
        if value is None
        else f"a {type(value).__name__}"
    )
    return f"{value!r}, {kind}"


def _container_problems(c: dict[str, Any], where: str) -> list[str]:
    out = []
    for key in ("command", "args"):
        items = c.get(key)
        if not isinstance(items, list):
            continue
        for i, item in enumerate(items):
            if not isinstance(item, str):
                quoted = "'true'" if item is True else "'false'" if item is False else f"'{item}'"
                out.append(
                    f"{where}: {key}[{i}] is {_describe(item)}, not a string; the API server refuses such a "
                    f"pod and no setting after it would be read: quote it ({quoted})"
                )
            else:
                m = _COMMAND_PLACEHOLDER.search(item)
                if m:
                    out.append(
                        f"{where}: {key}[{i}] sets {m.group(0)}, a template placeholder not filled in yet: "
                        f"render the manifest first"
                    )
    env = c.get("env")
    for i, e in enumerate(env if isinstance(env, list) else ()):
        if not isinstance(e, dict):
            continue
        name, value = e.get("name"), e.get("value")
        label = f"env[{i}] ({name})" if isinstance(name, str) else f"env[{i}]"
        if "value" in e and value is not None and not isinstance(value, str):
            quoted = "'true'" if value is True else "'false'" if value is False else f"'{value}'"
            out.append(
                f"{where}: {label} value is {_describe(value)}, not a string; the API server refuses such a "
                f"pod: quote it ({quoted})"
            )
        elif isinstance(name, str) and name.startswith(READ_ENV_PREFIXES) and _placeholder(value):
            out.append(
                f"{where}: {label} value {value!r} is a template placeholder not filled in yet; the decision "
                f"reads this variable: render the manifest first"
            )
    resources = c.get("resources")
    for section in ("limits", "requests"):
        values = resources.get(section) if isinstance(resources, dict) else None
        for res, value in values.items() if isinstance(values, dict) else ():
            problem = _quantity_problem(value)
            if problem:
                out.append(f"{where}: resources.{section}[{res}] {problem}")
    return out


def template_problems(path: str, template: Any) -> list[str]:
    """What in one pod template (or pod) is bad input for the decision, each naming the template,
    the container and the field, and what to do."""
    if not isinstance(template, dict):
        return []
    out = []
    prefix = f"{path}, " if path else ""
    meta = template.get("metadata")
    for section in ("annotations", "labels"):
        values = meta.get(section) if isinstance(meta, dict) else None
        for key in READ_META:
            value = values.get(key) if isinstance(values, dict) else None
            if _placeholder(value):
                out.append(
                    f"{prefix}metadata.{section}[{key}] is {value!r}, a template placeholder not filled in "
                    f"yet: render the manifest first"
                )
    spec = template.get("spec")
    for kind in ("containers", "initContainers"):
        items = spec.get(kind) if isinstance(spec, dict) else None
        for i, c in enumerate(items if isinstance(items, list) else ()):
            if isinstance(c, dict):
                name = c.get("name")
                label = f"container {name}" if isinstance(name, str) and name else f"{kind}[{i}]"
                if kind == "initContainers" and isinstance(name, str) and name:
                    label = f"init container {name}"
                out.extend(_container_problems(c, f"{prefix}{label}"))
    return out


# -- reading every input first ------------------------------------------------------------------


class Inputs:
    """What the input holds: the documents of each file (in order), the kustomize tree of each file
    inside one, and the RdmaPolicy documents, (where, document)."""

    def __init__(self, trees: dict[str, str]):
        self.files: list[tuple[str, list[Any]]] = []
        self.trees = trees
        self.policy_docs: list[tuple[str, Any]] = []


def read(
    paths: list[str],
    namespace: str | None,
    cluster_state: str | None,
    state: Any,
    runtimes: Any,
    config_maps: Any,
    report: Any,
) -> Inputs:
    """Every input, read before any document is judged (a TrainJob's runtime, a Namespace or a
    policy may come later in the same file, or in another one). The cluster state the input
    carries goes where the decision looks it up: ConfigMaps (the scripts containers run from
    ConfigMap volumes) into `config_maps`, Trainer runtimes into `runtimes`, DRA objects and
    Namespaces into `state`. An unreadable file is bad input, told to `report`."""
    from webhook.cli.review_report import record_of
    from webhook.cli.review_scope import is_namespace, is_policy_document
    from webhook.cluster.state import is_dra, is_runtime
    from webhook.core.scripts import is_config_map

    files, trees = input_files(paths)
    inputs = Inputs(trees)
    for path in files:
        try:
            docs = documents(path)
        except InputError as exc:
            report.bad(str(exc), {**record_of(path, 0, None), "document": 0})
            continue
        inputs.files.append((path, docs))
        if path in trees:
            continue
        for i, doc in enumerate(docs, 1):
            where = f"{path}#{i}" if len(docs) > 1 else path
            if is_config_map(doc):
                config_maps.add(doc, namespace or "default")
            elif is_runtime(doc):
                runtimes.add(doc, namespace or "default")
            elif is_dra(doc):
                state.dra.add(doc, namespace or "default")
            elif is_policy_document(doc):
                inputs.policy_docs.append((where, doc))
            elif is_namespace(doc):
                state.add(doc, where, cluster_state)
    return inputs
