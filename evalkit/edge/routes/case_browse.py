"""Browsing a dataset: its cases filtered and paged, a case version as text, the diff
between two versions, and what promotion carried into or out of the dataset. Everyone
logged in reads them, like the rest of a workspace."""

from __future__ import annotations

from typing import get_args

from evalkit.auth import access
from evalkit.edge.endpoint import Call, Endpoint
from evalkit.errors import BadRequest
from evalkit.model import case_browse as wire
from evalkit.model.names import whole_number
from evalkit.store import case_browse
from evalkit.store.workspaces import get_workspace

MAX_LIMIT = 200
MAX_OFFSET = 10_000_000
_STATES: tuple[str, ...] = get_args(wire.CaseFilterState)


def _number(call: Call, name: str, default: int | None, low: int, high: int) -> int | None:
    text = call.request.query_params.get(name)
    if text is None or text == "":
        return default
    number = whole_number(text)
    if number is None or not low <= number <= high:
        raise BadRequest(
            f"{name} must be a whole number from {low} to {high}, not {text!r}",
            code="bad-query",
        )
    return number


def _text(call: Call, name: str) -> str | None:
    return call.request.query_params.get(name) or None


async def cases_search(call: Call) -> wire.CasePage:
    access.require_read(call.actor)
    state = call.request.query_params.get("state") or "live"
    if state not in _STATES:
        raise BadRequest(
            f"state must be one of {', '.join(_STATES)}, not {state!r}", code="bad-query"
        )
    limit = _number(call, "limit", 50, 1, MAX_LIMIT)
    offset = _number(call, "offset", 0, 0, MAX_OFFSET)
    assert limit is not None and offset is not None
    async with call.db.connection() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
        return await case_browse.search_cases(
            conn,
            ws,
            call.param("dataset"),
            state=state,  # type: ignore[arg-type]
            tag=_text(call, "tag"),
            split=_text(call, "split"),
            text=_text(call, "q"),
            offset=offset,
            limit=limit,
        )


async def promotions_list(call: Call) -> wire.PromotionPage:
    access.require_read(call.actor)
    limit = _number(call, "limit", 50, 1, MAX_LIMIT)
    offset = _number(call, "offset", 0, 0, MAX_OFFSET)
    assert limit is not None and offset is not None
    async with call.db.connection() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
        return await case_browse.list_promotions(
            conn,
            call.actor,
            ws,
            call.param("dataset"),
            case_id=_text(call, "case"),
            offset=offset,
            limit=limit,
        )


def _version(text: str) -> int:
    number = whole_number(text)
    if number is None or not 1 <= number <= 10**9:
        raise BadRequest(
            f"a case version is a number from 1, not {text!r}", code="bad-case-version"
        )
    return number


async def case_version_show(call: Call) -> wire.CaseVersionText:
    access.require_read(call.actor)
    version = _version(call.param("version"))
    async with call.db.connection() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
        return await case_browse.version_text(conn, ws, call.param("case_id"), version)


async def case_diff(call: Call) -> wire.CaseDiff:
    access.require_read(call.actor)
    old = _number(call, "from", None, 1, 10**9)
    new = _number(call, "to", None, 1, 10**9)
    async with call.db.connection() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
        return await case_browse.diff_versions(conn, ws, call.param("case_id"), old, new)


_DS = "/api/workspaces/{workspace}/datasets/{dataset}"
_CASE = "/api/workspaces/{workspace}/cases/{case_id}"

ENDPOINTS = [
    Endpoint(
        "GET",
        _DS + "/case-search",
        cases_search,
        "One page of a dataset's cases with tags and split, filtered: state (live, pending, "
        "approved, rejected, removed, all), tag, split, q (part of the id), offset, limit",
        returns=wire.CasePage,
        tags=["cases"],
    ),
    Endpoint(
        "GET",
        _DS + "/promotions",
        promotions_list,
        "Approved versions promotion copied into this dataset (a target) or out of it into "
        "its namesake in the target (a source), newest first; case, offset, limit",
        returns=wire.PromotionPage,
        tags=["cases"],
    ),
    Endpoint(
        "GET",
        _CASE + "/versions/{version}",
        case_version_show,
        "One version of a case with its text (YAML)",
        returns=wire.CaseVersionText,
        tags=["cases"],
    ),
    Endpoint(
        "GET",
        _CASE + "/diff",
        case_diff,
        "The line diff between two versions of a case (from, to; default: the previous "
        "version to the current one)",
        returns=wire.CaseDiff,
        tags=["cases"],
    ),
]
