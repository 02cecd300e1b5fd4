"""Human labels on runs: one row per reading, never updated."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evalkit.cases.suite import apply_overlay
from evalkit.db import Conn
from evalkit.errors import NotFound
from evalkit.model import labels as wire
from evalkit.scoring.agreement import Reading


@dataclass(frozen=True, slots=True)
class LabelTarget:
    run_id: int
    workspace: str
    score_names: list[str]


async def label_target(conn: Conn, run_id: int) -> LabelTarget:
    row = await conn.one("run_label_target_get", run_id=run_id)
    if row is None:
        raise NotFound(f"no run {run_id}; see `evalkit experiments show ID`", code="no-such-run")
    return LabelTarget(row["id"], row["workspace"], list(row["score_names"]))


async def add_label(
    conn: Conn, run_id: int, request: wire.LabelRequest, user_id: int | None, username: str | None
) -> wire.Label:
    row = await conn.one(
        "label_insert",
        run_id=run_id,
        name=request.name,
        value=request.value,
        comment=request.comment,
        user_id=user_id,
    )
    assert row is not None
    return wire.Label(
        id=row["id"],
        run_id=run_id,
        name=request.name,
        value=request.value,
        comment=request.comment,
        labelled_by=username,
        created_at=row["created_at"],
    )


async def run_labels(conn: Conn, run_id: int) -> list[wire.Label]:
    rows = await conn.all("labels_list_by_run", run_id=run_id)
    return [wire.Label(run_id=run_id, **row) for row in rows]


async def agreement_readings(
    conn: Conn, experiment_id: int, round: int | None = None
) -> list[Reading]:
    """Readings of the scores in ``round`` (None: the experiment's current round)."""
    rows = await conn.all(
        "agreement_readings_for_experiment", experiment_id=experiment_id, round=round
    )
    return [Reading(**row) for row in rows]


async def label_queue(
    conn: Conn, experiment_id: int, name: str | None, offset: int, limit: int
) -> wire.LabelQueue:
    """One page of the experiment's labelling queue (``label_queue_list``)."""
    where = {"experiment_id": experiment_id, "name": name}
    counted = await conn.one("label_queue_count", **where)
    rows = await conn.all("label_queue_list", **where, offset=offset, limit=limit)
    return wire.LabelQueue(
        experiment_id=experiment_id,
        score=name,
        total=counted["total"] if counted else 0,
        offset=offset,
        limit=limit,
        runs=[_queued(row) for row in rows],
    )


def _queued(row: dict[str, Any]) -> wire.QueuedRun:
    content = row.pop("content")
    target = row.pop("target_content")
    if target is not None:
        content = apply_overlay(target, content)
    return wire.QueuedRun(**row, input=(content or {}).get("input"))
