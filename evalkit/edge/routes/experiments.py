"""Experiments and runs: start, read, resume; the CLI driver's work list and transitions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import msgspec

from evalkit.auth import access
from evalkit.auth.access import Actor
from evalkit.auth.secrets import SecretBox
from evalkit.config import Settings
from evalkit.edge.endpoint import Call, Endpoint
from evalkit.errors import BadGateway, BadRequest, Conflict, EvalkitError
from evalkit.harness.client import HarnessClient
from evalkit.jobs import settle
from evalkit.jobs.app import defer
from evalkit.model import runs as wire
from evalkit.model.harness import Capabilities
from evalkit.model.names import parse_ref, whole_number
from evalkit.runs import machine
from evalkit.store import agents, datasets
from evalkit.store import runs as store
from evalkit.store.agents import AgentRow
from evalkit.store.workspaces import WorkspaceRow, get_workspace

TRANSITION_MAX_BODY = 72 * 2**20
"""A transition may carry a trajectory (the harness client reads at most 64 MiB)."""
CAPABILITIES_TIMEOUT = 15.0


def _edge_http(call: Call) -> httpx.AsyncClient:
    state = call.request.app.state
    if getattr(state, "outbound", None) is None:
        from evalkit.outbound import make_client

        state.outbound = make_client(call.settings.egress, timeout=CAPABILITIES_TIMEOUT)
    return state.outbound  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- start


async def experiments_create(call: Call) -> wire.Experiment:
    access.require_user(call.actor)
    body: wire.ExperimentCreate = await call.payload()
    async with call.db.connection() as conn:
        experiment_id = await start_experiment(
            conn, call.actor, body, settings=call.settings, http=_edge_http(call)
        )
        return await store.get_experiment(conn, experiment_id)


@dataclass(frozen=True, slots=True)
class Plan:
    """What starting an experiment resolved before it calls anything outside the database."""

    dataset_ws: WorkspaceRow
    dataset_name: str
    dataset_id: int
    agent: AgentRow
    driver: str
    home_ws: WorkspaceRow
    pins: list[store.CasePin]


async def plan_experiment(
    conn: Any, actor: Actor, body: wire.ExperimentCreate, action: str = "run experiments in it"
) -> Plan:
    """Every refusal of POST /api/experiments that needs only the database: dataset, agent,
    who drives, where the experiment lives and the right to write there, the cases."""
    dataset_ws, dataset_name = await _dataset_of(conn, actor, body.dataset)
    agent = await _agent_of(conn, actor, body.agent)
    driver = _driver_for(actor, agent, body)
    home = access.experiment_workspace(
        dataset_ws.facts, agent.workspace_facts, actor.username or ""
    )
    home_ws = await get_workspace(conn, actor, home)
    access.require_write(actor, home_ws.facts, action)
    dataset_id = await datasets.dataset_id(conn, dataset_ws, dataset_name)
    pins = await store.pin_cases(
        conn,
        workspace_id=dataset_ws.id,
        dataset_id=dataset_id,
        dataset=f"{dataset_name}@{dataset_ws.facts.name}",
        case_ids=body.case_ids,
        split=body.split,
    )
    return Plan(dataset_ws, dataset_name, dataset_id, agent, driver, home_ws, pins)


async def start_experiment(
    conn: Any,
    actor: Actor,
    body: wire.ExperimentCreate,
    *,
    settings: Settings,
    http: httpx.AsyncClient,
) -> int:
    """Start an experiment as ``actor``: the API's POST /api/experiments, and a schedule
    firing in a worker (as its creator). Returns the new experiment's id."""
    plan = await plan_experiment(conn, actor, body)
    capabilities = await _capabilities(conn, plan.agent, plan.driver, body, settings, http)
    async with conn.transaction():
        experiment_id = await store.insert_experiment(
            conn,
            workspace_id=plan.home_ws.id,
            dataset_id=plan.dataset_id,
            agent_id=plan.agent.id,
            driver=plan.driver,
            body=body,
            capabilities=capabilities,
            created_by=actor.user_id,
            pins=plan.pins,
        )
        if plan.driver == "server":
            await _dispatch(conn, plan.agent.id)
    return experiment_id


async def _dataset_of(conn: Any, actor: Actor, text: str) -> tuple[WorkspaceRow, str]:
    ref = parse_ref(text, "dataset").resolve(actor.username or "")
    return await get_workspace(conn, actor, ref.workspace or ""), ref.name


async def _agent_of(conn: Any, actor: Actor, text: str) -> AgentRow:
    ref = parse_ref(text, "agent").resolve(actor.username or "")
    ws = await get_workspace(conn, actor, ref.workspace or "")
    return await agents.get_agent(conn, ws.id, ref.name)


def _driver_for(actor: Actor, agent: AgentRow, body: wire.ExperimentCreate) -> str:
    """Who moves the runs: the server for a shared harness agent, the owner's CLI for a
    personal one, the caller's own code (the SDK) for a code-driven agent."""
    if body.judge is not None and not body.sdk:
        raise BadRequest(
            "judge names the judge the SDK's process grades the rubrics with, so it goes only "
            "with sdk: true (run_experiment); the server's default judge grades the others "
            "(`evalkit judge-default show`)",
            code="judge-needs-sdk",
        )
    if agent.harness_url is None:
        if not body.sdk:
            raise BadRequest(
                f"agent {agent.ref} has no harness URL: it is code-driven, so your code runs "
                "it with evalkit.sdk.run_experiment; give it a harness with `evalkit agents "
                f"edit {agent.ref} --harness-url URL` to run it with `evalkit run`",
                code="code-driven-agent",
            )
        access.require_run_agent(actor, agent.workspace_facts, driven_by_server=False)
        return "sdk"
    if body.sdk:
        raise BadRequest(
            f"agent {agent.ref} has a harness, so evalkit calls it: run it with `evalkit run`, "
            "or create a code-driven agent (no --harness-url) for run_experiment",
            code="harness-agent",
        )
    personal = agent.workspace_kind == "personal"
    access.require_run_agent(actor, agent.workspace_facts, driven_by_server=not personal)
    return "cli" if personal else "server"


async def _capabilities(
    conn: Any,
    agent: AgentRow,
    driver: str,
    body: wire.ExperimentCreate,
    settings: Settings,
    http: httpx.AsyncClient,
) -> Capabilities:
    if driver == "sdk":
        return code_driven_capabilities(agent.provides)
    if driver == "cli":
        if body.capabilities is None:
            raise BadRequest(
                f"agent {agent.ref} is personal, so your CLI drives its runs and must send the "
                "capabilities it read from the harness; use `evalkit run`",
                code="capabilities-required",
            )
        return body.capabilities
    assert agent.harness_url is not None
    key = await agents.agent_api_key(conn, agent.id, SecretBox(settings.encryption_key))
    client = HarnessClient(agent.harness_url, key, http)
    try:
        return await client.capabilities()
    except EvalkitError as exc:
        raise BadGateway(
            f"cannot start: agent {agent.ref}'s harness did not give its capabilities ({exc}); "
            f"check it with `evalkit harness check {agent.ref}`",
            code="harness-unreachable",
        ) from None


CODE_DRIVEN_PROVIDES = {
    "trajectory": True,
    "tool_calls": True,
    "token_usage": True,
    "run_listing": True,
    "thinking": False,
    "artifacts": False,
    "workspace": False,
}


def code_driven_capabilities(provides: dict[str, bool]) -> Capabilities:
    """What a code-driven agent is taken to provide (its traces or the SDK's trajectory),
    overridden by what the agent declares (`agents create --provides k=v`)."""
    merged = {**CODE_DRIVEN_PROVIDES, **provides}
    return msgspec.convert({"provides": merged}, Capabilities)


async def _dispatch(conn: Any, agent_id: int) -> None:
    await defer(conn, "dispatch_agent", queueing_lock=f"dispatch:{agent_id}", agent_id=agent_id)


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
        row = await store.run_row(conn, _id(call, "run"))
    return store.run_view(row, with_trajectory=with_trajectory)


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
        await store.reopen_experiment(conn, experiment_id)
        if row["driver"] == "server":
            await _redispatch(conn, row["agent_id"], experiment_id)
        return await store.get_experiment(conn, experiment_id)


async def _redispatch(conn: Any, agent_id: int, experiment_id: int) -> None:
    """Queue a step for every live run; compare-and-set makes extra steps harmless."""
    from evalkit.jobs.runs import defer_advance

    await _dispatch(conn, agent_id)
    for run in await store.live_runs(conn, experiment_id):
        if run["state"] != "queued":
            await defer_advance(conn, run["id"])


async def _require_driver_rights(conn: Any, call: Call, row: dict[str, Any]) -> None:
    """Resuming or driving an experiment: the CLI that drives it is its creator's; a
    server-driven one may be resumed by anyone who may write to its workspace."""
    if row["driver"] in ("cli", "sdk"):
        access.require_driver(call.actor, row["created_by"], row["created_by_name"], row["id"])
        return
    ws = await get_workspace(conn, call.actor, row["workspace"])
    access.require_write(call.actor, ws.facts, "resume experiments in it")


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
    works = [work for work, _ in loaded]
    accepts = (row["capabilities"] or {}).get("accepts") or {}
    if accepts.get("file_urls"):
        from evalkit.serve import public_url

        key = call.settings.encryption_key or ""
        works = [store.sign_files(w, public_url(call.settings), key) for w in works]
    return wire.WorkList(experiment_id=experiment_id, runs=works)


async def runs_transition(call: Call) -> wire.TransitionResult:
    access.require_user(call.actor)
    run_id = _id(call, "run")
    async with call.db.connection() as conn:
        run = await store.run_row(conn, run_id)
        row = await store.experiment_row(conn, run["experiment_id"])
        _require_cli_driver(call, row)
        body: wire.Transition = await call.payload()
        if body.run_id != run_id:
            raise BadRequest(
                f"the transition names run {body.run_id} but was posted to run {run_id}; "
                f"post it to /api/runs/{body.run_id}/transition"
            )
        if not machine.is_allowed(body.from_state, body.to_state):
            raise BadRequest(
                f"a run cannot go from {body.from_state} to {body.to_state}",
                code="transition-not-allowed",
            )
        applied = await store.apply_transition(conn, body)
        if applied and body.to_state in machine.TERMINAL:
            await store.finish_experiment_if_done(conn, run["experiment_id"])
        if applied and body.to_state == "scoring":
            from evalkit.jobs.runs import defer_advance

            await defer_advance(conn, run_id)  # the server scores it and finishes it
        if applied and body.to_state == "collecting":
            [(work, work_row)] = await store.load_work(conn, [run_id])
            await settle.on_collecting(conn, work_row["agent_id"], work, body)
        current = (await store.run_row(conn, run_id))["state"]
    return wire.TransitionResult(applied=applied, state=current)


def _require_cli_driver(call: Call, row: dict[str, Any]) -> None:
    if row["driver"] == "server":
        raise Conflict(
            f"experiment {row['id']} is driven by the server; its runs are not posted from a CLI",
            code="server-driven",
        )
    access.require_driver(call.actor, row["created_by"], row["created_by_name"], row["id"])


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
