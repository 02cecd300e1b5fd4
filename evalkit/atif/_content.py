"""Validator helpers for step contents: timestamps, multimodal messages and media sources,
and the context-management convention kept in ``step.extra``."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, Final

from evalkit.atif._shape import Field, Report, at, check_object, describe, key
from evalkit.atif.model import AUDIO_MEDIA_TYPE_ALIASES, AUDIO_MEDIA_TYPES, IMAGE_MEDIA_TYPES

__all__ = ["check_context_management", "check_message", "check_timestamp"]

_TEXT_PART: Final = {"type": Field("string", required=True), "text": Field("string", required=True)}
_MEDIA_PART: Final = {
    "type": Field("string", required=True),
    "source": Field("node", required=True),
}
_IMAGE_SOURCE: Final = {
    "media_type": Field("string", required=True),
    "path": Field("string", required=True),
}
_AUDIO_SOURCE: Final = {**_IMAGE_SOURCE, "duration_sec": Field("number", nonneg=True)}
_PART_TYPES: Final = ("text", "image", "audio")


def check_timestamp(report: Report, value: str, path: str) -> None:
    """ISO 8601 as Python reads it (``Z`` allowed), the same test the reference uses."""
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        report.add(
            path,
            "timestamp-invalid",
            f"`timestamp` {value!r} is not an ISO 8601 date-time; write it like "
            "'2026-01-05T09:00:00Z', or leave it out",
        )


def check_message(report: Report, value: str | list[Any], path: str, base_dir: Path | None) -> None:
    """A step message or result content: a string, or (v1.6+) an array of content parts."""
    if isinstance(value, str):
        return
    if report.version < 6:
        report.add(
            path,
            "field-requires-newer-version",
            "multimodal content (an array of content parts) was added in ATIF-v1.6, but "
            f"this document declares {report.version_label}; declare ATIF-v1.6 or later, "
            "or use a plain string",
        )
    for i, part in enumerate(value):
        _part(report, part, at(path, i), base_dir)


def _part(report: Report, node: object, path: str, base_dir: Path | None) -> None:
    if not isinstance(node, dict):
        report.add(
            path,
            "type",
            f"`{path}` must be a content part object, but it is {describe(node)}; "
            'write it like {"type": "text", "text": "..."}',
        )
        return
    ptype = node.get("type")
    tpath = key(path, "type")
    if "type" not in node:
        report.add(
            tpath,
            "required",
            "a content part is missing `type`; set it to 'text', 'image' or 'audio'",
        )
        return
    if ptype not in _PART_TYPES:
        report.add(
            tpath,
            "content-part-type-unknown",
            f"content part `type` is {describe(ptype)}; it must be 'text', 'image' or 'audio'",
        )
        return
    if ptype == "audio" and report.version < 8:
        report.add(
            tpath,
            "field-requires-newer-version",
            "audio content parts were added in ATIF-v1.8, but this document declares "
            f"{report.version_label}; declare ATIF-v1.8",
        )
    forbidden = "source" if ptype == "text" else "text"
    if forbidden in node:
        needed = "text" if ptype == "text" else "source"
        report.add(
            key(path, forbidden),
            "content-part-field-forbidden",
            f"{_a(ptype)} content part carries its data in `{needed}` and must not have "
            f"`{forbidden}`; remove it, or make a separate part for it",
        )
        node = {k: v for k, v in node.items() if k != forbidden}
    spec = _TEXT_PART if ptype == "text" else _MEDIA_PART
    checked = check_object(report, node, path, spec, f"{_a(ptype)} content part")
    if checked is not None and "source" in checked:
        _source(report, checked["source"], key(path, "source"), ptype, base_dir)


def _a(word: str) -> str:
    return f"an {word}" if word[0] in "aeiou" else f"a {word}"


def _audio_type(media_type: str) -> str:
    lowered = media_type.lower()
    return AUDIO_MEDIA_TYPE_ALIASES.get(lowered, lowered)


def _source(
    report: Report, node: dict[str, Any], path: str, kind: str, base_dir: Path | None
) -> None:
    spec = _IMAGE_SOURCE if kind == "image" else _AUDIO_SOURCE
    src = check_object(report, node, path, spec, f"{_a(kind)} source")
    if src is None:
        return
    media_type = src.get("media_type")
    if media_type is not None:
        is_image = media_type in IMAGE_MEDIA_TYPES
        is_audio = _audio_type(media_type) in AUDIO_MEDIA_TYPES
        ok = is_image if kind == "image" else is_audio
        mpath = key(path, "media_type")
        allowed = ", ".join(sorted(IMAGE_MEDIA_TYPES if kind == "image" else AUDIO_MEDIA_TYPES))
        if not ok and (is_image or is_audio):
            other = "audio" if kind == "image" else "image"
            report.add(
                mpath,
                "media-kind-mismatch",
                f"{media_type!r} is {_a(other)} type inside {_a(kind)} part; set the part's "
                f"`type` to '{other}', or point at {_a(kind)} file",
            )
        elif not ok:
            report.add(
                mpath,
                "media-type-unknown",
                f"{media_type!r} is not a supported {kind} media type; use one of {allowed}",
            )
    file_path = src.get("path")
    if base_dir is None or file_path is None or not _is_local(file_path):
        return
    if not (base_dir / file_path).exists():
        report.add(
            key(path, "path"),
            "media-file-missing",
            f"the {kind} file {file_path!r} does not exist next to the trajectory "
            f"(looked in {base_dir}); ship the file with the trajectory or fix the path",
        )


def _is_local(file_path: str) -> bool:
    return "://" not in file_path and not file_path.startswith("data:")


def check_context_management(
    report: Report, step: dict[str, Any], path: str, source: object
) -> None:
    """``extra.context_management`` = {type, boundary}, on system steps; 'replace' needs content."""
    cpath = key(key(path, "extra"), "context_management")
    cm = step["extra"]["context_management"]
    if not (
        isinstance(cm, dict)
        and isinstance(cm.get("type"), str)
        and isinstance(cm.get("boundary"), str)
    ):
        report.add(
            cpath,
            "context-management-shape",
            "`context_management` must be an object with a string `type` (e.g. 'compaction', "
            "'pruning', 'injection') and a string `boundary` (e.g. 'replace', 'append', "
            "'truncate'); fix it or rename the key",
        )
        return
    if source in ("user", "agent"):
        report.add(
            cpath,
            "context-management-not-system",
            f"context management is declared on a {source} step; it belongs on the system "
            "step that rewrote the context, so move it there",
        )
    if cm["boundary"] == "replace" and not _has_result_content(step.get("observation")):
        report.add(
            cpath,
            "context-management-replace-without-content",
            "a 'replace' boundary means later steps see only this step's observation "
            "content, but the step has no observation result with content; put the new "
            "context (e.g. the summary) in `observation.results[].content`",
        )


def _has_result_content(observation: object) -> bool:
    if not isinstance(observation, dict) or not isinstance(observation.get("results"), list):
        return False
    return any(isinstance(r, dict) and r.get("content") is not None for r in observation["results"])
