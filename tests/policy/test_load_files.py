"""webhook.policy.load: which files of a folder are policies, how each is read (duplicate keys,
YAML errors with their place, unreadable files) and the all-or-nothing load."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from webhook.policy import load
from webhook.policy.load import default_policies_dir, load_dir, load_texts, policy_files, read_documents

ROOT = Path(__file__).resolve().parent.parent.parent
ERDMA = (ROOT / "policies" / "erdma.yaml").read_text()


def named(name: str) -> str:
    return ERDMA.replace("\nname: erdma\n", f"\nname: {name}\n", 1)


# -- the files of a folder ----------------------------------------------------------------------


def test_policy_files_are_the_visible_yaml_and_yml_files_in_name_order(tmp_path):
    for name in ("b.yaml", "a.yml", "c.YAML.txt", ".hidden.yaml", "notes.txt", "yaml"):
        (tmp_path / name).write_text("x")
    (tmp_path / "dir.yaml").mkdir()
    os.symlink("b.yaml", tmp_path / "link.yaml")
    os.symlink("missing", tmp_path / "dangling.yaml")
    assert [p.name for p in policy_files(tmp_path)] == ["a.yml", "b.yaml", "link.yaml"]


def test_the_shipped_catalogue_is_beside_the_package():
    assert default_policies_dir() == ROOT / "policies"


def test_without_the_repository_the_image_catalogue_is_used(monkeypatch, tmp_path):
    fake = tmp_path / "site" / "webhook" / "policy" / "load.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("")
    monkeypatch.setattr(load, "__file__", str(fake))
    assert default_policies_dir() == Path("/usr/share/rdma-webhook/catalogue") == load.IMAGE_CATALOGUE
    (tmp_path / "site" / "policies").mkdir()
    assert default_policies_dir() == tmp_path / "site" / "policies"


# -- one file read ------------------------------------------------------------------------------------


def test_read_documents_skips_empty_documents(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("---\n" + named("one") + "---\n---\n" + named("two"))
    docs, errors = read_documents(str(path))
    assert errors == [] and [d["name"] for d in docs] == ["one", "two"]


def test_read_documents_names_the_line_and_column_of_a_yaml_error(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("a: 1\nb: [2\n")
    docs, errors = read_documents(str(path))
    assert docs == [] and len(errors) == 1
    (error,) = errors
    assert (error.file, error.policy) == (str(path), None)
    assert error.field == "line 3, column 1"
    assert error.message.startswith("not valid YAML: ") and "expected ',' or ']'" in error.message


def test_read_documents_refuses_a_key_given_twice(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("a: 1\nnccl: {X: 1}\nnccl: {Y: 2}\n")
    docs, errors = read_documents(str(path))
    assert docs == [] and [e.field for e in errors] == ["line 3, column 1"]
    assert errors[0].message == "not valid YAML: found duplicate key 'nccl'"


def test_read_documents_of_a_missing_or_binary_file(tmp_path):
    docs, errors = read_documents(str(tmp_path / "nope.yaml"))
    assert docs == [] and len(errors) == 1 and errors[0].field is None
    assert errors[0].message.startswith("cannot read: ") and "No such file" in errors[0].message
    binary = tmp_path / "b.yaml"
    binary.write_bytes(b"\xff\xfe\x00name")
    docs, errors = read_documents(str(binary))
    assert docs == [] and errors[0].message.startswith("cannot read: ") and "utf-8" in errors[0].message


# -- duplicate keys ------------------------------------------------------------------------------------

NOT_A_POLICY = (
    "m.yaml: field apiVersion: None is not a policy version this webhook reads "
    "(rdma-webhook.io/v1alpha2 or rdma-webhook.io/v1alpha1)"
)


@pytest.mark.parametrize(
    "text,key",
    [
        ("a: 1\na: 2\n", "'a'"),
        ("1: x\n1: y\n", "1"),
        ("1.5: x\n1.5: y\n", "1.5"),
        ("true: x\ntrue: y\n", "True"),
        ("outer: {inner: 1, inner: 2}\n", "'inner'"),
    ],
)
def test_a_key_given_twice_in_one_mapping_is_refused(text, key):
    ps, errors = load_texts([("p.yaml", text)])
    assert ps is None and len(errors) == 1
    assert f"not valid YAML: found duplicate key {key}" in str(errors[0])


def test_the_same_key_in_two_mappings_and_merge_overrides_are_allowed():
    # every policy has its `nccl:` key: once per mapping is no duplicate
    ps, errors = load_texts([("p.yaml", named("one") + "---\n" + named("two"))])
    assert errors == [] and set(ps.by_name) == {"one", "two"}
    # a `<<` merge whose keys the mapping overrides is YAML's own way to reuse a block
    merged = "a: &base {x: 1, y: 2}\nb:\n  <<: *base\n  x: 3\n"
    ps, errors = load_texts([("m.yaml", merged)])
    assert [str(e) for e in errors] == [NOT_A_POLICY]  # read, then refused as no policy


def test_two_merges_in_one_mapping_are_not_a_duplicate_key():
    text = "a: &a {x: 1}\nb: &b {y: 2}\nc:\n  <<: *a\n  <<: *b\n"
    ps, errors = load_texts([("m.yaml", text)])
    assert [str(e) for e in errors] == [NOT_A_POLICY]


# -- several files ------------------------------------------------------------------------------------


def test_load_texts_names_the_line_of_a_yaml_error_in_its_message():
    ps, errors = load_texts([("p.yaml", "a: 1\nb: [2\n")])
    assert ps is None and len(errors) == 1
    assert (errors[0].file, errors[0].policy, errors[0].field) == ("p.yaml", None, None)
    assert errors[0].message.startswith("line 3, column 1: not valid YAML: expected ',' or ']'")


def test_a_document_that_is_not_a_mapping_is_named_by_its_type():
    ps, errors = load_texts([("p.yaml", named("ok") + "---\n- a\n---\nplain text\n")])
    assert ps is None
    assert [str(e) for e in errors] == [
        "p.yaml: each YAML document must be a policy mapping, not list",
        "p.yaml: each YAML document must be a policy mapping, not str",
    ]


def test_every_file_is_checked_and_nothing_loads_when_one_is_wrong():
    bad = named("bad").replace("\npriority: 10\n", "\npriority: high\n", 1)
    assert bad != named("bad")
    ps, errors = load_texts([("a.yaml", bad), ("b.yaml", "x: [\n"), ("c.yaml", named("good"))])
    assert ps is None and [e.file for e in errors] == ["a.yaml", "b.yaml"]


def test_a_duplicate_name_keeps_the_first_and_names_both_files():
    ps, errors = load_texts([("a.yaml", named("same") + "---\n" + named("same"))])
    assert ps is None
    assert [str(e) for e in errors] == [
        "a.yaml: policy 'same': field name: duplicate policy name, also defined in a.yaml"
    ]


def test_no_policy_is_an_error_unless_allowed():
    ps, errors = load_texts([("a.yaml", "# only a comment\n")])
    assert ps is None and [str(e) for e in errors] == ["(policies): no policies found"]
    ps, errors = load_texts([], allow_empty=True)
    assert errors == [] and ps is not None and len(ps) == 0


def test_load_dir_of_an_empty_folder_is_allowed_for_the_server(tmp_path):
    ps, errors = load_dir(tmp_path, allow_empty=True)
    assert errors == [] and ps is not None and len(ps) == 0
    ps, errors = load_dir(tmp_path)
    assert ps is None and [str(e) for e in errors] == [f"{tmp_path}: no *.yaml policy files in the folder"]


def test_load_dir_of_a_missing_folder_says_why(tmp_path):
    ps, errors = load_dir(tmp_path / "nope", allow_empty=True)
    assert ps is None and [str(e) for e in errors] == [
        f"{tmp_path / 'nope'}: cannot read the policies folder: No such file or directory"
    ]


def test_load_dir_reports_an_unreadable_file_and_loads_nothing(tmp_path):
    (tmp_path / "a.yaml").write_text(named("good"))
    (tmp_path / "b.yaml").write_bytes(b"\xff\xfe")
    ps, errors = load_dir(tmp_path)
    assert ps is None and len(errors) == 1
    assert str(errors[0]).startswith(f"{tmp_path / 'b.yaml'}: cannot read: ")
    (tmp_path / "b.yaml").unlink()
    (tmp_path / "c.yaml").write_text(named("bad").replace("\npriority: 10\n", "\npriority: high\n", 1))
    ps, errors = load_dir(tmp_path)
    assert ps is None and [e.file for e in errors] == [str(tmp_path / "c.yaml")]
    (tmp_path / "c.yaml").unlink()
    ps, errors = load_dir(tmp_path)
    assert errors == [] and set(ps.by_name) == {"good"}


def test_a_key_given_twice_after_a_merge_is_refused():
    ps, errors = load_texts([("m.yaml", "a: &a {x: 1}\nc:\n  <<: *a\n  y: 1\n  y: 2\n")])
    assert ps is None and [str(e) for e in errors] == [
        "m.yaml: line 5, column 3: not valid YAML: found duplicate key 'y'"
    ]


def test_load_dir_of_files_without_a_policy_is_allowed_for_the_server(tmp_path):
    (tmp_path / "a.yaml").write_text("# chosen later\n")
    ps, errors = load_dir(tmp_path, allow_empty=True)
    assert errors == [] and ps is not None and len(ps) == 0
    ps, errors = load_dir(tmp_path)
    assert ps is None and [str(e) for e in errors] == ["(policies): no policies found"]


def test_load_dir_reads_every_file_after_an_unreadable_one(tmp_path):
    (tmp_path / "a.yaml").write_bytes(b"\xff\xfe")
    (tmp_path / "b.yaml").write_text(named("bad").replace("\npriority: 10\n", "\npriority: high\n", 1))
    ps, errors = load_dir(tmp_path)
    assert ps is None and [e.file for e in errors] == [str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")]
    assert errors[0].message.startswith("cannot read: ") and errors[0].field is None and errors[0].policy is None


def test_every_document_after_a_problem_is_still_checked():
    bad1 = named("bad-one").replace("\npriority: 10\n", "\npriority: high\n", 1)
    bad2 = named("bad-two").replace("\npriority: 10\n", "\npriority: low\n", 1)
    text = bad1 + "---\n" + named("one") + "---\n" + named("one") + "---\n- item\n---\n" + bad2
    ps, errors = load_texts([("a.yaml", "x: [\n"), ("b.yaml", text), ("c.yaml", "y: [\n")])
    assert ps is None
    assert [(e.file, e.policy, e.field) for e in errors] == [
        ("a.yaml", None, None),
        ("b.yaml", "bad-one", "priority"),
        ("b.yaml", "one", "name"),
        ("b.yaml", None, None),
        ("b.yaml", "bad-two", "priority"),
        ("c.yaml", None, None),
    ]


def test_a_character_yaml_refuses_is_an_error_without_a_place(tmp_path):
    # the YAML reader's own error (a control character) has no mark and no `problem`
    ps, errors = load_texts([("p.yaml", "a: \x07\n")])
    assert ps is None and len(errors) == 1 and errors[0].field is None
    assert str(errors[0]).startswith("p.yaml: not valid YAML: unacceptable character #x0007: ")
    path = tmp_path / "p.yaml"
    path.write_text("a: \x07\n")
    docs, errors = read_documents(str(path))
    assert docs == [] and len(errors) == 1 and errors[0].field is None
    assert errors[0].message.startswith("not valid YAML: unacceptable character #x0007: ")
