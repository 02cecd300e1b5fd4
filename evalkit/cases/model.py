"""The case-file model: what a case file may say, what lint reports, what sync sends.

Exceptions raised by ``evalkit.cases``::

    EvalkitError (evalkit.errors)
    └── CasesError              a case file or evalkit.yaml is wrong; ``findings`` says where
        ├── ProjectError        evalkit.yaml has errors
        │   └── ProjectNotFound no evalkit.yaml in the start directory or above it
        └── SuiteError          a suite has lint errors; ``report`` is the whole lint report
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

from evalkit.errors import EvalkitError

CASE_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
CASE_ID_RULE = (
    "1 to 128 characters: letters, digits, '_', '.', '-', starting with a letter or digit"
)
CUSTOM_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
FIXTURE_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")

GAUGES: tuple[str, ...] = ("latency", "tokens", "cost", "steps", "tool_call_count")
BUILTIN_EVALUATORS: tuple[str, ...] = (
    "exact_match",
    "contains",
    "not_contains",
    "regex",
    "numeric",
    "json_schema",
    "tool_calls",
    "max_steps",
    *GAUGES,
)
"""Built-in evaluator names a case may use under ``evaluators:`` (besides judge and custom)."""

LIBRARY_JUDGES: dict[str, tuple[str, ...]] = {
    "task_completion": (),
    "answer_correctness": ("expected",),
    "groundedness": ("trajectory",),
    "tool_use": ("tool_calls",),
    "unnecessary_steps": ("trajectory",),
    "safety": (),
}
"""The library judges a case may name under ``judges:``, with what each needs
(``evalkit.scoring.judge_library`` holds their prompts; a test keeps the two in step)."""

DEFAULT_MAX_FIXTURE_BYTES = 50 * 2**20

Severity = Literal["error", "warning"]

# --------------------------------------------------------------------------- evaluators


class _Config(Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    pass


class ExactMatchConfig(_Config):
    """``exact_match: {value, ignore_case, strip}``; no value means ``expected.answer``."""

    value: str | None = None
    ignore_case: bool = False
    strip: bool = True


class TextMatchConfig(_Config):
    """``contains`` / ``not_contains`` in the long form: ``{values, ignore_case}``."""

    values: str | list[str]
    ignore_case: bool = False


class RegexConfig(_Config):
    """``regex: {pattern, ignore_case}``; pattern is one regex or a list (all must match)."""

    pattern: str | list[str]
    ignore_case: bool = False


class NumericConfig(_Config):
    """``numeric: {value, tolerance, relative}``; no value means ``expected.answer``."""

    value: float | None = None
    tolerance: Annotated[float, Meta(ge=0)] = 0.0
    relative: bool = False


class ToolCallsConfig(_Config):
    """``tool_calls: {required, forbidden, order}``: tool names from the trajectory."""

    required: list[str] | None = None
    forbidden: list[str] | None = None
    order: list[str] | None = None


class JudgeConfig(_Config):
    """``judge: {rubric, model}``: the LLM judge grades the run against the rubric."""

    rubric: str
    model: str | None = None


class LibraryJudgeConfig(_Config):
    """One library judge under ``judges:`` in the long form: ``{model}``."""

    model: str | None = None


class EvaluatorsConfig(_Config):
    """The ``evaluators:`` block of a case. ``null`` means "not set" (an overlay removes)."""

    exact_match: bool | str | ExactMatchConfig | None = None
    contains: str | list[str] | TextMatchConfig | None = None
    not_contains: str | list[str] | TextMatchConfig | None = None
    regex: str | list[str] | RegexConfig | None = None
    numeric: bool | float | NumericConfig | None = None
    json_schema: dict[str, Any] | None = None
    tool_calls: ToolCallsConfig | None = None
    max_steps: Annotated[int, Meta(gt=0)] | None = None
    latency: bool | None = None
    tokens: bool | None = None
    cost: bool | None = None
    steps: bool | None = None
    tool_call_count: bool | None = None
    judge: JudgeConfig | None = None
    judges: dict[str, bool | LibraryJudgeConfig | None] | None = None
    custom: dict[str, Any] | None = None


# --------------------------------------------------------------------------- cases


class CaseFile(_Config):
    """One parsed case file, as written (``id`` may be missing: it defaults to the stem)."""

    id: str | None = None
    description: str | None = None
    input: dict[str, Any] | None = None
    expected: dict[str, Any] | None = None
    tags: list[str] | None = None
    split: str | None = None
    evaluators: EvaluatorsConfig | None = None
    overlay: str | None = None
    metadata: dict[str, Any] | None = None

    @property
    def files(self) -> list[str]:
        """The fixture keys under ``input.files`` (empty when there are none)."""
        files = (self.input or {}).get("files") or []
        return [str(key) for key in files]


class Case(Struct, kw_only=True, frozen=True):
    """A case as sync sends it to the server."""

    id: str
    source: str
    """The case file's path relative to the suite directory, with '/' separators."""
    content: dict[str, Any]
    """The case file's mapping without ``id``: JSON values only, as written."""
    content_hash: str
    """sha256 hex of ``canonical_json(content)``."""
    fixture_keys: list[str]
    overlay: str | None = None


def canonical_json(value: Any) -> bytes:
    """JSON with sorted keys and no whitespace: the same bytes for the same data."""
    return msgspec.json.encode(value, order="sorted")


def content_hash(content: Any) -> str:
    """sha256 hex digest of ``canonical_json(content)``."""
    return hashlib.sha256(canonical_json(content)).hexdigest()


def version_hash(content_sha: str, fixtures: dict[str, Any]) -> str:
    """What makes two case versions the same: the content and the pinned fixture bytes and
    context (the content names fixture keys, not bytes, so a changed file is a new version).

    ``fixtures`` maps each key to its pin (``sha256`` and ``context``, other fields are not
    part of it). The server stores this per version; ``evalkit sync`` computes the same to
    name an unchanged case by its hash alone.
    """
    pins = {
        key: {"sha256": pin["sha256"], "context": pin.get("context")}
        for key, pin in fixtures.items()
    }
    return hashlib.sha256(canonical_json({"content": content_sha, "fixtures": pins})).hexdigest()


# --------------------------------------------------------------------------- lint


class Location(Struct, kw_only=True, frozen=True):
    file: str
    line: int | None = None


class LintFinding(Struct, kw_only=True, frozen=True):
    """One problem: ``code`` starts with ``E-`` (error) or ``W-`` (warning)."""

    code: str
    severity: Severity
    file: str
    line: int | None
    message: str


class LintReport(Struct, kw_only=True):
    """What ``lint_suite`` found, plus the names the online checks need."""

    suite: str
    dataset: str
    files_checked: int = 0
    findings: list[LintFinding] = []
    case_ids: list[str] = []
    custom_evaluators: dict[str, list[Location]] = {}
    """Custom evaluator name -> where cases use it (online lint warns W-CUSTOM-UNKNOWN)."""
    overlay_targets: dict[str, list[Location]] = {}
    """Overlay target case id -> where overlays name it (online lint checks it exists)."""

    @property
    def errors(self) -> list[LintFinding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[LintFinding]:
        return [f for f in self.findings if f.severity == "warning"]

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def custom_evaluator_names(self) -> frozenset[str]:
        return frozenset(self.custom_evaluators)


# --------------------------------------------------------------------------- errors


class CasesError(EvalkitError):
    """A case file or evalkit.yaml is wrong; ``findings`` says where and why."""

    def __init__(self, message: str, findings: list[LintFinding]) -> None:
        super().__init__(message)
        self.findings = findings


class ProjectError(CasesError):
    """evalkit.yaml has errors."""


class ProjectNotFound(ProjectError):
    """No evalkit.yaml in the start directory or any directory above it."""


class SuiteError(CasesError):
    """A suite has lint errors, so it cannot be loaded (or synced)."""

    def __init__(self, message: str, report: LintReport) -> None:
        super().__init__(message, report.errors)
        self.report = report


# --------------------------------------------------------------------------- formatting


def format_finding(finding: LintFinding, *, relative_to: str | Path | None = None) -> str:
    """``path:line: E-CODE message`` on one line (``path: ...`` when there is no line).

    With ``relative_to``, a path inside that directory is shown relative to it.
    """
    path = finding.file
    if relative_to is not None:
        with contextlib.suppress(ValueError):
            path = str(Path(path).absolute().relative_to(Path(relative_to).absolute()))
    where = f"{path}:{finding.line}" if finding.line is not None else path
    message = " ".join(finding.message.split())
    return f"{where}: {finding.code} {message}"


def format_findings(findings: list[LintFinding], *, relative_to: str | Path | None = None) -> str:
    return "\n".join(format_finding(f, relative_to=relative_to) for f in findings)
