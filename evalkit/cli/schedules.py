"""``evalkit schedules ...``: experiments the server starts on a cron timer."""

from __future__ import annotations

from typing import Annotated

from cyclopts import App, Parameter

from evalkit.cli.app import JsonFlag
from evalkit.cli.client import Client
from evalkit.cli.output import CliError, emit_json, say, table
from evalkit.model import schedules as wire
from evalkit.model.runs import TERMINAL

schedules = App(
    name="schedules",
    help=(
        "Schedules: the server starts an experiment of a dataset and a shared harness agent "
        "on a cron timer (UTC), e.g. a nightly regression run on @prod."
    ),
)

ScheduleRef = Annotated[
    str,
    Parameter(help="A schedule's id, or NAME@WORKSPACE (NAME: your personal workspace)."),
]


@schedules.command(name="create")
def schedules_create(
    dataset: Annotated[
        str, Parameter(help="NAME@WORKSPACE of the dataset (NAME: your personal one).")
    ],
    /,
    *,
    agent: Annotated[
        str,
        Parameter(help="NAME@WORKSPACE of a shared agent with a harness URL."),
    ],
    cron: Annotated[
        str,
        Parameter(
            help="When to start: five cron fields, minute hour day-of-month month "
            "day-of-week, in UTC. '0 * * * *' is hourly, '0 2 * * *' is 02:00 UTC daily."
        ),
    ],
    name: Annotated[
        str | None,
        Parameter(help="Its name in its workspace (default: DATASET-AGENT)."),
    ] = None,
    split: Annotated[str | None, Parameter(help="Run only the cases of this split.")] = None,
    case_id: Annotated[
        list[str] | None, Parameter(name="--case-id", help="Run only this case (repeatable).")
    ] = None,
    repetitions: Annotated[int, Parameter(help="Runs per case (1 to 100).")] = 1,
    model: Annotated[str | None, Parameter(help="Model name passed to the harness.")] = None,
    json: JsonFlag = False,
) -> int:
    """Have the server start an experiment on a cron timer.

    Each time the expression comes due, the server starts an experiment exactly as `evalkit
    run DATASET --agent AGENT` would, as you, pinning the cases current then. Only agents
    the server drives can be scheduled: shared agents with a harness URL. The schedule lives
    where those experiments live (the dataset's workspace when both are shared), and its
    writers may create and delete it. Slots missed while no worker ran are fired once, not
    once each. A worker must be running (`evalkit worker`, or the server's own).
    """
    if not 1 <= repetitions <= 100:
        raise CliError("--repetitions must be from 1 to 100", exit_code=2)
    with Client() as client:
        body = wire.ScheduleCreate(
            dataset=str(client.resolve(dataset, "dataset")),
            agent=str(client.resolve(agent, "agent")),
            cron=cron,
            name=name,
            case_ids=case_id or None,
            split=split,
            repetitions=repetitions,
            model=model,
        )
        created: wire.Schedule = client.post("/api/schedules", body, type=wire.Schedule)
    if json:
        emit_json(created)
    else:
        say(
            f"created schedule {created.name}@{created.workspace} (id {created.id}): "
            f"{created.agent} over {created.dataset} at '{created.cron}' UTC; "
            f"first run {_when(created.next_fire_at)}"
        )
    return 0


@schedules.command(name="list")
def schedules_list(
    *,
    workspace: Annotated[str | None, Parameter(help="Only this workspace's schedules.")] = None,
    json: JsonFlag = False,
) -> int:
    """List schedules with their next fire time and their latest experiment's result."""
    path = f"/api/schedules?workspace={workspace}" if workspace else "/api/schedules"
    with Client() as client:
        rows: list[wire.Schedule] = client.get(path, type=list[wire.Schedule])
    if json:
        emit_json(rows)
        return 0
    table(
        [
            (
                s.id,
                f"{s.name}@{s.workspace}",
                s.cron,
                s.agent,
                s.dataset,
                _when(s.next_fire_at),
                latest_text(s),
            )
            for s in rows
        ],
        ["id", "schedule", "cron (utc)", "agent", "dataset", "next", "latest"],
    )
    return 0


@schedules.command(name="show")
def schedules_show(schedule: ScheduleRef, /, *, json: JsonFlag = False) -> int:
    """Show a schedule: what it runs, when, and its latest experiment's result."""
    with Client() as client:
        shown: wire.Schedule = client.get(f"/api/schedules/{schedule}", type=wire.Schedule)
    if json:
        emit_json(shown)
        return 0
    say(f"schedule {shown.name}@{shown.workspace} (id {shown.id})")
    say(f"runs:       {shown.agent} over {shown.dataset}{_filters(shown)}")
    say(f"cron:       {shown.cron} (UTC)")
    say(f"created:    {_when(shown.created_at)} by {shown.created_by or '(deleted user)'}")
    say(f"next fire:  {_when(shown.next_fire_at)}")
    last = _when(shown.last_fire_at) if shown.last_fire_at else "never"
    say(f"last fire:  {last} ({shown.fires} so far)")
    say(f"latest:     {latest_text(shown)}")
    if shown.latest is not None:
        say(f"            see `evalkit experiments show {shown.latest.experiment_id}`")
    return 0


@schedules.command(name="delete")
def schedules_delete(schedule: ScheduleRef, /, *, json: JsonFlag = False) -> int:
    """Delete a schedule. The experiments it started stay; a running one goes on."""
    with Client() as client:
        gone: wire.ScheduleDeleted = client.request(
            "DELETE", f"/api/schedules/{schedule}", type=wire.ScheduleDeleted
        )
    if json:
        emit_json(gone)
    else:
        say(f"deleted schedule {gone.name}@{gone.workspace} (id {gone.id})")
    return 0


def latest_text(s: wire.Schedule) -> str:
    """The latest result in one line: the experiment, its state, its runs by state; or why
    the last fire started nothing."""
    parts = []
    if s.last_error is not None:
        parts.append(f"last fire refused: {s.last_error}")
    latest = s.latest
    if latest is not None:
        counts = ", ".join(f"{n} {state}" for state, n in sorted(latest.by_state.items()))
        if latest.status == "finished":
            parts.append(f"experiment {latest.experiment_id} finished: {counts}")
        else:
            ended = sum(latest.by_state.get(state, 0) for state in TERMINAL)
            parts.append(
                f"experiment {latest.experiment_id} running: {ended}/{latest.runs} finished"
                + (f" ({counts})" if counts else "")
            )
    elif s.last_error is None:
        parts.append("no experiment yet")
    return "; ".join(parts)


def _filters(s: wire.Schedule) -> str:
    extra = []
    if s.split:
        extra.append(f"split {s.split}")
    if s.case_ids:
        extra.append(f"cases {', '.join(s.case_ids)}")
    if s.repetitions != 1:
        extra.append(f"{s.repetitions} repetitions")
    if s.model:
        extra.append(f"model {s.model}")
    return f" ({'; '.join(extra)})" if extra else ""


def _when(value: object) -> str:
    from datetime import UTC, datetime

    assert isinstance(value, datetime)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
