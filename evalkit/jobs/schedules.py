"""The schedule tick: once a minute, start the experiments of the schedules that are due.

A schedule is due when its ``next_fire_at`` (the next cron slot, UTC, after the last one it
fired on) has come. The tick claims the slot with one compare-and-set UPDATE, so however
many workers (or manual ticks) see the same due schedule, one of them starts the experiment.
Slots missed while no worker ran collapse into one fire: the latest slot at or before now.
A claimed slot is spent even when the start is refused (the reason is kept on the schedule);
the next slot tries again.

The experiment is started by :func:`evalkit.runs.engine.start_experiment`, the code behind
POST /api/experiments, as the schedule's creator.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime

from procrastinate import JobContext

from evalkit.auth import access
from evalkit.config import Settings
from evalkit.db import Database
from evalkit.errors import ApiError, EvalkitError
from evalkit.http1 import Http1Client
from evalkit.jobs import queue, runtime
from evalkit.jobs.app import DATABASE_RETRY, app
from evalkit.runs.engine import start_experiment
from evalkit.store import schedules as store

log = logging.getLogger("evalkit.schedules")


@dataclass(frozen=True, slots=True)
class Fire:
    """One slot a tick claimed, and what came of it."""

    schedule_id: int
    slot: datetime
    experiment_id: int | None
    error: str | None


@app.periodic(cron="*/1 * * * *", periodic_id="fire-schedules")
@app.task(
    name=queue.FIRE_SCHEDULES,
    queueing_lock=queue.FIRE_SCHEDULES,
    retry=DATABASE_RETRY,
    pass_context=True,
)
async def fire_schedules(context: JobContext, timestamp: int) -> int:
    """Start the experiments of every schedule that is due."""
    fires = await tick(
        runtime.database(),
        now=datetime.now(UTC),
        settings=runtime.settings(),
        http=runtime.harness_http(),
    )
    return len(fires)


async def tick(db: Database, *, now: datetime, settings: Settings, http: Http1Client) -> list[Fire]:
    """Fire every schedule due at ``now``; returns the slots this call claimed."""
    async with db.connection() as conn:
        due = await store.due_schedules(conn, now)
    fires = []
    for schedule in due:
        fire = await _fire(db, schedule, now, settings, http)
        if fire is not None:
            fires.append(fire)
    return fires


async def _fire(
    db: Database,
    schedule: store.DueSchedule,
    now: datetime,
    settings: Settings,
    http: Http1Client,
) -> Fire | None:
    slot = store.latest_slot(schedule.cron, now)
    async with db.connection() as conn:
        claimed = await store.claim_slot(
            conn,
            schedule.id,
            due=schedule.next_fire_at,
            slot=slot,
            next_fire_at=store.next_slot(schedule.cron, slot),
        )
        if not claimed:
            return None  # another tick fired this slot
        experiment_id: int | None = None
        error: str | None = None
        try:
            actor = access.schedule_actor(
                schedule.creator_id,
                schedule.creator,
                is_admin=schedule.creator_is_admin,
                disabled=schedule.creator_disabled,
                schedule=schedule.ref,
            )
            experiment_id = await start_experiment(
                conn, actor, schedule.experiment, settings=settings, http=http, by_schedule=True
            )
        except ApiError as exc:
            error = f"{exc.message} [{exc.code}]"
        except EvalkitError as exc:
            error = exc.message
        except Exception as exc:
            log.exception("schedule %s: starting its experiment failed", schedule.ref)
            error = f"starting the experiment failed ({type(exc).__name__}: {exc}); see the log"
        await store.record_fire(conn, schedule.id, experiment_id=experiment_id, error=error)
    if error is None:
        log.info("schedule %s (slot %s) started experiment %s", schedule.ref, slot, experiment_id)
    else:
        log.warning("schedule %s (slot %s) started nothing: %s", schedule.ref, slot, error)
    return Fire(schedule.id, slot, experiment_id, error)
