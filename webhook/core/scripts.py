"""Scripts a container runs from ConfigMap volumes (`bash /scripts/train.sh`, `source
/scripts/env.sh`): which file of which ConfigMap each mounted path is, and its text when the
ConfigMap is handed in.

No I/O and no API call: the ConfigMaps are handed to the decision already resolved (`ConfigMaps`,
as the namespace and the attachments are). `rdma-webhook review` hands in those of its input;
`/mutate` and `/validate` hand in none (no per-request API call), so such a script is named in a
warning as not read. The reading itself is `webhook.commands.reader.read`.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol

from webhook.commands.files import Files, normal_path


class ConfigMaps(Protocol):
    """The ConfigMaps at hand: a ConfigMap's `data`, None when it is not known."""

    def config_map(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...


def is_config_map(doc: Any) -> bool:
    return (
        isinstance(doc, dict)
        and doc.get("kind") == "ConfigMap"
        and doc.get("apiVersion") == "v1"
        and isinstance(doc.get("metadata"), dict)
        and isinstance(doc["metadata"].get("name"), str)
    )


class ConfigMapStore:
    """ConfigMaps given with the object judged (`rdma-webhook review`'s input, a List at
    `/validate`), by namespace and name; then those of `base`, if any."""

    def __init__(self, base: ConfigMaps | None = None) -> None:
        self.by_key: dict[tuple[str, str], dict[str, Any]] = {}
        self.base = base

    def add(self, doc: dict[str, Any], default_namespace: str) -> None:
        meta: dict[str, Any] = doc["metadata"]
        data = doc.get("data")
        ns = meta.get("namespace") or default_namespace
        self.by_key[(str(ns), str(meta["name"]))] = dict(data) if isinstance(data, dict) else {}

    def config_map(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        found = self.by_key.get((namespace, name))
        if found is None and self.base is not None:
            return self.base.config_map(namespace, name)
        return found


def _sources(volume: dict[str, Any]) -> list[dict[str, Any]]:
    """The configMap sources of a volume: a `configMap` volume, or a `projected` one's."""
    cm = volume.get("configMap")
    if isinstance(cm, dict):
        return [cm]
    projected = volume.get("projected")
    out: list[dict[str, Any]] = []
    found = projected.get("sources") if isinstance(projected, dict) else None
    if isinstance(found, list):
        for source in found:
            if isinstance(source, dict) and "serviceAccountToken" in source:
                return []  # the API server's token volume (its configMap is kube-root-ca.crt): in every pod
            if isinstance(source, dict) and isinstance(source.get("configMap"), dict):
                out.append(source["configMap"])
    return out


def config_volumes(spec: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Volume name -> its configMap sources, for the volumes that have any (most pods: none)."""
    out: dict[str, list[dict[str, Any]]] = {}
    volumes = spec.get("volumes")
    if not isinstance(volumes, list):
        return out
    for v in volumes:
        if isinstance(v, dict) and ("configMap" in v or "projected" in v):
            sources = _sources(v)
            name = v.get("name")
            if sources and isinstance(name, str):
                out[name] = sources
    return out


def _volume_files(source: dict[str, Any], data: Mapping[str, Any] | None) -> dict[str, str | None] | None:
    """Path in the volume -> text (None: the ConfigMap is not at hand); None when the files are
    not known (no `items` and no data)."""
    items = source.get("items")
    if isinstance(items, list) and items:
        out: dict[str, str | None] = {}
        for item in items:
            if isinstance(item, dict) and isinstance(item.get("key"), str) and isinstance(item.get("path"), str):
                text = data.get(item["key"]) if data is not None else None
                if data is None or isinstance(text, str):
                    out[item["path"]] = text if isinstance(text, str) else None
        return out
    if data is None:
        return None
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}


def may_name_a_mount(container: dict[str, Any], line: str) -> bool:
    """Whether the command `line` may name a file under one of the container's mounts (any
    volume: which are ConfigMaps is looked up only after): a mount path in it, a path relative
    to the working directory, or a working directory under a mount. Every labelled pod with a
    command pays this, so it is a few substring tests (`Files.mentioned` is the exact test,
    and never true where this is false)."""
    mounts = container.get("volumeMounts")
    if not isinstance(mounts, list) or not mounts:
        return False
    found_wd = container.get("workingDir")
    wd = normal_path(found_wd) if isinstance(found_wd, str) and found_wd else ""
    has_wd = bool(wd)
    wd = wd.rstrip("/")  # "/" becomes "", so that wd + "/" is the directory's prefix
    absolute = "/" in line
    if not absolute and not has_wd:  # `torchrun ... train.py`: no path a mount could hold
        return False
    for m in mounts:
        if not isinstance(m, dict):
            continue
        mount: dict[str, Any] = m
        path = mount.get("mountPath")
        if not isinstance(path, str) or not path.startswith("/"):
            continue
        path = normal_path(path).rstrip("/")
        if not path or (absolute and path in line):  # a mount at / holds every path
            return True
        if has_wd:
            if (wd + "/").startswith(path + "/"):
                return True
            if path.startswith(wd + "/") and path[len(wd) + 1 :] in line:
                return True
    return False


def files_of(
    container: dict[str, Any], volumes: dict[str, list[dict[str, Any]]], namespace: str, config_maps: ConfigMaps | None
) -> Files | None:
    """The ConfigMap files `container` sees through its volumeMounts, None when it mounts none."""
    mounts = container.get("volumeMounts")
    if not isinstance(mounts, list):
        return None
    wd = container.get("workingDir")
    files = Files(wd if isinstance(wd, str) else "")
    for m in mounts:
        if not isinstance(m, dict):
            continue
        name, path = m.get("name"), m.get("mountPath")
        sources = volumes.get(name) if isinstance(name, str) else None
        if not sources or not isinstance(path, str) or not path.startswith("/"):
            continue
        sub = m.get("subPath")
        sub_path = sub.strip("/") if isinstance(sub, str) else ""
        for source in sources:
            cm = source.get("name")
            if not isinstance(cm, str):
                continue
            data = config_maps.config_map(namespace, cm) if config_maps is not None else None
            in_volume = _volume_files(source, data)
            if in_volume is None:
                if not sub_path:
                    files.add_dir(path, cm)
                else:
                    files.add_file(path, None, cm)  # one file of a ConfigMap not at hand
                continue
            for rel, text in in_volume.items():
                rel = rel.strip("/")
                if not sub_path:
                    files.add_file(path.rstrip("/") + "/" + rel, text, cm)
                elif rel == sub_path:
                    files.add_file(path, text, cm)
                elif rel.startswith(sub_path + "/"):
                    files.add_file(path.rstrip("/") + "/" + rel[len(sub_path) + 1 :], text, cm)
    return files if files else None


class PodVolumes:
    """A pod's ConfigMap volumes (`config_volumes`), found when first asked for, once per pod."""

    __slots__ = ("spec", "_found")

    def __init__(self, spec: dict[str, Any]):
        self.spec = spec
        self._found: dict[str, list[dict[str, Any]]] | None = None

    def get(self) -> dict[str, list[dict[str, Any]]]:
        if self._found is None:
            self._found = config_volumes(self.spec)
        return self._found


class MountedFiles:
    """The ConfigMap files a container sees (`files_of`), built on the first question: the
    reading asks only when the command runs a file by path, and a remembered reading that
    asked nothing never builds them (`webhook.commands.reader.read`)."""

    __slots__ = ("container", "volumes", "namespace", "config_maps", "_files", "_built")

    def __init__(self, container: dict[str, Any], volumes: PodVolumes, namespace: str, config_maps: ConfigMaps | None):
        self.container = container
        self.volumes = volumes
        self.namespace = namespace
        self.config_maps = config_maps
        self._files: Files | None = None
        self._built = False

    def files(self) -> Files | None:
        if not self._built:
            self._built = True
            volumes = self.volumes.get()
            self._files = files_of(self.container, volumes, self.namespace, self.config_maps) if volumes else None
        return self._files

    def lookup(self, path: str) -> tuple[str | None, str] | None:
        if not path.startswith("/") and not self.container.get("workingDir"):
            return None  # a relative path without a working dir is no file here (`Files.lookup`): not worth the map
        files = self.files()
        return files.lookup(path) if files is not None else None

    def mentioned(self, text: str) -> bool:
        files = self.files()
        return files.mentioned(text) if files is not None else False
