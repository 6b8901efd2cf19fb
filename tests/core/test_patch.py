"""The JSON Patch diff: for any two JSON documents, the patch turns the first into the second
(applied by the `jsonpatch` library, RFC 6902), and equal documents give no operations."""

from __future__ import annotations

import copy
import json

import jsonpatch
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import FEW
from webhook.core import patch

keys = st.text(alphabet="ab/~c-.0", min_size=0, max_size=4)
leaves = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=3))
docs = st.recursive(
    leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=40 if FEW else 400, deadline=None)
@given(docs, docs)
def test_patch_turns_a_into_b(a, b):
    ops = patch.make(a, b)
    result = jsonpatch.apply_patch(copy.deepcopy(a), ops)
    assert result == b and _same_types(result, b)


@settings(max_examples=20 if FEW else 200, deadline=None)
@given(docs)
def test_equal_documents_give_no_patch(a):
    assert patch.make(a, copy.deepcopy(a)) == []


def _same_types(x, y) -> bool:
    if type(x) is not type(y):
        return False
    if isinstance(x, dict):
        return x.keys() == y.keys() and all(_same_types(x[k], y[k]) for k in x)
    if isinstance(x, list):
        return len(x) == len(y) and all(_same_types(p, q) for p, q in zip(x, y))
    return True


def test_escapes_and_parents():
    a = {"metadata": {}, "spec": {"containers": [{"name": "t"}]}}
    b = {
        "metadata": {"annotations": {"rdma-webhook.io/status": "injected"}},
        "spec": {
            "containers": [{"name": "t", "env": [{"name": "NCCL_NET", "value": "IB"}]}],
            "volumes": [{"name": "v"}],
        },
    }
    ops = patch.make(a, b)
    assert {"op": "add", "path": "/metadata/annotations", "value": {"rdma-webhook.io/status": "injected"}} in ops
    assert {"op": "add", "path": "/spec/volumes", "value": [{"name": "v"}]} in ops
    assert patch.make({"a/b~c": 1}, {"a/b~c": 2}) == [{"op": "replace", "path": "/a~1b~0c", "value": 2}]


def test_a_changed_type_is_one_replace():
    """A value whose JSON type changes (also 1 -> True, which compare equal in Python) is
    replaced whole, not diffed into."""
    assert patch.make({"a": 1}, {"a": True}) == [{"op": "replace", "path": "/a", "value": True}]
    assert patch.make({"a": {"b": 1}}, {"a": [1]}) == [{"op": "replace", "path": "/a", "value": [1]}]
    assert patch.make([0], [False]) == [{"op": "replace", "path": "/0", "value": False}]


@pytest.mark.parametrize(
    "a,b",
    [
        ([1, 2, 3, 4], [1, 2]),  # removals from the end, backwards
        ([1, 2, 3], []),
        ({"l": [{"x": 1}, {"y": 2}, {"z": 3}]}, {"l": [{"x": 1}]}),
        ([0, 1], [0, True]),  # equal in Python, not in JSON
        ([[0], {"a": 1}], [[False], {"a": True}]),
        ({"a": 1, "b": 2, "c": 3}, {"a": 1}),  # removed keys
        ({"a": 1, "b": 2}, {"c": 1, "d": 2}),  # as many keys, other names
        ({"a": {"b": [1, 2]}}, {"a": {"b": [1, 2, 3]}}),
        ({"a": [1, {"b": 1}]}, {"a": [1, {"b": 2}], "c": []}),
        ([{"a": [0]}, 1], [{"a": [False]}, 1]),
    ],
)
def test_cases_a_few_examples_may_miss(a, b):
    """Deterministic cases for the walks the property covers by chance (the mutation profile runs
    a tenth of its examples): list removals, JSON-type changes inside equal-looking values."""
    ops = patch.make(a, copy.deepcopy(b))
    assert jsonpatch.apply_patch(copy.deepcopy(a), ops) == b and _same_types(
        jsonpatch.apply_patch(copy.deepcopy(a), ops), b
    )
    assert patch.make(a, copy.deepcopy(a)) == []
    assert all(set(op) >= {"op", "path"} and op["op"] in ("add", "remove", "replace") for op in ops)


def test_a_list_item_changed_in_place_is_one_replace_at_its_index():
    """An item of the same JSON type with another value, and an item that becomes or stops being
    null, is replaced at its index; the items around it give no operation."""
    assert patch.make(["a", "b", "c"], ["a", "x", "c"]) == [{"op": "replace", "path": "/1", "value": "x"}]
    assert patch.make([1, {"k": 1}], [None, {"k": 1}]) == [{"op": "replace", "path": "/0", "value": None}]
    assert patch.make([None, "keep"], [2, "keep"]) == [{"op": "replace", "path": "/0", "value": 2}]


def test_words_inserted_in_a_command_line_are_one_replace_when_that_is_shorter():
    """`-x NAME` inserted after a launcher's name: the command line of short words is one replace
    of the whole list (fewer bytes than an add per new word); where the kept words are long (a
    script given as one argument) an add per new word at its place, and nothing for the words
    after them (not a replace of each)."""
    a = ["mpirun", "--allow-run-as-root", "-np", "8", "python", "train.py"]
    b = a[:1] + ["-x", "NCCL_NET"] + a[1:]
    ops = patch.make({"args": a}, {"args": b})
    assert ops == [{"op": "replace", "path": "/args", "value": b}]
    script = "set -e; " + "echo step; " * 40
    a = ["mpirun", "-np", "8", "bash", "-c", script]
    b = a[:1] + ["-x", "NCCL_NET"] + a[1:]
    ops = patch.make({"args": a}, {"args": b})
    assert ops == [
        {"op": "add", "path": "/args/1", "value": "-x"},
        {"op": "add", "path": "/args/2", "value": "NCCL_NET"},
    ]
    assert len(orjson.dumps(ops)) < len(orjson.dumps([{"op": "replace", "path": "/args", "value": b}]))
    b = ["mpirun", "-x", "NCCL_NET"] + [w.upper() for w in a[1:]]  # the tail changed too: pairs and appends
    assert jsonpatch.apply_patch({"args": list(a)}, patch.make({"args": a}, {"args": b})) == {"args": b}


def test_the_replace_of_a_command_line_is_chosen_by_its_bytes():
    """At each size of inserted words the rule picks the form that is no longer than the other
    (counting the new words against the replace, a close call keeps the adds)."""
    base = ["mpirun", "-np", "8", "python", "train.py"]
    for pad in (0, 20, 60, 200):
        a = [*base, "w" * pad]
        for grown in (2, 4):
            b = a[:1] + ["-x", "N"] * (grown // 2) + a[1:]
            ops = patch.make({"args": a}, {"args": b})
            whole = [{"op": "replace", "path": "/args", "value": b}]
            assert jsonpatch.apply_patch({"args": list(a)}, ops) == {"args": b}
            assert len(orjson.dumps(ops)) <= len(orjson.dumps(whole)) + sum(len(w) + 3 for w in b[1 : 1 + grown])


def test_items_appended_are_adds_at_the_end():
    a = [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    b = [*a, {"name": "NCCL_NET", "value": "IB"}]
    assert patch.make(a, b) == [{"op": "add", "path": "/2", "value": {"name": "NCCL_NET", "value": "IB"}}]
    b = [*a, {"name": "B", "value": "2"}]  # the new item equals the old last one: still one add
    assert jsonpatch.apply_patch(copy.deepcopy(a), patch.make(a, b)) == b and len(patch.make(a, b)) == 1


def test_a_list_that_more_than_doubles_is_one_replace():
    """More new items than kept ones: the whole list in one replace, shorter than an add each."""
    assert patch.make({"c": ["mpirun"]}, {"c": ["mpirun", "-x", "A"]}) == [
        {"op": "replace", "path": "/c", "value": ["mpirun", "-x", "A"]}
    ]
    assert patch.make({"c": []}, {"c": ["x"]}) == [{"op": "replace", "path": "/c", "value": ["x"]}]
    a = [{"k": "a"}, {"k": "b"}]  # not words: as many new items as kept ones are adds
    assert patch.make(a, [*a, {"k": "c"}, {"k": "d"}]) == [
        {"op": "add", "path": "/2", "value": {"k": "c"}},
        {"op": "add", "path": "/3", "value": {"k": "d"}},
    ]


def test_list_removals_are_from_the_end():
    assert patch.make([1, 2, 3], [1]) == [{"op": "remove", "path": "/2"}, {"op": "remove", "path": "/1"}]


# A pod as the API server sends it, as JSON text: parsed twice, the two documents are equal and
# share no object (not even their strings and large numbers), like a copy rebuilt from the wire.
POD_TEXT = json.dumps(
    {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "trainer-",
            "namespace": "ml-training",
            "labels": {"rdma-webhook.io/inject": "true"},
        },
        "spec": {
            "priority": 100000,
            "containers": [
                {
                    "name": "trainer",
                    "image": "nvcr.io/nvidia/pytorch:25.11-py3",
                    "args": ["--nproc_per_node=8", "train.py"],
                    "env": [{"name": "MASTER_PORT", "value": "23456"}],
                    "ports": [{"containerPort": 23456, "protocol": "TCP"}],
                    "resources": {"limits": {"nvidia.com/gpu": "8"}, "requests": {"nvidia.com/gpu": "8"}},
                }
            ],
            "securityContext": {},
            "terminationGracePeriodSeconds": 30,
        },
    }
)


def test_json_equality_holds_for_equal_documents_that_share_no_object():
    """`_same`, the screen before every diff: true for the very same document and for an equal
    one built apart (walked item by item, key by key, down to numbers and strings), false
    wherever Python's `==` is looser than JSON's."""
    a, b = json.loads(POD_TEXT), json.loads(POD_TEXT)
    assert a["spec"]["priority"] is not b["spec"]["priority"] and a["kind"] is not b["kind"]
    assert patch._same(a, a) and patch._same(a, b) and patch._same(b, a)
    assert patch._same(a["spec"]["containers"], b["spec"]["containers"])
    assert patch._same(a["spec"]["priority"], b["spec"]["priority"])
    for x, y in [
        (1, True),
        (0, 0.0),
        (None, 0),
        ([1], [1.0]),
        ([[0]], [[False]]),
        ({"a": 0}, {"a": False}),
        ({"a": {"b": 1}}, {"a": {"b": 1.0}}),
        ([{"a": [1]}], [{"a": [True]}]),
    ]:
        assert not patch._same(x, y) and not patch._same(y, x), (x, y)


def test_values_equal_but_not_shared_give_no_operation():
    """A patch between two documents built apart names only what differs, not every value that
    is equal without being the same object."""
    a, b = json.loads(POD_TEXT), json.loads(POD_TEXT)
    b["metadata"]["labels"]["team"] = "llm"
    b["spec"]["containers"][0]["env"].append({"name": "NCCL_NET", "value": "IB"})
    del b["spec"]["terminationGracePeriodSeconds"]
    assert patch.make(a, b) == [
        {"op": "add", "path": "/metadata/labels/team", "value": "llm"},
        {"op": "add", "path": "/spec/containers/0/env/1", "value": {"name": "NCCL_NET", "value": "IB"}},
        {"op": "remove", "path": "/spec/terminationGracePeriodSeconds"},
    ]
    assert patch.make(a, json.loads(POD_TEXT)) == []


def test_a_document_replaced_whole_is_one_replace_at_the_root():
    assert patch.make(None, {"a": 1}) == [{"op": "replace", "path": "", "value": {"a": 1}}]
    assert patch.make({"a": 1}, None) == [{"op": "replace", "path": "", "value": None}]
    assert patch.make(None, None) == []
