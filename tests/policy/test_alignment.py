"""`policy lint --cluster-state` (webhook/policy/alignment.py): whether the cluster's ResourceSlices
can satisfy each aligned claim. The GB200 tray of the issue (kubernetes-sigs/dra-driver-nvidia-gpu
#1123: its NICs share no PCIe root with a GPU) against the shipped pcieRoot-aligned policy is an
error naming the node; the same policy aligned on the NUMA node passes there; an HGX node whose
NICs sit beside its GPUs passes either way. The slices are shaped as the drivers publish them
(resource.k8s.io/v1 ResourceSlice, spec.devices[].attributes; NVIDIA's GPU DRA driver and DRANET,
which publishes its RDMA NICs with the standard attributes)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from webhook.policy.alignment import check, objects_of
from webhook.policy.claim_template import aligned_template
from webhook.policy.load import load_texts

ROOT = Path(__file__).resolve().parent.parent.parent
ALIGNED = (ROOT / "policies" / "roce-dranet-aligned.yaml").read_text()
PCIE, NUMA = "resource.kubernetes.io/pcieRoot", "resource.kubernetes.io/numaNode"


def slice_of(node: str, driver: str, devices: list[dict], v1beta1: bool = False) -> dict:
    if v1beta1:  # the older API: the attributes under `basic`
        devices = [{"name": d["name"], "basic": {"attributes": d["attributes"]}} for d in devices]
    return {
        "apiVersion": "resource.k8s.io/v1beta1" if v1beta1 else "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def gpus(roots: list[str], numa: list[int]) -> list[dict]:
    return [
        {"name": f"gpu-{i}", "attributes": {PCIE: {"string": r}, NUMA: {"int": n}, "productName": {"string": "GB200"}}}
        for i, (r, n) in enumerate(zip(roots, numa))
    ]


def nics(roots: list[str], numa: list[int], rdma: bool = True) -> list[dict]:
    return [
        {
            "name": f"nic-{i}",
            "attributes": {PCIE: {"string": r}, "dra.net/numaNode": {"int": n}, "dra.net/rdma": {"bool": rdma}},
        }
        for i, (r, n) in enumerate(zip(roots, numa))
    ]


def gb200(node="gb200-tray-0", v1beta1=False) -> list[dict]:
    """Four GPUs on their own PCIe roots, four ConnectX NICs on the Grace CPU's: no root shared."""
    return [
        slice_of(
            node,
            "gpu.nvidia.com",
            gpus([f"pci000{i}:00" for i in (8, 9)] + ["pci0018:00", "pci0019:00"], [0, 0, 1, 1]),
            v1beta1,
        ),
        slice_of(
            node, "dra.net", nics(["pci0000:00", "pci0002:00", "pci0010:00", "pci0012:00"], [0, 0, 1, 1]), v1beta1
        ),
    ]


def hgx(node="hgx-0", pairs=8) -> list[dict]:
    """Eight GPUs, each with a NIC under its PCIe switch (and one NIC without RDMA)."""
    roots = [f"pci00{i:02d}:00" for i in range(8)]
    return [
        slice_of(node, "gpu.nvidia.com", gpus(roots, [0] * 4 + [1] * 4)),
        slice_of(node, "dra.net", nics(roots[:pairs], [0] * 4 + [1] * 4) + nics(["pci00ff:00"], [0], rdma=False)),
    ]


def policies(text: str = ALIGNED):
    ps, errors = load_texts([("p.yaml", text)])
    assert ps is not None, [str(e) for e in errors]
    return ps


NUMA_ALIGNED = ALIGNED.replace("  aligned: true\n", "  aligned: true\n  alignment: numaNode\n")


def test_pcie_root_alignment_cannot_be_met_on_a_gb200_tray():
    errors, warnings = check(policies(), gb200() + hgx())
    assert len(errors) == 1 and warnings == []
    assert errors[0].startswith(
        "policy 'roce-dranet-aligned': claim.alignment pcieRoot: on gb200-tray-0 (4 GPUs, 4 NICs) no GPU has a "
        f"NIC with its {PCIE}"
    )
    assert "hgx-0" not in errors[0] and "claim.alignment: numaNode" in errors[0]
    assert check(policies(), hgx()) == ([], [])
    assert len(check(policies(), gb200(v1beta1=True))[0]) == 1  # v1beta1 slices read alike


def test_numa_alignment_fits_the_gb200_tray_and_the_hgx_node():
    ps = policies(NUMA_ALIGNED)
    assert ps.get("roce-dranet-aligned").claim.attribute == NUMA
    assert check(ps, gb200() + hgx()) == ([], [])


def test_a_node_with_fewer_pairs_than_gpus_is_a_warning():
    errors, warnings = check(policies(), hgx(pairs=6))
    assert errors == []
    assert warnings == [
        f"policy 'roce-dranet-aligned': node hgx-0: only 6 of its 8 GPUs have a NIC with their {PCIE}: "
        "a pod asking for more GPUs than that cannot be placed there"
    ]


def test_nothing_to_check_is_said_and_policies_without_alignment_are_left_alone():
    errors, warnings = check(policies(), [])
    assert errors == [] and "could not be checked" in warnings[0]
    plain = (ROOT / "policies" / "gb200-roce.yaml").read_text()
    assert check(policies(plain), gb200()) == ([], [])


def test_the_template_of_a_numa_aligned_claim_matches_on_the_numa_node():
    claim = policies(NUMA_ALIGNED).get("roce-dranet-aligned").claim
    doc = aligned_template("t", 2, "gpu.nvidia.com", "rdma", attribute=claim.attribute)
    assert [c["matchAttribute"] for c in doc["spec"]["spec"]["devices"]["constraints"]] == [NUMA, NUMA]


def test_alignment_only_with_an_aligned_claim():
    ps, errors = load_texts([("p.yaml", ALIGNED.replace("  aligned: true\n", "  alignment: numaNode\n"))])
    assert ps is None and any("claim.alignment: only meaningful with claim.aligned: true" in str(e) for e in errors)


def lint(tmp_path: Path, state: list[dict] | str, policy_text: str = ALIGNED) -> subprocess.CompletedProcess:
    folder = tmp_path / "policies"
    folder.mkdir(exist_ok=True)
    (folder / "p.yaml").write_text(policy_text)
    file = tmp_path / "state.yaml"
    file.write_text(
        state if isinstance(state, str) else yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": state})
    )
    return subprocess.run(
        [sys.executable, "-m", "webhook", "policy", "lint", str(folder), "--cluster-state", str(file)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def test_cli(tmp_path):
    bad = lint(tmp_path, gb200())
    assert bad.returncode == 1 and "error: " in bad.stderr and "gb200-tray-0 (4 GPUs, 4 NICs)" in bad.stderr
    assert "Traceback" not in bad.stderr
    ok = lint(tmp_path, gb200(), NUMA_ALIGNED)
    assert ok.returncode == 0, ok.stderr
    broken = lint(tmp_path, "kind: [unclosed\n")
    assert (
        broken.returncode == 1 and "cannot read the cluster state" in broken.stderr and "Traceback" not in broken.stderr
    )
    assert objects_of([None, "x", {"kind": "List", "items": [{"kind": "ResourceSlice"}]}]) == [
        {"kind": "ResourceSlice"}
    ]
    shutil.rmtree(tmp_path / "policies")


# -- how the cluster state is read (issue 43: the survivors of the policy.rest mutation run) ------------


def error_nodes(errors: list[str]) -> str:
    (error,) = errors
    return error.split(": on ", 1)[1].split(" no GPU has", 1)[0]


def test_v1beta1_slices_that_pair_pass():
    roots = [f"pci00{i:02d}:00" for i in range(8)]
    objs = [
        slice_of("hgx-0", "gpu.nvidia.com", gpus(roots, [0] * 8), v1beta1=True),
        slice_of("hgx-0", "dra.net", nics(roots, [0] * 8), v1beta1=True),
    ]
    assert check(policies(), objs) == ([], [])


def test_v1_attributes_win_over_a_basic_block_and_malformed_attributes_are_no_value():
    roots = ["pci0000:00", "pci0001:00"]
    gpu_devices = gpus(roots, [0, 0])
    for d in gpu_devices:  # a stray v1beta1 block beside the v1 attributes is not read
        d["basic"] = {"attributes": {PCIE: {"string": "elsewhere"}}}
    assert check(
        policies(), [slice_of("n", "gpu.nvidia.com", gpu_devices), slice_of("n", "dra.net", nics(roots, [0, 0]))]
    ) == (
        [],
        [],
    )
    # values not wrapped as the API wraps them ({"string": ...}) and attributes that are no mapping
    bad_gpus = [{"name": "g0", "attributes": {PCIE: "pci0000:00"}}, {"name": "g1", "attributes": ["x"]}]
    bad_nics = [{"name": "n0", "attributes": {PCIE: "pci0000:00", "dra.net/rdma": {"bool": True}}}]
    errors, _ = check(policies(), [slice_of("n", "gpu.nvidia.com", bad_gpus), slice_of("n", "dra.net", bad_nics)])
    assert error_nodes(errors) == "n (2 GPUs, 1 NICs)"


def test_an_unqualified_attribute_as_a_driver_publishes_it():
    gpu_devices = [{"name": "g0", "attributes": {"pcieRoot": {"string": "pci0000:00"}}}]
    nic_devices = [{"name": "n0", "attributes": {"pcieRoot": {"string": "pci0000:00"}, "rdma": {"bool": True}}}]
    objs = [slice_of("n", "gpu.nvidia.com", gpu_devices), slice_of("n", "dra.net", nic_devices)]
    assert check(policies(), objs) == ([], [])


CLASSES = ALIGNED.replace("  drivers: [dra.net]\n  selectors: [rdma]\n", "  deviceClasses: [rdma-nics]\n", 1)


def device_class(name: str, driver: str | None, metadata: bool = True) -> dict:
    obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
    }
    if metadata:
        obj["metadata"] = {"name": name}
    return obj


def test_the_nics_of_a_policys_device_classes_are_those_of_the_drivers_their_cel_names():
    assert CLASSES != ALIGNED
    roots = ["pci0000:00", "pci0001:00"]
    tray = [
        slice_of("n", "gpu.nvidia.com", gpus(roots, [0, 0])),
        slice_of("n", "sriov.example", nics(roots, [0, 0], rdma=False)),
    ]
    # no selectors: every device of the class's driver is a NIC of the fabric
    assert check(policies(CLASSES), [device_class("rdma-nics", "sriov.example"), *tray]) == ([], [])
    # the class unknown to the cluster state, or another class naming the driver: no NIC of the fabric
    errors, _ = check(policies(CLASSES), tray)
    assert error_nodes(errors) == "n (2 GPUs, 0 NICs)"
    errors, _ = check(policies(CLASSES), [device_class("other", "sriov.example"), *tray])
    assert error_nodes(errors) == "n (2 GPUs, 0 NICs)"
    # a class without metadata, or an object of another kind with the class's name, names nothing
    odd = {**device_class("rdma-nics", "sriov.example"), "kind": "ResourceClaim"}
    errors, _ = check(policies(CLASSES), [device_class("rdma-nics", "x", metadata=False), odd, *tray])
    assert error_nodes(errors) == "n (2 GPUs, 0 NICs)"


def test_with_selectors_only_the_devices_with_such_an_attribute_set_are_nics():
    roots = [f"pci00{i:02d}:00" for i in range(4)]
    nic_devices = nics(roots[:2], [0, 0]) + nics(roots[2:], [0, 0], rdma=False)
    for d in nic_devices:  # another boolean attribute set is not the selector's
        d["attributes"]["dra.net/virtual"] = {"bool": True}
    errors, warnings = check(
        policies(), [slice_of("n", "gpu.nvidia.com", gpus(roots, [0] * 4)), slice_of("n", "dra.net", nic_devices)]
    )
    assert errors == [] and warnings == [
        f"policy 'roce-dranet-aligned': node n: only 2 of its 4 GPUs have a NIC with their {PCIE}: "
        "a pod asking for more GPUs than that cannot be placed there"
    ]


def test_only_resource_slices_of_the_gpu_and_nic_drivers_are_read_whatever_comes_first():
    roots = ["pci0000:00", "pci0001:00"]
    other = {
        "kind": "ResourceClaim",
        "spec": {"driver": "gpu.nvidia.com", "nodeName": "n", "devices": gpus(["x"], [0])},
    }
    unrelated = slice_of("n", "other.driver", nics(roots, [0, 0]))
    no_spec = {"kind": "ResourceSlice", "spec": "text"}
    objs = [other, unrelated, no_spec, device_class("c", "d"), slice_of("n", "gpu.nvidia.com", gpus(roots, [0, 0]))]
    objs.append(slice_of("n", "dra.net", ["junk", *nics(roots, [0, 0])]))
    assert check(policies(), objs) == ([], [])
    errors, _ = check(policies(), objs[:-1])
    assert error_nodes(errors) == "n (2 GPUs, 0 NICs)"


def test_a_slice_is_counted_on_its_node_else_its_pool_else_no_node():
    roots = ["pci0000:00"]
    named = slice_of("node-a", "gpu.nvidia.com", gpus(roots, [0]))
    named["spec"]["pool"]["name"] = "pool-a"
    pooled = slice_of("x", "gpu.nvidia.com", gpus(roots, [0]))
    del pooled["spec"]["nodeName"]
    pooled["spec"]["pool"]["name"] = "pool-b"
    bare = slice_of("x", "gpu.nvidia.com", gpus(roots, [0]))
    del bare["spec"]["nodeName"]
    del bare["spec"]["pool"]
    errors, _ = check(policies(), [named, pooled, bare])
    assert error_nodes(errors) == "(no node) (1 GPUs, 0 NICs), node-a (1 GPUs, 0 NICs), pool-b (1 GPUs, 0 NICs)"


def test_every_node_that_cannot_pair_is_named_after_one_without_gpus():
    nic_only = slice_of("a-nics", "dra.net", nics(["pci0000:00"], [0]))
    errors, _ = check(policies(), [nic_only, *gb200("tray-1"), *gb200("tray-0")])
    assert error_nodes(errors) == "tray-0 (4 GPUs, 4 NICs), tray-1 (4 GPUs, 4 NICs)"


def test_an_aligned_policy_after_one_without_alignment_is_checked():
    plain = (ROOT / "policies" / "gb200-roce.yaml").read_text().replace("\npriority: -1\n", "\npriority: 100\n", 1)
    ps, errors = load_texts([("a.yaml", plain), ("b.yaml", ALIGNED)])
    assert errors == [] and ps.ranked()[0].name == "gb200-roce"
    found, _ = check(ps, gb200())
    assert len(found) == 1 and found[0].startswith("policy 'roce-dranet-aligned': ")


def test_objects_of_flattens_lists_and_skips_what_is_not_an_object():
    a, b, c = {"kind": "A"}, {"kind": "B"}, {"kind": "C"}
    assert objects_of([a, None, "x", {"kind": "ResourceSliceList", "items": [b, {"kind": "List", "items": [c]}]}]) == [
        a,
        b,
        c,
    ]
    odd = {"kind": "FooList", "items": "not a list"}
    assert objects_of([odd, {"kind": 5, "items": [a]}]) == [odd, {"kind": 5, "items": [a]}]
