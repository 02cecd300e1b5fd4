"""Experiments and runs: start, read, resume; the CLI driver's work list and transitions."""

from __future__ import annotations

from typing import Any

from evalkit.auth import access
from evalkit.config import public_url
from evalkit.edge.endpoint import Call, Endpoint
from evalkit.errors import BadRequest, Conflict
from evalkit.http1 import Http1Client
from evalkit.model import runs as wire
from evalkit.model.names import whole_number
from evalkit.runs import engine
from evalkit.store import runs as store
from evalkit.store.workspaces import get_workspace

TRANSITION_MAX_BODY = 72 * 2**20
"""A transition may carry a trajectory (the harness client reads at most 64 MiB)."""
CAPABILITIES_TIMEOUT = 15.0
"""Seconds a server-driven harness has to give its capabilities when an experiment starts."""


# --------------------------------------------------------------------------- start


async def experiments_create(call: Call) -> wire.Experiment:
    access.require_user(call.actor)
    body: wire.ExperimentCreate = await call.payload()
    # A client per start, closed with it: a start reads one harness's capabilities at most.
    http = Http1Client(call.settings.egress, timeout=CAPABILITIES_TIMEOUT)
    async with http, call.db.connection() as conn:
        experiment_id = await engine.start_experiment(
            conn, call.actor, body, settings=call.settings, http=http
        )
        return await store.get_experiment(conn, experiment_id)


# --------------------------------------------------------------------------- read


async def experiments_list(call: Call) -> list[wire.Experiment]:
    access.require_read(call.actor)
    workspace = call.request.query_params.get("workspace")
    limit = _limit(call.request.query_params.get("limit"))
    async with call.db.connection() as conn:
        ws_id = (await get_workspace(conn, call.actor, workspace)).id if workspace else None
        return await store.list_experiments(conn, ws_id, limit)


def _limit(text: str | None) -> int:
    if text is None:
        return 50
    number = whole_number(text)
    if number is None or not 1 <= number <= 1000:
        raise BadRequest(f"limit must be a whole number from 1 to 1000, got {text!r}")
    return number


async def experiments_show(call: Call) -> wire.ExperimentDetail:
    access.require_read(call.actor)
    async with call.db.connection() as conn:
        return await store.get_experiment(conn, _id(call, "experiment"), with_runs=True)


async def runs_show(call: Call) -> wire.Run:
    access.require_read(call.actor)
    with_trajectory = call.request.query_params.get("trajectory") in ("1", "true")
    async with call.db.connection() as conn:
        run_id = _id(call, "run")
        row = await store.run_row(conn, run_id)
        events = await store.run_events(conn, run_id)
    return store.run_view(row, with_trajectory=with_trajectory, events=events)


def _id(call: Call, what: str) -> int:
    text = call.param(what)
    number = whole_number(text)
    if number is None:
        raise BadRequest(
            f"{what} ids are whole numbers, got {text!r}; see `evalkit experiments list`"
        )
    return number


# --------------------------------------------------------------------------- resume


async def experiments_resume(call: Call) -> wire.Experiment:
    access.require_user(call.actor)
    experiment_id = _id(call, "experiment")
    async with call.db.connection() as conn:
        row = await store.experiment_row(conn, experiment_id)
        await _require_driver_rights(conn, call, row)
        await engine.resume_experiment(
            conn, experiment_id, driver=row.driver, agent_id=row.agent_id
        )
        return await store.get_experiment(conn, experiment_id)


async def _require_driver_rights(conn: Any, call: Call, row: store.ExperimentRow) -> None:
    """Resuming or driving an experiment: the CLI or SDK that drives it is its creator's; a
    server-driven one may be resumed by anyone who may start it (in a shared workspace,
    everyone; in a personal one, its owner)."""
    if row.driver in ("cli", "sdk"):
        access.require_driver(call.actor, row.created_by, row.created_by_name, row.id)
        return
    ws = await get_workspace(conn, call.actor, row.workspace)
    access.require_start_experiment(
        call.actor, ws.facts, driver=row.driver, action="resume experiments in it"
    )


# --------------------------------------------------------------------------- CLI driver


async def experiments_work(call: Call) -> wire.WorkList:
    """The live runs of an experiment the caller's CLI drives, as the machine needs them."""
    access.require_user(call.actor)
    experiment_id = _id(call, "experiment")
    async with call.db.connection() as conn:
        row = await store.experiment_row(conn, experiment_id)
        _require_cli_driver(call, row)
        live = [r["id"] for r in await store.live_runs(conn, experiment_id)]
        loaded = await store.load_work(conn, live) if live else []
    works = [run.work for run in loaded]
    accepts = (row.capabilities or {}).get("accepts") or {}
    if accepts.get("file_urls"):
        key = call.settings.encryption_key or ""
        works = [store.sign_files(w, public_url(call.settings), key) for w in works]
    return wire.WorkList(experiment_id=experiment_id, runs=works)


async def runs_transition(call: Call) -> wire.TransitionResult:
    access.require_user(call.actor)
    run_id = _id(call, "run")
    async with call.db.connection() as conn:
        run = await store.find_run(conn, run_id)
        row = await store.experiment_row(conn, run.experiment_id)
        _require_cli_driver(call, row)
        body: wire.Transition = await call.payload()
        if body.run_id != run_id:
            raise BadRequest(
                f"the transition names run {body.run_id} but was posted to run {run_id}; "
                f"post it to /api/runs/{body.run_id}/transition"
            )
        actor = engine.driver_actor(row.driver, call.actor.username)
        applied = await engine.record(conn, body, row.facts, actor=actor)
        current = await store.find_run(conn, run_id)
    return wire.TransitionResult(applied=applied, state=current.state)


def _require_cli_driver(call: Call, row: store.ExperimentRow) -> None:
    if row.driver == "server":
        raise Conflict(
            f"experiment {row.id} is driven by the server; its runs are not posted from a CLI",
            code="server-driven",
        )
    access.require_driver(call.actor, row.created_by, row.created_by_name, row.id)


_EXP = "/api/experiments/{experiment}"

ENDPOINTS = [
    Endpoint(
        "POST",
        "/api/experiments",
        experiments_create,
        "Start an experiment: pin the dataset's cases and queue one run per case and repetition",
        body=wire.ExperimentCreate,
        returns=wire.Experiment,
        status=201,
        tags=["experiments"],
        refusals=(502,),  # the harness did not give its capabilities
    ),
    Endpoint(
        "GET",
        "/api/experiments",
        experiments_list,
        "Experiments, newest first (?workspace=NAME, ?limit=N up to 1000)",
        returns=list[wire.Experiment],
        tags=["experiments"],
    ),
    Endpoint(
        "GET",
        _EXP,
        experiments_show,
        "One experiment with its runs",
        returns=wire.ExperimentDetail,
        tags=["experiments"],
    ),
    Endpoint(
        "POST",
        _EXP + "/resume",
        experiments_resume,
        "Go on with the runs that are not finished, on the pinned case versions",
        returns=wire.Experiment,
        tags=["experiments"],
    ),
    Endpoint(
        "GET",
        _EXP + "/work",
        experiments_work,
        "The live runs of an experiment your CLI drives (personal harness agents)",
        returns=wire.WorkList,
        tags=["experiments"],
    ),
    Endpoint(
        "GET",
        "/api/runs/{run}",
        runs_show,
        "One run: status, answer, output, errors, trajectory summary (?trajectory=1: whole)",
        returns=wire.Run,
        tags=["experiments"],
    ),
    Endpoint(
        "POST",
        "/api/runs/{run}/transition",
        runs_transition,
        "Record one state machine step of a run your CLI drives (compare-and-set)",
        body=wire.Transition,
        returns=wire.TransitionResult,
        tags=["experiments"],
        max_body=TRANSITION_MAX_BODY,
    ),
]
