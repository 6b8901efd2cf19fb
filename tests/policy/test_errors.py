"""webhook.policy.errors: a policy problem as its reader sees it, `file: policy 'name': field f: what`."""

from __future__ import annotations

import pytest

from webhook.policy.errors import PolicyError


@pytest.mark.parametrize(
    "policy,field,text",
    [
        ("p", "shm.max", "a.yaml: policy 'p': field shm.max: wrong"),
        (None, "shm.max", "a.yaml: field shm.max: wrong"),
        ("p", None, "a.yaml: policy 'p': wrong"),
        (None, None, "a.yaml: wrong"),
        ("", "", "a.yaml: wrong"),
    ],
)
def test_the_text_names_what_is_known(policy, field, text):
    error = PolicyError("a.yaml", policy, field, "wrong")
    assert str(error) == text and error.args == (text,)
    assert (error.file, error.policy, error.field, error.message) == ("a.yaml", policy, field, "wrong")


def test_the_text_follows_a_renamed_field():
    error = PolicyError("a.yaml", "p", "networks[0].resource", "wrong")
    error.field = "device.resource"
    assert str(error) == "a.yaml: policy 'p': field device.resource: wrong"
