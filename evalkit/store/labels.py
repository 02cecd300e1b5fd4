"""Human labels on runs: one row per reading, never updated."""

from __future__ import annotations

from dataclasses import dataclass

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


async def agreement_readings(conn: Conn, experiment_id: int) -> list[Reading]:
    rows = await conn.all("agreement_readings_for_experiment", experiment_id=experiment_id)
    return [Reading(**row) for row in rows]
