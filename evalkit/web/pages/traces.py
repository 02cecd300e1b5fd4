"""The Runs tab, as the docs name it: the OpenTelemetry sessions agents sent (``/runs``),
claimed by runs of experiments or not (deployed traffic too), and one session's spans
tree, the run that claimed it, and what its agent's span mapping made of it. The tab was
called Traces at ``/sessions``; those addresses redirect here."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from starlette.responses import RedirectResponse, Response

from evalkit.cases.model import CASE_ID_RE
from evalkit.edge.routes import agents, otel, session_list, trace_check, workspaces
from evalkit.errors import BadRequest, NotFound
from evalkit.model.names import whole_number
from evalkit.model.otel import TraceCheck
from evalkit.otel.model import Span
from evalkit.web.page import Page, WebCall, use

LIST_PATH = "/runs"
"""The list of sessions; one session is at ``/runs/WORKSPACE/AGENT/SESSION`` (a run of an
experiment is at ``/runs/ID``: one segment)."""
OLD_PATH = "/sessions"
"""Where the tab was before it was named as the docs name it (kept as redirects)."""
PAGE_SIZE = 50
MAX_SPANS_SHOWN = 2000
"""A session over this many spans shows its first ones in tree order and says so."""
MAX_DEPTH_INDENT = 24
KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
STATUSES = {0: "unset", 1: "ok", 2: "error"}


def _int(text: str | None, default: int, low: int, high: int) -> int:
    number = whole_number(text)
    if number is None:
        return default
    return max(low, min(high, number))


async def sessions_page(call: WebCall) -> Response:
    query = call.request.query_params
    workspace = query.get("workspace", "").strip()
    agent = query.get("agent", "").strip()
    offset = _int(query.get("offset"), 0, 0, session_list.MAX_OFFSET)
    all_workspaces = await use(call, workspaces.workspaces_list)
    if workspace not in {ws.name for ws in all_workspaces}:
        workspace = ""
    agent_names: list[str] = []
    if workspace:
        found = await use(call, agents.agents_list, params={"workspace": workspace})
        agent_names = [a.name for a in found]
    if agent not in agent_names:
        agent = ""  # an agent of another workspace, left over from an earlier filter
    found_page = await use(
        call,
        session_list.trace_sessions_list,
        query={"workspace": workspace, "agent": agent, "offset": offset, "limit": PAGE_SIZE},
    )
    filters = {"workspace": workspace, "agent": agent}

    def page_link(to_offset: int) -> str:
        pairs = {k: v for k, v in {**filters, "offset": to_offset}.items() if v}
        return LIST_PATH + (f"?{urlencode(pairs)}" if pairs else "")

    return call.render(
        "sessions.html",
        page=found_page,
        workspaces=[ws.name for ws in all_workspaces],
        agent_names=agent_names,
        workspace=workspace,
        agent=agent,
        offset=offset,
        prev_link=page_link(max(0, offset - PAGE_SIZE)) if offset else None,
        next_link=page_link(offset + PAGE_SIZE) if found_page.more else None,
    )


@dataclass
class SpanLine:
    """One span as the tree shows it."""

    span: Span
    depth: int
    orphan: bool
    """Its parent span never arrived (or belongs to another trace): shown as a root."""
    left: float
    width: float
    duration_ms: float
    offset_ms: float
    kind: str
    status: str
    attributes: list[tuple[str, str]] = field(default_factory=list)
    events: list[tuple[str, float, list[tuple[str, str]]]] = field(default_factory=list)
    resource: list[tuple[str, str]] = field(default_factory=list)

    @property
    def indent(self) -> int:
        return min(self.depth, MAX_DEPTH_INDENT)


def _value(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def span_tree(spans: list[Span]) -> tuple[list[SpanLine], float]:
    """Spans in tree order (parents before children, siblings by start time), with their
    bar positions relative to the whole session; and the session's length in ms."""
    if not spans:
        return [], 0.0
    start = min(s.start_ns for s in spans)
    end = max(max(s.end_ns, s.start_ns) for s in spans)
    total = max(end - start, 1)
    known = {(s.trace_id, s.span_id) for s in spans}
    children: dict[tuple[str, str], list[Span]] = {}
    roots: list[Span] = []
    for span in spans:
        parent = (span.trace_id, span.parent_span_id) if span.parent_span_id else None
        if parent is not None and parent in known and parent != (span.trace_id, span.span_id):
            children.setdefault(parent, []).append(span)
        else:
            roots.append(span)
    seen: set[tuple[str, str]] = set()
    lines: list[SpanLine] = []
    # Roots first; then whatever a cycle of parent ids kept out of reach, as roots too.
    for batch in (roots, sorted(spans, key=_start_key)):
        stack = [(span, 0) for span in sorted(batch, key=_start_key, reverse=True)]
        while stack:
            span, depth = stack.pop()
            key = (span.trace_id, span.span_id)
            if key in seen:  # a span listed twice, or already placed
                continue
            seen.add(key)
            lines.append(_line(span, depth, start, total))
            kids = children.get(key, [])
            stack.extend((kid, depth + 1) for kid in sorted(kids, key=_start_key, reverse=True))
    return lines, total / 1e6


@dataclass
class DryRun:
    """What an SDK dry run stamped on its ``evalkit.run`` span: the case it ran."""

    case_id: str
    question: str


MAX_QUESTION_CHARS = 500


def dry_run_of(spans: list[Span]) -> DryRun | None:
    """The case of the dry run that made this session (``run_experiment(dry_run=...)``
    creates no run, so nothing else names it), or None."""
    for span in spans:
        attrs = span.attributes
        if span.name != "evalkit.run" or attrs.get("evalkit.dry_run") is not True:
            continue
        question = attrs.get("input.value")
        text = question if isinstance(question, str) else _value(question)
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and isinstance(parsed.get("question"), str):
            text = parsed["question"]
        if len(text) > MAX_QUESTION_CHARS:
            text = text[:MAX_QUESTION_CHARS] + "…"
        return DryRun(case_id=str(attrs.get("evalkit.case_id") or "?"), question=text)
    return None


def _start_key(span: Span) -> tuple[int, str]:
    return (span.start_ns, span.span_id)


def _line(span: Span, depth: int, start: int, total: int) -> SpanLine:
    duration = max(span.end_ns - span.start_ns, 0)
    return SpanLine(
        span=span,
        depth=depth,
        orphan=depth == 0 and span.parent_span_id is not None,
        left=round(100 * (span.start_ns - start) / total, 3),
        width=round(max(100 * duration / total, 0.3), 3),
        duration_ms=duration / 1e6,
        offset_ms=(span.start_ns - start) / 1e6,
        kind=KINDS.get(span.kind, str(span.kind)),
        status=STATUSES.get(span.status_code, str(span.status_code)),
        attributes=[(k, _value(v)) for k, v in sorted(span.attributes.items())],
        events=[
            (
                e.name,
                (e.time_ns - start) / 1e6,
                [(k, _value(v)) for k, v in sorted(e.attributes.items())],
            )
            for e in span.events
        ],
        resource=[(k, _value(v)) for k, v in sorted(span.resource.items())],
    )


async def session_page(call: WebCall) -> Response:
    params = {
        "workspace": call.param("workspace"),
        "agent": call.param("agent"),
        "session": call.param("session"),
    }
    detail = await use(call, otel.traces_show, params=params)
    listed = await use(
        call,
        session_list.trace_sessions_list,
        query={
            "workspace": params["workspace"],
            "agent": params["agent"],
            "session": params["session"],
            "limit": 1,
        },
    )
    check: TraceCheck | None = None
    check_problem: str | None = None
    try:
        check = await use(call, trace_check.traces_check, params=params)
    except NotFound as exc:  # no active mapping: the spans are still worth showing
        check_problem = exc.message
    lines, total_ms = span_tree(detail.spans)
    run = listed.sessions[0].run if listed.sessions else None
    saved = _saved_case(check, SUITE) if check is not None else None
    return call.render(
        "session.html",
        session=detail.session,
        run=run,
        dry_run=dry_run_of(detail.spans) if run is None else None,
        lines=lines[:MAX_SPANS_SHOWN],
        hidden=max(0, len(lines) - MAX_SPANS_SHOWN),
        total_ms=total_ms,
        traces=len({s.trace_id for s in detail.spans}),
        check=check,
        check_problem=check_problem,
        saved=saved,
        suite=SUITE,
    )


SUITE = "traffic"
"""The suite a case saved from a session page is named for (its id starts with it)."""


@dataclass
class SavedCase:
    case_id: str = ""
    text: str = ""
    problem: str | None = None


def _saved_case(check: TraceCheck, suite: str, *, expected_answer: bool = False) -> SavedCase:
    """The case file of a session, or why it cannot be one (no user turn, no answer)."""
    from evalkit.importers._model import ImportFailed
    from evalkit.importers.session import session_case_text

    try:
        case_id, text = session_case_text(check, suite, expected_answer=expected_answer)
    except ImportFailed as exc:
        return SavedCase(problem=exc.message)
    return SavedCase(case_id, text)


async def case_download(call: WebCall) -> Response:
    """``/cases/from-session?workspace=&agent=&session=[&suite=][&expected=answer]``: the
    session's case file as a download, exactly as the session page shows it."""
    query = call.request.query_params
    params = {k: query.get(k, "") for k in ("workspace", "agent", "session")}
    if not all(params.values()):
        raise BadRequest(
            "a case download names its session: ?workspace=WS&agent=AGENT&session=ID "
            "(the session page's Save as case link has them)"
        )
    suite = query.get("suite") or SUITE
    if not CASE_ID_RE.match(suite):
        raise BadRequest(f"suite {suite!r} cannot start a case id; use letters, digits, - and _")
    check = await use(call, trace_check.traces_check, params=params)
    saved = _saved_case(check, suite, expected_answer=query.get("expected") == "answer")
    if saved.problem is not None:
        raise BadRequest(saved.problem)
    return Response(
        saved.text,
        media_type="application/yaml; charset=utf-8",
        headers={"content-disposition": f'attachment; filename="{saved.case_id}.yaml"'},
    )


async def old_address(call: WebCall) -> Response:
    """``/sessions...`` (the tab's old address) moved to ``/runs...``, query kept: a
    permanent redirect, so bookmarks and links pasted in chats keep working."""
    raw = call.request.scope.get("raw_path") or call.request.url.path.encode()
    path = raw.decode("latin-1").split("?", 1)[0]
    target = LIST_PATH + path[len(OLD_PATH) :]
    query = call.request.url.query
    return RedirectResponse(target + (f"?{query}" if query else ""), 301)


PAGES = [
    Page("GET", "/cases/from-session", case_download),
    Page("GET", LIST_PATH, sessions_page),
    Page("GET", LIST_PATH + "/{workspace}/{agent}/{session:path}", session_page),
    Page("GET", OLD_PATH, old_address),
    Page("GET", OLD_PATH + "/{rest:path}", old_address),
]
