"""Structural checks shared by the ATIF validator: JSON types, required and unknown keys,
and fields newer than the declared schema version.

Each object kind is described by a table of :class:`Field` entries. :func:`check_object`
reports every problem it sees and hands back only the values that passed, so that the
caller can go on with cross-field rules without tripping over wrong types.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

__all__ = ["AtifError", "Field", "Report", "at", "check_object", "describe", "key"]


class AtifError(msgspec.Struct, frozen=True):
    """One broken rule: where (JSON path), which rule (stable id), and what to do about it."""

    path: str
    rule: str
    message: str


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# What a value of each kind is called in messages.
_KIND_NAMES: Final = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "object": "a JSON object",
    "node": "a JSON object",
    "array": "an array",
    "string|number": "a string or a number",
    "message": "a string or an array of content parts",
    "integer[]": "an array of integers",
    "number[]": "an array of numbers",
    "object[]": "an array of JSON objects",
}


@dataclass(frozen=True)
class Field:
    """How one key of an ATIF object is checked.

    ``since`` is the minor version (the N of ATIF-v1.N) that introduced the field;
    ``nonneg`` asks for a value >= 0.
    """

    kind: str
    required: bool = False
    since: int = 0
    nonneg: bool = False


@dataclass
class Report:
    """Collects errors; ``version`` is the minor version the current document declares."""

    errors: list[AtifError] = field(default_factory=list)
    version: int = 8
    version_label: str = "ATIF-v1.8"

    def add(self, path: str, rule: str, message: str) -> None:
        self.errors.append(AtifError(path=path, rule=rule, message=message))


def key(path: str, name: object) -> str:
    """Path of member ``name`` under ``path``: ``steps[0].message`` or ``extra["a b"]``."""
    if isinstance(name, str) and _IDENT.match(name):
        return f"{path}.{name}" if path else name
    return f"{path}[{json.dumps(str(name))}]"


def at(path: str, index: int) -> str:
    """Path of array element ``index`` under ``path``."""
    return f"{path}[{index}]"


def describe(value: object) -> str:
    """Short JSON-ish name of a value's type, with the value when it is small."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({'true' if value else 'false'})"
    if isinstance(value, int):
        return f"an integer ({value})"
    if isinstance(value, float):
        return f"a number ({value})"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"a string ({json.dumps(shown)})"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return f"a Python {type(value).__name__}"


def _is_int(value: object) -> bool:
    return type(value) is int


def _is_number(value: object) -> bool:
    if type(value) is int:
        return True
    return type(value) is float and math.isfinite(value)


def _is_object(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) for k in value)


def _element_check(kind: str) -> Any:
    return {"integer[]": _is_int, "number[]": _is_number, "object[]": _is_object}[kind]


def _kind_ok(kind: str, value: object) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return _is_int(value)
    if kind == "number":
        return _is_number(value)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "object":
        return _is_object(value)
    if kind == "node":
        return isinstance(value, dict)
    if kind == "string|number":
        return isinstance(value, str) or _is_number(value)
    if kind == "message":
        return isinstance(value, str | list)
    # "array" and the typed arrays: element types of typed arrays are checked separately
    return isinstance(value, list)


def _type_message(path: str, kind: str, value: object) -> str:
    msg = f"`{path}` must be {_KIND_NAMES[kind]}, but it is {describe(value)}"
    if kind == "object" and isinstance(value, str):
        return msg + "; put the decoded JSON object here, not a JSON-encoded string"
    if kind == "object" and isinstance(value, dict):
        return msg + " with non-string keys; use string keys only"
    if kind in ("integer", "number") and isinstance(value, str):
        return msg + "; write it as a JSON number without quotes"
    if kind == "integer" and isinstance(value, float):
        return msg + "; write it as a whole number"
    return msg + f"; change it to {_KIND_NAMES[kind]}"


def check_object(
    report: Report,
    node: object,
    path: str,
    spec: Mapping[str, Field],
    what: str,
) -> dict[str, Any] | None:
    """Check ``node`` against ``spec``; return the non-null members that have the right type.

    Returns ``None`` (after reporting) when ``node`` is not an object at all.
    """
    if not isinstance(node, dict):
        if path:
            msg = f"`{path}` must be a JSON object ({what}), but it is {describe(node)}"
        else:
            msg = f"the document must be a JSON object (a trajectory), but it is {describe(node)}"
        report.add(path, "type", msg + f"; write {what} as a JSON object")
        return None
    _check_keys(report, node, path, spec, what)
    good: dict[str, Any] = {}
    for name, fld in spec.items():
        fpath = key(path, name)
        if name not in node:
            if fld.required:
                report.add(
                    fpath,
                    "required",
                    f"{what} is missing `{name}`, which is required; "
                    f"add it as {_KIND_NAMES[fld.kind]}",
                )
        elif _member_ok(report, fpath, name, fld, node[name]):
            good[name] = node[name]
    return good


def _check_keys(
    report: Report, node: dict[Any, Any], path: str, spec: Mapping[str, Field], what: str
) -> None:
    """Report each key of ``node`` that is not a string, or not a field of ``spec``."""
    for name in node:
        if not isinstance(name, str):
            report.add(
                key(path, name),
                "type",
                f"{what} has a non-string key {name!r}; JSON object keys are strings",
            )
        elif name not in spec:
            report.add(
                key(path, name),
                "unknown-field",
                f"`{name}` is not an ATIF field of {what}; remove it, or move it into "
                "an `extra` object, which is the place for custom data",
            )


def _member_ok(report: Report, fpath: str, name: str, fld: Field, value: Any) -> bool:
    """Whether a present member is usable: not null, of its kind, its elements too, not
    negative where it cannot be. A field newer than the document's version is reported and
    still used."""
    if value is None:
        if fld.required:
            report.add(
                fpath,
                "type",
                f"`{fpath}` is required and cannot be null; set it to {_KIND_NAMES[fld.kind]}",
            )
        return False
    if not _kind_ok(fld.kind, value):
        report.add(fpath, "type", _type_message(fpath, fld.kind, value))
        return False
    if fld.kind.endswith("[]") and not _elements_ok(report, fpath, fld.kind, value):
        return False
    if fld.nonneg and value < 0:
        report.add(
            fpath,
            "negative-value",
            f"`{fpath}` is {value}, but it cannot be negative; use 0 or more, "
            "or leave the field out if the value is unknown",
        )
        return False
    if fld.since > report.version:
        report.add(
            fpath,
            "field-requires-newer-version",
            f"`{name}` was added in ATIF-v1.{fld.since}, but this document declares "
            f"{report.version_label}; set `schema_version` to ATIF-v1.{fld.since} "
            "or later, or drop the field",
        )
    return True


def _elements_ok(report: Report, path: str, kind: str, value: list[Any]) -> bool:
    check = _element_check(kind)
    bad = [i for i, item in enumerate(value) if not check(item)]
    if not bad:
        return True
    first = bad[0]
    more = f" ({len(bad) - 1} more elements are wrong too)" if len(bad) > 1 else ""
    report.add(
        at(path, first),
        "type",
        f"`{at(path, first)}` is {describe(value[first])}, but `{path}` must be "
        f"{_KIND_NAMES[kind]}{more}; fix the element type",
    )
    return False
