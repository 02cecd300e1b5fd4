"""The labelling queue page: one queued run at a time (its input, answer, judge score and
explanation, trajectory summary), Pass/Fail posted through the API's label handler, and
j/k, p/f from the keyboard (``static/app.js`` clicks the element marked ``data-key``).

The page's position is an offset into the queue's stable order. Labelling an entry removes
it from the queue, so after a label the same offset shows the next entry."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.responses import RedirectResponse, Response

from evalkit.edge.routes import experiments, labels, run_list
from evalkit.model.names import whole_number
from evalkit.web.page import Page, WebCall, use
from evalkit.web.pages.experiments import FMT
from evalkit.web.pages.runs import _json, label_from_form


def _where(score: str | None, at: int) -> str:
    return urlencode({k: v for k, v in (("score", score), ("at", at)) if v not in (None, "")})


async def label_page(call: WebCall) -> Response:
    experiment_id = call.param("experiment")
    score = call.request.query_params.get("score") or None
    at = whole_number(call.request.query_params.get("at", "0") or "0") or 0
    params = {"experiment": experiment_id}
    query: dict[str, Any] = {"score": score, "offset": at, "limit": 1}
    queue = await use(call, labels.label_queue, params=params, query=query)
    if not queue.runs and at > 0 and queue.total:  # past the end (the queue shrank)
        at = queue.total - 1
        query["offset"] = at
        queue = await use(call, labels.label_queue, params=params, query=query)
    brief = await use(call, run_list.experiment_brief, params=params, query={"scores": "0"})
    entry = queue.runs[0] if queue.runs else None
    run = None
    if entry is not None:
        run = await use(call, experiments.runs_show, params={"run": entry.run_id})
    base = f"/experiments/{experiment_id}/label"
    return call.render(
        "label_queue.html",
        fmt=FMT,
        e=brief,
        queue=queue,
        entry=entry,
        run=run,
        at=at,
        score=score,
        task=None if entry is None else _json(entry.input),
        previous=f"{base}?{_where(score, at - 1)}" if at > 0 else None,
        next=f"{base}?{_where(score, at + 1)}" if at + 1 < queue.total else None,
    )


async def label_post(call: WebCall) -> Response:
    """Pass or Fail on the queue page: the label, then the next entry (now at this offset)."""
    experiment_id = call.param("experiment")
    form = await call.form()
    await label_from_form(call, str(form.get("run", "")), form)
    score = str(form.get("score", "")) or None
    at = whole_number(str(form.get("at", "0"))) or 0
    return RedirectResponse(
        f"/experiments/{experiment_id}/label?{_where(score, at)}&done=label", 303
    )


PAGES = [
    Page("GET", "/experiments/{experiment}/label", label_page),
    Page("POST", "/experiments/{experiment}/label", label_post),
]
