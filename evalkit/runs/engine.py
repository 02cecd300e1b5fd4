"""The run engine: starting experiments, and recording what happens to their runs.

Every driver (the server's jobs, the owner's CLI posting steps, the SDK posting batches,
the settle job attaching a traced trajectory) records a run's transitions through
:func:`record` or :func:`record_all` (steps in order), or :func:`record_chain` and
:func:`record_chains` (consecutive steps of one run as one write), the only callers of the
store's transition write. Each runs the work that follows a recorded step, in the caller's
transaction, once:

- a run that reached ``collecting`` and waits for its spans wakes its session's settle job;
- a run that reached ``scoring`` is queued for the server's scoring, unless the caller
  scores it itself (the server's own job goes on with it; the SDK's batch scores in place,
  with :func:`score_in_place`, what needs nothing outside evalkit);
- a trajectory built from traces links the session to its run;
- a run that ended may close its experiment.

The decisions (which step, with what) are :mod:`evalkit.runs.machine`'s; this module does
not decide, it records and starts.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from evalkit.auth import access
from evalkit.auth.access import Actor
from evalkit.auth.secrets import SecretBox
from evalkit.config import Settings
from evalkit.db import Conn, IntegrityError
from evalkit.errors import BadGateway, BadRequest, EvalkitError
from evalkit.harness.client import HarnessClient
from evalkit.http1 import Http1Client
from evalkit.jobs import queue
from evalkit.model import runs as wire
from evalkit.model.harness import Capabilities
from evalkit.model.names import parse_ref
from evalkit.model.runs import TERMINAL, ExperimentFacts, RunPosition, Transition
from evalkit.runs import machine
from evalkit.scoring import run as scoring_run
from evalkit.store import agents, datasets
from evalkit.store import runs as store
from evalkit.store.agents import AgentRow
from evalkit.store.workspaces import WorkspaceRow, get_workspace

WORKER = "worker"
"""The actor of steps the server's jobs take."""
SWEEP = "sweep"
"""The actor of steps the server's safety net takes (giving up on a run)."""
SETTLE = "settle"
"""The actor of a traced run's trajectory attached by the settle job."""
SERVER = "server"
"""The actor of the end of a run the edge scored in place (:func:`score_in_place`)."""

GIVE_UP_TRIES = 5


def driver_actor(driver: str, username: str | None) -> str:
    """The actor of steps a user's CLI or SDK posts."""
    return f"{driver}:{username or '?'}"


# --------------------------------------------------------------------------- recording


async def record(
    conn: Conn,
    step: Transition,
    facts: ExperimentFacts,
    *,
    actor: str,
    scores_itself: bool = False,
) -> bool:
    """Record one step; True when it was applied (False: the run had moved on)."""
    [applied] = await record_all(conn, [step], facts, actor=actor, scores_itself=scores_itself)
    return applied


async def record_all(
    conn: Conn,
    steps: Sequence[Transition],
    facts: ExperimentFacts,
    *,
    actor: str,
    scores_itself: bool = False,
    close: bool = True,
) -> list[bool]:
    """Record steps of runs of one experiment, in order (sent together: each is
    compare-and-set after the one before it), and run the work after each applied one; the
    experiment is closed at most once, after the last. A caller in a transaction passes
    ``close=False`` and calls :func:`close_after_commit` once it committed: a check inside
    the transaction could not see a run another transaction ended meanwhile."""
    applied = await record_chains(
        conn, [[step] for step in steps], facts, actor=actor, scores_itself=scores_itself
    )
    ended = any(done and t.to_state in TERMINAL for t, done in zip(steps, applied, strict=True))
    if ended and close:
        await store.finish_experiment_if_done(conn, facts.experiment_id)
    return applied


async def record_chain(
    conn: Conn,
    chain: Sequence[Transition],
    facts: ExperimentFacts,
    *,
    actor: str,
    scores_itself: bool = False,
) -> bool:
    """Record consecutive steps of one run (each starting where the one before leads) with
    one statement, all of them or none (False: the run had moved on), then the work after
    each, as :func:`record_all` does. A run that ended here leaves its experiment's close to
    the caller (:func:`close_after_commit`, once its transaction committed)."""
    [applied] = await record_chains(conn, [chain], facts, actor=actor, scores_itself=scores_itself)
    return applied


async def record_chains(
    conn: Conn,
    chains: Sequence[Sequence[Transition]],
    facts: ExperimentFacts,
    *,
    actor: str,
    scores_itself: bool = False,
) -> list[bool]:
    """:func:`record_chain` for chains of runs of one experiment, in order, sent together."""
    for chain in chains:
        _check_chain(chain)
    applied = await _write(conn, chains, actor)
    for chain, done in zip(chains, applied, strict=True):
        if done:
            for step in chain:
                await _after(conn, step, facts, scores_itself=scores_itself)
    return applied


def _check_chain(chain: Sequence[Transition]) -> None:
    for before, step in itertools.pairwise(chain):
        if (step.run_id, step.from_state, step.from_attempts) != (
            before.run_id,
            before.to_state,
            before.attempts,
        ):
            raise ValueError(
                f"run {step.run_id}: a step from {step.from_state} does not follow the step "
                f"to {before.to_state} of run {before.run_id}; a chain is of one run, in order"
            )


async def score_in_place(
    conn: Conn,
    reached: Sequence[Transition],
    facts: ExperimentFacts,
    *,
    actor: str = SERVER,
    queue_others: bool = True,
) -> list[Transition]:
    """Finish the runs that ``reached`` scoring in the caller's transaction (steps recorded
    with ``scores_itself``, after the scores the caller was given were stored): those whose
    evaluators call nothing outside evalkit are scored here and their step to done or
    failed recorded; the others are queued for the server's scoring (unless
    ``queue_others`` is False: the caller, the server's own job, scores them next).
    Returns the steps to done or failed recorded here: when there are any, the caller
    calls :func:`close_after_commit` once its transaction committed.

    A worker's scoring job would cost a dozen transactions a run; this is a few statements
    in the transaction that brought the run to scoring, so a crash leaves the run either
    before scoring or ended, with its scores."""
    if not reached:
        return []
    contexts = await scoring_run.score_in_place(conn, [t.run_id for t in reached])
    ends = [
        machine.scored(
            RunPosition(
                run_id=t.run_id,
                experiment_id=facts.experiment_id,
                state="scoring",
                attempts=t.attempts,
            ),
            harness_status=contexts[t.run_id].harness_status,
            timed_out=contexts[t.run_id].timed_out,
        )
        for t in reached
        if t.run_id in contexts
    ]
    applied = await record_chains(
        conn, [[end] for end in ends], facts, actor=actor, scores_itself=True
    )
    moved = [t.run_id for t, done in zip(ends, applied, strict=True) if not done]
    if moved:
        # This transaction holds these runs since it moved them to scoring: only a bug gets
        # here, and rolling back is better than a run left in scoring with no job.
        raise EvalkitError(f"run {moved[0]} left scoring while the server scored it in place")
    if queue_others:
        await queue.defer_advances(conn, [t.run_id for t in reached if t.run_id not in contexts])
    return ends


async def close_after_commit(conn: Conn, experiment_id: int) -> None:
    """Close the experiment if no run of it is live, on an autocommit connection after a
    transaction that ended runs in place: that transaction's own check could not see a run
    a worker ended meanwhile (and the worker's could not see this transaction's runs)."""
    await store.finish_experiment_if_done(conn, experiment_id)


async def _write(conn: Conn, chains: Sequence[Sequence[Transition]], actor: str) -> list[bool]:
    for step in itertools.chain.from_iterable(chains):
        if not machine.is_allowed(step.from_state, step.to_state):
            raise BadRequest(
                machine.not_allowed(step.run_id, step.from_state, step.to_state),
                code="transition-not-allowed",
            )
    try:
        return await store.write_chains(conn, chains, actor=actor)
    except IntegrityError as exc:
        if exc.constraint != "run_transition_allowed":
            raise
        # The machine allowed it but the database's table does not: they disagree.
        raise BadRequest(str(exc), code="transition-not-allowed") from None


async def _after(
    conn: Conn, step: Transition, facts: ExperimentFacts, *, scores_itself: bool
) -> None:
    if step.to_state == "collecting":
        session_id = await _session_waiting_for_spans(conn, step, facts)
        if session_id:
            await queue.defer_settle(conn, facts.agent_id, session_id, after=0)
    elif step.to_state == "scoring":
        trajectory = step.trajectory
        if trajectory is not None and trajectory.source == "otel" and step.session_id:
            await store.link_session(conn, facts.agent_id, step.session_id, step.run_id)
        if not scores_itself:
            await queue.defer_advance(conn, step.run_id)


async def _session_waiting_for_spans(
    conn: Conn, step: Transition, facts: ExperimentFacts
) -> str | None:
    """The session whose spans make the trajectory of a run that reached collecting, if
    they do: the SDK names a session only for a traced run; a traced agent's run may have
    learned its session before this step."""
    if facts.driver == "sdk":
        return step.session_id
    if facts.trajectory_source != "otel":
        return None
    if step.session_id:
        return step.session_id
    position = await store.run_position(conn, step.run_id)
    return None if position is None else position.session_id


async def give_up(conn: Conn, run_id: int, error: str, facts: ExperimentFacts) -> None:
    """End a live run as errored wherever it is (its job failed for good)."""
    for _ in range(GIVE_UP_TRIES):
        position = await store.run_position(conn, run_id)
        if position is None or position.state in TERMINAL:
            return
        step = machine.give_up(position, error)
        if await record(conn, step, facts, actor=SWEEP):
            return
    raise EvalkitError(f"run {run_id} kept moving while evalkit tried to give up on it")


async def claim(conn: Conn, agent_id: int, *, limit: int) -> list[int]:
    """Move queued server-driven runs of the agent to starting, within its free slots, and
    queue a step of each (in one transaction: a crash leaves neither or both)."""
    async with conn.transaction():
        claimed = await store.claim_runs(conn, agent_id, limit=limit, actor=WORKER)
        for run_id in claimed:
            await queue.defer_advance(conn, run_id)
    return claimed


# --------------------------------------------------------------------------- starting


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
    conn: Conn, actor: Actor, body: wire.ExperimentCreate, *, schedule: str | None = None
) -> Plan:
    """Every refusal of starting an experiment that needs only the database: dataset, agent,
    who drives, where the experiment lives and the right to start it there, the cases.
    ``schedule`` is what a schedule does (create, fire): it needs the schedule's rights."""
    dataset_ws, dataset_name = await _dataset_of(conn, actor, body.dataset)
    agent = await _agent_of(conn, actor, body.agent)
    driver = _driver_for(actor, agent, body)
    home = access.experiment_workspace(
        dataset_ws.facts, agent.workspace_facts, actor.username or ""
    )
    home_ws = await get_workspace(conn, actor, home)
    if schedule is None:
        access.require_start_experiment(actor, home_ws.facts, driver=driver)
    else:
        access.require_schedule(actor, home_ws.facts, schedule)
    dataset_id = await datasets.dataset_id(conn, dataset_ws, dataset_name)
    pins = await store.pin_cases(
        conn,
        workspace_id=dataset_ws.id,
        dataset_id=dataset_id,
        dataset=f"{dataset_name}@{dataset_ws.facts.name}",
        case_ids=body.case_ids,
        split=body.split,
        fill=_how_cases_arrive(dataset_ws),
    )
    return Plan(dataset_ws, dataset_name, dataset_id, agent, driver, home_ws, pins)


def _how_cases_arrive(ws: WorkspaceRow) -> str:
    if ws.promoted_from is None:
        return "sync cases into it first"
    # A promotion target refuses sync: its cases come from approvals in the source.
    source = ws.promoted_from
    return (
        f"@{ws.facts.name} is a promotion target, fed by approvals in @{source}: approve cases"
        f" there (`evalkit cases approve CASE_ID@{source}`)"
    )


async def start_experiment(
    conn: Conn,
    actor: Actor,
    body: wire.ExperimentCreate,
    *,
    settings: Settings,
    http: Http1Client,
    by_schedule: bool = False,
) -> int:
    """Start an experiment as ``actor`` (POST /api/experiments, and a schedule firing in a
    worker as its creator: ``by_schedule``). Returns the new experiment's id.

    ``http`` reads a server-driven harness's capabilities, under ``settings.egress``."""
    schedule = "keep schedules firing in it" if by_schedule else None
    plan = await plan_experiment(conn, actor, body, schedule=schedule)
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
            await queue.defer_dispatch(conn, plan.agent.id)
    return experiment_id


async def resume_experiment(conn: Conn, experiment_id: int, *, driver: str, agent_id: int) -> None:
    """Open the experiment again and, when the server drives it, queue a step for every
    live run (compare-and-set makes extra steps harmless)."""
    await store.reopen_experiment(conn, experiment_id)
    if driver != "server":
        return
    await queue.defer_dispatch(conn, agent_id)
    for run in await store.live_runs(conn, experiment_id):
        if run["state"] != "queued":
            await queue.defer_advance(conn, run["id"])


async def _dataset_of(conn: Conn, actor: Actor, text: str) -> tuple[WorkspaceRow, str]:
    ref = parse_ref(text, "dataset").resolve(actor.username or "")
    return await get_workspace(conn, actor, ref.workspace or ""), ref.name


async def _agent_of(conn: Conn, actor: Actor, text: str) -> AgentRow:
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
        access.require_run_agent(
            actor, agent.workspace_facts, driven_by_server=False, agent=agent.ref
        )
        return "sdk"
    if body.sdk:
        raise BadRequest(
            f"agent {agent.ref} has a harness, so evalkit calls it: run it with `evalkit run`, "
            "or create a code-driven agent (no --harness-url) for run_experiment",
            code="harness-agent",
        )
    # A personal harness agent is driven by its owner's CLI, which sends the capabilities
    # it read from the harness; a start without them (the web UI, a script) asks the
    # server to drive it.
    personal = agent.workspace_kind == "personal"
    by_server = not personal or body.capabilities is None
    access.require_run_agent(
        actor, agent.workspace_facts, driven_by_server=by_server, agent=agent.ref
    )
    return "cli" if personal else "server"


async def _capabilities(
    conn: Conn,
    agent: AgentRow,
    driver: str,
    body: wire.ExperimentCreate,
    settings: Settings,
    http: Http1Client,
) -> Capabilities:
    if driver == "sdk":
        return code_driven_capabilities(agent.provides)
    if driver == "cli":
        assert body.capabilities is not None  # _driver_for refused a start without them
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
