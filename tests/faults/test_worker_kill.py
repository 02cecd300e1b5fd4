"""Issue 4: a worker killed with SIGKILL at any moment, then started again, leaves every run
in exactly one terminal state, with no duplicate side effects.

The edge runs in this process without a worker; the worker is the real ``evalkit worker``
in a subprocess, killed with SIGKILL at random moments and started again as a supervisor
would. Reference harnesses on loopback play the agents and count what they received; a
remote evaluator on loopback scores the runs. The soak aims kills at each phase of a run
(start, poll, stop grace, settle, scoring) and records which phases each kill landed in:
those of the requests the worker had sent and not heard back from (``tests.faults.phases``).

``EVALKIT_FAULT_SEED=N`` replays a schedule of kills (the machine's timing still varies,
so a replay lands close to, not exactly on, the same moments).
"""

from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from pprint import pformat
from typing import Any

import psycopg
import pytest

from evalkit.auth.secrets import generate_key
from evalkit.config import Settings
from evalkit.harness.reference import Behaviour, ReferenceHarness
from tests.conftest import ADMIN_PASSWORD, RunningServer, start_server
from tests.faults.phases import PHASES, Open, Requests, SlowEvaluator, watch
from tests.faults.processes import EVALKIT, fault_seed, query, says
from tests.integration.datasets_helpers import Repo, admin_api, simple_case
from tests.integration.runs_helpers import (
    ARITHMETIC,
    api,
    create_agent,
    fast_engine,
    login_token,
    until,
    write_suite,
)

TERMINAL = ("done", "failed", "errored")
STALLED_SECONDS = 2.0
"""worker.stalled_seconds of the edge and every worker (``fast_engine``)."""
HARNESS_TIMEOUT = 2.0
"""worker.harness_timeout_seconds of the edge and every worker (``fast_engine``)."""
HANGING_START = {"EVALKIT_WORKER_HARNESS_TIMEOUT_SECONDS": "5"}
"""Long enough that a hanging POST /runs is still open when the kill lands."""


class WorkerProcess:
    """``evalkit worker`` in a subprocess, configured like the edge through EVALKIT_* vars.
    Each start is a new process with its own log file under ``log_dir``."""

    def __init__(self, db_url: str, settings: Settings, log_dir: Path, **overrides: str) -> None:
        self.db_url = db_url
        self.log_dir = log_dir
        worker = settings.worker
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("EVALKIT_")}
        self.env.update(
            EVALKIT_DATABASE_URL=db_url,
            EVALKIT_ENCRYPTION_KEY=settings.encryption_key or "",
            EVALKIT_DATA_DIR=str(log_dir / "worker-data"),
            EVALKIT_SERVER_HOST=settings.server.host,
            EVALKIT_SERVER_PORT=str(settings.server.port),
            EVALKIT_EGRESS_ALLOW_PRIVATE="true" if settings.egress.allow_private else "false",
            EVALKIT_WORKER_CONCURRENCY=str(worker.concurrency),
            EVALKIT_WORKER_HARNESS_TIMEOUT_SECONDS=str(worker.harness_timeout_seconds),
            EVALKIT_WORKER_HARNESS_ATTEMPTS=str(worker.harness_attempts),
            EVALKIT_WORKER_RETRY_BACKOFF_SECONDS=str(worker.retry_backoff_seconds),
            EVALKIT_WORKER_STALLED_SECONDS=str(worker.stalled_seconds),
        )
        self.env.update(overrides)
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._after_worker_id = 0

    @property
    def log(self) -> Path:
        return self.log_dir / f"worker-{self.starts}.log"

    def start(self) -> None:
        self.starts += 1
        (row,) = query(self.db_url, "SELECT coalesce(max(id), 0) FROM procrastinate_workers")
        self._after_worker_id = row[0]
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [EVALKIT, "worker"],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def wait_registered(self, context: str = "", timeout: float = 90) -> None:
        """Until this process's procrastinate worker has registered (it takes jobs then)."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"{context}: worker start {self.starts} exited with "
                    f"{self.proc.returncode}:\n{self.tail()}"
                )
            rows = query(
                self.db_url,
                "SELECT id FROM procrastinate_workers WHERE id > %s",
                (self._after_worker_id,),
            )
            if rows:
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{context}: worker start {self.starts} did not register:\n{self.tail()}"
                )
            time.sleep(0.05)

    def doing(self) -> list[str]:
        """The jobs this process is running now (not those a killed one left behind)."""
        rows = query(
            self.db_url,
            "SELECT task_name FROM procrastinate_jobs WHERE status = 'doing' AND worker_id > %s",
            (self._after_worker_id,),
        )
        return [row[0] for row in rows]

    def doing_runs(self) -> list[int]:
        """The runs of the ``advance_run`` jobs this process is running now."""
        rows = query(
            self.db_url,
            "SELECT (args->>'run_id')::bigint FROM procrastinate_jobs WHERE status = 'doing' "
            "AND task_name = 'advance_run' AND worker_id > %s",
            (self._after_worker_id,),
        )
        return [row[0] for row in rows]

    def owns(self, worker_id: int | None) -> bool:
        """Whether ``worker_id`` is this process's procrastinate worker (its latest start)."""
        return worker_id is not None and worker_id > self._after_worker_id

    def kill(self) -> float:
        """SIGKILL, then wait for the process to end; returns when the signal was sent."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        signalled = time.monotonic()
        self.proc.wait(timeout=30)
        return signalled

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.kill()

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def logs(self) -> str:
        return "\n".join(
            (self.log_dir / f"worker-{n}.log").read_text(errors="replace")
            for n in range(1, self.starts + 1)
        )


def dev_workspace(edge: RunningServer, cli: Any, tmp_path: Path) -> str:
    """@dev with the finance suite (add, mul, sub) synced; returns the admin's token."""
    token = login_token(edge, "admin", ADMIN_PASSWORD)
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", edge.url)
    cli.monkeypatch.setenv("EVALKIT_TOKEN", token)
    admin_api(edge, token, "POST", "/api/workspaces", json={"name": "dev"})
    synced = cli("sync", str(write_suite(Repo(tmp_path / "repo"))), "--workspace", "dev")
    assert synced.code == 0, synced.err
    return token


def start_experiment(edge: RunningServer, token: str, agent: str, **body: Any) -> int:
    body.setdefault("dataset", "finance@dev")
    r = api(
        edge,
        token,
        "POST",
        "/api/experiments",
        json={"agent": agent, **body},
    )
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def jobs_dump(db_url: str) -> str:
    rows = query(
        db_url,
        "SELECT id, task_name, status, args, attempts, scheduled_at FROM procrastinate_jobs "
        "ORDER BY id",
    )
    return "\n".join(map(str, rows)) or "(no jobs)"


def run_state(db_url: str, run_id: int) -> str:
    ((state,),) = query(db_url, "SELECT state FROM runs WHERE id = %s", (run_id,))
    return str(state)


def blocked_by(db_url: str, holder: int) -> list[int]:
    """Database sessions waiting on a lock that session ``holder`` holds."""
    rows = query(
        db_url,
        "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
        (holder,),
    )
    return [row[0] for row in rows]


def todo_jobs(db_url: str) -> list[tuple[Any, ...]]:
    return query(db_url, "SELECT id, task_name FROM procrastinate_jobs WHERE status = 'todo'")


def live_runs(db_url: str) -> list[tuple[Any, ...]]:
    return query(
        db_url,
        "SELECT r.id, a.name, r.state, r.attempts, r.harness_run_id FROM runs r "
        "JOIN agents a ON a.id = r.agent_id WHERE r.state NOT IN ('done', 'failed', 'errored') "
        "ORDER BY r.id",
    )


class LostFinish(AssertionError):
    """Experiments left ``running`` with every run over: a crash lost the step that closes
    them, and nothing came back to close them."""


def wait_all_finished(db_url: str, worker: WorkerProcess, timeout: float, context: str) -> None:
    """Until every experiment is finished. Raises :class:`LostFinish` as soon as some stay
    running for 20 s with no live run (closing one takes a statement, not 20 s)."""
    deadline = time.monotonic() + timeout
    idle_since: float | None = None
    while unfinished := query(db_url, "SELECT id FROM experiments WHERE status <> 'finished'"):
        lost = query(
            db_url,
            "SELECT e.id FROM experiments e WHERE e.status <> 'finished' AND NOT EXISTS ("
            "SELECT 1 FROM runs r WHERE r.experiment_id = e.id "
            "AND r.state NOT IN ('done', 'failed', 'errored'))",
        )
        idle_since = (idle_since or time.monotonic()) if lost else None
        if idle_since is not None and time.monotonic() - idle_since > 20:
            raise LostFinish(
                f"{context}: experiments {[r[0] for r in lost]} of {len(unfinished)} unfinished "
                f"stay running with every run over\njobs:\n{jobs_dump(db_url)}"
            )
        if worker.proc is not None and worker.proc.poll() is not None:
            raise AssertionError(
                f"{context}: the worker exited with {worker.proc.returncode}:\n{worker.tail()}"
            )
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{context}: experiments not finished after {timeout:.0f} s\n"
                f"live runs (id, agent, state, attempts, harness run):\n"
                + "\n".join(map(str, live_runs(db_url)))
                + f"\njobs:\n{jobs_dump(db_url)}\nworker log:\n{worker.tail(80)}"
            )
        time.sleep(0.25)


def wait_no_advance_jobs(db_url: str, timeout: float, context: str) -> None:
    """Jobs of a killed worker are requeued by the sweep for dead workers (at a worker's
    start, seconds later for a worker that died just before, and once a minute)."""
    deadline = time.monotonic() + timeout
    while True:
        left = query(
            db_url,
            "SELECT id, status, args, attempts FROM procrastinate_jobs "
            "WHERE task_name = 'advance_run' AND status IN ('todo', 'doing') ORDER BY id",
        )
        if not left:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{context}: advance_run jobs left after {timeout:.0f} s: {left}")
        time.sleep(0.25)


# --------------------------------------------------------------------------- the soak


def agents() -> dict[str, tuple[Behaviour, dict[str, Any]]]:
    """name -> (harness behaviour, agent settings). Expected outcomes in ``expect_run``."""
    return {
        "quick": (Behaviour(run_seconds=0.3), {"max_concurrent_runs": 4}),
        # Never finishes by itself: every run times out, is stopped, spends 1 s stopping
        # (the stop grace a kill may land in).
        "stuck": (
            Behaviour(run_seconds=math.inf, stop_seconds=1.0),
            {"max_concurrent_runs": 3, "run_timeout": 0.5, "stop_grace": 5},
        ),
        "failing": (Behaviour(run_seconds=0.2, fail_runs=True), {"max_concurrent_runs": 2}),
        # Starts fine, then answers every poll with HTML: the run errors after 3 attempts.
        "garbled": (Behaviour(run_seconds=0.2, garbage_status=True), {"max_concurrent_runs": 2}),
    }


PLAN = ["quick"] * 8 + ["stuck"] * 5 + ["failing"] * 4 + ["garbled"] * 3
"""The agent of each of the 20 experiments."""


def expect_run(agent: str, run: dict[str, Any], starts: int) -> list[str]:
    """What is wrong with a run of ``agent`` at the end (empty: nothing). ``starts``: how
    many POST /runs the harness received for it."""
    wrong = []
    state, traj = run["state"], run["has_trajectory"]
    # A start repeated after a kill answers the existing run with its current status; when
    # that already says succeeded, the engine never needs the garbled status endpoint.
    garbled_but_restarted_late = (
        agent == "garbled"
        and starts > 1
        and (state, run["harness_status"]) == ("done", "succeeded")
    )
    if agent == "quick" and (state, run["harness_status"], run["timed_out"]) != (
        "done",
        "succeeded",
        False,
    ):
        wrong.append("a quick run must be done, succeeded, not timed out")
    if agent == "stuck" and (state, run["harness_status"], run["timed_out"]) != (
        "done",
        "stopped",
        True,
    ):
        wrong.append("a stuck run must be done, stopped, timed out")
    if agent == "failing" and (state, run["harness_status"]) != ("failed", "failed"):
        wrong.append("a failing run must be failed")
    if agent == "garbled" and state != "errored" and not garbled_but_restarted_late:
        wrong.append("a garbled run must be errored (unless a repeated start said succeeded)")
    if traj != (agent != "garbled" or garbled_but_restarted_late):
        wrong.append("a trajectory row only and always for runs that reached collecting")
    if run["harness_run_id"] is None:
        wrong.append("every run was started on its harness, so it has a harness run id")
    if run["finished_at"] is None:
        wrong.append("a terminal run has finished_at")
    return wrong


HARNESS_DELAYS = {"start": 0.3, "status": 0.15, "stop": 0.4, "trajectory": 0.6}
"""Seconds each harness holds back its answer to the worker (after doing what was asked):
the windows a kill lands in while that request is open. Well under the worker's 2 s
harness timeout."""
EVALUATOR_SECONDS = 0.6
"""How long the remote evaluator ``grade`` takes to answer."""
SCORE_NAMES = {"exact_match", "grade"}
"""The scores every case of the soak's suite asks for, once per run that is scored."""
MIN_KILLS = 4
"""Kills at random moments are added until there are this many."""
AIM_SECONDS = 30.0
"""How long an aimed kill waits for its phase before it lands wherever the worker is."""
PHASE_OF = {
    ("start", "starting"): "start",
    ("status", "running"): "poll",
    ("status", "stopping"): "stop-grace",
    ("stop", "running"): "stop-grace",
    # The step to collecting is recorded with the fetch's step, so during the fetch the
    # run is still where the harness's final status found it; a run taken on again after
    # a kill fetches from collecting.
    ("trajectory", "starting"): "settle",
    ("trajectory", "running"): "settle",
    ("trajectory", "stopping"): "settle",
    ("trajectory", "collecting"): "settle",
    ("evaluate", "scoring"): "scoring",
}
"""(request kind, the run's state) -> the phase a worker waiting for that answer is in. A
request open at a kill counts only when its run is in that state: the worker had not moved
on (a request it gave up on, or one of a second job on the same run, does not count)."""


GRADED_CASE = """\
input:
  question: {question!r}
expected:
  answer: {answer!r}
evaluators:
  exact_match: true
  custom:
    grade: {{}}
"""


def graded_suite(edge: RunningServer, token: str, cli: Any, tmp_path: Path, endpoint: str) -> None:
    """@dev's suite ``graded``: the arithmetic cases (ids ``g-add``...: case ids are unique
    in a workspace), each scored by the built-in exact_match and by the remote evaluator
    ``grade`` at ``endpoint``."""
    admin_api(
        edge,
        token,
        "POST",
        "/api/workspaces/dev/evaluators",
        json={"name": "grade", "endpoint": endpoint},
    )
    repo = Repo(tmp_path / "graded-repo")
    for case_id, (question, answer) in ARITHMETIC.items():
        repo.case("graded", f"g-{case_id}", GRADED_CASE.format(question=question, answer=answer))
    synced = cli("sync", str(repo.suite("graded")), "--workspace", "dev")
    assert synced.code == 0, synced.err


def stop_asked(harnesses: dict[str, ReferenceHarness], req: Open) -> bool:
    """Whether the harness run a status poll asks about was already asked to stop."""
    run = harnesses[req.source].state.runs.get(req.key or "")
    return run is not None and run.stop_final < math.inf


def aimed_at(phase: str, req: Open, harnesses: dict[str, ReferenceHarness], now: float) -> bool:
    """Whether open request ``req`` puts the worker in ``phase`` and stays open a while."""
    held = EVALUATOR_SECONDS if req.kind == "evaluate" else HARNESS_DELAYS[req.kind]
    if req.opened + held - now < 0.05:
        return False
    if req.kind == "status":
        return phase == ("stop-grace" if stop_asked(harnesses, req) else "poll")
    return any(kind == req.kind and p == phase for (kind, _), p in PHASE_OF.items())


def evalkit_run(harnesses: dict[str, ReferenceHarness], req: Open) -> int | None:
    if req.source == "evaluator":
        return int(req.key or 0)
    run = harnesses[req.source].state.runs.get(req.key or "")
    return None if run is None else int(run.evalkit_run_id)


def kill_worker(
    aim: str | None,
    worker: WorkerProcess,
    book: Requests,
    harnesses: dict[str, ReferenceHarness],
    rng: random.Random,
) -> dict[str, Any]:
    """Kill the worker, in ``aim`` (a phase) when it gets there within AIM_SECONDS, else
    (or with no aim) while it runs some job. Returns what the kill hit: ``hit`` lists the
    phases of the requests the worker had open when it died, ``open`` those requests
    (source, kind, evalkit run, the run's state), ``job_runs`` the states of the runs of
    the jobs it was doing, ``in_scoring`` the runs in ``scoring`` then."""
    time.sleep(rng.uniform(0.1, 1.0))
    began = time.monotonic()
    if aim is None:
        busy_until = began + 3
        while not worker.doing() and time.monotonic() < busy_until:
            time.sleep(0.01)
        time.sleep(rng.uniform(0, 0.1))
    else:
        deadline = began + AIM_SECONDS
        while time.monotonic() < deadline:
            now = time.monotonic()
            if any(aimed_at(aim, r, harnesses, now) for r in book.now_open()):
                break
            time.sleep(0.005)
    before = book.now_open()
    moment = time.monotonic()
    signalled = worker.kill()
    # Asked within the worker's harness timeout and still not answered when it died.
    landed = [
        r
        for r in before
        if r.open_at(moment)
        and (r.closed is None or r.closed > signalled)
        and (r.kind == "evaluate" or moment - r.opened < HARNESS_TIMEOUT)
    ]
    doing = worker.doing_runs()  # its jobs stay doing until a worker requeues them
    # Only the worker moves runs, so with it dead the runs stay as it left them.
    states = dict(
        query(
            worker.db_url,
            "SELECT id, state FROM runs WHERE state NOT IN ('queued', 'done', 'failed', 'errored')",
        )
    )
    opened = []
    for req in landed:
        run_id = evalkit_run(harnesses, req)
        opened.append((req.source, req.kind, run_id, states.get(run_id, "?")))
    hit = {PHASE_OF[kind, state] for _, kind, _, state in opened if (kind, state) in PHASE_OF}
    return {
        "aim": aim,
        "hit": sorted(hit),
        "waited": round(moment - began, 2),
        "open": opened,
        "job_runs": dict(Counter(states.get(run_id, "over") for run_id in doing)),
        "in_scoring": sorted(run_id for run_id, state in states.items() if state == "scoring"),
        "moment": moment,
    }


def wait_queue_empty(db_url: str, worker: WorkerProcess, timeout: float, context: str) -> None:
    """Until no job waits or runs, but the periodic jobs the live worker is running now.
    A killed worker's jobs go back to the queue within seconds of the next worker's
    start."""
    periodic = {
        row[0] for row in query(db_url, "SELECT task_name FROM procrastinate_periodic_defers")
    }
    deadline = time.monotonic() + timeout
    while True:
        left = [
            row
            for row in query(
                db_url,
                "SELECT id, task_name, status, worker_id, args, attempts FROM procrastinate_jobs "
                "WHERE status IN ('todo', 'doing') ORDER BY id",
            )
            if not (row[1] in periodic and row[2] == "doing" and worker.owns(row[3]))
        ]
        if not left:
            return
        if time.monotonic() > deadline:
            raise AssertionError(says(f"{context}: jobs left after {timeout:.0f} s", left))
        time.sleep(0.25)


@pytest.mark.slow
def test_worker_killed_at_random_moments(database_url, tmp_path, cli):
    """Kills land in each of the five phases of a run (start, poll, stop grace, settle: the
    trajectory fetch, scoring), aimed there while a request of that phase is open; after
    the restarts every run ends in one terminal state with each of its scores stored once,
    and no job is left."""
    seed = fault_seed()
    rng = random.Random(seed)
    context = f"fault seed {seed} (EVALKIT_FAULT_SEED={seed} replays the kills)"
    began = time.monotonic()
    edge = start_server(database_url, tmp_path, worker=False, configure=fast_engine)
    book = Requests()
    harnesses: dict[str, ReferenceHarness] = {}
    evaluator = SlowEvaluator(book, EVALUATOR_SECONDS)
    worker: WorkerProcess | None = None
    try:
        token = dev_workspace(edge, cli, tmp_path)
        evaluator.start()
        graded_suite(edge, token, cli, tmp_path, evaluator.endpoint)
        for name, (behaviour, agent_settings) in agents().items():
            harnesses[name] = watch(ReferenceHarness(behaviour), book, name, HARNESS_DELAYS)
            harnesses[name].start()
            create_agent(edge, token, "dev", name, harnesses[name].url, **agent_settings)
        worker = WorkerProcess(database_url, edge.settings, tmp_path)
        worker.start()

        experiments: dict[int, str] = {}
        for agent in PLAN:
            body: dict[str, Any] = {"repetitions": rng.choice([1, 1, 2, 3])}
            cases = rng.sample(sorted(ARITHMETIC), rng.randint(1, 3))
            if len(cases) < len(ARITHMETIC):
                body["case_ids"] = [f"g-{case_id}" for case_id in cases]
            experiments[
                start_experiment(edge, token, f"{agent}@dev", dataset="graded@dev", **body)
            ] = agent

        # Kill aimed at each phase no earlier kill landed in (while a request of that phase
        # is open at a harness or the evaluator), in a random order, with one or two kills
        # at random moments among them; then aim again at any phase still missed (twice at
        # most), and kill at random moments until there were MIN_KILLS. A worker start
        # takes seconds (20 s on a loaded machine), so every kill counts in the test's
        # time. Restart at once (a supervisor with no delay: the dead worker may not count
        # as dead yet, and the sweep queues itself for when it will) or after a pause (the
        # new worker's start-up sweep finds it dead).
        plan: list[str | None] = list(PHASES)
        rng.shuffle(plan)
        for _ in range(rng.randint(1, 2)):
            plan.insert(rng.randrange(len(plan) + 1), None)
        kills: list[dict[str, Any]] = []

        def kill_and_restart(aim: str | None) -> None:
            assert worker is not None
            worker.wait_registered(context)
            kills.append(kill_worker(aim, worker, book, harnesses, rng))
            delay = 0.0 if rng.random() < 0.4 else STALLED_SECONDS + 0.5
            kills[-1]["restart_after"] = delay
            time.sleep(delay)
            worker.start()

        def missed(phase: str) -> bool:
            return not any(phase in k["hit"] for k in kills)

        for aim in plan:
            if aim is None or missed(aim):
                kill_and_restart(aim)
        for aim in [*PHASES, *PHASES]:
            if missed(aim):
                kill_and_restart(aim)
        while len(kills) < MIN_KILLS:
            kill_and_restart(None)
        killed = time.monotonic() - began
        worker.wait_registered(context)
        in_scoring = Counter(run_id for k in kills for run_id in k.pop("in_scoring"))
        moments = [k.pop("moment") for k in kills]
        context += f"; kills: {pformat(kills, width=100)}"

        wait_all_finished(database_url, worker, 240, context)
        settled = time.monotonic() - began
        wait_queue_empty(database_url, worker, 90, context)

        # ---- experiments: finished, through the API
        for experiment_id in experiments:
            detail = api(edge, token, "GET", f"/api/experiments/{experiment_id}").json()
            assert detail["status"] == "finished", says(context, detail)
            assert sum(detail["by_state"].values()) == detail["runs"], says(context, detail)
            assert set(detail["by_state"]) <= set(TERMINAL), says(context, detail)

        # ---- runs: one terminal state each, as the agent's behaviour implies
        columns = (
            "id",
            "experiment_id",
            "state",
            "harness_run_id",
            "harness_status",
            "timed_out",
            "finished_at",
            "has_trajectory",
            "trajectory_valid",
            "error",
        )
        rows = query(
            database_url,
            "SELECT r.id, r.experiment_id, r.state, r.harness_run_id, r.harness_status, "
            "r.timed_out, r.finished_at, t.run_id IS NOT NULL, t.valid, r.error "
            "FROM runs r LEFT JOIN trajectories t ON t.run_id = r.id ORDER BY r.id",
        )
        runs = [dict(zip(columns, row, strict=True)) for row in rows]
        assert {r["experiment_id"] for r in runs} == set(experiments), context
        starts = Counter()
        for ref in harnesses.values():
            starts.update(ref.counters.starts)
        problems = {
            r["id"]: wrong
            for r in runs
            if (wrong := expect_run(experiments[r["experiment_id"]], r, starts[str(r["id"])]))
        }
        if problems:
            seen_by_harness = {
                run_id: (name, ref.counters.starts[str(run_id)], dict(ref.counters.stops))
                for name, ref in harnesses.items()
                for run_id in problems
                if str(run_id) in ref.state.by_evalkit_id
            }
            raise AssertionError(
                says(
                    context,
                    problems,
                    [r for r in runs if r["id"] in problems],
                    "harness (starts of the run, stops per harness run):",
                    seen_by_harness,
                )
            )
        (trajectory_rows,) = query(database_url, "SELECT count(*) FROM trajectories")[0]
        assert trajectory_rows == sum(r["has_trajectory"] for r in runs), context

        # ---- the harnesses: one created run per evalkit run, and it is the recorded one
        for name, ref in harnesses.items():
            mine = {str(r["id"]): r for r in runs if experiments[r["experiment_id"]] == name}
            created = ref.state.by_evalkit_id
            assert set(created) == set(mine), says(context, name, sorted(created), sorted(mine))
            assert ref.counters.runs_created == len(mine), says(context, name, ref.counters)
            wrong_ids = {
                run_id: (r["harness_run_id"], created[run_id].id)
                for run_id, r in mine.items()
                if r["harness_run_id"] != created[run_id].id
            }
            assert not wrong_ids, says(context, name, wrong_ids)

        # ---- scores: each scored run has every score of its round once; the evaluator was
        # asked again only for a run a kill caught in scoring
        twice = query(
            database_url,
            "SELECT run_id, round, name, count(*) FROM scores GROUP BY run_id, round, name "
            "HAVING count(*) > 1",
        )
        assert not twice, says(context, "scores stored twice (run, round, name, count):", twice)
        scored: dict[int, dict[str, tuple[Any, ...]]] = {r["id"]: {} for r in runs}
        for run_id, round_no, name, value, error in query(
            database_url,
            "SELECT s.run_id, s.round, s.name, s.value, s.error FROM scores s "
            "JOIN runs r ON r.id = s.run_id JOIN experiments e ON e.id = r.experiment_id "
            "WHERE s.round = e.scoring_round",
        ):
            scored[run_id][name] = (round_no, value, error)
        wrong_scores = {
            r["id"]: (experiments[r["experiment_id"]], r["state"], scored[r["id"]])
            for r in runs
            if set(scored[r["id"]]) != (SCORE_NAMES if r["state"] != "errored" else set())
            or (
                experiments[r["experiment_id"]] == "quick"
                and any(v[1:] != (1.0, None) for v in scored[r["id"]].values())
            )
        }
        assert not wrong_scores, says(
            context,
            "runs whose scores are not one exact_match and one grade (1.0 for quick runs), "
            "or that have scores but errored:",
            wrong_scores,
        )
        asked = Counter(int(r.key or 0) for r in book.calls if r.source == "evaluator")
        asked_again = {
            run_id: (n, in_scoring[run_id])
            for run_id, n in asked.items()
            if n > 1 + in_scoring[run_id]
        }
        cut = Counter(
            run_id for k in kills for _, kind, run_id, _ in k["open"] if kind == "evaluate"
        )
        # Answered less than a second before a kill: the score may not have been stored.
        just_answered = Counter(
            int(r.key or 0)
            for r in book.calls
            if r.source == "evaluator"
            and r.closed is not None
            and any(0 <= m - r.closed < 1.0 for m in moments)
        )
        assert not asked_again, says(
            context,
            "runs the evaluator was asked for more than once per kill in scoring:",
            asked_again,
        )

        # ---- what the API says is what the database holds
        for r in runs:
            shown = api(edge, token, "GET", f"/api/runs/{r['id']}").json()
            seen = (shown["state"], shown["harness_run_id"], shown["timed_out"])
            assert seen == (r["state"], r["harness_run_id"], r["timed_out"]), says(
                context, shown, r
            )
            assert shown["trajectory_valid"] == r["trajectory_valid"], says(context, shown, r)

        # ---- the queue: nothing left to do, nothing failed
        failed = query(
            database_url,
            "SELECT id, task_name, args, attempts FROM procrastinate_jobs WHERE status = 'failed'",
        )
        assert not failed, says(context, failed, jobs_dump(database_url))

        # ---- every phase had its kill
        hits = Counter(phase for k in kills for phase in k["hit"])
        missed = [phase for phase in PHASES if not hits[phase]]
        assert not missed, says(context, f"no kill landed in {missed}; hits {dict(hits)}")

        retried_starts = sum(
            n - 1 for ref in harnesses.values() for n in ref.counters.starts.values()
        )
        repeated_stops = sum(n - 1 for n in harnesses["stuck"].counters.stops.values())
        print(
            f"\n{context}\n{len(runs)} runs in {len(experiments)} experiments, "
            f"{len(kills)} kills, {worker.starts} worker starts; kills per phase "
            f"{dict(sorted(hits.items()))}; kills done after {killed:.1f} s, finished after "
            f"{settled:.1f} s, "
            f"{time.monotonic() - began:.1f} s in all; "
            f"retried starts {retried_starts}, repeated stops {repeated_stops}, "
            f"evaluator calls repeated {sum(asked.values()) - len(asked)} "
            f"({sum(cut.values())} cut by kills, {sum(just_answered.values())} answered "
            "less than 1 s before a kill); "
            f"stalled jobs requeued {worker.logs().count('retrying job')}"
        )
    finally:
        if worker is not None:
            worker.stop()
        for ref in harnesses.values():
            ref.stop()
        evaluator.stop()
        edge.stop()


# --------------------------------------------------------------------------- one start


def test_kill_while_the_harness_holds_the_first_start(database_url, tmp_path, cli):
    """The harness created the run, then the worker died before it heard the run's id: the
    start is tried again after the restart and the harness hands back the same run."""
    edge = start_server(database_url, tmp_path, worker=False, configure=fast_engine)
    ref = ReferenceHarness(Behaviour(hang_first={"start": 1})).start()
    worker = WorkerProcess(database_url, edge.settings, tmp_path, **HANGING_START)
    try:
        token = dev_workspace(edge, cli, tmp_path)
        create_agent(edge, token, "dev", "ref", ref.url)
        worker.start()
        experiment_id = start_experiment(edge, token, "ref@dev", case_ids=["add"])
        until(lambda: ref.counters.runs_created == 1, timeout=90, what="the harness run")
        ((run_id, state, harness_run_id),) = query(
            database_url,
            "SELECT id, state, harness_run_id FROM runs WHERE experiment_id = %s",
            (experiment_id,),
        )
        assert (state, harness_run_id) == ("starting", None)
        worker.kill()
        # Started again at once: the dead worker's lock went with it, so its job comes back.
        worker.start()
        wait_all_finished(database_url, worker, 120, "hanging start")

        detail = api(edge, token, "GET", f"/api/experiments/{experiment_id}").json()
        assert detail["by_state"] == {"done": 1}, detail
        assert ref.counters.runs_created == 1, ref.counters
        assert ref.counters.starts[str(run_id)] == 2, ref.counters
        run = api(edge, token, "GET", f"/api/runs/{run_id}").json()
        assert run["harness_run_id"] == ref.state.by_evalkit_id[str(run_id)].id, run
        assert run["answer"] == "5" and run["trajectory_valid"] is True, run
        wait_no_advance_jobs(database_url, 90, "hanging start")
    finally:
        worker.stop()
        ref.stop()
        edge.stop()


PICKED_UP_WITHIN = 5.0
"""Seconds a restarted worker may take, after its registration, to start again a run the
killed one left that no job holds."""
TAKEN_BACK_WITHIN = 20.0
"""Seconds a restarted worker may take, after its registration, to start again the runs
whose jobs the killed one was running (seconds on a quiet machine; generous for a loaded
one, and still well under the old minute)."""


def seconds_until(predicate: Any, timeout: float, what: str) -> float:
    began = time.monotonic()
    until(predicate, timeout=timeout, what=what)
    return time.monotonic() - began


def test_kill_while_a_chained_run_starts(database_url, tmp_path, cli):
    """When its run leaves the agent's slot, ``advance_run`` claims the agent's next queued
    run and drives it in the same job. Killed while that next run's POST /runs hangs, the
    job that comes back is the first run's, which is over, and no job holds the next run:
    a worker started again at once queues a step for it within seconds (not the
    once-a-minute sweep's 2 x stalled_seconds + the harness timeout).

    The first run gives up the slot without calling the harness (its case attaches a file
    the harness cannot take, so it errors at once), so the hanging call is the next run's."""
    edge = start_server(database_url, tmp_path, worker=False, configure=fast_engine)
    ref = ReferenceHarness(
        Behaviour(hang_first={"start": 1}, without=frozenset({"files", "file_urls"}))
    ).start()
    worker = WorkerProcess(database_url, edge.settings, tmp_path, **HANGING_START)
    try:
        token = dev_workspace(edge, cli, tmp_path)
        repo = Repo(tmp_path / "mixed-repo")
        repo.fixture("report", b"quarterly numbers\n")
        repo.case("mixed", "a-file", simple_case(question="Summarize", files="report"))
        repo.case("mixed", "b-plain", simple_case(question="What is 2 + 3?", answer="5"))
        assert cli("sync", str(repo.suite("mixed")), "--workspace", "dev").code == 0
        create_agent(edge, token, "dev", "ref", ref.url, max_concurrent_runs=1)
        # A quiet worker first (its start-up sweeps done), then one experiment: its one
        # dispatch claims the first run only, and the first run's job claims the second.
        worker.start()
        worker.wait_registered("chained start")
        until(lambda: not worker.doing() and not todo_jobs(database_url), what="a quiet worker")
        experiment_id = start_experiment(edge, token, "ref@dev", dataset="mixed@dev")
        until(lambda: ref.counters.runs_created == 1, timeout=60, what="the chained start")
        runs = query(
            database_url,
            "SELECT id, case_id, state, harness_run_id FROM runs WHERE experiment_id = %s "
            "ORDER BY id",
            (experiment_id,),
        )
        second = runs[1][0]
        assert [r[1:] for r in runs] == [
            ("a-file", "errored", None),
            ("b-plain", "starting", None),
        ], runs
        worker.kill()
        worker.start()  # at once, as a supervisor would
        worker.wait_registered("chained start")
        took = seconds_until(
            lambda: ref.counters.starts[str(second)] == 2, PICKED_UP_WITHIN, "the repeated start"
        )
        print(f"\nchained run started again {took:.2f} s after the new worker registered")
        wait_all_finished(database_url, worker, 60, "chained start")

        detail = api(edge, token, "GET", f"/api/experiments/{experiment_id}").json()
        assert detail["by_state"] == {"errored": 1, "done": 1}, detail
        assert ref.counters.runs_created == 1, ref.counters
        assert ref.counters.starts[str(second)] == 2, ref.counters
        wait_no_advance_jobs(database_url, 90, "chained start")
    finally:
        worker.stop()
        ref.stop()
        edge.stop()


def test_a_worker_restarted_at_once_takes_back_the_starts_it_was_making(
    database_url, tmp_path, cli
):
    """Killed while two runs' POST /runs hang (each run's own job ``doing``), the worker
    is started again at once. The killed worker's liveness lock went with its process, so
    the new worker takes back both jobs within seconds of its start (at once when the dead
    worker's last heartbeat is already 3 s old, else by the retry it queues for then), on
    the same harness runs. stalled_seconds is 30 here: the jobs come back long before a
    heartbeat that old would matter."""
    edge = start_server(database_url, tmp_path, worker=False, configure=fast_engine)
    ref = ReferenceHarness(Behaviour(hang_first={"start": 2})).start()
    stalled = 30.0
    worker = WorkerProcess(
        database_url,
        edge.settings,
        tmp_path,
        EVALKIT_WORKER_STALLED_SECONDS=str(stalled),
        **HANGING_START,
    )
    try:
        token = dev_workspace(edge, cli, tmp_path)
        create_agent(edge, token, "dev", "ref", ref.url, max_concurrent_runs=2)
        worker.start()
        worker.wait_registered("restart at once")
        experiment_id = start_experiment(edge, token, "ref@dev", case_ids=["add", "mul"])
        until(lambda: ref.counters.runs_created == 2, timeout=60, what="both starts")
        run_ids = [str(row[0]) for row in query(
            database_url, "SELECT id FROM runs WHERE experiment_id = %s", (experiment_id,)
        )]  # fmt: skip
        assert sorted(worker.doing_runs()) == sorted(map(int, run_ids)), jobs_dump(database_url)
        killed = worker.kill()
        worker.start()
        worker.wait_registered("restart at once")
        registered = time.monotonic()
        took = seconds_until(
            lambda: all(ref.counters.starts[i] == 2 for i in run_ids),
            TAKEN_BACK_WITHIN,
            "both runs started again",
        )
        print(
            f"\nruns started again {took:.2f} s after the new worker registered, "
            f"{registered + took - killed:.2f} s after the kill"
        )
        wait_all_finished(database_url, worker, 60, "restart at once")
        detail = api(edge, token, "GET", f"/api/experiments/{experiment_id}").json()
        assert detail["by_state"] == {"done": 2}, detail
        assert ref.counters.runs_created == 2, ref.counters
        wait_no_advance_jobs(database_url, 30, "restart at once")
    finally:
        worker.stop()
        ref.stop()
        edge.stop()


def test_a_stopped_worker_keeps_its_jobs_when_another_looks_for_dead_ones(
    database_url, tmp_path, cli
):
    """A live worker that sends no heartbeat (SIGSTOP: as slow as a worker gets) for longer
    than stalled_seconds and the 3 s a worker without its lock may stay silent still holds
    its liveness lock, so the other worker's sweep for dead workers leaves its job alone:
    the run's start is sent once while it is stopped. Once it goes on (SIGCONT), it
    finishes the run itself, on the same harness run."""
    edge = start_server(database_url, tmp_path, worker=False, configure=fast_engine)
    ref = ReferenceHarness(Behaviour(hang_first={"start": 1})).start()
    first = WorkerProcess(database_url, edge.settings, tmp_path / "first", **HANGING_START)
    second = WorkerProcess(database_url, edge.settings, tmp_path / "second", **HANGING_START)
    for process in (first, second):
        process.log_dir.mkdir()
    try:
        first.start()
        first.wait_registered("stopped worker")
        second.start()  # it starts while the workspace is set up
        token = dev_workspace(edge, cli, tmp_path)
        create_agent(edge, token, "dev", "ref", ref.url)
        second.wait_registered("stopped worker")
        experiment_id = start_experiment(edge, token, "ref@dev", case_ids=["add"])
        ((run_id,),) = query(
            database_url, "SELECT id FROM runs WHERE experiment_id = %s", (experiment_id,)
        )
        until(lambda: ref.counters.runs_created == 1, timeout=60, what="the start")
        ((worker_id,),) = query(
            database_url,
            "SELECT worker_id FROM procrastinate_jobs WHERE status = 'doing' "
            "AND task_name = 'advance_run'",
        )
        slow, other = (second, first) if second.owns(worker_id) else (first, second)
        assert slow.proc is not None
        slow.proc.send_signal(signal.SIGSTOP)
        try:
            time.sleep(STALLED_SECONDS + 2.5)  # silent past both
            ((sweep,),) = query(
                database_url,
                "INSERT INTO procrastinate_jobs (queue_name, task_name, args) "
                "VALUES ('default', 'retry_stalled_jobs', '{\"timestamp\": 0}') RETURNING id",
            )
            until(
                lambda: not query(database_url, "SELECT 1 FROM procrastinate_jobs WHERE id = %s "
                                  "AND status IN ('todo', 'doing')", (sweep,)),
                timeout=30,
                what="the other worker's sweep",
            )  # fmt: skip
            ((silent,),) = query(
                database_url,
                "SELECT extract(epoch FROM now() - last_heartbeat) FROM procrastinate_workers "
                "WHERE id = %s",
                (worker_id,),
            )
            assert silent > max(STALLED_SECONDS, 3.0), silent
            still = query(
                database_url,
                "SELECT worker_id, (args->>'run_id')::bigint FROM procrastinate_jobs "
                "WHERE status = 'doing' AND task_name = 'advance_run'",
            )
            assert still == [(worker_id, run_id)], jobs_dump(database_url)
            assert ref.counters.starts[str(run_id)] == 1, ref.counters
        finally:
            slow.proc.send_signal(signal.SIGCONT)
        wait_all_finished(database_url, slow, 60, "stopped worker")
        run = api(edge, token, "GET", f"/api/runs/{run_id}").json()
        assert run["state"] == "done" and run["answer"] == "5", run
        assert ref.counters.runs_created == 1, ref.counters
        assert "holds its liveness lock but sent no heartbeat" in other.logs(), other.tail(80)
    finally:
        first.stop()
        second.stop()
        ref.stop()
        edge.stop()


def test_kill_between_a_stop_and_its_record(database_url, tmp_path, cli):
    """A run past its timeout: the worker asks the harness to stop it, and dies before it
    records ``stopping``. After the restart the harness says ``stopped``; the run still
    timed out (evalkit stopped it), so it must end ``done`` and timed out, not ``failed``
    as a run the harness stopped by itself.

    The test holds the run's row lock, so the worker's write after the stop waits on it
    and the kill lands in between for certain; the waiting write is then cancelled."""
    edge = start_server(database_url, tmp_path, worker=False, configure=fast_engine)
    ref = ReferenceHarness(Behaviour(run_seconds=math.inf, stop_seconds=0.1)).start()
    worker = WorkerProcess(database_url, edge.settings, tmp_path)
    try:
        token = dev_workspace(edge, cli, tmp_path)
        create_agent(edge, token, "dev", "ref", ref.url, run_timeout=0.5, stop_grace=5)
        worker.start()
        experiment_id = start_experiment(edge, token, "ref@dev", case_ids=["add"])
        ((run_id,),) = query(
            database_url, "SELECT id FROM runs WHERE experiment_id = %s", (experiment_id,)
        )
        until(lambda: run_state(database_url, run_id) == "running", timeout=90, what="running")
        with psycopg.connect(database_url) as lock:
            lock.execute("SELECT id FROM runs WHERE id = %s FOR UPDATE", (run_id,))
            (holder,) = lock.execute("SELECT pg_backend_pid()").fetchone()  # type: ignore[misc]
            until(lambda: blocked_by(database_url, holder), timeout=60, what="the write")
            assert sum(ref.counters.stops.values()) == 1, ref.counters
            worker.kill()
            # The dead worker's write still waits in its database session, and would land
            # once the lock goes: end that session, as if the write had never been sent.
            for pid in blocked_by(database_url, holder):
                query(database_url, "SELECT pg_terminate_backend(%s)", (pid,))
            lock.rollback()
        assert run_state(database_url, run_id) == "running"
        worker.start()
        wait_all_finished(database_url, worker, 60, "lost stop")

        run = api(edge, token, "GET", f"/api/runs/{run_id}").json()
        assert (run["state"], run["timed_out"], run["harness_status"]) == (
            "done",
            True,
            "stopped",
        ), run
        assert ref.counters.runs_created == 1, ref.counters
        wait_no_advance_jobs(database_url, 90, "lost stop")
    finally:
        worker.stop()
        ref.stop()
        edge.stop()


def test_kill_between_the_last_run_and_the_experiment_finish(database_url, tmp_path, cli):
    """The worker records the experiment's last run as done and dies before it closes the
    experiment. The job comes back, finds its run over, and must still close the
    experiment: nothing else will (no run of it is left to finish, and resume only moves
    live runs). The test holds the experiment's row lock so the kill lands in between: FOR
    NO KEY UPDATE, which blocks the finish's UPDATE but not the key-share locks that the
    foreign keys of the run's scores and steps take while the run is scored in place."""
    edge = start_server(database_url, tmp_path, worker=False, configure=fast_engine)
    ref = ReferenceHarness(Behaviour(run_seconds=0.1)).start()
    worker = WorkerProcess(database_url, edge.settings, tmp_path)
    try:
        token = dev_workspace(edge, cli, tmp_path)
        create_agent(edge, token, "dev", "ref", ref.url)
        experiment_id = start_experiment(edge, token, "ref@dev", case_ids=["add"])
        with psycopg.connect(database_url) as lock:
            lock.execute(
                "SELECT id FROM experiments WHERE id = %s FOR NO KEY UPDATE", (experiment_id,)
            )
            (holder,) = lock.execute("SELECT pg_backend_pid()").fetchone()  # type: ignore[misc]
            worker.start()
            until(lambda: blocked_by(database_url, holder), timeout=90, what="the finish")
            states = query(
                database_url, "SELECT state FROM runs WHERE experiment_id = %s", (experiment_id,)
            )
            assert states == [("done",)], states
            worker.kill()
            for pid in blocked_by(database_url, holder):
                query(database_url, "SELECT pg_terminate_backend(%s)", (pid,))
            lock.rollback()
        worker.start()
        wait_all_finished(database_url, worker, 60, "lost finish")
        detail = api(edge, token, "GET", f"/api/experiments/{experiment_id}").json()
        assert detail["status"] == "finished" and detail["by_state"] == {"done": 1}, detail
        assert ref.counters.runs_created == 1, ref.counters
    finally:
        worker.stop()
        ref.stop()
        edge.stop()


def test_a_dead_jobs_waiting_twin_does_not_stop_the_next_worker(database_url, tmp_path):
    """What a worker leaves when it is killed just after a job queued its run's next step:
    the job still ``doing`` under a silent worker, the next step ``todo`` under the same
    queueing lock. Putting the dead job back in the queue would break that lock; the next
    worker must start anyway, drop the dead job and run the waiting one."""
    settings = Settings(encryption_key=generate_key())
    fast_engine(settings)
    lock = "run:424242"
    with psycopg.connect(database_url, autocommit=True) as conn:
        (dead,) = conn.execute(
            "INSERT INTO procrastinate_workers (last_heartbeat) "
            "VALUES (now() - interval '1 hour') RETURNING id"
        ).fetchone()
        for status, worker_id in (("doing", dead), ("todo", None)):
            conn.execute(
                "INSERT INTO procrastinate_jobs "
                "(queue_name, task_name, queueing_lock, args, status, worker_id) "
                "VALUES ('default', 'advance_run', %s, '{\"run_id\": 424242}', %s, %s)",
                (lock, status, worker_id),
            )
    worker = WorkerProcess(database_url, settings, tmp_path)
    try:
        worker.start()
        worker.wait_registered("dead job with a waiting twin")
        wait_no_advance_jobs(database_url, 30, "dead job with a waiting twin")
        assert worker.proc is not None and worker.proc.poll() is None, worker.tail()
        failed = query(database_url, "SELECT id FROM procrastinate_jobs WHERE status = 'failed'")
        assert not failed, jobs_dump(database_url)
    finally:
        worker.stop()
