"""Small helpers for schema checks over YAML nodes: findings with lines, type words."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from yaml.nodes import Node

from evalkit.cases._yaml import line_of
from evalkit.cases.model import LintFinding


@dataclass
class Sink:
    """Collects findings for one file."""

    file: str
    findings: list[LintFinding] = field(default_factory=list)

    def error(self, code: str, where: Node | int | None, message: str) -> None:
        self._add(code, "error", where, message)

    def warning(self, code: str, where: Node | int | None, message: str) -> None:
        self._add(code, "warning", where, message)

    def _add(self, code: str, severity: Any, where: Node | int | None, message: str) -> None:
        line = line_of(where) if isinstance(where, Node) else where
        self.findings.append(
            LintFinding(code=code, severity=severity, file=self.file, line=line, message=message)
        )

    @property
    def has_errors(self) -> bool:
        return any(f.severity == "error" for f in self.findings)


def kind(value: Any) -> str:
    """A user-facing word for the YAML type of ``value``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return "a string" if value.strip() else "an empty string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def suggest(name: str, known: Iterable[str]) -> str:
    """`` (did you mean `x`?)`` or an empty string."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean `{close[0]}`?)" if close else ""


def unknown_key(sink: Sink, key_node: Node, key: str, where: str, known: Iterable[str]) -> None:
    known = sorted(known)
    sink.error(
        "E-SCHEMA-UNKNOWN-KEY",
        key_node,
        f"unknown key `{key}` in {where}{suggest(key, known)}; allowed: {', '.join(known)}",
    )
