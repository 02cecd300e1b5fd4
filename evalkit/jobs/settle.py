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
from evalkit.jobs import runtime
from evalkit.jobs.app import DATABASE_RETRY, app, defer
from evalkit.model.runs import RunWork, TrajectoryRecord, Transition
from evalkit.store import runs as runs_store

log = logging.getLogger("evalkit.otel")


async def on_collecting(conn: Conn, agent_id: int, work: RunWork, transition: Transition) -> None:
    """A run reached collecting: if its trajectory comes from traces, wake its session."""
    session_id = transition.session_id or work.session_id
    if work.trajectory_source != "otel" or not session_id:
        return
    await defer_settle(conn, agent_id, session_id, after=0)


async def defer_settle(conn: Conn | None, agent_id: int, session_id: str, *, after: float) -> None:
    await defer(
        conn,
        "settle_session",
        queueing_lock=f"settle:{agent_id}:{session_id}",
        schedule_in=after,
        agent_id=agent_id,
        session_id=session_id,
    )


@app.task(name="settle_session", retry=DATABASE_RETRY, pass_context=True)
async def settle_session(context: JobContext, agent_id: int, session_id: str) -> str:
    settings = runtime.settings()
    async with runtime.database().connection() as conn:
        run = await runs_store.collecting_run_for_session(conn, agent_id, session_id)
        if run is None:
            return "no run is waiting for this session"
        session = await _session(conn, agent_id, session_id)
        now = datetime.now(UTC)
        wait = _wait_needed(now, run, session, settings.otel.settle_seconds)
        if wait > 0:
            await defer_settle(None, agent_id, session_id, after=wait)
            return f"not settled; again in {wait:.1f} s"
        record = await _collect(conn, agent_id, session_id, run, session)
        transition = Transition(
            run_id=run["id"],
            from_state="collecting",
            from_attempts=run["attempts"],
            to_state="scoring",
            trajectory=record,
        )
        from evalkit.jobs.runs import defer_advance

        if await runs_store.apply_transition(conn, transition):
            await runs_store.link_session(conn, agent_id, session_id, run["id"])
            await defer_advance(None, run["id"])
            return "trajectory attached"
        return "the run had moved on"


def _wait_needed(
    now: datetime, run: dict[str, Any], session: dict[str, Any] | None, settle: float
) -> float:
    """Seconds until the session counts as settled (0: build now)."""
    ended = run["harness_done_at"] or now
    deadline = ended + timedelta(seconds=run["trajectory_wait_seconds"])
    if now >= deadline:
        return 0.0
    if session is None:  # no span yet: wait for the first, up to the deadline
        return min(settle, (deadline - now).total_seconds())
    quiet_since = session["last_received_at"]
    quiet_until = quiet_since + timedelta(seconds=settle)
    if now >= quiet_until:
        return 0.0
    return min((quiet_until - now).total_seconds(), (deadline - now).total_seconds())


async def _session(conn: Conn, agent_id: int, session_id: str) -> dict[str, Any] | None:
    from evalkit.store.otel import session_row

    return await session_row(conn, agent_id, session_id)


async def _collect(
    conn: Conn,
    agent_id: int,
    session_id: str,
    run: dict[str, Any],
    session: dict[str, Any] | None,
) -> TrajectoryRecord:
    from evalkit.otel.build import build_trajectory
    from evalkit.otel.mapping import parse_mapping
    from evalkit.store.agents import active_mapping
    from evalkit.store.otel import spans_for_session

    if session is None:
        return TrajectoryRecord(
            source="otel",
            partial=True,
            fetch_error=(
                f"no span of session {session_id!r} arrived within the agent's "
                f"{run['trajectory_wait_seconds']:g} s trajectory wait; check the exporter "
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
        spans, parse_mapping(mapping[1]), session_id=session_id, agent_name=run["agent_name"]
    )
    partial = bool(session.get("truncated")) or (
        run["timed_out"] and run["harness_status"] not in ("succeeded", "failed", "stopped")
    )
    raw = msgspec.json.encode(result.trajectory).decode()
    if result.unread:
        log.info("session %s: the mapping could not read %d things", session_id, len(result.unread))
    return TrajectoryRecord(source="otel", raw=raw, partial=partial)
