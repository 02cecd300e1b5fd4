"""Scoring a monitored session: what a monitor's evaluators see of a deployed agent's
session, and where their scores go.

A session is read as the agent's active mapping builds it (the trajectory `evalkit traces
check` shows): its first user turn is the input, its final answer the answer. There is no
case, so only evaluators that need no expected answer run: the gauges, the judge with the
monitor's rubric, and the workspace's remote evaluators. Each evaluator's scores are stored
as soon as it ends, and one whose scores are stored already is not asked again, so a
replayed job (a worker died, the judge was rate limited) changes nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import msgspec

from evalkit.atif.model import Trajectory
from evalkit.config import Settings
from evalkit.db import Conn, Database
from evalkit.importers.session import message_text
from evalkit.jobs import queue
from evalkit.model.harness import Provides
from evalkit.otel.build import build_trajectory
from evalkit.otel.mapping import parse_mapping
from evalkit.scoring.model import RunContext, ScoreItem
from evalkit.scoring.run import Selected, Services, evaluate
from evalkit.scoring.stats import passes
from evalkit.store import monitors as store
from evalkit.store.agents import active_mapping
from evalkit.store.otel import spans_for_session

FROM_SPANS = Provides(trajectory=True, tool_calls=True, token_usage=True)
"""A trajectory built from spans carries what the spans carry: the gauges read it and say
when a count is missing, rather than being skipped for an undeclared capability."""


def selected_evaluators(monitor: dict[str, Any]) -> list[Selected]:
    """The evaluators a monitor scores with, as a case's ``evaluators:`` would select them."""
    chosen = [Selected(name, f"builtin:{name}", True, "gauge") for name in monitor["builtins"]]
    if monitor["rubric"]:
        chosen.append(Selected("judge", "judge", {"rubric": monitor["rubric"]}))
    for name in monitor["evaluators"]:
        chosen.append(Selected(f"custom.{name}", f"remote:{name}", {}))
    return chosen


async def session_context(
    conn: Conn, monitor: dict[str, Any], session_id: str, settled_at: datetime
) -> tuple[RunContext, str | None]:
    """The session as an evaluator sees a run (input, answer and trajectory), and why it
    cannot be scored when it cannot (no mapping, an unreadable trajectory)."""
    trajectory: Trajectory | None = None
    answer: str | None = None
    question = ""
    problem: str | None = None
    mapping = await active_mapping(conn, monitor["agent_id"])
    if mapping is None:
        problem = (
            f"agent {monitor['agent']}@{monitor['workspace']} has no active span mapping, so "
            "its sessions cannot be read; set one with `evalkit agents mapping set`"
        )
    else:
        spans = await spans_for_session(conn, monitor["agent_id"], session_id)
        built = build_trajectory(
            spans, parse_mapping(mapping[1]), session_id=session_id, agent_name=monitor["agent"]
        )
        answer = built.answer
        question = _first_user_text(built.trajectory)
        try:
            trajectory = msgspec.convert(built.trajectory, Trajectory)
        except msgspec.ValidationError as exc:
            problem = (
                f"session {session_id}'s trajectory cannot be read ({exc}); "
                f"`evalkit traces check {session_id}` shows what the mapping built"
            )
    context = RunContext(
        run_id=0,
        experiment_id=0,
        workspace_id=monitor["workspace_id"],
        case_id=session_id,
        repetition=0,
        case={"input": {"question": question}, "metadata": {"session": session_id}},
        answer=answer,
        output=None,
        trajectory=trajectory,
        trajectory_valid=trajectory is not None,
        provides=FROM_SPANS if problem is None else Provides(),
        finished_at=settled_at,
        state="scoring",
        harness_status="succeeded",
        trajectory_unreadable=problem is not None and mapping is not None,
    )
    return context, problem


def _first_user_text(trajectory: dict[str, Any]) -> str:
    for step in trajectory.get("steps") or []:
        if step.get("source") == "user":
            text = message_text(step.get("message"))
            if text.strip():
                return text
    return ""


async def score_session(
    db: Database,
    monitor: dict[str, Any],
    version: int,
    session_id: str,
    *,
    settings: Settings,
    http: httpx.AsyncClient,
) -> str:
    """Score one taken session with the monitor's evaluators not yet stored for it."""
    async with db.connection() as conn:
        taken = await store.session_for_scoring(conn, monitor["id"], version, session_id)
        if taken is None:
            return "the session is gone or was never taken"
        if taken["scored_at"] is not None:
            return "scored already"
        settled_at = taken["last_received_at"]
        ctx, problem = await session_context(conn, monitor, session_id, settled_at)
    stored = set(taken["stored"])
    todo = [s for s in selected_evaluators(monitor) if s.identity not in stored]

    async def save(items: list[ScoreItem]) -> None:
        async with db.connection() as conn:
            for item in items:
                await store.record_score(
                    conn,
                    monitor_id=monitor["id"],
                    monitor_version=version,
                    agent_id=monitor["agent_id"],
                    session_id=session_id,
                    score_name=item.name,
                    kind=item.kind,
                    evaluator=item.evaluator,
                    prompt_hash=item.prompt_hash,
                    value=item.value,
                    raw=_number(item.raw),
                    passed=None if item.value is None else passes(item.value),
                    comment=item.explanation,
                    error=item.error,
                    skipped=item.skipped,
                    session_settled_at=settled_at,
                )

    if problem is not None:
        items = [_unscorable(s, problem) for s in todo]
        await save(items)
    else:
        services = Services(db, settings, http, record_judges=False)
        items = await evaluate(ctx, todo, services=services, save=save)
    async with db.connection() as conn:
        await store.mark_scored(conn, monitor["id"], version, session_id)
    return f"{len(items)} scores"


def _unscorable(selected: Selected, problem: str) -> ScoreItem:
    return ScoreItem(
        name=selected.score_name,
        value=None,
        kind=selected.kind,
        error=problem,
        evaluator=selected.identity,
    )


def _number(raw: Any) -> float | None:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return None
    return float(raw)


SWEEP_BATCH = 1000
"""Sessions one sweep step considers for one monitor."""


async def sweep_monitor(db: Database, monitor_id: int, *, settle_seconds: float) -> int:
    """Take the monitor's sessions that settled since its watermark: sampled, under the
    hour's cap, each with its scoring job. Returns how many were taken."""
    taken = 0
    while True:
        async with db.transaction() as conn:
            monitor = await store.lock(conn, monitor_id)
            if monitor is None:
                return taken
            until = datetime.now(UTC) - timedelta(seconds=settle_seconds)
            if until <= monitor["scanned_until"]:
                return taken
            rows = await store.candidates(
                conn, monitor, since=monitor["scanned_until"], until=until, limit=SWEEP_BATCH
            )
            full = len(rows) == SWEEP_BATCH
            if full:
                until = _batch_end(rows)
                rows = [r for r in rows if r["last_received_at"] <= until]
            picked = [
                r["session_id"]
                for r in rows
                if store.sampled(monitor_id, r["session_id"], monitor["sample_rate"])
            ]
            capped = 0
            if monitor["cap_per_hour"] is not None:
                room = monitor["cap_per_hour"] - await store.taken_last_hour(
                    conn, monitor_id, monitor["version"]
                )
                capped = max(len(picked) - max(room, 0), 0)
                picked = picked[: max(room, 0)]
            new = await store.take(conn, monitor, picked)
            await queue.defer_monitored(conn, monitor_id, monitor["version"], new)
            await store.advance(conn, monitor_id, until=until, capped=capped)
            taken += len(new)
        if not full:
            return taken


def _batch_end(rows: list[dict[str, Any]]) -> datetime:
    """Where a full batch's watermark may go: before its last timestamp, so sessions that
    share it with rows past the limit are considered next time (unless every row shares it)."""
    last = rows[-1]["last_received_at"]
    earlier = [r["last_received_at"] for r in rows if r["last_received_at"] < last]
    return max(earlier) if earlier else last


async def backfill(conn: Conn, monitor_id: int, since: datetime) -> tuple[int, int]:
    """Take the monitor's stored sessions last received since ``since`` and settled before
    its watermark, sampled, without the hourly cap (a backfill is asked for by a person).
    Returns (sessions considered, sessions taken)."""
    monitor = await store.lock(conn, monitor_id)
    if monitor is None:
        return 0, 0
    considered = taken = 0
    cursor = since
    while True:
        rows = await store.candidates(
            conn, monitor, since=cursor, until=monitor["scanned_until"], limit=SWEEP_BATCH
        )
        considered += len(rows)
        picked = [
            r["session_id"]
            for r in rows
            if store.sampled(monitor_id, r["session_id"], monitor["sample_rate"])
        ]
        new = await store.take(conn, monitor, picked, backfill=True)
        await queue.defer_monitored(conn, monitor_id, monitor["version"], new)
        taken += len(new)
        if len(rows) < SWEEP_BATCH:
            return considered, taken
        cursor = _batch_end(rows)
