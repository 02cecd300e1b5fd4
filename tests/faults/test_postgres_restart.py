"""Issue 11: PostgreSQL restarted under load.

A cluster of the test's own (the session's shared one serves the other tests), the real
``evalkit server`` and ``evalkit worker`` in subprocesses, reference harnesses on loopback
playing agents, experiments in flight and OTLP exports going. The cluster is stopped
(``pg_ctl stop -m fast``: sessions ended, transactions rolled back) and started again on
the same data directory and socket, once or twice, while all that runs.

The promises: nobody restarts the edge or the worker (the same processes serve on); new
requests succeed again within a bounded time of the database coming back; every experiment
finishes with each run in one terminal state; no procrastinate job is left failed or
undone; every span whose export was acknowledged is stored, once.

``EVALKIT_FAULT_SEED=N`` replays the experiments, the ids and the restart schedule (the
machine's timing still varies, so a replay lands close to, not exactly on, the same
moments).
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from evalkit import db as evalkit_db
from evalkit.auth.secrets import generate_key
from evalkit.config import Settings
from evalkit.db import Database
from evalkit.errors import DatabaseError
from evalkit.harness.reference import Behaviour, ReferenceHarness
from evalkit.otel.mapping import load_starter
from evalkit.sql import migrate
from tests.faults.processes import EdgeProcess, RestartableCluster, fault_seed, query, says
from tests.faults.spans import (
    ExporterLog,
    SeededIds,
    Senders,
    exporter,
    keys,
    make_batches,
    stored_counts,
    traced_agent,
)
from tests.faults.test_worker_kill import (
    TERMINAL,
    WorkerProcess,
    dev_workspace,
    jobs_dump,
    live_runs,
    start_experiment,
    wait_all_finished,
    wait_no_advance_jobs,
)
from tests.integration.datasets_helpers import admin_api
from tests.integration.otel_helpers import agent_session, mint
from tests.integration.runs_helpers import ARITHMETIC, api, create_agent, fast_engine, until

RECOVERY_BOUND = 15.0
"""Seconds after the database is back within which the edge must serve again."""
AGENTS = {
    # name: (harness behaviour, agent settings)
    "quick": (Behaviour(run_seconds=0.3), {"max_concurrent_runs": 4}),
    "slow": (Behaviour(run_seconds=3.0), {"max_concurrent_runs": 3}),
}
TRACED = "traced"
"""An agent whose trajectories come from its spans (a settle job per run), sent by
:class:`TraceFeeder` for each run its harness starts."""
SETTLE = {"EVALKIT_OTEL_SETTLE_SECONDS": "0.5"}


def engine_env(settings: Settings) -> dict[str, str]:
    """The EVALKIT_* variables that give a subprocess ``fast_engine``'s settings."""
    worker = settings.worker
    return {
        "EVALKIT_EGRESS_ALLOW_PRIVATE": "true",
        "EVALKIT_WORKER_CONCURRENCY": str(worker.concurrency),
        "EVALKIT_WORKER_HARNESS_TIMEOUT_SECONDS": str(worker.harness_timeout_seconds),
        "EVALKIT_WORKER_HARNESS_ATTEMPTS": str(worker.harness_attempts),
        "EVALKIT_WORKER_RETRY_BACKOFF_SECONDS": str(worker.retry_backoff_seconds),
        "EVALKIT_WORKER_STALLED_SECONDS": str(worker.stalled_seconds),
    }


class TraceFeeder:
    """Plays the traced agent's instrumentation: for each run its harness starts, an agent
    turn's spans with the harness run id as the session id, exported through the real
    exporter, and sent again until acknowledged."""

    def __init__(self, ref: ReferenceHarness, url: str, token: str, seed: int) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        self.ref = ref
        self.exporter = exporter(url, token)
        self.memory = InMemorySpanExporter()
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": "traced-agent"}),
            id_generator=SeededIds(random.Random(f"{seed}-traced")),
        )
        self.provider.add_span_processor(SimpleSpanProcessor(self.memory))
        self.tracer = self.provider.get_tracer("evalkit-fault-tests")
        self.sent: set[str] = set()
        self.failed = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> TraceFeeder:
        self.thread.start()
        return self

    def _run(self) -> None:
        from opentelemetry.sdk.trace.export import SpanExportResult

        pending: dict[str, list[Any]] = {}
        while not self.stop.is_set():
            for evalkit_id, run in list(self.ref.state.by_evalkit_id.items()):
                if evalkit_id in self.sent:
                    continue
                if evalkit_id not in pending:
                    agent_session(self.tracer, run.id)
                    pending[evalkit_id] = list(self.memory.get_finished_spans())
                    self.memory.clear()
                if self.exporter.export(pending[evalkit_id]) is SpanExportResult.SUCCESS:
                    self.sent.add(evalkit_id)
                else:
                    self.failed += 1
            self.stop.wait(0.05)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(timeout=60)
        self.exporter.shutdown()
        self.provider.shutdown()


def states(db_url: str) -> Counter[str]:
    """How many live runs are in each state now."""
    return Counter(row[2] for row in live_runs(db_url))


def wait_queue_idle(db_url: str, timeout: float, context: str) -> None:
    """Until no job is running and none is due (a job scheduled later, as a periodic one,
    may wait): what the restarts interrupted has been run again or let go."""
    deadline = time.monotonic() + timeout
    while True:
        left = query(
            db_url,
            "SELECT id, task_name, status, args, attempts FROM procrastinate_jobs "
            "WHERE status = 'doing' OR (status = 'todo' AND coalesce(scheduled_at, now()) "
            "< now() - interval '5 seconds') ORDER BY id",
        )
        if not left:
            return
        if time.monotonic() > deadline:
            raise AssertionError(says(context, f"jobs left after {timeout:.0f} s", left))
        time.sleep(0.25)


class Probe:
    """Requests to the edge that need the database (an authenticated read), noting when
    each answered and how."""

    def __init__(self, url: str, token: str, path: str) -> None:
        self.client = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=10
        )
        self.path = path

    def once(self) -> int | str:
        try:
            return self.client.get(self.path).status_code
        except httpx.TransportError as exc:
            return type(exc).__name__

    def until_served(self, since: float, bound: float) -> tuple[float, Counter[Any]]:
        """Probe until a request succeeds and the next ten do too; returns the seconds from
        ``since`` to the first of those successes and what the failures were."""
        failures: Counter[Any] = Counter()
        streak_began: float | None = None
        streak = 0
        while True:
            now = time.monotonic()
            outcome = self.once()
            if outcome == 200:
                streak_began = streak_began or now
                streak += 1
                if streak >= 10:
                    return streak_began - since, failures
            else:
                failures[outcome] += 1
                streak_began, streak = None, 0
            if time.monotonic() - since > bound:
                raise AssertionError(
                    f"the edge did not serve {self.path} again within {bound:.0f} s of the "
                    f"database coming back; failures: {dict(failures)}"
                )
            time.sleep(0.05)

    def close(self) -> None:
        self.client.close()


@pytest.mark.slow
def test_postgres_restarted_under_load(tmp_path: Path, cli):
    seed = fault_seed()
    rng = random.Random(seed)
    context = f"fault seed {seed} (EVALKIT_FAULT_SEED={seed} replays the restarts)"
    began = time.monotonic()
    cluster = RestartableCluster()
    harnesses: dict[str, ReferenceHarness] = {}
    edge: EdgeProcess | None = None
    worker: WorkerProcess | None = None
    senders: Senders | None = None
    feeder: TraceFeeder | None = None
    probe: Probe | None = None
    try:
        db_url = cluster.start()
        migrate.upgrade(db_url)

        settings = Settings()
        fast_engine(settings)
        edge = EdgeProcess(db_url, tmp_path, **engine_env(settings), **SETTLE)
        settings.encryption_key = edge.key
        settings.server.port = edge.port
        worker = WorkerProcess(db_url, settings, tmp_path, **SETTLE)
        edge.start()
        worker.start()
        edge.wait_ready(context)
        worker.wait_registered(context)

        token = dev_workspace(edge, cli, tmp_path)  # type: ignore[arg-type]
        for name, (behaviour, agent_settings) in AGENTS.items():
            harnesses[name] = ReferenceHarness(behaviour).start()
            create_agent(edge, token, "dev", name, harnesses[name].url, **agent_settings)
        harnesses[TRACED] = ReferenceHarness(
            Behaviour(run_seconds=1.0, without=frozenset({"trajectory"}))
        ).start()
        admin_api(
            edge,
            token,
            "POST",
            "/api/workspaces/dev/agents",
            json={
                "name": TRACED,
                "harness_url": harnesses[TRACED].url,
                "trajectory_source": "otel",
                "mapping": load_starter("openinference"),
                "poll_interval": 0.05,
                "trajectory_wait": 60,
                "max_concurrent_runs": 3,
            },
        )
        feeder = TraceFeeder(
            harnesses[TRACED], edge.url, mint(edge, token, "dev", TRACED), seed
        ).start()
        span_token = traced_agent(edge, token, "dev", "load")
        batches = make_batches(rng, 4000, 50)

        experiments: dict[int, str] = {}
        for agent in ["quick", "slow", TRACED] * 2:
            body: dict[str, Any] = {"repetitions": rng.choice([1, 2, 3])}
            cases = rng.sample(sorted(ARITHMETIC), rng.randint(1, 3))
            if len(cases) < len(ARITHMETIC):
                body["case_ids"] = cases
            experiments[start_experiment(edge, token, f"{agent}@dev", **body)] = agent  # type: ignore[arg-type]
        probe = Probe(edge.url, token, f"/api/experiments/{min(experiments)}")

        with ExporterLog() as exporter_log:
            senders = Senders(edge.url, span_token, batches, threads=2).start()
            until(lambda: "running" in states(db_url), timeout=60, what="a running run")
            restarts: list[dict[str, Any]] = []
            for _ in range(rng.randint(1, 2)):
                time.sleep(rng.uniform(0.5, 2.0))
                live = states(db_url)
                down_for = rng.uniform(1.0, 5.0)
                stopping = time.monotonic()
                cluster.stop_fast()
                stopped = time.monotonic()
                time.sleep(down_for)
                cluster.start_again()
                up = time.monotonic()
                served_after, failures = probe.until_served(up, RECOVERY_BOUND)
                restarts.append(
                    {
                        "live": dict(live),
                        "stop_took": round(stopped - stopping, 1),
                        "down_for": round(down_for, 1),
                        "start_took": round(up - stopped - down_for, 1),
                        "served_after": round(served_after, 2),
                        "failures": dict(failures),
                    }
                )
            last_up = up
            context += f"; restarts: {restarts}"
            time.sleep(1.0)
            acked, given_up = senders.finish()

        assert edge.alive(), says(context, "the edge exited", edge.tail())
        wait_all_finished(db_url, worker, 180, context)
        feeder.finish()
        settled = time.monotonic() - last_up
        wait_no_advance_jobs(db_url, 90, context)
        wait_queue_idle(db_url, 60, context)
        assert worker.proc is not None and worker.proc.poll() is None, says(
            context, "the worker exited", worker.tail()
        )
        assert (edge.starts, worker.starts) == (1, 1), context

        # ---- experiments finished; every run in one terminal state, done for these agents
        for experiment_id, agent in experiments.items():
            detail = api(edge, token, "GET", f"/api/experiments/{experiment_id}").json()
            assert detail["status"] == "finished", says(context, detail)
            assert set(detail["by_state"]) <= set(TERMINAL), says(context, detail)
            assert detail["by_state"] == {"done": detail["runs"]}, says(context, agent, detail)
        runs = query(
            db_url,
            "SELECT r.id, r.state, r.harness_status, t.run_id IS NOT NULL FROM runs r "
            "LEFT JOIN trajectories t ON t.run_id = r.id ORDER BY r.id",
        )
        wrong = [r for r in runs if r[1:] != ("done", "succeeded", True)]
        assert not wrong, says(context, "runs not done with a trajectory", wrong)
        created = sum(ref.counters.runs_created for ref in harnesses.values())
        assert created == len(runs), says(context, "harness runs created vs evalkit runs")

        # ---- the queue: nothing failed, nothing left
        failed = query(
            db_url,
            "SELECT id, task_name, args, attempts FROM procrastinate_jobs WHERE status = 'failed'",
        )
        assert not failed, says(context, failed, jobs_dump(db_url))

        # ---- spans: every acknowledged one stored, once
        stored = stored_counts(db_url, "load")
        exported = len(acked) + len(given_up)
        missing = keys([batches[i] for i in acked]) - set(stored)
        assert not missing, says(context, f"{len(missing)} acknowledged spans not stored")
        twice = {k: n for k, n in stored.items() if n > 1}
        assert not twice, says(context, "spans stored more than once", twice)
        assert set(stored) <= keys(batches[:exported]), context

        print(
            f"\n{context}\n{len(runs)} runs in {len(experiments)} experiments; "
            f"{cluster.restarts} restarts of PostgreSQL; the worker started its job loop again "
            f"{worker.logs().count('starting it again')} times; experiments finished "
            f"{settled:.1f} s after the last restart; {exported} exports ({len(acked)} "
            f"acknowledged, exporter retries {exporter_log.retries}, given up "
            f"{len(given_up)}; why: {dict(exporter_log.gave_up)}); traced runs' exports "
            f"{len(feeder.sent)} acknowledged after {feeder.failed} failed; "
            f"{time.monotonic() - began:.1f} s in all"
        )
    except httpx.TransportError as exc:
        state = "gone" if edge is None else "running" if edge.alive() else "exited"
        code = None if edge is None or edge.proc is None else edge.proc.returncode
        raise AssertionError(
            says(
                context,
                f"the edge did not answer ({exc!r}); its process: {state} ({code})",
                edge.tail() if edge else "",
            )
        ) from exc
    finally:
        if senders is not None:
            senders.stop.set()
        if feeder is not None:
            feeder.stop.set()
        if probe is not None:
            probe.close()
        if worker is not None:
            worker.stop()
        if edge is not None:
            edge.stop()
        for ref in harnesses.values():
            ref.stop()
        cluster.stop()


# --------------------------------------------------------------------------- regressions


async def outcomes_after_idle_connections_die(database_url: str) -> list[str]:
    """Four pooled connections used, then idle; every one of them ended by the database (as
    when PostgreSQL restarts); then six requests one after another: each one's outcome."""
    db = Database(database_url, min_size=4, max_size=4)
    await db.open()
    try:

        async def use() -> None:
            async with db.connection() as conn:
                await conn.one("schema_revision_get")
                await asyncio.sleep(0.1)

        await asyncio.gather(*[use() for _ in range(4)])  # four live connections, idle now
        with psycopg.connect(database_url, autocommit=True) as side:
            ended = side.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
        assert ended == (4,)
        outcomes = []
        for _ in range(6):
            try:
                async with db.connection() as conn:
                    await conn.one("schema_revision_get")
                outcomes.append("ok")
            except DatabaseError:
                outcomes.append("failed")
            await asyncio.sleep(0.05)
        return outcomes
    finally:
        await db.close()


async def test_dead_pool_connections_cost_one_failed_request(database_url):
    """Every idle connection of the pool dies at once, just after its last use (as when
    PostgreSQL restarts): the first statement on one fails, and the pool then replaces the
    others before they are handed out, instead of failing one request for each of them."""
    outcomes = await outcomes_after_idle_connections_die(database_url)
    assert outcomes == ["failed"] + ["ok"] * 5, outcomes


async def test_a_connection_that_died_while_idle_fails_no_request(database_url, monkeypatch):
    """A pooled connection unused for IDLE_CHECK_SECONDS is tested before it is handed out,
    so the connections that died while the edge was idle (PostgreSQL restarted in between)
    fail no request at all. That matters with several edge processes: each has its own
    pool, and the first request to reach each would otherwise fail (the restart fault
    test's request after the restart did, on the process its probe had not reached)."""
    monkeypatch.setattr(evalkit_db, "IDLE_CHECK_SECONDS", 0.0)  # every connection is idle
    outcomes = await outcomes_after_idle_connections_die(database_url)
    assert outcomes == ["ok"] * 6, outcomes


async def test_begin_on_a_dead_connection_is_a_database_error(database_url):
    """A transaction's BEGIN on a pooled connection that died is a DatabaseError (the
    collector answers 503 and the exporter retries), not a raw driver error (a 500, which
    the exporter does not retry: the spans were lost)."""
    db = Database(database_url, min_size=1, max_size=1)
    await db.open()
    try:
        async with db.connection() as conn:
            await conn.one("schema_revision_get")
        with psycopg.connect(database_url, autocommit=True) as side:
            side.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        with pytest.raises(DatabaseError, match="did not answer"):
            async with db.transaction() as conn:
                await conn.one("schema_revision_get")
        async with db.transaction() as conn:  # and the pool has a live one again
            assert await conn.one("schema_revision_get")
    finally:
        await db.close()


def test_every_job_runs_again_after_a_database_error():
    """A database restart under a job ends it with a DatabaseError (or procrastinate's
    ConnectorException when it queues a job): each of evalkit's jobs runs again rather
    than stay failed (settle_session and the periodic jobs had no retry)."""
    from procrastinate.exceptions import ConnectorException
    from procrastinate.jobs import Job

    from evalkit.jobs.app import load_tasks

    tasks = {
        n: t
        for n, t in load_tasks().tasks.items()
        if not n.startswith(("builtin:", "procrastinate."))
    }
    assert {"settle_session", "sweep_runs", "orphan_traces", "fire_schedules"} <= set(tasks)
    lost = DatabaseError("the database did not answer (server closed the connection)")
    for name, task in tasks.items():
        job = Job(queue="default", lock=None, queueing_lock=None, task_name=name, attempts=1)
        for error in (lost, ConnectorException("Database error.")):
            assert task.get_retry_exception(exception=error, job=job) is not None, (name, error)


def test_worker_comes_back_after_the_database_restarts(tmp_path: Path):
    """Procrastinate stops its worker when the listener cannot reconnect; ``evalkit
    worker`` starts it again (the process does not exit), and jobs queued after the
    restart run."""
    cluster = RestartableCluster()
    worker: WorkerProcess | None = None
    try:
        db_url = cluster.start()
        migrate.upgrade(db_url)
        settings = Settings()
        fast_engine(settings)
        settings.encryption_key = generate_key()
        worker = WorkerProcess(db_url, settings, tmp_path)
        worker.start()
        worker.wait_registered("before the restart")
        (first,) = query(db_url, "SELECT max(id) FROM procrastinate_workers")[0]
        cluster.stop_fast()
        time.sleep(1.0)
        cluster.start_again()
        deadline = time.monotonic() + 60
        while not query(db_url, "SELECT 1 FROM procrastinate_workers WHERE id > %s", (first,)):
            assert worker.proc is not None and worker.proc.poll() is None, worker.tail()
            assert time.monotonic() < deadline, "no worker registered again\n" + worker.tail()
            time.sleep(0.1)
        assert "starting it again" in worker.logs(), worker.tail()
        # The stopped worker unregistered (or was unregistered on the way back).
        workers = [row[0] for row in query(db_url, "SELECT id FROM procrastinate_workers")]
        assert first not in workers, (first, workers)

        job = defer_job(db_url, "delete_stale_login_tokens", timestamp=0)
        deadline = time.monotonic() + 30
        while query(db_url, "SELECT 1 FROM procrastinate_jobs WHERE id = %s", (job,)):
            assert time.monotonic() < deadline, jobs_dump(db_url) + "\n" + worker.tail()
            time.sleep(0.1)
    finally:
        if worker is not None:
            worker.stop()
        cluster.stop()


def defer_job(db_url: str, task: str, **args: Any) -> int:
    """Queue a job through procrastinate's own defer function, from outside the worker."""
    ((job_id,),) = query(
        db_url,
        "SELECT unnest(procrastinate_defer_jobs_v1(ARRAY[ROW('default', %s, 0, NULL, NULL, "
        "%s::jsonb, NULL)::procrastinate_job_to_defer_v1]))",
        (task, json.dumps(args)),
    )
    return int(job_id)
