"""Queueing jobs: the task names, their queueing locks, and one function per kind of job.

Nothing here runs a job; the task bodies live in the modules of ``evalkit.jobs`` (their
``@app.task`` names are the constants below, and a test checks the two agree). Code that
only queues work (the run engine, the edge) imports this module and never a task module.

A job is queued on the caller's connection when it has one, inside the transaction that
writes the rows the job acts on, so a job exists exactly when its data does::

    async with db.transaction() as conn:
        ...
        await queue.defer_advance(conn, run_id)
"""

from __future__ import annotations

from typing import Any

from procrastinate.exceptions import AlreadyEnqueued

from evalkit.db import Conn
from evalkit.jobs import procrastinate_adapter
from evalkit.jobs.app import app

ADVANCE_RUN = "advance_run"
DISPATCH_AGENT = "dispatch_agent"
SWEEP_RUNS = "sweep_runs"
SETTLE_SESSION = "settle_session"
SCORE_RUN = "score_run_job"
FIRE_SCHEDULES = "fire_schedules"
SPAN_PARTITIONS = "span_partitions"
ORPHAN_TRACES = "orphan_traces"
RETRY_STALLED_JOBS = "retry_stalled_jobs"
DELETE_STALE_LOGIN_TOKENS = "delete_stale_login_tokens"
MONITOR_SWEEP = "monitor_sweep"
MONITOR_TICK = "monitor_tick"
SCORE_MONITORED = "score_monitored_session"

TASK_NAMES = frozenset(
    {
        ADVANCE_RUN,
        DISPATCH_AGENT,
        SWEEP_RUNS,
        SETTLE_SESSION,
        SCORE_RUN,
        FIRE_SCHEDULES,
        SPAN_PARTITIONS,
        ORPHAN_TRACES,
        RETRY_STALLED_JOBS,
        DELETE_STALE_LOGIN_TOKENS,
        MONITOR_SWEEP,
        MONITOR_TICK,
        SCORE_MONITORED,
    }
)


def run_lock(run_id: int) -> str:
    """At most one waiting step per run."""
    return f"run:{run_id}"


def dispatch_lock(agent_id: int) -> str:
    return f"dispatch:{agent_id}"


def settle_lock(agent_id: int, session_id: str) -> str:
    return f"settle:{agent_id}:{session_id}"


MONITOR_SWEEP_LOCK = "monitor-sweep"
"""One waiting sweep of the monitors, and one running (the task's lock)."""


def monitored_lock(monitor_id: int, version: int, session_id: str) -> str:
    return f"monitored:{monitor_id}:{version}:{session_id}"


async def defer_advance(conn: Conn | None, run_id: int, *, after: float = 0) -> None:
    """Queue a step of the run (one waiting job per run at most)."""
    await defer(conn, ADVANCE_RUN, queueing_lock=run_lock(run_id), schedule_in=after, run_id=run_id)


async def defer_advances(conn: Conn, run_ids: list[int]) -> None:
    """Queue a step of each run, in the caller's transaction, as :func:`defer_advance`
    would one by one, in two statements (see :func:`defer_settles`)."""
    if not run_ids:
        return
    locks = {run_lock(run_id): run_id for run_id in run_ids}
    waiting = await procrastinate_adapter.waiting_locks(conn, locks)
    todo = {lock: run_id for lock, run_id in locks.items() if lock not in waiting}
    if not todo:
        return
    try:
        await procrastinate_adapter.defer_under_locks(
            app, conn, ADVANCE_RUN, {lock: {"run_id": run_id} for lock, run_id in todo.items()}
        )
    except AlreadyEnqueued:
        for run_id in todo.values():
            await defer_advance(conn, run_id)


async def defer_dispatch(conn: Conn | None, agent_id: int) -> None:
    """Queue a claim of the agent's free slots."""
    await defer(conn, DISPATCH_AGENT, queueing_lock=dispatch_lock(agent_id), agent_id=agent_id)


async def defer_settle(conn: Conn | None, agent_id: int, session_id: str, *, after: float) -> None:
    """Queue the settle job of a traced session (one waiting job per session at most)."""
    await defer(
        conn,
        SETTLE_SESSION,
        queueing_lock=settle_lock(agent_id, session_id),
        schedule_in=after,
        agent_id=agent_id,
        session_id=session_id,
    )


async def defer_settles(conn: Conn, agent_id: int, session_ids: list[str], after: float) -> None:
    """Queue ``settle_session`` for each session, in the caller's transaction, as
    :func:`defer_settle` would one by one, in two statements: sessions that already have a
    waiting job are skipped, the others are queued at once. A lock taken meanwhile by a
    concurrent batch falls back to one defer per session."""
    if not session_ids:
        return
    locks = {settle_lock(agent_id, s): s for s in session_ids}
    waiting = await procrastinate_adapter.waiting_locks(conn, locks)
    todo = {lock: session for lock, session in locks.items() if lock not in waiting}
    if not todo:
        return
    try:
        await procrastinate_adapter.defer_under_locks(
            app,
            conn,
            SETTLE_SESSION,
            {lock: {"agent_id": agent_id, "session_id": s} for lock, s in todo.items()},
            schedule_in=after,
        )
    except AlreadyEnqueued:
        for session in todo.values():
            await defer_settle(conn, agent_id, session, after=after)


async def defer_monitor_sweep(conn: Conn | None, *, after: float = 0) -> None:
    """Queue a sweep of the monitors for settled sessions to take (one waiting at most)."""
    await defer(conn, MONITOR_SWEEP, queueing_lock=MONITOR_SWEEP_LOCK, schedule_in=after)


async def defer_monitored(
    conn: Conn, monitor_id: int, version: int, session_ids: list[str]
) -> None:
    """Queue the scoring of sessions a monitor version took, in the caller's transaction,
    in one statement (a session is taken once per version, so its lock is free)."""
    if not session_ids:
        return
    await procrastinate_adapter.defer_under_locks(
        app,
        conn,
        SCORE_MONITORED,
        {
            monitored_lock(monitor_id, version, s): {
                "monitor_id": monitor_id,
                "version": version,
                "session_id": s,
            }
            for s in session_ids
        },
    )


async def defer_scoring(
    conn: Conn, run_ids: list[int], round: int, only: list[str] | None
) -> list[int]:
    """Queue one scoring job per run, in the caller's transaction."""
    if not run_ids:
        return []
    deferrer = app.configure_task(SCORE_RUN, allow_unknown=False, connection=conn.raw)
    jobs: list[dict[str, Any]] = [
        {"run_id": run_id, "round": round, "only": only} for run_id in run_ids
    ]
    return await deferrer.batch_defer_async(*jobs)


async def defer(
    conn: Conn | None,
    task_name: str,
    *,
    queueing_lock: str | None = None,
    schedule_in: float | None = None,
    **kwargs: Any,
) -> int | None:
    """Queue ``task_name``. On ``conn`` it commits (or rolls back) with the caller's
    transaction; with ``conn=None`` it goes through the worker's own pool.

    With a ``queueing_lock``, a job already waiting under that lock makes this a no-op
    (``None``): the waiting job does the same work. An unknown task name raises
    (procrastinate imports the task modules to look it up).
    """
    options: dict[str, Any] = {"allow_unknown": False}
    if queueing_lock is not None:
        options["queueing_lock"] = queueing_lock
    if schedule_in is not None and schedule_in > 0:
        options["schedule_in"] = {"seconds": schedule_in}
    if conn is None:
        task = app.configure_task(task_name, **options)
        try:
            return await task.defer_async(**kwargs)
        except AlreadyEnqueued:
            return None
    task = app.configure_task(task_name, connection=conn.raw, **options)
    try:
        # A savepoint: a refused lock must not abort the caller's transaction.
        async with conn.raw.transaction():
            return await task.defer_async(**kwargs)
    except AlreadyEnqueued:
        return None
