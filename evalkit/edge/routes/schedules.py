"""Schedules: create, list, show and delete the cron timers that start experiments."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from evalkit.auth import access
from evalkit.auth.access import Actor
from evalkit.edge.endpoint import Call, Endpoint
from evalkit.errors import BadRequest
from evalkit.model import schedules as wire
from evalkit.model.names import parse_ref, whole_number
from evalkit.model.runs import ExperimentCreate
from evalkit.runs.engine import Plan, plan_experiment
from evalkit.store import schedules as store
from evalkit.store.workspaces import get_workspace


async def schedules_create(call: Call) -> wire.Schedule:
    access.require_user(call.actor)
    body: wire.ScheduleCreate = await call.payload()
    cron = store.check_cron(body.cron)
    async with call.db.connection() as conn:
        plan = await _plan(conn, call.actor, body)
        schedule_id = await store.create_schedule(
            conn,
            workspace_id=plan.home_ws.id,
            workspace=plan.home_ws.facts.name,
            dataset_id=plan.dataset_id,
            agent_id=plan.agent.id,
            name=body.name or store.default_name(plan.dataset_name, plan.agent.name),
            cron=cron,
            body=body,
            created_by=call.actor.user_id,
            now=datetime.now(UTC),
        )
        return await store.get_schedule(conn, schedule_id)


async def _plan(conn: Any, actor: Actor, body: wire.ScheduleCreate) -> Plan:
    """The refusals of starting this experiment now (the same code as POST /api/experiments,
    short of calling the harness), plus: the server must be the one driving it."""
    start = ExperimentCreate(
        dataset=body.dataset,
        agent=body.agent,
        case_ids=body.case_ids,
        split=body.split,
        repetitions=body.repetitions,
        model=body.model,
    )
    try:
        plan = await plan_experiment(conn, actor, start, schedule="create schedules in it")
    except BadRequest as exc:
        if exc.code != "code-driven-agent":
            raise
        raise BadRequest(
            f"agent {body.agent} has no harness URL: it is code-driven, and a schedule's "
            "experiments are started by the server, which runs agents only through their "
            "harness; run it from your own timer with evalkit.sdk.run_experiment, or give it "
            "a harness (`evalkit agents edit AGENT --harness-url URL`)",
            code="code-driven-agent",
        ) from None
    if plan.driver != "server":
        # A personal harness agent: its owner's CLI drives it, never the server.
        access.require_run_agent(
            actor, plan.agent.workspace_facts, driven_by_server=True, agent=plan.agent.ref
        )
    return plan


async def schedules_list(call: Call) -> list[wire.Schedule]:
    access.require_read(call.actor)
    workspace = call.request.query_params.get("workspace")
    async with call.db.connection() as conn:
        ws_id = (await get_workspace(conn, call.actor, workspace)).id if workspace else None
        return await store.list_schedules(conn, ws_id)


async def schedules_show(call: Call) -> wire.Schedule:
    access.require_read(call.actor)
    async with call.db.connection() as conn:
        return await store.get_schedule(conn, await _schedule_id(conn, call))


async def schedules_delete(call: Call) -> wire.ScheduleDeleted:
    access.require_user(call.actor)
    async with call.db.connection() as conn:
        schedule_id = await _schedule_id(conn, call)
        ws = await get_workspace(
            conn, call.actor, await store.schedule_workspace(conn, schedule_id)
        )
        access.require_schedule(call.actor, ws.facts, "delete its schedules")
        shown = await store.get_schedule(conn, schedule_id)
        await store.delete_schedule(conn, schedule_id)
    return wire.ScheduleDeleted(id=shown.id, name=shown.name, workspace=shown.workspace)


async def _schedule_id(conn: Any, call: Call) -> int:
    """``{schedule}`` is an id, or ``NAME@WORKSPACE`` (a bare NAME: the caller's personal
    workspace)."""
    text = call.param("schedule")
    number = whole_number(text)
    if number is not None:
        return number
    ref = parse_ref(text, "schedule").resolve(call.actor.username or "")
    ws = await get_workspace(conn, call.actor, ref.workspace or "")
    return await store.find_schedule(conn, ws.id, ws.facts.name, ref.name)


_ONE = "/api/schedules/{schedule}"

ENDPOINTS = [
    Endpoint(
        "POST",
        "/api/schedules",
        schedules_create,
        "Start an experiment of a dataset and a shared harness agent on a cron timer (UTC)",
        body=wire.ScheduleCreate,
        returns=wire.Schedule,
        status=201,
        tags=["schedules"],
    ),
    Endpoint(
        "GET",
        "/api/schedules",
        schedules_list,
        "Schedules with their latest experiment's result (?workspace=NAME)",
        returns=list[wire.Schedule],
        tags=["schedules"],
    ),
    Endpoint(
        "GET",
        _ONE,
        schedules_show,
        "One schedule (by id or NAME@WORKSPACE) with its latest experiment's result",
        returns=wire.Schedule,
        tags=["schedules"],
    ),
    Endpoint(
        "DELETE",
        _ONE,
        schedules_delete,
        "Delete a schedule (by id or NAME@WORKSPACE); the experiments it started stay",
        returns=wire.ScheduleDeleted,
        tags=["schedules"],
    ),
]
