"""A dataset's cases (filtered, paged) and one case: content, versions, diff, changelog,
comments, and review for those the rules let review."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from starlette.responses import RedirectResponse, Response

from evalkit.auth import access
from evalkit.auth.access import WorkspaceFacts
from evalkit.edge.routes import case_browse, datasets, workspaces
from evalkit.errors import Forbidden
from evalkit.model import api
from evalkit.model import datasets as wire
from evalkit.web.page import Page, WebCall, form_struct, use

CASE_FILTERS = ("state", "tag", "split", "q")
STATE_CHOICES = (
    ("live", "Every live case"),
    ("pending", "Pending review"),
    ("approved", "Approved"),
    ("rejected", "Rejected"),
    ("removed", "Removed by a sync"),
    ("all", "Live and removed"),
)
DONE = {
    "approve": "Approved. The changelog below has the entry.",
    "reject": "Rejected. The changelog below has the entry.",
    "comment": "Your comment is posted.",
}


def may_review(call: WebCall, ws: api.Workspace) -> bool:
    """Whether the review rule in ``evalkit.auth.access`` lets this user decide here; it
    only hides the buttons: the API handler asks the same rule again on POST."""
    facts = WorkspaceFacts(
        name=ws.name,
        kind=ws.kind,
        owner_id=None,
        actor_role=ws.your_role,
        is_promotion_target=ws.promoted_from is not None,
    )
    try:
        access.require_review(call.actor, facts)
    except Forbidden:
        return False
    return True


def dataset_url(workspace: str, dataset: str) -> str:
    return f"/w/{quote(workspace)}/datasets/{quote(dataset)}"


def case_url(workspace: str, dataset: str, case: str) -> str:
    return f"{dataset_url(workspace, dataset)}/cases/{quote(case)}"


def with_query(query: Any, **changes: Any) -> str:
    """The current query string with some keys changed (None or "" drops a key)."""
    merged = {k: v for k, v in query.items()}
    merged.update(changes)
    kept = {k: v for k, v in merged.items() if v not in (None, "")}
    return "?" + urlencode(kept) if kept else "?"


def pager(query: Any, total: int, offset: int, limit: int) -> dict[str, Any]:
    return {
        "total": total,
        "first": offset + 1 if total else 0,
        "last": min(offset + limit, total),
        "prev": with_query(query, offset=max(0, offset - limit) or None) if offset > 0 else None,
        "next": with_query(query, offset=offset + limit) if offset + limit < total else None,
    }


async def dataset_page(call: WebCall) -> Response:
    ws_name, ds_name = call.param("workspace"), call.param("dataset")
    params = {"workspace": ws_name, "dataset": ds_name}
    query = call.request.query_params
    ws: api.Workspace = await use(call, workspaces.workspaces_show, params={"workspace": ws_name})
    ds: wire.Dataset = await use(call, datasets.datasets_show, params=params)
    found = await use(
        call,
        case_browse.cases_search,
        params=params,
        query={k: query.get(k) for k in (*CASE_FILTERS, "offset", "limit")},
    )
    promotions = None
    if ws.promotes_to or ws.promoted_from:
        promotions = await use(
            call, case_browse.promotions_list, params=params, query={"limit": 20}
        )
    return call.render(
        "dataset.html",
        ws=ws,
        ds=ds,
        found=found,
        promotions=promotions,
        filters={k: query.get(k, "") for k in CASE_FILTERS},
        filtered=any(query.get(k) for k in CASE_FILTERS),
        states=STATE_CHOICES,
        pager=pager(query, found.total, found.offset, found.limit),
        dataset_url=dataset_url,
        case_url=case_url,
    )


async def case_page(call: WebCall) -> Response:
    ws_name, ds_name, case_id = call.param("workspace"), call.param("dataset"), call.param("case")
    query = call.request.query_params
    case_params = {"workspace": ws_name, "case_id": case_id}
    ws: api.Workspace = await use(call, workspaces.workspaces_show, params={"workspace": ws_name})
    detail: wire.CaseDetail = await use(call, datasets.cases_show, params=case_params)
    if detail.dataset != ds_name:  # an old link, or a case id typed under another dataset
        return RedirectResponse(case_url(ws_name, detail.dataset, case_id), 303)
    current = detail.versions[0]
    shown = await use(
        call,
        case_browse.case_version_show,
        params={**case_params, "version": query.get("version") or current.version},
    )
    diff = await use(
        call,
        case_browse.case_diff,
        params=case_params,
        query={"from": query.get("from"), "to": query.get("to")},
    )
    promotions = None
    if ws.promotes_to or ws.promoted_from:
        promotions = await use(
            call,
            case_browse.promotions_list,
            params={"workspace": ws_name, "dataset": ds_name},
            query={"case": case_id, "limit": 20},
        )
    events = list(reversed(detail.events))
    return call.render(
        "case.html",
        ws=ws,
        case=detail,
        current=current,
        shown=shown,
        diff=diff,
        promotions=promotions,
        events=events,
        comments=[e for e in events if e.kind == "comment"],
        can_review=may_review(call, ws) and not current.removed,
        done=DONE.get(query.get("done", "")),
        url=case_url(ws_name, ds_name, case_id),
        dataset_url=dataset_url,
        case_url=case_url,
    )


async def _decide(call: WebCall, handler: Any, done: str) -> Response:
    form = await call.form()
    ws_name, ds_name, case_id = call.param("workspace"), call.param("dataset"), call.param("case")
    body = form_struct(
        wire.ReviewRequest,
        {
            "comment": str(form.get("comment", "")).strip() or None,
            "version": form.get("version") or None,
        },
    )
    await use(call, handler, params={"workspace": ws_name, "case_id": case_id}, body=body)
    return RedirectResponse(f"{case_url(ws_name, ds_name, case_id)}?done={done}#review", 303)


async def case_approve(call: WebCall) -> Response:
    return await _decide(call, datasets.cases_approve, "approve")


async def case_reject(call: WebCall) -> Response:
    return await _decide(call, datasets.cases_reject, "reject")


async def case_comment(call: WebCall) -> Response:
    form = await call.form()
    ws_name, ds_name, case_id = call.param("workspace"), call.param("dataset"), call.param("case")
    body = form_struct(wire.CommentRequest, {"text": str(form.get("text", "")).strip()})
    await use(
        call, datasets.cases_comment, params={"workspace": ws_name, "case_id": case_id}, body=body
    )
    return RedirectResponse(f"{case_url(ws_name, ds_name, case_id)}?done=comment#comments", 303)


_DATASET = "/w/{workspace}/datasets/{dataset}"
_CASE = _DATASET + "/cases/{case}"

PAGES = [
    Page("GET", _DATASET, dataset_page),
    Page("GET", _CASE, case_page),
    Page("POST", _CASE + "/approve", case_approve),
    Page("POST", _CASE + "/reject", case_reject),
    Page("POST", _CASE + "/comments", case_comment),
]
