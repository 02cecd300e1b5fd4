"""Schedules: cron expressions, the schedule rows, and the compare-and-set that claims a slot."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from croniter import CroniterError, croniter

from evalkit.db import Conn, IntegrityError
from evalkit.errors import BadRequest, Conflict, NotFound
from evalkit.model import schedules as wire
from evalkit.model.names import NAME_RE, check_name
from evalkit.model.runs import ExperimentCreate

CRON_RULE = (
    "a cron expression has five fields, minute hour day-of-month month day-of-week, "
    "evaluated in UTC; e.g. '0 * * * *' (hourly) or '30 2 * * 1-5' (02:30 UTC on weekdays)"
)


# --------------------------------------------------------------------------- cron


def check_cron(expression: str) -> str:
    """The expression with its fields single-spaced, or BadRequest naming it and the rule."""
    fields = expression.split()
    if len(fields) != 5:
        raise BadRequest(
            f"cron expression {expression!r} has {len(fields)} field"
            f"{'s' if len(fields) != 1 else ''}: {CRON_RULE}",
            code="bad-cron",
        )
    normal = " ".join(fields)
    try:
        croniter(normal, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
    except CroniterError as exc:
        raise BadRequest(
            f"cron expression {expression!r} is not valid ({exc}): {CRON_RULE}", code="bad-cron"
        ) from None
    return normal


def next_slot(cron: str, after: datetime) -> datetime:
    """The first slot of ``cron`` strictly after ``after``, in UTC."""
    nxt: datetime = croniter(cron, after.astimezone(UTC)).get_next(datetime)
    return nxt.astimezone(UTC)


def latest_slot(cron: str, now: datetime) -> datetime:
    """The last slot of ``cron`` at or before ``now`` (slots fall on whole minutes)."""
    minute = now.astimezone(UTC).replace(second=0, microsecond=0)
    prev: datetime = croniter(cron, minute + timedelta(seconds=1)).get_prev(datetime)
    return prev.astimezone(UTC)


# --------------------------------------------------------------------------- writing


def default_name(dataset: str, agent: str) -> str:
    """``DATASET-AGENT``, cut to the 63 characters a name may have."""
    return f"{dataset}-{agent}"[:63].rstrip("-_.")


async def create_schedule(
    conn: Conn,
    *,
    workspace_id: int,
    workspace: str,
    dataset_id: int,
    agent_id: int,
    name: str,
    cron: str,
    body: wire.ScheduleCreate,
    created_by: int | None,
    now: datetime,
) -> int:
    check_name("schedule", name)
    try:
        row = await conn.one(
            "schedule_insert",
            workspace_id=workspace_id,
            name=name,
            dataset_id=dataset_id,
            agent_id=agent_id,
            cron=cron,
            split=body.split,
            case_ids=body.case_ids,
            repetitions=body.repetitions,
            model=body.model,
            created_by=created_by,
            next_fire_at=next_slot(cron, now),
        )
    except IntegrityError as exc:
        if exc.constraint == "schedules_workspace_name_key":
            raise Conflict(
                f"schedule {name}@{workspace} exists already; give this one another --name, "
                f"or `evalkit schedules delete {name}@{workspace}` first",
                code="schedule-exists",
            ) from None
        raise
    assert row is not None
    return int(row["id"])


async def delete_schedule(conn: Conn, schedule_id: int) -> None:
    if await conn.one("schedule_delete", schedule_id=schedule_id) is None:
        raise _no_schedule(str(schedule_id))


# --------------------------------------------------------------------------- reading


def _no_schedule(text: str) -> NotFound:
    return NotFound(f"no schedule {text}; see `evalkit schedules list`", code="no-such-schedule")


async def find_schedule(conn: Conn, workspace_id: int, workspace: str, name: str) -> int:
    """A schedule's id from its name in a workspace."""
    if not NAME_RE.match(name):
        raise _no_schedule(f"{name}@{workspace}")
    row = await conn.one("schedule_get_id", workspace_id=workspace_id, name=name)
    if row is None:
        raise _no_schedule(f"{name}@{workspace}")
    return int(row["id"])


async def schedule_workspace(conn: Conn, schedule_id: int) -> str:
    row = await conn.one("schedule_get_workspace", schedule_id=schedule_id)
    if row is None:
        raise _no_schedule(str(schedule_id))
    return str(row["workspace"])


async def get_schedule(conn: Conn, schedule_id: int) -> wire.Schedule:
    rows = await conn.all("schedule_list", workspace_id=None, schedule_id=schedule_id)
    if not rows:
        raise _no_schedule(str(schedule_id))
    return _from_row(rows[0])


async def list_schedules(conn: Conn, workspace_id: int | None) -> list[wire.Schedule]:
    rows = await conn.all("schedule_list", workspace_id=workspace_id, schedule_id=None)
    return [_from_row(r) for r in rows]


def _from_row(r: dict[str, Any]) -> wire.Schedule:
    latest = None
    if r["latest_id"] is not None:
        by_state = {str(k): int(v) for k, v in r["latest_by_state"].items()}
        latest = wire.ScheduleLatest(
            experiment_id=r["latest_id"],
            status=r["latest_status"],
            created_at=r["latest_created_at"],
            finished_at=r["latest_finished_at"],
            runs=sum(by_state.values()),
            by_state=by_state,
            summary=r["latest_summary"],
        )
    return wire.Schedule(
        id=r["id"],
        name=r["name"],
        workspace=r["workspace"],
        dataset=f"{r['dataset']}@{r['dataset_workspace']}",
        agent=f"{r['agent']}@{r['agent_workspace']}",
        cron=r["cron"],
        split=r["split"],
        case_ids=r["case_ids"],
        repetitions=r["repetitions"],
        model=r["model"],
        created_at=r["created_at"],
        created_by=r["created_by_name"],
        next_fire_at=r["next_fire_at"],
        last_fire_at=r["last_fire_at"],
        fires=r["fires"],
        last_error=r["last_error"],
        latest=latest,
    )


# --------------------------------------------------------------------------- firing


@dataclass(frozen=True, slots=True)
class DueSchedule:
    """A schedule whose next slot has come, with what its experiment is started from."""

    id: int
    ref: str
    cron: str
    next_fire_at: datetime
    experiment: ExperimentCreate
    creator_id: int | None
    creator: str | None
    creator_is_admin: bool
    creator_disabled: bool


async def due_schedules(conn: Conn, now: datetime) -> list[DueSchedule]:
    rows = await conn.all("schedule_list_due", now=now)
    return [
        DueSchedule(
            id=r["id"],
            ref=f"{r['name']}@{r['workspace']}",
            cron=r["cron"],
            next_fire_at=r["next_fire_at"],
            experiment=ExperimentCreate(
                dataset=f"{r['dataset']}@{r['dataset_workspace']}",
                agent=f"{r['agent']}@{r['agent_workspace']}",
                case_ids=r["case_ids"],
                split=r["split"],
                repetitions=r["repetitions"],
                model=r["model"],
            ),
            creator_id=r["created_by"],
            creator=r["created_by_name"],
            creator_is_admin=bool(r["created_by_admin"]),
            creator_disabled=r["created_by_disabled_at"] is not None,
        )
        for r in rows
    ]


async def claim_slot(
    conn: Conn, schedule_id: int, *, due: datetime, slot: datetime, next_fire_at: datetime
) -> bool:
    """Move the schedule past ``slot`` if its next fire time is still ``due``: True for the
    one caller that moved it, False for every other (the slot is someone else's)."""
    row = await conn.one(
        "schedule_claim",
        schedule_id=schedule_id,
        due=due,
        slot=slot,
        next_fire_at=next_fire_at,
    )
    return row is not None


async def record_fire(
    conn: Conn, schedule_id: int, *, experiment_id: int | None, error: str | None
) -> None:
    await conn.execute(
        "schedule_record_fire", schedule_id=schedule_id, experiment_id=experiment_id, error=error
    )
