"""Reading trace sessions across agents, a page at a time (GET /api/trace-sessions)."""

from __future__ import annotations

from typing import Any

from evalkit.db import Conn
from evalkit.model.session_list import SessionListed, SessionPage, SessionRun


def _listed(row: dict[str, Any]) -> SessionListed:
    run = None
    if row["run_id"] is not None and row["experiment_id"] is not None:
        run = SessionRun(
            id=row["run_id"],
            state=row["run_state"],
            experiment_id=row["experiment_id"],
            case_id=row["case_id"],
            repetition=row["repetition"],
            dataset=row["dataset"],
            dataset_workspace=row["dataset_workspace"],
        )
    return SessionListed(
        agent=row["agent"],
        workspace=row["workspace"],
        session_id=row["session_id"],
        span_count=row["span_count"],
        bytes=row["bytes"],
        rejected_spans=row["rejected_spans"],
        truncated=row["truncated"],
        first_span_at=row["first_span_at"],
        last_span_at=row["last_span_at"],
        first_received_at=row["first_received_at"],
        last_received_at=row["last_received_at"],
        run=run,
        unassigned=row["unassigned"],
    )


async def list_session_page(
    conn: Conn,
    *,
    workspace_id: int | None,
    agent_id: int | None,
    session_id: str | None,
    offset: int,
    limit: int,
) -> SessionPage:
    """One page, most recently active first; one row more is read to know if more exist.
    ``session_id`` needs ``agent_id`` (a session id is unique per agent)."""
    if session_id is not None:
        if agent_id is None:
            raise ValueError("a session is looked up within its agent: pass agent_id")
        rows = await conn.all("session_list_one", agent_id=agent_id, session_id=session_id)
        rows = rows[offset:]
    else:
        page = {"offset": offset, "limit": limit + 1, "upto": offset + limit + 1}
        if agent_id is not None:
            rows = await conn.all("session_list_page_by_agent", agent_id=agent_id, **page)
        elif workspace_id is not None:
            rows = await conn.all(
                "session_list_page_by_workspace", workspace_id=workspace_id, **page
            )
        else:
            rows = await conn.all("session_list_page", **page)
    return SessionPage(
        sessions=[_listed(row) for row in rows[:limit]],
        offset=offset,
        limit=limit,
        more=len(rows) > limit,
    )
