"""Trajectories from traces: the settle job of a session.

A traced agent's run waits in ``collecting`` while its spans arrive. The collector defers
``settle_session`` after every batch it stores for a session (one waiting job per session,
by queueing lock), and the run engine defers it when a run reaches ``collecting``. The job
builds the trajectory once the session has been quiet for ``otel.settle_seconds``, or
when the agent's ``trajectory_wait`` has passed since the run ended, whichever comes
first; it validates and attaches the trajectory and hands the run back to the engine.
Building again from the same spans gives the same trajectory, so a replayed job is
harmless (the transition is compare-and-set).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
from procrastinate import JobContext

from evalkit.db import Conn
from evalkit.jobs import queue, runtime
from evalkit.jobs.app import DATABASE_RETRY, app
from evalkit.model.harness import FINAL_STATUSES
from evalkit.model.runs import CollectingRun, TrajectoryRecord
from evalkit.otel.build import build_trajectory
from evalkit.otel.mapping import parse_mapping
from evalkit.runs import engine, machine
from evalkit.store import runs as runs_store
from evalkit.store.agents import active_mapping
from evalkit.store.otel import session_row, spans_for_session

log = logging.getLogger("evalkit.otel")


@app.task(name=queue.SETTLE_SESSION, retry=DATABASE_RETRY, pass_context=True)
async def settle_session(context: JobContext, agent_id: int, session_id: str) -> str:
    settings = runtime.settings()
    async with runtime.database().connection() as conn:
        run = await runs_store.collecting_run_for_session(conn, agent_id, session_id)
        if run is None:
            return "no run is waiting for this session"
        session = await session_row(conn, agent_id, session_id)
        now = datetime.now(UTC)
        wait = _wait_needed(now, run, session, settings.otel.settle_seconds)
        if wait > 0:
            await queue.defer_settle(None, agent_id, session_id, after=wait)
            return f"not settled; again in {wait:.1f} s"
        record = await trajectory_from_spans(
            conn,
            agent_id,
            session_id,
            session,
            agent_name=run.agent_name,
            cut_short=run.timed_out and run.harness_status not in FINAL_STATUSES,
            waited_seconds=run.trajectory_wait_seconds,
        )
        step = machine.attach_trajectory(run, record, session_id=session_id)
        if await engine.record(conn, step, run.facts, actor=engine.SETTLE):
            return "trajectory attached"
        return "the run had moved on"


def _wait_needed(
    now: datetime, run: CollectingRun, session: dict[str, Any] | None, settle: float
) -> float:
    """Seconds until the session counts as settled (0: build now)."""
    ended = run.harness_done_at or now
    deadline = ended + timedelta(seconds=run.trajectory_wait_seconds)
    if now >= deadline:
        return 0.0
    if session is None:  # no span yet: wait for the first, up to the deadline
        return min(settle, (deadline - now).total_seconds())
    quiet_since: datetime = session["last_received_at"]
    quiet_until = quiet_since + timedelta(seconds=settle)
    if now >= quiet_until:
        return 0.0
    return min((quiet_until - now).total_seconds(), (deadline - now).total_seconds())


async def trajectory_from_spans(
    conn: Conn,
    agent_id: int,
    session_id: str,
    session: dict[str, Any] | None,
    *,
    agent_name: str,
    cut_short: bool,
    waited_seconds: float,
) -> TrajectoryRecord:
    """The trajectory the agent's active mapping builds from the session's stored spans
    (``session``: its row, None when no span came; ``cut_short``: the run timed out before
    its harness finished, so it is partial)."""
    if session is None:
        return TrajectoryRecord(
            source="otel",
            partial=True,
            fetch_error=(
                f"no span of session {session_id!r} arrived within the agent's "
                f"{waited_seconds:g} s trajectory wait; check the exporter "
                "and that the spans carry the session id the mapping names"
            ),
        )
    mapping = await active_mapping(conn, agent_id)
    if mapping is None:
        return TrajectoryRecord(
            source="otel",
            fetch_error="the agent has no active span mapping; set one with "
            "`evalkit agents mapping set` and activate it",
        )
    spans = await spans_for_session(conn, agent_id, session_id)
    result = build_trajectory(
        spans, parse_mapping(mapping[1]), session_id=session_id, agent_name=agent_name
    )
    partial = bool(session.get("truncated")) or cut_short
    raw = msgspec.json.encode(result.trajectory).decode()
    if result.unread:
        log.info("session %s: the mapping could not read %d things", session_id, len(result.unread))
    return TrajectoryRecord(source="otel", raw=raw, partial=partial)
