"""The server's driver of the run state machine: procrastinate jobs.

``dispatch_agent`` claims free slots of an agent (queued -> starting) and defers one
``advance_run`` per claimed run. ``advance_run`` takes steps of its run until the run is
terminal or must wait (then it defers itself for later and ends); when its run leaves the
agent's slot it claims the next queued run and goes on with that one, so a busy agent
keeps ``max_concurrent_runs`` runs moving without a job per transition.

Every step is recorded through :func:`evalkit.runs.engine.record`, by compare-and-set: a
job that a dead worker left half done is simply run again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import msgspec
from procrastinate import JobContext, RetryStrategy

from evalkit.config import public_url
from evalkit.db import Conn, Database
from evalkit.harness.client import HarnessClient
from evalkit.jobs import procrastinate_adapter, queue, runtime
from evalkit.jobs.app import DATABASE_RETRY, app
from evalkit.jobs.batch import Batcher
from evalkit.model.harness import Capabilities
from evalkit.model.runs import IN_FLIGHT, TERMINAL, ExperimentFacts, LoadedRun, RunWork, Transition
from evalkit.runs import engine, machine
from evalkit.scoring.run import score_run
from evalkit.store import runs as store

log = logging.getLogger("evalkit.runs")

JOB_ATTEMPTS = 10
JOB_RETRY = RetryStrategy(max_attempts=JOB_ATTEMPTS, exponential_wait=1)
"""Retries of a job that raised (a database hiccup); harness errors are the machine's."""


@app.task(name=queue.DISPATCH_AGENT, retry=JOB_RETRY, pass_context=True)
async def dispatch_agent(context: JobContext, agent_id: int) -> int:
    """Start as many queued runs of the agent as it has free slots."""
    async with runtime.database().connection() as conn:
        return len(await engine.claim(conn, agent_id, limit=1000))


@app.periodic(cron="*/1 * * * *", periodic_id="sweep-runs")
@app.task(
    name=queue.SWEEP_RUNS, queueing_lock=queue.SWEEP_RUNS, retry=DATABASE_RETRY, pass_context=True
)
async def sweep_runs(context: JobContext, timestamp: int) -> int:
    """The safety net, once a minute: start queued runs whose agent has free slots, and
    queue a step for live runs that no job will move (their worker died between claiming
    them and queueing their next step)."""
    settings = runtime.settings()
    idle = 2 * settings.worker.stalled_seconds + settings.worker.harness_timeout_seconds
    moved = 0
    async with runtime.database().connection() as conn:
        for agent_id in await store.agents_with_queued_runs(conn):
            moved += len(await engine.claim(conn, agent_id, limit=1000))
        for experiment_id in await store.open_experiments_without_live_runs(conn):
            log.warning("experiment %s had no live run but was still open", experiment_id)
            await store.finish_experiment_if_done(conn, experiment_id)
            moved += 1
        moved += await queue_orphans(conn, idle_seconds=idle)
    return moved


RESTART_SWEPT_STATES = frozenset({"starting", "running", "stopping", "collecting"})
"""The states :func:`queue_left_behind` moves at once. What a second job's step repeats in
them is a harness call (a start carries its idempotency key); a run in ``scoring`` is
left to the once-a-minute sweep, since a repeated step there calls the evaluators again."""


async def queue_left_behind(db: Database) -> int:
    """At a worker's start: queue a step for every live run that no job holds, however
    short its idle time. A dead worker leaves such runs when it was driving a run its job
    had claimed after the job's own run (see :func:`_drive`); waiting for the sweep's idle
    threshold would leave them for minutes. A run another live worker drives the same way
    may get a second job: its steps are compare-and-set, so one of the two stops at once."""
    async with db.connection() as conn:
        return await queue_orphans(conn, idle_seconds=0, states=RESTART_SWEPT_STATES)


async def queue_orphans(
    conn: Conn, *, idle_seconds: float, states: frozenset[str] | None = None
) -> int:
    """Queue a step for the live server-driven runs (in ``states``, default all) idle for
    ``idle_seconds`` that no job waits or runs for; how many."""
    idle_runs = await store.orphaned_runs(conn, idle_seconds)
    if states is not None:
        idle_runs = [run for run in idle_runs if run["state"] in states]
    orphans = await procrastinate_adapter.without_live_jobs(conn, idle_runs)
    for run in orphans:
        log.warning("run %s (%s) had no job to move it; queueing one", run["id"], run["state"])
        if run["state"] == "collecting" and run["trajectory_source"] == "otel":
            await queue.defer_settle(None, run["agent_id"], run["session_id"], after=0)
        else:
            await queue.defer_advance(None, run["id"])
    return len(orphans)


@app.task(name=queue.ADVANCE_RUN, retry=JOB_RETRY, pass_context=True)
async def advance_run(context: JobContext, run_id: int) -> None:
    db = runtime.database()
    driving = run_id
    try:
        async with db.connection() as conn:
            loaded = await store.load_work(conn, [run_id])
        next_run = loaded[0] if loaded else None
        while next_run is not None:
            driving = next_run.work.run_id
            next_run = await _drive(db, next_run)
    except Exception as exc:
        if (context.job.attempts or 0) + 1 < JOB_ATTEMPTS:
            raise
        # The last attempt: a run must not stay live with no job to move it.
        log.exception("run %s: giving up after %s job attempts", driving, JOB_ATTEMPTS)
        async with db.connection() as conn:
            [run] = await store.load_work(conn, [driving])
            error = f"evalkit could not advance the run: {exc}"
            await engine.give_up(conn, driving, error, run.facts)


async def _drive(db: Database, run: LoadedRun) -> LoadedRun | None:
    """Step one run as far as it goes now; return the next run to drive, if a slot freed.

    A connection is taken for each statement, never held across a harness call: a slow
    harness must not starve the other jobs of the pool."""
    work = run.work
    if work.state in TERMINAL:
        # Closing the experiment may be the step a crash lost: it is cheap to repeat.
        await _close_if_done(db, work.experiment_id)
        return None
    if work.state == "queued":
        return None
    env = _env(run)
    if env.capabilities.accepts.file_urls:
        settings = runtime.settings()
        work = store.sign_files(work, public_url(settings), settings.encryption_key or "")
    freed = False
    held: list[Transition] = []
    while work.state not in TERMINAL:
        result = await machine.step(work, env)
        if result.handoff:
            break  # the settle job takes it from here (see evalkit.jobs.settle)
        if result.transition is not None:
            after = machine.advance(work, result.transition)
            held.append(result.transition)
            if result.wait == 0 and machine.fetches_trajectory_next(after, env):
                # Recorded with the fetch's step, which always follows: a crash before then
                # leaves the run where it was, and starting it again is idempotent on the
                # run's id.
                work = after
                continue
            taken = await _record(db, held, run.facts)
            if not taken:
                return None  # another driver moved it on: that one owns it now
            before, work = held[0].from_state, after
            for end in taken[len(held) :]:
                work = machine.advance(work, end)
            held = []
            freed = freed or (before in IN_FLIGHT and work.state not in IN_FLIGHT)
        if result.wait > 0 and work.state not in TERMINAL:
            await queue.defer_advance(None, work.run_id, after=result.wait)
            break
    next_run = await _claim_next(db, run.facts) if freed else None
    if work.state in TERMINAL and not _keeps_open(next_run, run.facts):
        # After the commit that ended the run: a check inside its transaction could not see
        # a run another job ended meanwhile (nor that job's check this one).
        await _close_if_done(db, run.facts.experiment_id)
    return next_run


async def _close_if_done(db: Database, experiment_id: int) -> None:
    async with db.connection() as conn:
        await engine.close_after_commit(conn, experiment_id)


async def _claim_next(db: Database, facts: ExperimentFacts) -> LoadedRun | None:
    """A queued run of the agent for the slot this job's run freed (None: none is queued),
    claimed with those of the other jobs whose runs of the agent freed one now."""
    return await runtime.kept("next runs", lambda: Batcher(_claim_runs)).submit(facts.agent_id, db)


async def _claim_runs(agent_id: int, asked: Sequence[Database]) -> list[LoadedRun | None]:
    """One claim for as many runs as slots were freed (each caller asks with the worker's
    database); a run for each caller, in order, while queued runs last."""
    async with asked[0].connection() as conn:
        claimed = await store.claim_runs(conn, agent_id, limit=len(asked), actor=engine.WORKER)
        loaded: list[LoadedRun | None] = (
            list(await store.load_work(conn, claimed)) if claimed else []
        )
    return loaded + [None] * (len(asked) - len(loaded))


def _keeps_open(next_run: LoadedRun | None, facts: ExperimentFacts) -> bool:
    """Whether ``next_run``, just claimed, keeps the ended run's experiment open: it is a
    live run of it, and whoever ends it checks again."""
    return next_run is not None and next_run.facts.experiment_id == facts.experiment_id


async def _record(
    db: Database, steps: list[Transition], facts: ExperimentFacts
) -> list[Transition]:
    """Record ``steps``, consecutive steps of one run, by one statement; the steps recorded
    (none: another driver had moved the run on). A run that ended here leaves its
    experiment's close to the caller.

    A step to scoring goes with the run's scores and its step to done or failed, in the
    same transaction, when nothing its case selects calls outside evalkit
    (:func:`evalkit.runs.engine.score_in_place`): a few statements instead of a scoring
    step's half a dozen transactions. Otherwise this job scores the run next. The runs of
    the experiment that reach scoring at the same moment share that transaction."""
    if steps[-1].to_state != "scoring":
        async with db.connection() as conn:
            applied = await engine.record_chain(
                conn, steps, facts, actor=engine.WORKER, scores_itself=True
            )
        return steps if applied else []
    finishing = runtime.kept("finishing runs", lambda: Batcher(_finish_runs))
    return await finishing.submit(facts.experiment_id, (db, steps, facts))


Finishing = tuple[Database, list[Transition], ExperimentFacts]
"""A run's steps to scoring, to record with its scores (see :func:`_record`)."""


async def _finish_runs(experiment_id: int, asked: Sequence[Finishing]) -> list[list[Transition]]:
    """Record the chains to scoring of runs of one experiment, score those that need nothing
    outside evalkit and end them, in one transaction; for each, the steps recorded."""
    db, facts = asked[0][0], asked[0][2]
    chains = [steps for _, steps, _ in asked]
    async with db.pipelined_transaction() as conn:
        applied = await engine.record_chains(
            conn, chains, facts, actor=engine.WORKER, scores_itself=True
        )
        reached = [chain[-1] for chain, done in zip(chains, applied, strict=True) if done]
        ends = await engine.score_in_place(
            conn, reached, facts, actor=engine.WORKER, queue_others=False
        )
    end_of = {end.run_id: end for end in ends}
    return [
        [*chain, *([end_of[chain[-1].run_id]] if chain[-1].run_id in end_of else [])]
        if done
        else []
        for chain, done in zip(chains, applied, strict=True)
    ]


def _env(run: LoadedRun) -> machine.Env:
    settings = runtime.settings()
    key = runtime.agent_key(run.facts.agent_id, run.api_key)
    return machine.Env(
        harness=HarnessClient(run.harness_url or "", key, runtime.harness_http()),
        capabilities=msgspec.convert(run.capabilities or {}, Capabilities),
        fixture_bytes=runtime.fixture_bytes,
        attempts=settings.worker.harness_attempts,
        backoff=settings.worker.retry_backoff_seconds,
        score=_score,
    )


async def _score(work: RunWork) -> None:
    """Score the run's current round (replays insert nothing twice)."""
    await score_run(
        runtime.database(), work.run_id, settings=runtime.settings(), http=runtime.http_client()
    )
