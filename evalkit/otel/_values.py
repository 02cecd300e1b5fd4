"""Reading one value a mapping names out of a span's attributes: a plain attribute, or a
value inside a JSON attribute (:class:`~evalkit.otel.mapping.AttributeRef`)."""

from __future__ import annotations

import json
from typing import Any, Final

from evalkit.otel.mapping import AttributeRef, Name, Names, names

_MISSING: Final = object()


def first(attributes: dict[str, Any], rule: Names | None) -> Any:
    """The value of the first name of ``rule`` the attributes have (not ``""``), or None."""
    return first_named(attributes, rule)[1]


def first_named(attributes: dict[str, Any], rule: Names | None) -> tuple[Name | None, Any]:
    """The first name of ``rule`` the attributes have, and its value; (None, None) if none."""
    for name in names(rule):
        value = resolve(attributes, name)
        if value is not None:
            return name, value
    return None, None


def resolve(attributes: dict[str, Any], name: Name) -> Any:
    """One name's value, or None when the attributes do not have it."""
    if isinstance(name, str):
        value = attributes.get(name)
        return None if value is None or value == "" else value
    raw = attributes.get(name.attribute)
    if raw is None or raw == "":
        return None
    return _inside(raw, name)


def _inside(raw: Any, ref: AttributeRef) -> Any:
    value = raw
    if isinstance(value, str) and (ref.json or ref.path is not None or ref.where):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    for path, wanted in (ref.where or {}).items():
        found = at_path(value, path)
        if found is _MISSING or not same(found, wanted):
            return None
    if ref.path is not None:
        value = at_path(value, ref.path)
        if value is _MISSING:
            return None
    return None if value is None or value == "" else value


def at_path(value: Any, path: str | list[str | int]) -> Any:
    """The value at ``path`` (``"kwargs.content"``, ``"messages.-1"``, or a list of steps),
    or ``_MISSING``. A step into a list is an index, negative from the end."""
    steps = path.split(".") if isinstance(path, str) else path
    for step in steps:
        if isinstance(value, list):
            index = _index(step)
            if index is None or not -len(value) <= index < len(value):
                return _MISSING
            value = value[index]
        elif isinstance(value, dict):
            key = str(step)
            if key not in value:
                return _MISSING
            value = value[key]
        else:
            return _MISSING
    return value


def _index(step: str | int) -> int | None:
    if isinstance(step, int):
        return step
    digits = step[1:] if step.startswith("-") else step
    return int(step) if digits.isdigit() else None


def same(value: Any, wanted: Any) -> bool:
    """Attribute equality for rules: booleans only equal booleans, numbers compare as numbers,
    anything else as text."""
    if isinstance(value, bool) or isinstance(wanted, bool):
        return isinstance(value, bool) and isinstance(wanted, bool) and value == wanted
    if isinstance(value, int | float) and isinstance(wanted, int | float):
        return value == wanted
    return str(value) == str(wanted)


def json_container(value: Any) -> bool:
    """A JSON object or list, structured or as JSON text (an agent's state, an envelope)."""
    if isinstance(value, dict | list):
        return True
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        try:
            return isinstance(json.loads(value), dict | list)
        except ValueError:
            return False
    return False
