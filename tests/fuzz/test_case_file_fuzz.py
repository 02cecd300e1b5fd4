"""Hypothesis fuzz of the case-file parser and lint (``evalkit.cases``): random text, random
YAML documents, mutated valid cases, and YAML bombs (billion laughs, deep nesting, recursive
aliases, numbers too long to read).

Whatever a case file says, ``lint_suite`` answers a report whose findings each carry a
code, a severity and a message, and ``load_suite`` answers a suite or a ``SuiteError``;
neither raises anything else, and neither takes long.
"""

from __future__ import annotations

import re
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from evalkit.cases import LintReport, SuiteError, lint_suite, load_suite
from evalkit.cases._yaml import MAX_DEPTH, MAX_INT_DIGITS, MAX_VALUES
from tests.fuzz.conftest import examples

CODE = re.compile(r"^[EW]-[A-Z0-9]+(-[A-Z0-9]+)*$")
SECONDS = 10.0
"""Longest lint (and load) of one fuzzed file may take on a loaded two-core machine."""


def lint(text: str | bytes, name: str = "c1.yaml") -> LintReport:
    """Lint a suite of one file, then load it; check both outcomes."""
    with tempfile.TemporaryDirectory() as tmp:
        suite = Path(tmp) / "suite"
        suite.mkdir()
        path = suite / name
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8", errors="surrogatepass")
        started = time.monotonic()
        report = lint_suite(suite)
        assert time.monotonic() - started < SECONDS, "lint took too long"
        for finding in report.findings:
            assert CODE.match(finding.code), finding
            assert finding.severity == ("error" if finding.code[0] == "E" else "warning")
            assert finding.message.strip() and finding.file
            assert finding.line is None or finding.line >= 1
        started = time.monotonic()
        try:
            loaded = load_suite(suite)
        except SuiteError as exc:
            assert not report.ok and exc.report.errors
        else:
            assert report.ok and len(loaded.cases) == 1
            [case] = loaded.cases
            assert case.content_hash and case.id
        assert time.monotonic() - started < SECONDS, "load took too long"
        return report


# --------------------------------------------------------------------------- strategies

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=12),
    st.sampled_from(["", "~", "null", "yes", "0x1F", "1e3", "2026-01-05", "*x", "&a", "!!str"]),
)
keys = st.one_of(
    st.sampled_from(
        [
            "id",
            "input",
            "expected",
            "tags",
            "split",
            "evaluators",
            "overlay",
            "metadata",
            "description",
            "files",
            "answer",
            "question",
            "exact_match",
            "contains",
            "regex",
            "numeric",
            "json_schema",
            "tool_calls",
            "max_steps",
            "judge",
            "custom",
            "rubric",
            "pattern",
            "value",
            "values",
            "tolerance",
            "ignore_case",
            "latency",
            "<<",
        ]
    ),
    st.text(max_size=8),
    st.integers(-3, 3),
    st.booleans(),
)
documents = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=5)),
    max_leaves=25,
)

VALID = {
    "id": "add-1",
    "description": "adds",
    "input": {"question": "What is 2 + 3?", "files": ["doc"]},
    "expected": {"answer": "5", "tool_calls": [{"name": "calc"}]},
    "tags": ["math", "easy"],
    "split": "test",
    "metadata": {"source": "hand"},
    "evaluators": {
        "exact_match": True,
        "contains": ["5"],
        "not_contains": {"values": ["6"], "ignore_case": True},
        "regex": {"pattern": ["\\d+"], "ignore_case": False},
        "numeric": {"value": 5, "tolerance": 0.1},
        "json_schema": {"type": "object", "properties": {"a": {"type": "integer"}}},
        "tool_calls": {"required": ["calc"], "forbidden": ["rm"], "order": ["calc"]},
        "max_steps": 5,
        "latency": True,
        "judge": {"rubric": "Is it right?"},
        "custom": {"checker": {"threshold": 0.5}},
    },
}


@st.composite
def mutated_cases(draw: st.DrawFn) -> Any:
    """VALID with a few subtrees replaced (a key's value, a list element, the whole)."""
    import copy

    data: Any = copy.deepcopy(VALID)
    for _ in range(draw(st.integers(1, 3))):
        node, key = None, None
        current: Any = data
        while isinstance(current, dict | list) and current and draw(st.booleans()):
            node = current
            key = draw(
                st.sampled_from(list(current) if isinstance(current, dict) else range(len(current)))
            )
            current = node[key]
        replacement = draw(documents)
        if node is None:
            data = replacement
        elif isinstance(node, dict) and draw(st.booleans()):
            node[draw(keys)] = node.pop(key)  # a renamed key instead
        else:
            node[key] = replacement
    return data


def dump(data: Any) -> str:
    return yaml.safe_dump(data, allow_unicode=True, sort_keys=False)


# --------------------------------------------------------------------------- fuzz


@settings(max_examples=examples(200))
@given(st.text(max_size=300))
def test_random_text(text: str) -> None:
    lint(text)


@settings(max_examples=examples(100))
@given(st.binary(max_size=300))
def test_random_bytes(data: bytes) -> None:
    lint(data)


@settings(max_examples=examples(200))
@given(documents)
def test_random_yaml_documents(data: Any) -> None:
    lint(dump(data))


def test_the_valid_case_is_valid() -> None:
    """The seed of the mutations lints clean (with its fixture key declared missing only)."""
    report = lint(dump({**VALID, "input": {"question": "q"}}))
    assert report.ok and not report.findings, report.findings


@settings(max_examples=examples(300))
@given(mutated_cases())
def test_mutated_valid_cases(data: Any) -> None:
    lint(dump(data))


@settings(max_examples=examples(150))
@given(mutated_cases(), st.data())
def test_mutated_yaml_text(data: Any, draw: st.DataObject) -> None:
    """Text edits YAML's own syntax cares about: indentation, quotes, anchors, tabs."""
    text = dump(data)
    for _ in range(draw.draw(st.integers(1, 3))):
        at = draw.draw(st.integers(0, len(text)))
        piece = draw.draw(
            st.sampled_from(
                [
                    "\t",
                    "  ",
                    "'",
                    '"',
                    ": ",
                    "- ",
                    "&a ",
                    "*a",
                    "!!int ",
                    "\n",
                    "{",
                    "]",
                    "<<: *a\n",
                    "\x00",
                    "\ufeff",
                    "%YAML 1.1\n",
                ]
            )
        )
        text = text[:at] + piece + text[at:]
    lint(text)


# --------------------------------------------------------------------------- bombs


def laughs(width: int, levels: int, where: str = "input") -> str:
    lines = ["a0: &a0 [" + ", ".join(['"lol"'] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return f"{where}:\n  " + "\n  ".join(lines) + "\n"


@pytest.mark.parametrize(("width", "levels"), [(9, 9), (10, 10), (2, 64), (1000, 3)])
def test_billion_laughs_is_a_finding(width: int, levels: int) -> None:
    report = lint(laughs(width, levels))
    [finding] = report.errors
    assert finding.code == "E-YAML" and "YAML bomb" in finding.message


def test_aliases_that_stay_small_are_fine() -> None:
    report = lint(laughs(3, 4) + "expected:\n  answer: x\n")
    assert report.ok, report.findings


@settings(max_examples=examples(40))
@given(st.integers(1, 12), st.integers(1, 12), st.sampled_from(["input", "expected", "metadata"]))
def test_alias_chains(width: int, levels: int, where: str) -> None:
    report = lint(laughs(width, levels, where) + ("input: {q: 1}\n" if where != "input" else ""))
    expanded = sum(width**i for i in range(1, levels + 1))
    bombed = any("YAML bomb" in f.message for f in report.errors)
    assert bombed == (expanded > MAX_VALUES), (width, levels, expanded)


@pytest.mark.parametrize(
    "text",
    [
        "input: {q: " + "[" * 10_000 + "]" * 10_000 + "}\n",
        "input: {q: " + "{a: " * 10_000 + "1" + "}" * 10_000 + "}\n",
        "input: {q: " + "[" * 990 + "]" * 990 + "}\n",  # under libyaml's own limit
        "input:\n" + "".join("  " * i + "a:\n" for i in range(1, 400)) + "  " * 400 + "1\n",
        "input: {q: " + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + "}\n",
    ],
    ids=["flow-10000", "mapping-10000", "flow-990", "block-400", "just-past-the-limit"],
)
def test_deep_nesting_is_a_finding(text: str) -> None:
    [finding] = lint(text).errors
    assert finding.code == "E-YAML" and "nest" in finding.message


def test_nesting_at_the_limit_is_fine() -> None:
    depth = MAX_DEPTH - 3  # the case mapping and input hold it
    report = lint("input: {q: " + "[" * depth + "]" * depth + "}\n")
    assert report.ok, report.findings


@pytest.mark.parametrize(
    "text",
    ["input: &x {q: *x}\n", "input: &x [*x]\n", "a: &x {b: [1, {c: *x}]}\ninput: {q: 1}\n"],
)
def test_recursive_alias_is_a_finding(text: str) -> None:
    [finding] = lint(text).errors
    assert finding.code == "E-YAML" and "recursive alias" in finding.message


def test_number_too_long_to_read_is_a_finding() -> None:
    [finding] = lint("input: {q: " + "9" * (MAX_INT_DIGITS + 1) + "}\n").errors
    assert finding.code == "E-YAML" and finding.line == 1 and "in quotes" in finding.message
    assert lint("input: {q: '" + "9" * 10_000 + "'}\n").ok  # quoted, it is text


@pytest.mark.parametrize(
    "pattern", ["a{4294967296}", "a{99999999999999999999}", "(" * 2000 + ")" * 2000]
)
def test_regex_that_cannot_compile_is_a_finding(pattern: str) -> None:
    """Was OverflowError (a repeat count past C's int) or RecursionError from re.compile."""
    report = lint(f"input: {{q: 1}}\nevaluators: {{regex: {{pattern: '{pattern}'}}}}\n")
    [finding] = report.errors
    assert finding.code == "E-EVALUATOR-CONFIG", finding


def test_regex_lint_uses_the_scoring_engine() -> None:
    r"""The regex evaluator scores with the ``regex`` module, which reads ``\p{L}``."""
    assert lint("input: {q: 1}\nevaluators: {regex: '\\p{L}+'}\n").ok
