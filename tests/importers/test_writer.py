"""The shared writer of `evalkit import` on real files, without a peer: file names from awkward
ids, a second import that finds renamed files, and YAML that reads back as it was meant."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalkit.cases import load_suite
from evalkit.importers import PeerDataset, PeerExample
from evalkit.importers.writer import apply, plan_import


def _dataset(*examples: PeerExample) -> PeerDataset:
    return PeerDataset(
        peer="langfuse", url="http://127.0.0.1:9", name="d", id="ds-1", version=None,
        record={"name": "d"}, examples=list(examples),
    )  # fmt: skip


def _ex(example_id: str, **kw: Any) -> PeerExample:
    kw.setdefault("input", {"q": example_id})
    kw.setdefault("expected", None)
    kw.setdefault("metadata", {})
    return PeerExample(id=example_id, **kw)


def _import(suite: Path, *examples: PeerExample, **kw: Any):
    plan = plan_import(_dataset(*examples), suite, **kw)
    apply(plan)
    return plan


def test_awkward_ids_become_distinct_valid_file_names(tmp_path):
    suite = tmp_path / "s"
    suite.mkdir()
    (suite / "s-x.yaml").write_text("input: {q: written by hand}\n")
    long_id = "k" * 300
    plan = _import(suite, _ex("A/b"), _ex("a b"), _ex("A-B"), _ex("x"), _ex(long_id), _ex("///"))
    ids = [w.case_id for w in plan.writes]
    assert ids[:4] == ["s-A-b", "s-a-b-2", "s-A-B-3", "s-x-2"]
    assert len(ids[4]) == 128 and ids[4].startswith("s-kkk")
    assert ids[5].startswith("s-") and len(ids[5]) == 10  # nothing usable: a hash of the id
    suite_read = load_suite(suite)  # lint passes: valid, unique ids
    assert len(suite_read.cases) == 7
    assert (suite / "s-x.yaml").read_text() == "input: {q: written by hand}\n"


def test_a_renamed_file_is_found_again_and_an_empty_one_is_filled(tmp_path):
    suite = tmp_path / "s"
    _import(suite, _ex("one", expected="1"), _ex("two"))
    (suite / "s-one.yaml").rename(suite / "first.yaml")
    (suite / "s-two.yaml").write_text("")  # as an interrupted import can leave it

    plan = _import(suite, _ex("one", expected="uno"), _ex("two"))
    assert [(w.path.name, w.action) for w in plan.writes] == [
        ("first.yaml", "update"),
        ("s-two.yaml", "add"),
    ]
    cases = {c.id: c.content for c in load_suite(suite).cases}
    assert set(cases) == {"first", "s-two"}
    assert cases["first"]["expected"] == {"answer": "uno"}


def test_values_yaml_would_misread_come_back_as_they_were(tmp_path):
    tricky = {
        "yes": "yes",
        "date": "2024-01-01",
        "number_text": "0123",
        "float_text": "1e3",
        "null_text": "null",
        "lines": "first\nsecond\n",
        "padded": "  leading and trailing  ",
        "unicode": "Größe – 大きさ",
        "colon": "key: value # not a comment",
        "empty": "",
        "nested": {"list": [1, 2.5, True, None, "x"]},
    }
    suite = tmp_path / "s"
    _import(suite, _ex("t", input=tricky, metadata={"tags": ["b", "a", "b"], "kept": 1}))
    [case] = load_suite(suite).cases
    assert case.content["input"] == tricky
    assert case.content["tags"] == ["b", "a"]
    assert case.content["metadata"]["kept"] == 1


def test_tags_that_are_not_text_stay_in_metadata(tmp_path):
    suite = tmp_path / "s"
    plan = _import(suite, _ex("t", metadata={"tags": [1, 2]}))
    [case] = load_suite(suite).cases
    assert "tags" not in case.content and case.content["metadata"]["tags"] == [1, 2]
    assert list(plan.notes.values()) == [1]
