"""A suite: the directory of case files that sync turns into a dataset."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from evalkit.cases._index import SuiteIndex
from evalkit.cases.lint import analyze, format_report
from evalkit.cases.model import Case, LintFinding, SuiteError, content_hash, version_hash
from evalkit.cases.project import ProjectConfig

_CHUNK = 1 << 20


def hash_fixture(path: str | Path) -> tuple[str, int]:
    """(sha256 hex, size in bytes) of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


@dataclass(frozen=True)
class FixtureRef:
    """A fixture the suite uses, resolved through evalkit.yaml's registry."""

    key: str
    path: Path
    """Absolute path of the file (symlinks resolved)."""
    size: int
    context: str | None = None
    known_sha256: str | None = field(default=None, repr=False, compare=False)
    """The sha256 when the sync index has it already."""

    @cached_property
    def sha256(self) -> str:
        """The file's sha256 (hex), read on first use."""
        return self.known_sha256 or hash_fixture(self.path)[0]

    @property
    def pin(self) -> dict[str, Any]:
        """What a case version records of this fixture (see ``version_hash``)."""
        return {"sha256": self.sha256, "size": self.size, "context": self.context}


@dataclass(frozen=True)
class Suite:
    """A suite that passed the offline lint: its cases sorted by id, its fixtures by key."""

    name: str
    """The dataset name: the directory's name."""
    path: Path
    cases: list[Case]
    fixtures: dict[str, FixtureRef] = field(default_factory=dict)
    warnings: list[LintFinding] = field(default_factory=list)
    custom_evaluators: frozenset[str] = frozenset()

    def version_hash(self, case: Case) -> str:
        """The case's version hash, as the server computes it from what sync sends."""
        return version_hash(
            case.content_hash, {key: self.fixtures[key].pin for key in case.fixture_keys}
        )

    def case(self, case_id: str) -> Case:
        for case in self.cases:
            if case.id == case_id:
                return case
        raise KeyError(case_id)


def load_suite(
    directory: str | Path,
    project: ProjectConfig | None = None,
    *,
    max_fixture_bytes: int | None = None,
    index: SuiteIndex | None = None,
) -> Suite:
    """Parse and check a suite. Raises SuiteError (with the lint report) on any error.

    With ``index`` (``evalkit sync``), files the index vouches for are not parsed again and
    the fixtures' sha256 are computed now, each file read only when its stat changed.
    """
    analysis = analyze(directory, project, max_fixture_bytes=max_fixture_bytes, index=index)
    report = analysis.report
    if not report.ok:
        raise SuiteError(format_report(report), report)
    cases: list[Case] = []
    for parsed in analysis.cases:
        data = parsed.data
        content = data if "id" not in data else {k: v for k, v in data.items() if k != "id"}
        cases.append(
            Case(
                id=parsed.id,
                source=parsed.source,
                content=content,
                content_hash=parsed.content_hash or content_hash(content),
                fixture_keys=parsed.fixture_keys,
                overlay=parsed.overlay,
            )
        )
    fixtures: dict[str, FixtureRef] = {}
    for key, (entry, size, path) in sorted(analysis.fixtures.items()):
        known = index.fixture_sha256(path) if index is not None else None
        fixtures[key] = FixtureRef(
            key=key, path=path, size=size, context=entry.context, known_sha256=known
        )
    return Suite(
        name=report.dataset,
        path=Path(directory).absolute(),
        cases=cases,
        fixtures=fixtures,
        warnings=report.warnings,
        custom_evaluators=report.custom_evaluator_names(),
    )


def apply_overlay(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """The content of ``base`` with an overlay's content applied (RFC 7396 merge patch).

    Mappings merge key by key, ``null`` removes a key, anything else (lists included)
    replaces. The overlay's own ``overlay`` key is not copied.
    """
    patch = {key: value for key, value in overlay.items() if key != "overlay"}
    return _merge(base, patch)


def _merge(base: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return patch
    result = dict(base) if isinstance(base, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge(result.get(key), value)
    return result
