"""Offline lint of a suite: every check that needs no server.

The online part of ``evalkit lint`` (case ids and overlay targets across the workspace,
W-CUSTOM-UNKNOWN for custom evaluators the server does not know) starts from the
``LintReport`` returned here: ``case_ids``, ``overlay_targets`` and ``custom_evaluators``.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from evalkit.cases._check import Sink
from evalkit.cases._index import Checked, SuiteIndex
from evalkit.cases._validate import ParsedCase, check_case
from evalkit.cases._yaml import YamlSyntaxError, parse
from evalkit.cases.model import (
    DEFAULT_MAX_FIXTURE_BYTES,
    LintFinding,
    LintReport,
    Location,
    format_finding,
    format_findings,
)
from evalkit.cases.project import PROJECT_FILE, FixtureEntry, ProjectConfig
from evalkit.model.names import NAME_RE, NAME_RULE

__all__ = ["format_finding", "format_findings", "format_report", "format_summary", "lint_suite"]

CASE_SUFFIXES = (".yaml", ".yml")


@dataclass
class Analysis:
    """Everything one pass over a suite learns; ``load_suite`` builds on it."""

    report: LintReport
    directory: Path
    cases: list[ParsedCase] = field(default_factory=list)
    """Case files without errors (after the id check: without duplicates), sorted by id."""
    ids: list[ParsedCase] = field(default_factory=list)
    """Every case file whose id is known, errors or not, in file order."""
    fixtures: dict[str, tuple[FixtureEntry, int, Path]] = field(default_factory=dict)
    """Fixtures the cases use and that passed the checks: key -> (entry, size, real path)."""


def lint_suite(
    directory: str | Path,
    project: ProjectConfig | None = None,
    *,
    max_fixture_bytes: int | None = None,
) -> LintReport:
    """Check a suite directory without a server.

    ``max_fixture_bytes`` defaults to evalkit.yaml's ``max_fixture_bytes``, else 50 MiB.
    """
    return analyze(directory, project, max_fixture_bytes=max_fixture_bytes).report


def analyze(
    directory: str | Path,
    project: ProjectConfig | None,
    *,
    max_fixture_bytes: int | None = None,
    index: SuiteIndex | None = None,
) -> Analysis:
    """One pass over a suite. With ``index``, case files whose stat or bytes are the ones it
    recorded are not parsed again: their findings come from the index (and go into it)."""
    suite = Path(directory)
    dataset = Path(os.path.normpath(suite.absolute())).name
    report = LintReport(suite=str(suite), dataset=dataset)
    analysis = Analysis(report=report, directory=suite)
    findings = report.findings
    if project is not None:
        findings.extend(project.warnings)
    if not suite.is_dir():
        findings.append(
            _finding(
                "E-SUITE-NOT-FOUND",
                str(suite),
                None,
                "no such directory: give the suite's directory (its name is the dataset name)",
            )
        )
        return analysis
    if not NAME_RE.match(dataset):
        findings.append(
            _finding(
                "E-DATASET-NAME",
                str(suite),
                None,
                f"the directory name {dataset!r} is the "
                f"dataset name and must be {NAME_RULE}: rename the directory",
            )
        )
    files = _case_files(suite)
    report.files_checked = len(files)
    if not files:
        findings.append(
            LintFinding(
                code="W-SUITE-EMPTY",
                severity="warning",
                file=str(suite),
                line=None,
                message="no case files (*.yaml, *.yml) in this directory",
            )
        )
    prefix = "" if str(suite) == "." else str(suite).rstrip("/") + "/"  # as str(suite / name)
    for name, st, is_link in files:
        sink = Sink(prefix + name)
        parsed = _check_file(sink, suite, name, st, is_link, index)
        findings.extend(sink.findings)
        if parsed is not None:
            analysis.ids.append(parsed)
            if parsed.valid and not sink.has_errors:
                analysis.cases.append(parsed)
    _check_ids(analysis)
    _check_fixtures(analysis, project, max_fixture_bytes)
    for case in analysis.ids:
        for name, line in case.custom_refs:
            report.custom_evaluators.setdefault(name, []).append(
                Location(file=case.file, line=line)
            )
        target = case.overlay
        if target is not None:
            report.overlay_targets.setdefault(target, []).append(
                Location(file=case.file, line=case.overlay_line)
            )
    report.case_ids = sorted({case.id for case in analysis.ids})
    analysis.cases.sort(key=lambda case: case.id)
    findings.sort(key=lambda f: (f.file, f.line or 0, f.code))
    return analysis


def format_summary(report: LintReport) -> str:
    """One line: how many errors and warnings, in how many case files."""
    errors, warnings = len(report.errors), len(report.warnings)
    files = f"{report.files_checked} case file{'s' if report.files_checked != 1 else ''}"
    if not errors and not warnings:
        return f"{report.dataset}: {files}, no problems"
    counts = f"{errors} error{'s' if errors != 1 else ''}, "
    counts += f"{warnings} warning{'s' if warnings != 1 else ''}"
    return f"{report.dataset}: {counts} in {files}"


def format_report(report: LintReport, *, relative_to: str | Path | None = None) -> str:
    """Every finding on its own line, then the summary line."""
    lines = [format_finding(f, relative_to=relative_to) for f in report.findings]
    return "\n".join([*lines, format_summary(report)])


# --------------------------------------------------------------------------- steps


def _finding(code: str, file: str, line: int | None, message: str) -> LintFinding:
    return LintFinding(code=code, severity="error", file=file, line=line, message=message)


def _case_files(suite: Path) -> list[tuple[str, os.stat_result, bool]]:
    """The suite's case files (regular files, or links to them): name, stat, is a link."""
    found: list[tuple[str, os.stat_result, bool]] = []
    with os.scandir(suite) as entries:
        for entry in entries:
            name = entry.name
            if name.startswith(".") or name == PROJECT_FILE or not name.endswith(CASE_SUFFIXES):
                continue
            try:
                st = entry.stat()
            except OSError:  # a dangling link
                continue
            if stat.S_ISREG(st.st_mode):
                found.append((name, st, entry.is_symlink()))
    found.sort(key=lambda item: item[0])
    return found


def _check_file(
    sink: Sink,
    suite: Path,
    name: str,
    st: os.stat_result,
    is_link: bool,
    index: SuiteIndex | None,
) -> ParsedCase | None:
    if is_link:
        real = (suite / name).resolve()
        if not real.is_relative_to(suite.resolve()):
            sink.error(
                "E-PATH-ESCAPE",
                None,
                f"this case file is a link to {real}, outside "
                "the suite directory: copy the file into the suite instead",
            )
            return None
    if index is None:
        return _check_bytes(sink, name, _read(sink.file))
    checked = index.reuse_by_stat(name, st, sink.file)
    if checked is None:
        data = _read(sink.file)
        digest = hashlib.sha256(data).digest()
        checked = index.reuse_by_content(name, st, digest, sink.file)
        if checked is None:
            parsed = _check_bytes(sink, name, data)
            index.record(name, st, digest, Checked(findings=list(sink.findings), parsed=parsed))
            return parsed
    sink.findings.extend(checked.findings)
    return checked.parsed


def _read(file: str) -> bytes:
    with open(file, "rb") as f:
        return f.read()


def _check_bytes(sink: Sink, name: str, data: bytes) -> ParsedCase | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        sink.error("E-YAML", None, "the file is not UTF-8 text: save it as UTF-8")
        return None
    if "\r" in text:  # as reading in text mode does
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    try:
        doc = parse(text)
    except YamlSyntaxError as exc:
        sink.error("E-YAML", exc.line, f"invalid YAML: {exc.message}")
        return None
    for problem in doc.key_problems:
        sink.error(problem.code, problem.line, problem.message)
    if doc.data is None and doc.key_problems:
        return None
    return check_case(sink, doc, source=name, stem=os.path.splitext(name)[0])


def _check_ids(analysis: Analysis) -> None:
    first: dict[str, ParsedCase] = {}
    duplicates: set[int] = set()
    for case in analysis.ids:
        seen = first.get(case.id)
        if seen is None:
            first[case.id] = case
            continue
        duplicates.add(id(case))
        where = f"{seen.source}:{seen.id_line}" if seen.id_line else seen.source
        analysis.report.findings.append(
            _finding(
                "E-CASE-ID-DUPLICATE",
                case.file,
                case.id_line or 1,
                f"case id {case.id!r} "
                f"is already used by {where}: case ids are unique, give one of them another id",
            )
        )
    analysis.cases = [case for case in analysis.cases if id(case) not in duplicates]
    for case in analysis.ids:
        target = case.overlay
        if target is not None and target in first:
            analysis.report.findings.append(
                _finding(
                    "E-OVERLAY-TARGET",
                    case.file,
                    case.overlay_line,
                    f"overlay target "
                    f"{target!r} is a case of this dataset ({first[target].source}); an overlay "
                    "patches a case of another dataset: name that case's id",
                )
            )


def _check_fixtures(analysis: Analysis, project: ProjectConfig | None, limit: int | None) -> None:
    users = _fixture_users(analysis, project)
    if project is None:
        return
    cap = limit or project.max_fixture_bytes or DEFAULT_MAX_FIXTURE_BYTES
    root = project.root.resolve()
    for key in sorted(users):
        entry = project.fixtures[key]
        first_case, first_line = users[key][0]
        used = f"used by {len(users[key])} case(s), first {first_case.source}:{first_line}"
        real = entry.resolved.resolve()
        problem = _fixture_path_problem(key, entry, real, root, used)
        if problem is None:
            size = real.stat().st_size
            if size <= cap:
                analysis.fixtures[key] = (entry, size, real)
                continue
            problem = (
                "E-FIXTURE-TOO-LARGE",
                f"fixture `{key}` is {size} bytes, over the {cap}-byte limit ({used}): shrink "
                "the file or raise `max_fixture_bytes` in evalkit.yaml",
            )
        code, message = problem
        analysis.report.findings.append(_finding(code, str(project.path), entry.line, message))


def _fixture_users(
    analysis: Analysis, project: ProjectConfig | None
) -> dict[str, list[tuple[ParsedCase, int]]]:
    """The cases (and lines) that use each fixture key of the registry; a key the registry
    does not have is a finding."""
    registry = project.fixtures if project is not None else {}
    users: dict[str, list[tuple[ParsedCase, int]]] = {}
    for case in analysis.ids:
        for key, line in case.fixture_refs:
            if key in registry:
                users.setdefault(key, []).append((case, line))
                continue
            if project is None:
                why = f"no {PROJECT_FILE} was found, so there is no fixtures registry"
            else:
                why = f"{project.path} has no such key under `fixtures:`"
            hint = difflib.get_close_matches(key, list(registry), n=1)
            did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
            analysis.report.findings.append(
                _finding(
                    "E-FIXTURE-UNKNOWN",
                    case.file,
                    line,
                    f"unknown fixture key {key!r}"
                    f"{did_you_mean}: {why}; `input.files` lists keys of that registry",
                )
            )
    return users


def _fixture_path_problem(
    key: str, entry: FixtureEntry, real: Path, root: Path, used: str
) -> tuple[str, str] | None:
    """(code, message) when a used fixture's path leaves the project, or is not a file."""
    if not real.is_relative_to(root):
        return (
            "E-PATH-ESCAPE",
            f"fixture `{key}` points to {real}, outside the project directory {root} ({used}): "
            "keep fixture files inside the repository",
        )
    if not real.exists():
        return (
            "E-FIXTURE-MISSING",
            f"fixture `{key}`: file {entry.path} does not exist ({used}): add the file or fix "
            "`path:`",
        )
    if not real.is_file():
        return (
            "E-FIXTURE-MISSING",
            f"fixture `{key}`: {entry.path} is not a regular file ({used}): point `path:` at "
            "a file",
        )
    return None
