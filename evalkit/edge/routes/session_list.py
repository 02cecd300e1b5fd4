"""Trace sessions of every agent, filtered and paged, each with the run that claimed it
(``GET /api/trace-sessions``): what the web UI's Traces page lists."""

from __future__ import annotations

from evalkit.auth import access
from evalkit.edge.endpoint import Call, Endpoint
from evalkit.errors import BadRequest
from evalkit.model.names import parse_ref, whole_number
from evalkit.model.session_list import SessionPage
from evalkit.store.agents import get_agent
from evalkit.store.session_list import list_session_page
from evalkit.store.workspaces import get_workspace

MAX_LIMIT = 500
MAX_OFFSET = 1_000_000


def _number(call: Call, name: str, default: int, low: int, high: int) -> int:
    text = call.request.query_params.get(name)
    if text is None or text == "":
        return default
    number = whole_number(text)
    if number is None or not low <= number <= high:
        raise BadRequest(f"{name} must be a whole number from {low} to {high}, not {text!r}")
    return number


async def trace_sessions_list(call: Call) -> SessionPage:
    access.require_read(call.actor)
    query = call.request.query_params
    limit = _number(call, "limit", 50, 1, MAX_LIMIT)
    offset = _number(call, "offset", 0, 0, MAX_OFFSET)
    workspace = query.get("workspace") or None
    agent = query.get("agent") or None
    session = query.get("session") or None
    workspace_id = agent_id = None
    async with call.db.connection() as conn:
        if agent is not None:
            ref = parse_ref(agent, "agent")
            if ref.workspace and workspace and ref.workspace != workspace:
                raise BadRequest(
                    f"agent {agent!r} is not in workspace {workspace!r}: drop one of the "
                    "two filters or make them agree"
                )
            workspace = ref.workspace or workspace
            if workspace is None:
                raise BadRequest(
                    f"say which workspace agent {agent!r} is in: agent=NAME@WORKSPACE, or "
                    "add workspace=WORKSPACE"
                )
            ws = await get_workspace(conn, call.actor, workspace)
            workspace_id = ws.id
            agent_id = (await get_agent(conn, ws.id, ref.name)).id
        elif session is not None:
            raise BadRequest(
                f"say whose session {session!r} is: add agent=NAME@WORKSPACE (session ids "
                "are unique per agent)"
            )
        elif workspace is not None:
            workspace_id = (await get_workspace(conn, call.actor, workspace)).id
        return await list_session_page(
            conn,
            workspace_id=workspace_id,
            agent_id=agent_id,
            session_id=session,
            offset=offset,
            limit=limit,
        )


ENDPOINTS = [
    Endpoint(
        "GET",
        "/api/trace-sessions",
        trace_sessions_list,
        "Trace sessions of every agent, most recently active first, with the run, experiment "
        "and case that claimed each (?workspace=, agent=NAME[@WORKSPACE], session=, "
        f"offset=, limit= up to {MAX_LIMIT}, default 50)",
        returns=SessionPage,
        tags=["otel"],
    ),
]
