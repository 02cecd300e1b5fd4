"""Monitors: create, list, show, check, change and delete the online scorers of deployed
agents, backfill them, and list a monitor's worst sessions."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

from evalkit.auth import access
from evalkit.db import Conn
from evalkit.edge.endpoint import Call, Endpoint
from evalkit.errors import BadRequest
from evalkit.jobs import queue
from evalkit.model import monitors as wire
from evalkit.model.names import parse_ref
from evalkit.scoring import monitor_stats, monitoring
from evalkit.scoring.stats import StatsError
from evalkit.store import monitors as store
from evalkit.store.agents import get_agent
from evalkit.store.evaluators import evaluator_ids
from evalkit.store.workspaces import WorkspaceRow, get_workspace

DEFAULT_WINDOW_SECONDS = 7 * 86400.0
MAX_SESSIONS = 1000


async def monitors_create(call: Call) -> wire.MonitorCreated:
    access.require_user(call.actor)
    body: wire.MonitorCreate = await call.payload()
    ref = parse_ref(body.agent, "agent").resolve(call.actor.username or "")
    async with call.db.transaction() as conn:
        ws = await get_workspace(conn, call.actor, ref.workspace or "")
        access.require_manage_monitor(call.actor, ws.facts, "create monitors of its agents")
        agent = await get_agent(conn, ws.id, ref.name)
        gauges, ids = await _evaluators(conn, ws, body.evaluators)
        monitor_id = await store.insert(
            conn,
            workspace_id=ws.id,
            workspace=ws.facts.name,
            name=body.name,
            agent_id=agent.id,
            sample_rate=_rate(body.sample_rate),
            cap_per_hour=body.cap_per_hour,
            builtins=gauges,
            evaluator_ids=ids,
            rubric=_rubric(body.rubric),
            created_by=call.actor.user_id,
        )
        backfilled = None
        if body.backfill_seconds is not None:
            backfilled = await _backfill(conn, monitor_id, body.backfill_seconds)
        await queue.defer_monitor_sweep(conn)
        row = await store.get_by_id(conn, monitor_id)
    assert row is not None
    return wire.MonitorCreated(monitor=_monitor(row), backfill=backfilled)


async def monitors_list(call: Call) -> list[wire.Monitor]:
    access.require_read(call.actor)
    workspace = call.request.query_params.get("workspace")
    async with call.db.connection() as conn:
        ws_id = (await get_workspace(conn, call.actor, workspace)).id if workspace else None
        rows = await store.list_monitors(conn, workspace_id=ws_id)
    return [_monitor(row) for row in rows]


async def monitors_show(call: Call) -> wire.MonitorSummary:
    access.require_read(call.actor)
    seconds = _window(call)
    since = datetime.now(UTC) - timedelta(seconds=seconds)
    async with call.db.connection() as conn:
        row, _ = await _find(conn, call)
        days = await store.score_days(conn, row["id"], since)
        progress = await store.progress(conn, row["id"], since)
    return wire.MonitorSummary(
        monitor=_monitor(row),
        window_seconds=seconds,
        since=since,
        taken=progress.get("taken", 0),
        scored=progress.get("scored", 0),
        scores=monitor_stats.summarize(days),
    )


async def monitors_check(call: Call) -> wire.MonitorCheck:
    access.require_read(call.actor)
    gates = call.request.query_params.getlist("gate")
    if not gates:
        raise BadRequest(
            "a check needs at least one gate, e.g. ?gate=judge>=0.8 "
            '(`evalkit monitors check NAME --gate "judge>=0.8"`)',
            code="no-gate",
        )
    summary = await monitors_show(call)
    window = window_text(summary.window_seconds)
    try:
        results = monitor_stats.check(summary.scores, gates, window)
    except StatsError as exc:
        raise BadRequest(str(exc), code="bad-gate") from None
    return wire.MonitorCheck(
        monitor=f"{summary.monitor.name}@{summary.monitor.workspace}",
        window_seconds=summary.window_seconds,
        passed=all(r.passed for r in results),
        gates=results,
    )


async def monitors_sessions(call: Call) -> list[wire.MonitorSession]:
    access.require_read(call.actor)
    params = call.request.query_params
    since = datetime.now(UTC) - timedelta(seconds=_window(call))
    below = _number(params.get("below"), "below")
    limit = _limit(params.get("limit"))
    async with call.db.connection() as conn:
        row, _ = await _find(conn, call)
        found = await store.worst_sessions(
            conn,
            row["id"],
            since=since,
            score=params.get("score") or None,
            below=below,
            limit=limit,
        )
    return [
        wire.MonitorSession(
            session_id=s["session_id"],
            agent=f"{s['agent']}@{s['agent_workspace']}",
            settled_at=s["settled_at"],
            scores=s["scores"],
        )
        for s in found
    ]


async def monitors_update(call: Call) -> wire.Monitor:
    access.require_user(call.actor)
    async with call.db.connection() as conn:
        _, ws = await _find(conn, call)
    access.require_manage_monitor(call.actor, ws.facts, "change its monitors")
    body: wire.MonitorUpdate = await call.payload()
    async with call.db.transaction() as conn:
        row, ws = await _find(conn, call)
        gauges, ids = (
            (row["builtins"], row["evaluator_ids"])
            if body.evaluators is None
            else await _evaluators(conn, ws, body.evaluators)
        )
        cap = None if body.no_cap else (body.cap_per_hour or row["cap_per_hour"])
        rubric = None if body.no_rubric else (_rubric(body.rubric) or row["rubric"])
        if not gauges and not ids and not rubric:
            raise BadRequest(
                f"monitor {row['name']}@{ws.facts.name} would have nothing to score with; keep "
                "a rubric or an evaluator",
                code="monitor-no-evaluators",
            )
        await store.update(
            conn,
            row["id"],
            sample_rate=row["sample_rate"] if body.sample_rate is None else _rate(body.sample_rate),
            cap_per_hour=cap,
            builtins=gauges,
            evaluator_ids=ids,
            rubric=rubric,
        )
        changed = await store.get_by_id(conn, row["id"])
    assert changed is not None
    return _monitor(changed)


async def monitors_delete(call: Call) -> wire.Monitor:
    access.require_user(call.actor)
    async with call.db.transaction() as conn:
        row, ws = await _find(conn, call)
        access.require_manage_monitor(call.actor, ws.facts, "delete its monitors")
        await store.delete(conn, row["id"])
    return _monitor(row)


async def monitors_backfill(call: Call) -> wire.MonitorBackfilled:
    access.require_user(call.actor)
    async with call.db.connection() as conn:
        row, ws = await _find(conn, call)
    access.require_manage_monitor(call.actor, ws.facts, "backfill its monitors")
    body: wire.MonitorBackfill = await call.payload()
    async with call.db.transaction() as conn:
        return await _backfill(conn, row["id"], body.since_seconds)


async def _backfill(conn: Conn, monitor_id: int, seconds: float) -> wire.MonitorBackfilled:
    if not math.isfinite(seconds) or seconds <= 0:
        raise BadRequest(
            f"a backfill goes back a positive time, got {seconds!r} seconds (e.g. --backfill 7d)",
            code="bad-backfill",
        )
    since = datetime.now(UTC) - timedelta(seconds=seconds)
    considered, taken = await monitoring.backfill(conn, monitor_id, since)
    return wire.MonitorBackfilled(considered=considered, taken=taken)


async def _find(conn: Conn, call: Call) -> tuple[dict[str, Any], WorkspaceRow]:
    """``{monitor}`` is ``NAME@WORKSPACE`` (a bare NAME: the caller's personal workspace)."""
    ref = parse_ref(call.param("monitor"), "monitor").resolve(call.actor.username or "")
    ws = await get_workspace(conn, call.actor, ref.workspace or "")
    return await store.get(conn, ws.id, ws.facts.name, ref.name), ws


async def _evaluators(
    conn: Conn, ws: WorkspaceRow, names: list[str]
) -> tuple[list[str], list[int]]:
    """The monitor's gauges and the ids of its remote evaluators; an unknown name refused."""
    gauges = [n for n in names if n in store.MONITOR_GAUGES]
    others = [n.removeprefix("custom.") for n in names if n not in store.MONITOR_GAUGES]
    found = await evaluator_ids(conn, ws.id, others)
    missing = [n for n in others if n not in found]
    if missing:
        raise BadRequest(
            f"{missing[0]!r} is neither a built-in gauge a monitor can use "
            f"({', '.join(store.MONITOR_GAUGES)}) nor a remote evaluator of @{ws.facts.name}; "
            "register it with `evalkit evaluators create`, or use --rubric for a judge "
            "(evaluators that need an expected answer cannot score live traffic)",
            code="unknown-evaluator",
        )
    return gauges, sorted(found.values())


def _rate(rate: float) -> float:
    if not math.isfinite(rate):
        raise BadRequest("the sample rate must be a number from 0 to 1", code="bad-sample-rate")
    return store.check_sample_rate(rate)


def _rubric(rubric: str | None) -> str | None:
    if rubric is not None and not rubric.strip():
        raise BadRequest(
            "the rubric is empty: say what the judge should check, or leave --rubric out",
            code="empty-rubric",
        )
    return rubric


def _window(call: Call) -> float:
    text = call.request.query_params.get("window_seconds")
    if text is None:
        return DEFAULT_WINDOW_SECONDS
    seconds = _number(text, "window_seconds")
    if seconds is None or seconds <= 0:
        raise BadRequest(
            f"window_seconds must be a positive number of seconds, got {text!r}",
            code="bad-window",
        )
    return seconds


def _number(text: str | None, what: str) -> float | None:
    if text is None or text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        raise BadRequest(f"{what} must be a number, got {text!r}", code="bad-request") from None
    if not math.isfinite(value):
        raise BadRequest(f"{what} must be a finite number, got {text!r}", code="bad-request")
    return value


def _limit(text: str | None) -> int:
    if text is None:
        return 50
    if not text.isdigit() or not 1 <= int(text) <= MAX_SESSIONS:
        raise BadRequest(
            f"limit is a whole number from 1 to {MAX_SESSIONS}, got {text!r}", code="bad-limit"
        )
    return int(text)


def window_text(seconds: float) -> str:
    """``7d``, ``24h``, ``90m``: days from two days on, as people say them."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= (2 * size if unit == "d" else size) and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def _monitor(row: dict[str, Any]) -> wire.Monitor:
    return wire.Monitor(
        id=row["id"],
        name=row["name"],
        workspace=row["workspace"],
        agent=f"{row['agent']}@{row['workspace']}",
        version=row["version"],
        sample_rate=row["sample_rate"],
        cap_per_hour=row["cap_per_hour"],
        gauges=list(row["builtins"]),
        evaluators=list(row["evaluators"]),
        rubric=row["rubric"],
        capped_sessions=row["capped_sessions"],
        scanned_until=row["scanned_until"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


_ONE = "/api/monitors/{monitor}"

ENDPOINTS = [
    Endpoint(
        "POST",
        "/api/monitors",
        monitors_create,
        "Score a deployed agent's settled sessions that no run claims (sampled, capped per "
        "hour); optionally backfill stored ones",
        body=wire.MonitorCreate,
        returns=wire.MonitorCreated,
        status=201,
        tags=["monitors"],
    ),
    Endpoint(
        "GET",
        "/api/monitors",
        monitors_list,
        "Monitors (?workspace=NAME)",
        returns=list[wire.Monitor],
        tags=["monitors"],
    ),
    Endpoint(
        "GET",
        _ONE,
        monitors_show,
        "One monitor (NAME@WORKSPACE) and its scores over a window (?window_seconds=, "
        "default 7 days): per score mean, pass rate with its interval, per day",
        returns=wire.MonitorSummary,
        tags=["monitors"],
    ),
    Endpoint(
        "GET",
        _ONE + "/check",
        monitors_check,
        "Check gates (?gate=judge>=0.8, repeatable) on a monitor's scores over a window",
        returns=wire.MonitorCheck,
        tags=["monitors"],
    ),
    Endpoint(
        "GET",
        _ONE + "/sessions",
        monitors_sessions,
        "A monitor's scored sessions in a window, worst first (?score=, ?below=, ?limit=)",
        returns=list[wire.MonitorSession],
        tags=["monitors"],
    ),
    Endpoint(
        "PATCH",
        _ONE,
        monitors_update,
        "Change what a monitor scores with; a real change starts a new version",
        body=wire.MonitorUpdate,
        returns=wire.Monitor,
        tags=["monitors"],
    ),
    Endpoint(
        "DELETE",
        _ONE,
        monitors_delete,
        "Delete a monitor and its scores",
        returns=wire.Monitor,
        tags=["monitors"],
    ),
    Endpoint(
        "POST",
        _ONE + "/backfill",
        monitors_backfill,
        "Score the monitor's stored sessions of a past window (sampled; the hourly cap does "
        "not apply)",
        body=wire.MonitorBackfill,
        returns=wire.MonitorBackfilled,
        tags=["monitors"],
    ),
]
