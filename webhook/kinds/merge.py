"""Strategic merge patch, the subset that pod templates use: maps merged key by key, lists of
containers, env, volumes, ... merged by their merge key, everything else replaced. Kinds whose
controllers build pods from a base and a patch (Trainer runtimes and TrainJob overrides,
LeaderWorkerSet and RoleBasedGroup templates, Argo pod metadata) merge through it, so that what is
checked is what the controller will make."""

from __future__ import annotations

import copy
from typing import Any

# The merge keys of the lists the Kubernetes API merges by key (patchMergeKey in k8s.io/api);
# every other list is replaced whole, as a strategic merge patch does.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "schedulingGates": "name",
    "resourceClaims": "name",
    "claims": "name",
    "hostAliases": "ip",
}


def strategic_merge(base: Any, patch: Any, key: str = "") -> Any:
    """`patch` applied to `base` as the API machinery's strategic merge patch does for pod
    templates: maps merge recursively (null deletes a key), lists with a merge key merge item
    by item (`$patch: delete` removes one), other lists and scalars replace. A new object."""
    if isinstance(patch, dict):
        if patch.get("$patch") == "replace":
            return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
        out = copy.deepcopy(base) if isinstance(base, dict) else {}
        for k, v in patch.items():
            if k.startswith("$"):
                continue
            if v is None:
                out.pop(k, None)
            else:
                out[k] = strategic_merge(out.get(k), v, k)
        return out
    merge_key = MERGE_KEYS.get(key)
    if isinstance(patch, list) and merge_key and isinstance(base, list):
        out_list = copy.deepcopy(base)
        for item in patch:
            if not isinstance(item, dict) or merge_key not in item:
                out_list.append(copy.deepcopy(item))
                continue
            at = next(
                (i for i, b in enumerate(out_list) if isinstance(b, dict) and b.get(merge_key) == item[merge_key]), None
            )
            if item.get("$patch") == "delete":
                if at is not None:
                    del out_list[at]
            elif at is None:
                out_list.append(strategic_merge({}, item))
            else:
                out_list[at] = strategic_merge(out_list[at], item)
        return out_list
    return copy.deepcopy(patch)
