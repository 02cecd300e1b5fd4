"""A NUL character in a harness's JSON answer becomes U+FFFD before evalkit reads it; an
escaped backslash followed by the letters ``u0000`` is text, and stays as it is."""

from __future__ import annotations

import json

import pytest

from evalkit.harness.client import _without_nul


@pytest.mark.parametrize(
    ("sent", "read"),
    [
        ('{"answer": "4\\u00002"}', "4\ufffd2"),
        ('{"answer": "\\u0000\\u0000"}', "\ufffd\ufffd"),
        ('{"answer": "a backslash, then \\\\u0000"}', "a backslash, then \\u0000"),
        ('{"answer": "a backslash, then a NUL: \\\\\\u0000"}', "a backslash, then a NUL: \\\ufffd"),
        ('{"answer": "nothing to replace"}', "nothing to replace"),
    ],
)
def test_only_an_escaped_nul_is_replaced(sent, read):
    assert json.loads(sent)["answer"].replace("\x00", "\ufffd") == read  # what was meant
    assert json.loads(_without_nul(sent.encode()))["answer"] == read
