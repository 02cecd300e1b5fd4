"""Schema checks of one case file, over its YAML nodes, so every finding has a line."""

from __future__ import annotations

from typing import Any

import msgspec
from yaml.nodes import Node

from evalkit.cases._check import Sink, kind, unknown_key
from evalkit.cases._evaluators import EvalContext, check_evaluators
from evalkit.cases._yaml import Document, entries, items
from evalkit.cases.model import (
    CASE_ID_RE,
    CASE_ID_RULE,
    CaseFile,
    content_hash,
)

CASE_KEYS = (
    "id",
    "description",
    "input",
    "expected",
    "tags",
    "split",
    "evaluators",
    "overlay",
    "metadata",
)


class ParsedCase(msgspec.Struct, kw_only=True, array_like=True, gc=False):
    """A checked case file, with the lines lint needs later.

    ``valid`` is False when the file has errors; its id still counts for duplicates. The
    sync index keeps these (msgpack, so this is a Struct), without ``case_file``: a case it
    gives back has only what lint and sync use.
    """

    file: str
    source: str
    id: str
    id_line: int | None
    data: dict[str, Any]
    case_file: CaseFile | None
    """The typed model of a valid case (None when the file has errors, or from the index)."""
    fixture_refs: list[tuple[str, int]] = []
    overlay: str | None = None
    overlay_line: int | None = None
    custom_refs: list[tuple[str, int]] = []
    valid: bool = False
    """The file has no errors."""
    fixture_keys: list[str] = []
    """The keys under ``input.files`` of a valid case, each once, in order."""
    content_hash: str | None = None
    """``content_hash`` of a valid case's content (the mapping without ``id``)."""


def check_case(sink: Sink, doc: Document, *, source: str, stem: str) -> ParsedCase | None:
    """Check one case document; None when not even its id is known."""
    node, data = doc.node, doc.data
    if node is None or data is None:
        sink.error("E-SCHEMA-TYPE", 1, "the file is empty: a case is a mapping with `input:`")
        return None
    if not isinstance(data, dict):
        sink.error("E-SCHEMA-TYPE", node, f"a case file must be a mapping, got {kind(data)}")
        return None
    found = entries(node)
    ctx = EvalContext(sink, overlay="overlay" in data, expected=data.get("expected"))
    for key, (key_node, _) in found.items():
        if key not in CASE_KEYS:
            unknown_key(sink, key_node, key, "a case", CASE_KEYS)

    case_id, id_line = _check_id(sink, data, found, stem)
    for key in ("description", "split"):
        if key in data:
            _optional_str(sink, key, data[key], found[key][1])
    for key in ("expected", "metadata"):
        if key in data and data[key] is not None and not isinstance(data[key], dict):
            sink.error(
                "E-SCHEMA-TYPE", found[key][1], f"`{key}` must be a mapping, got {kind(data[key])}"
            )
    _check_input(ctx, data, found, node)
    if "tags" in data:
        _check_tags(sink, data["tags"], found["tags"][1])
    overlay_line = _check_overlay(sink, data, found)
    if data.get("evaluators") is not None:
        check_evaluators(ctx, data["evaluators"], found["evaluators"][1])

    if case_id is None:
        return None
    case_file = None
    chash = None
    if not sink.has_errors:
        try:
            case_file = msgspec.convert(data, CaseFile)
        except msgspec.ValidationError as exc:  # a gap between these checks and the model
            sink.error("E-SCHEMA-TYPE", node, f"the case does not fit the case model: {exc}")
        else:
            chash = content_hash({key: value for key, value in data.items() if key != "id"})
    return ParsedCase(
        file=sink.file,
        source=source,
        id=case_id,
        id_line=id_line,
        data=data,
        case_file=case_file,
        fixture_refs=ctx.fixture_refs,
        overlay=data["overlay"] if overlay_line is not None else None,
        overlay_line=overlay_line,
        custom_refs=ctx.custom_refs,
        valid=case_file is not None,
        fixture_keys=list(dict.fromkeys(case_file.files)) if case_file is not None else [],
        content_hash=chash,
    )


def _check_id(
    sink: Sink, data: dict[str, Any], found: dict[str, tuple[Node, Node]], stem: str
) -> tuple[str | None, int | None]:
    if data.get("id") is None:
        if not CASE_ID_RE.match(stem):
            sink.error(
                "E-CASE-ID",
                1,
                f"the file name {stem!r} is not a valid case id ({CASE_ID_RULE}): "
                "rename the file or set `id:`",
            )
            return None, None
        return stem, None
    value, value_node = data["id"], found["id"][1]
    if not isinstance(value, str):
        sink.error(
            "E-SCHEMA-TYPE", value_node, f"`id` must be a string, got {kind(value)}: quote it"
        )
        return None, None
    if not CASE_ID_RE.match(value):
        sink.error(
            "E-CASE-ID", value_node, f"`id` {value!r} is not a valid case id ({CASE_ID_RULE})"
        )
        return None, None
    return value, found["id"][0].start_mark.line + 1


def _optional_str(sink: Sink, key: str, value: Any, node: Node) -> None:
    if value is not None and not isinstance(value, str):
        sink.error("E-SCHEMA-TYPE", node, f"`{key}` must be a string, got {kind(value)}")
    elif isinstance(value, str) and not value.strip() and key == "split":
        sink.error("E-SCHEMA-VALUE", node, "`split` is empty: name a split or remove the key")


def _check_input(
    ctx: EvalContext, data: dict[str, Any], found: dict[str, tuple[Node, Node]], node: Node
) -> None:
    sink = ctx.sink
    if data.get("input") is None:
        if not ctx.overlay:
            where = found["input"][1] if "input" in found else 1
            sink.error("E-SCHEMA-REQUIRED", where, "a case needs `input:` (a mapping)")
        return
    value, value_node = data["input"], found["input"][1]
    if not isinstance(value, dict):
        sink.error("E-SCHEMA-TYPE", value_node, f"`input` must be a mapping, got {kind(value)}")
        return
    if value.get("files") is None:
        return
    files, files_node = value["files"], entries(value_node)["files"][1]
    if not isinstance(files, list):
        sink.error(
            "E-SCHEMA-TYPE",
            files_node,
            f"`input.files` must be a list of fixture keys, got {kind(files)}",
        )
        return
    for item, item_node in zip(files, items(files_node), strict=False):
        if not isinstance(item, str) or not item:
            sink.error(
                "E-SCHEMA-TYPE",
                item_node,
                f"each of `input.files` must be a fixture key (a string), got {kind(item)}",
            )
        else:
            ctx.fixture_refs.append((item, item_node.start_mark.line + 1))


def _check_tags(sink: Sink, tags: Any, node: Node) -> None:
    if tags is None:
        return
    if not isinstance(tags, list):
        sink.error("E-SCHEMA-TYPE", node, f"`tags` must be a list of strings, got {kind(tags)}")
        return
    seen: set[str] = set()
    for tag, tag_node in zip(tags, items(node), strict=False):
        if not isinstance(tag, str) or not tag.strip():
            sink.error(
                "E-SCHEMA-TYPE", tag_node, f"each tag must be a non-empty string, got {kind(tag)}"
            )
        elif tag in seen:
            sink.warning("W-TAG-DUPLICATE", tag_node, f"tag {tag!r} is listed twice: drop one")
        else:
            seen.add(tag)


def _check_overlay(
    sink: Sink, data: dict[str, Any], found: dict[str, tuple[Node, Node]]
) -> int | None:
    if "overlay" not in data:
        return None
    target, node = data["overlay"], found["overlay"][1]
    if not isinstance(target, str) or not target.strip():
        shown = "nothing" if target in (None, "") else kind(target)
        sink.error(
            "E-OVERLAY-TARGET",
            node,
            f"`overlay` names {shown}: write the id of the case this file patches "
            "(`overlay: <case id>`), or remove the key for an ordinary case",
        )
        return None
    if not CASE_ID_RE.match(target):
        sink.error(
            "E-OVERLAY-TARGET",
            node,
            f"overlay target {target!r} is not a valid case id ({CASE_ID_RULE})",
        )
        return None
    return node.start_mark.line + 1
