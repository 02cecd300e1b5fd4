"""run_experiment: an experiment whose runs are your own code's calls.

The server pins the cases and keeps every run's state; this module calls the task once per
run and posts each step of the run state machine, compare-and-set, the way the CLI driver
does (``evalkit.runs.local``)::

    queued -> starting (claim) -> running -> collecting -> scoring -> done | failed

At ``collecting`` a run either carries its trajectory (a RunResult's ATIF document, or a
note that there is none) and goes on to ``scoring`` at once, or waits there for its spans:
the server's settle job builds its trajectory from its trace session and moves it on.
The server scores it (built-ins, remote evaluators, and the judge unless this process
has one) and finishes it; the Python evaluators and this process's judge run here, on the
answer and trajectory, and their scores are posted beside the server's: with the step to
scoring for a run that carries its trajectory, once the server attached it for a traced
one.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from evalkit.model import runs as wire
from evalkit.model.runs import RunWork, TrajectoryRecord, agent_failed
from evalkit.model.sdk import ExperimentCases, PythonScore, PythonScores
from evalkit.runs import machine
from evalkit.sdk import tracing
from evalkit.sdk._batch import StepBatcher
from evalkit.sdk._binding import Binding, bind, normalize
from evalkit.sdk._evaluators import (
    PythonEvaluator,
    check_evaluators,
    not_judged,
    score_run,
    selected,
)
from evalkit.sdk._fixtures import FixtureCache
from evalkit.sdk._link import SdkLink, load_project_or_none, login
from evalkit.sdk._model import (
    EvalRun,
    ExperimentResult,
    Judge,
    RunResult,
    SdkError,
)
from evalkit.sdk._progress import Progress, Waiting, runs_text, say

if TYPE_CHECKING:
    import httpx

    from evalkit.sdk._judge import SdkJudge

PAST_COLLECTING = frozenset({"scoring", "done", "failed"})
NO_TRAJECTORY = (
    "no trajectory: the task returned none (RunResult.trajectory) and nothing traces this "
    "process (evalkit.sdk.tracing.register)"
)
POLL_SECONDS = (0.1, 0.2, 0.5, 1.0)
WINDOW = 3
"""Runs in flight (claimed, running or being reported) per task slot."""


def run_experiment(**options: Any) -> Any:
    """Run ``task`` over a dataset's cases and return the scored experiment (see
    :func:`arun_experiment` for the options). Refuses to run inside a running event loop
    (a notebook): ``await arun_experiment(...)`` there."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(arun_experiment(**options))
    raise SdkError(
        "run_experiment cannot run inside a running event loop (a notebook, or async code); "
        "use `await evalkit.sdk.arun_experiment(...)` with the same arguments"
    )


async def arun_experiment(
    *,
    dataset: str | None = None,
    agent: str | None = None,
    task: Callable[..., Any],
    evaluators: Sequence[PythonEvaluator] = (),
    concurrency: int = 4,
    workspace: str | None = None,
    case_ids: Sequence[str] | None = None,
    split: str | None = None,
    repetitions: int = 1,
    model: str | None = None,
    resume: int | None = None,
    judge: Judge | None = None,
    dry_run: bool | int = False,
    server_url: str | None = None,
    progress: bool = True,
    timeout: float | None = None,
) -> Any:
    """Run ``task`` once per case and repetition of ``dataset`` as runs of ``agent``.

    ``dataset`` is ``NAME@WORKSPACE``, or ``NAME`` in ``workspace`` (default: your personal
    one). A bare ``NAME`` without ``workspace`` that is a directory under the cases
    directory of evalkit.yaml is synced into your personal workspace first; a path to a
    suite directory is synced into ``workspace`` (or your personal one). A dataset named
    in a workspace (``NAME@WORKSPACE``, or ``NAME`` with ``workspace``) runs as it stands
    there, every review state included. ``agent`` is a code-driven agent (no harness URL).
    ``case_ids``, ``split``, ``repetitions`` and ``model`` mean what they mean for
    ``evalkit run``; ``resume=ID`` goes on with experiment ID's unfinished runs.
    ``concurrency`` bounds the task calls at once. ``dry_run=True`` (or N) runs one case
    (N cases) with no experiment and prints what the server made of each session.
    ``timeout`` bounds the wait for the server to finish scoring (seconds; None: no bound).
    Returns an :class:`ExperimentResult` (a list of :class:`DryRunCase` for a dry run).
    """
    binding = bind(task)
    python_evaluators = check_evaluators(evaluators)
    _refuse_bad_options(
        concurrency=concurrency,
        repetitions=repetitions,
        resume=resume,
        dataset=dataset,
        agent=agent,
        narrowed=bool(case_ids or split or model),
        judge=judge,
    )
    base, token = login(server_url)
    link = SdkLink(base, token)
    http = None
    try:
        if dry_run:
            from evalkit.sdk._dry_run import dry_run_cases

            count = 1 if dry_run is True else int(dry_run)
            if count < 1:
                raise SdkError(f"dry_run takes True or a number of cases, got {dry_run!r}")
            assert dataset is not None and agent is not None
            return await dry_run_cases(
                link,
                binding=binding,
                evaluators=python_evaluators,
                dataset=await _dataset_ref(link, dataset, workspace),
                agent=agent,
                workspace=workspace,
                count=count,
                case_ids=list(case_ids) if case_ids else None,
                split=split,
                model=model,
                progress=progress,
            )
        import httpx

        http = httpx.AsyncClient(timeout=300.0)  # the judge's
        if resume is not None:
            experiment, sdk_judge = await _resumed(link, resume, judge, http)
        else:
            assert dataset is not None and agent is not None
            experiment, sdk_judge = await _created(
                link,
                dataset=await _dataset_ref(link, dataset, workspace),
                agent=agent,
                judge=judge,
                http=http,
                case_ids=list(case_ids) if case_ids else None,
                split=split,
                repetitions=repetitions,
                model=model,
            )
        runner = _Runner(link, binding, python_evaluators, concurrency, progress, sdk_judge)
        return await runner.run(experiment, timeout)
    finally:
        if http is not None:
            await http.aclose()
        await link.aclose()


def _refuse_bad_options(
    *,
    concurrency: Any,
    repetitions: Any,
    resume: int | None,
    dataset: str | None,
    agent: str | None,
    narrowed: bool,
    judge: Any,
) -> None:
    """Refuse options that cannot go together, before anything is asked of the server.
    ``narrowed``: case_ids, split or model was given."""
    if not isinstance(concurrency, int) or concurrency < 1:
        raise SdkError(f"concurrency must be a whole number of at least 1, got {concurrency!r}")
    if not isinstance(repetitions, int) or not 1 <= repetitions <= 100:
        raise SdkError(f"repetitions must be from 1 to 100, got {repetitions!r}")
    if resume is not None and (dataset or narrowed or repetitions != 1):
        raise SdkError(
            "resume= goes on with the experiment as it was started: drop dataset, case_ids, "
            "split, repetitions and model"
        )
    if resume is None and (dataset is None or agent is None):
        raise SdkError("give dataset= and agent= (or resume=EXPERIMENT_ID)")
    if judge is not None and not isinstance(judge, Judge):
        raise SdkError("judge takes evalkit.sdk.Judge(base_url=..., model=...)")


async def _resumed(
    link: SdkLink, resume: int, judge: Judge | None, http: httpx.AsyncClient
) -> tuple[wire.Experiment, SdkJudge | None]:
    """Experiment ``resume``, reopened for its unfinished runs, with the judge it recorded."""
    from evalkit.sdk._judge import recorded_judge

    experiment = await link.post_json(f"/api/experiments/{resume}/resume", type=wire.Experiment)
    if experiment.driver != "sdk":
        raise SdkError(
            f"experiment {resume} is not an SDK experiment (driven by "
            f"{experiment.driver}); go on with it with `evalkit run --resume {resume}`"
        )
    sdk_judge = recorded_judge(experiment, judge, http)
    say(f"experiment {experiment.id}: going on with its unfinished runs")
    return experiment, sdk_judge


async def _created(
    link: SdkLink,
    *,
    dataset: str,
    agent: str,
    judge: Judge | None,
    http: httpx.AsyncClient,
    case_ids: list[str] | None,
    split: str | None,
    repetitions: int,
    model: str | None,
) -> tuple[wire.Experiment, SdkJudge | None]:
    """A new experiment of ``agent`` over ``dataset`` (a dataset reference), with the judge
    of this process recorded on it: the server leaves the rubrics to this process."""
    from evalkit.sdk._judge import load_judge

    name, ws = await link.ref(agent, "agent")
    tracing.require_agent(f"{name}@{ws}")  # before an experiment is created
    sdk_judge = await load_judge(link, judge, http)
    body = wire.ExperimentCreate(
        dataset=dataset,
        agent=f"{name}@{ws}",
        case_ids=case_ids,
        split=split,
        repetitions=repetitions,
        model=model,
        sdk=True,
        judge=sdk_judge.record() if sdk_judge is not None else None,
    )
    experiment = await link.post_json("/api/experiments", body, type=wire.Experiment)
    say(
        f"experiment {experiment.id}: {experiment.agent} over {experiment.dataset}, "
        f"{experiment.runs} runs"
    )
    return experiment, sdk_judge


run_experiment.__signature__ = inspect.signature(arun_experiment)  # type: ignore[attr-defined]


async def _dataset_ref(link: SdkLink, dataset: str, workspace: str | None) -> str:
    """``name@workspace`` of the dataset, syncing its suite directory first when there is
    one: a path (synced into ``workspace``, default the personal one), or a bare name
    without ``workspace`` that is a directory under evalkit.yaml's cases directory (synced
    into the personal workspace). A bare name with ``workspace`` is that workspace's
    dataset as it stands, like ``NAME@WORKSPACE``."""
    directory = _suite_dir(dataset, by_name=workspace is None)
    if directory is None:
        name, ws = await link.ref(dataset, "dataset", workspace)
        return f"{name}@{ws}"
    target = workspace or (await link.me()).personal_workspace
    await asyncio.to_thread(_sync, directory, target, link)
    return f"{directory.name}@{target}"


def _suite_dir(dataset: str, *, by_name: bool) -> Path | None:
    if "@" in dataset:
        return None
    path = Path(dataset)
    if path.is_dir() and (path.is_absolute() or len(path.parts) > 1):
        return path.resolve()
    if not by_name:
        return None
    project = load_project_or_none()
    if project is None:
        return None
    candidate = project.suite_dir(dataset)
    return candidate.resolve() if candidate.is_dir() else None


def _sync(directory: Path, workspace: str, link: SdkLink) -> None:
    import contextlib
    import os
    import sys

    from evalkit.cli.client import SERVER_URL_ENV, TOKEN_ENV
    from evalkit.cli.output import CliError
    from evalkit.cli.sync import sync

    saved = {k: os.environ.get(k) for k in (SERVER_URL_ENV, TOKEN_ENV)}
    os.environ[SERVER_URL_ENV], os.environ[TOKEN_ENV] = link.base_url, link.token
    try:
        with contextlib.redirect_stdout(sys.stderr):
            sync(directory, workspace=workspace)
    except CliError as exc:
        raise SdkError(f"syncing {directory} failed: {exc}") from None
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _now() -> datetime:
    return datetime.now(UTC)


def _error_text(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _trajectory_text(trajectory: Any) -> str:
    if isinstance(trajectory, str):
        return trajectory
    return msgspec.json.encode(trajectory).decode()


def valid_trajectory(trajectory: Any) -> dict[str, Any] | None:
    """The ATIF document as a dict when it is valid, else None."""
    from evalkit.atif.validate import validate_trajectory

    if trajectory is None:
        return None
    try:
        doc = json.loads(trajectory) if isinstance(trajectory, str) else trajectory
    except ValueError:
        return None
    if not isinstance(doc, dict) or validate_trajectory(doc):
        return None
    return doc


class _Runner:
    """Drives the live runs of one experiment, then waits for the server to finish it."""

    def __init__(
        self,
        link: SdkLink,
        binding: Binding,
        evaluators: list[PythonEvaluator],
        concurrency: int,
        progress: bool,
        judge: SdkJudge | None = None,
    ) -> None:
        self.link = link
        self.judge = judge
        """Grades the rubrics of every run, traced or not (the experiment says so)."""
        self.binding = binding
        self.evaluators = evaluators
        self.concurrency = concurrency
        self.model: str | None = None
        self.show_progress = progress
        self.fixtures = FixtureCache(link)
        self.cases: dict[str, dict[str, Any]] = {}
        self.awaiting: dict[int, RunResult | None] = {}
        """Traced runs whose Python evaluators or judge wait for the server's trajectory."""
        self.failures: list[str] = []
        self.scored: set[int] = set()

    async def run(self, experiment: wire.Experiment, timeout: float | None) -> ExperimentResult:
        self.experiment = experiment
        self.model = experiment.model
        if self.model and not self.binding.takes_model:
            say(
                f"warning: model={self.model!r} is recorded on the experiment, but the task "
                "has no `model` parameter, so the agent runs with its own default; add "
                "`model` to the task's parameters and pass it on"
            )
        tracing.require_agent(experiment.agent)
        if self.evaluators or self.judge is not None:
            answer = await self.link.get(f"/api/experiments/{experiment.id}/cases", ExperimentCases)
            self.cases = {c.case_id: c.content for c in answer.cases}
        if self.judge is not None and any(self._needs_judge(case) for case in self.cases):
            say(f"judge: {self.judge.describe}, called from this process")
        self.batcher = StepBatcher(self.link, experiment.id)
        work = await self.link.work(experiment.id)
        bar = Progress(len(work.runs), f"experiment {experiment.id}", enabled=self.show_progress)
        slots = asyncio.Semaphore(self.concurrency)
        window = asyncio.Semaphore(self.concurrency * WINDOW)

        async def one(run: RunWork) -> None:
            failed = await self._drive(run, slots, window)
            bar.advance(failed=failed)

        try:
            await asyncio.gather(*(one(run) for run in work.runs))
        finally:
            bar.close()
        for line in self.failures[:10]:
            say(line)
        if len(self.failures) > 10:
            say(f"... and {len(self.failures) - 10} more failed runs")
        return await self._finish(timeout)

    # ----------------------------------------------------------------------- one run

    async def _drive(
        self, run: RunWork, slots: asyncio.Semaphore, window: asyncio.Semaphore
    ) -> bool:
        """Take ``run`` as far as this process takes it; True when the task failed.

        A run is claimed (queued -> starting) ahead of a free task slot, within a window of
        a few slots' worth, so a claim's round trip never holds a slot; once a slot is free
        the task is called at once and the step to running travels while it runs (a task
        that ends before it has left skips it: starting -> collecting). Only the claim
        decides who runs the task: a run this process moved to starting is its own."""
        if run.state == "collecting":
            await self._resume_collecting(run)
            return False
        if run.state not in ("queued", "starting", "running"):
            return False  # scoring: the server has it
        async with window:
            claimed = await self._claim(run)
            if claimed is None:
                return False  # another process moved it on
            async with slots:
                moving = None
                if claimed.state == "starting":
                    started = _now()
                    begun = machine.transition(claimed, "running", started_at=started)
                    moving = self.batcher.enqueue(run.run_id, [begun])
                    claimed = msgspec.structs.replace(claimed, state="running", attempts=0)
                result, error, session_id = await self._call(claimed)
            if moving is not None:
                if self.batcher.withdraw(moving):
                    # The task ended before its step to running left: the run goes from
                    # starting to collecting in one step, which carries started_at.
                    claimed = msgspec.structs.replace(claimed, state="starting", started_at=started)
                elif not all(await moving.done):
                    return False
            return await self._report(claimed, result, error, session_id)

    async def _claim(self, run: RunWork) -> RunWork | None:
        """queued -> starting; a run found starting is taken as it is; one found running
        was left by a process that stopped: counting an attempt claims it, so two resumes
        never both call the task."""
        if run.state == "starting":
            return run
        if run.state == "queued":
            applied = await self.batcher.send(run.run_id, [machine.transition(run, "starting")])
            return (
                msgspec.structs.replace(run, state="starting", attempts=0) if all(applied) else None
            )
        again = machine.transition(run, "running", attempts=run.attempts + 1)
        applied = await self.batcher.send(run.run_id, [again])
        if not all(applied):
            return None
        return msgspec.structs.replace(run, state="running", attempts=run.attempts + 1)

    async def _call(self, run: RunWork) -> tuple[RunResult | None, BaseException | None, str]:
        session_id = str(uuid.uuid4())
        metadata = {
            "session_id": session_id,
            "experiment_id": run.experiment_id,
            "case_id": run.case_id,
            "repetition": run.repetition,
            "tags": list(run.tags),
        }
        result: RunResult | None = None
        error: BaseException | None = None
        span_facts = {**metadata, "run_id": run.run_id}
        with tracing.run_span(session_id, span_facts, run.input) as span:
            try:
                files = await self.fixtures.files(run.files) if run.files else []
                values = {
                    "input": dict(run.input),
                    "files": files,
                    "model": self.model,
                    "metadata": metadata,
                }
                result = normalize(await self.binding.call(values))
            except Exception as exc:
                error = exc
            span.finish(result, error)
        return result, error, session_id

    def _waits_for_spans(self, result: RunResult | None) -> bool:
        if result is not None and result.trajectory is not None:
            return False
        if tracing.is_registered():
            return True
        return result is not None and bool(result.session_id)

    async def _report(
        self,
        run: RunWork,
        result: RunResult | None,
        error: BaseException | None,
        session_id: str,
    ) -> bool:
        traced = self._waits_for_spans(result)
        if traced and tracing.is_registered():
            await asyncio.to_thread(tracing.flush)
        session = (result.session_id if result else None) or session_id
        answer = result.answer if result else None
        output = result.output if result else None
        collecting = machine.transition(
            run,
            "collecting",
            harness_status="failed" if error else "succeeded",
            answer=answer,
            output=output,
            error=_error_text(error) if error else None,
            harness_done_at=_now(),
            started_at=run.started_at if run.state == "starting" else None,
            session_id=session if traced else None,
        )
        if error is not None:
            self.failures.append(
                f"run {run.run_id} (case {run.case_id}, repetition {run.repetition}) "
                f"failed: {_error_text(error)}"
            )
        if traced:
            applied = await self.batcher.send(run.run_id, [collecting])
            if all(applied) and self._scored_here(run.case_id):
                self.awaiting[run.run_id] = result
            return error is not None
        trajectory = result.trajectory if result else None
        record = (
            TrajectoryRecord(source="sdk", raw=_trajectory_text(trajectory))
            if trajectory is not None
            else TrajectoryRecord(source="sdk", fetch_error=NO_TRAJECTORY)
        )
        scoring = machine.attach_trajectory(machine.advance(run, collecting), record)
        scores: list[PythonScore] = []
        model = (result.model if result else None) or self.model
        valid = valid_trajectory(trajectory)
        if error is not None:
            scores = self._not_judged(run.case_id, run.run_id)
        elif self._needs_scoring(run.case_id):
            scores = await self._scores(run.run_id, run, answer, output, valid, model)
        if error is None and self._needs_judge(run.case_id):
            # Stored with the step to scoring, in one transaction.
            scores += await self._judged(run, answer, output, valid, model)
        await self.batcher.send(run.run_id, [collecting, scoring], scores)
        self.scored.add(run.run_id)
        return error is not None

    async def _resume_collecting(self, run: RunWork) -> None:
        """A run left in collecting: a traced one waits for the settle job; one that was
        to carry its own trajectory had lost it with the process, so it goes on without."""
        if run.session_id:
            if self._scored_here(run.case_id):
                self.awaiting[run.run_id] = None
            return
        record = TrajectoryRecord(
            source="sdk", fetch_error="the process that ran the task stopped before sending it"
        )
        applied = await self.batcher.send(run.run_id, [machine.attach_trajectory(run, record)])
        if all(applied) and self._scored_here(run.case_id):
            self.awaiting[run.run_id] = None

    # ----------------------------------------------------------------------- scores

    def _scored_here(self, case_id: str) -> bool:
        """This process gives the run scores: Python evaluators, or the judge."""
        return self._needs_scoring(case_id) or self._needs_judge(case_id)

    def _not_judged(self, case_id: str, run_id: int) -> list[PythonScore]:
        """A run whose task raised: its Python evaluators and the judge skip it, uncalled."""
        content = self.cases.get(case_id) or {}
        return not_judged(self.evaluators, content, run_id, judge=self._needs_judge(case_id))

    def _needs_scoring(self, case_id: str) -> bool:
        content = self.cases.get(case_id)
        if not content:
            return False
        return bool(self.evaluators and selected(self.evaluators, content))

    def _needs_judge(self, case_id: str) -> bool:
        content = self.cases.get(case_id)
        block = (content or {}).get("evaluators")
        return self.judge is not None and isinstance(block, dict) and block.get("judge") is not None

    async def _scores(
        self,
        run_id: int,
        run: RunWork | wire.Run,
        answer: str | None,
        output: Any,
        trajectory: dict[str, Any] | None,
        model: str | None,
    ) -> list[PythonScore]:
        content = self.cases[run.case_id]
        if answer is None and output is not None:
            answer = json.dumps(output, sort_keys=True, separators=(",", ":"))
        evaluated = EvalRun(
            id=str(run_id),
            answer=answer,
            output=output,
            trajectory=trajectory,
            model=model,
            experiment_id=run.experiment_id,
            repetition=run.repetition,
        )
        return await score_run(self.evaluators, run.case_id, content, evaluated)

    async def _judged(
        self,
        run: RunWork | wire.Run,
        answer: str | None,
        output: Any,
        trajectory: dict[str, Any] | None,
        model: str | None,
    ) -> list[PythonScore]:
        assert self.judge is not None
        run_id = run.run_id if isinstance(run, RunWork) else run.id
        return await self.judge.grade(
            run_id=run_id,
            experiment_id=run.experiment_id,
            case_id=run.case_id,
            repetition=run.repetition,
            content=self.cases[run.case_id],
            answer=answer if answer is not None or output is None else _canonical(output),
            output=output,
            trajectory=trajectory,
            model=model,
        )

    async def _score_traced(self, run_id: int) -> None:
        """A traced run once the server attached its trajectory: its Python evaluators and
        the judge (the server leaves the rubric to this process) grade it here."""
        run = await self.link.get(f"/api/runs/{run_id}?trajectory=1", wire.Run)
        given = self.awaiting.get(run_id)
        trajectory = run.trajectory if run.trajectory_valid else None
        model = (given.model if given else None) or self.model
        scores: list[PythonScore] = []
        if agent_failed(run.harness_status, run.timed_out):
            scores = self._not_judged(run.case_id, run_id)
        else:
            if self._needs_scoring(run.case_id):
                scores = await self._scores(run_id, run, run.answer, run.output, trajectory, model)
            if self._needs_judge(run.case_id):
                scores += await self._judged(run, run.answer, run.output, trajectory, model)
        if scores:
            await self.link.post_json(f"/api/runs/{run_id}/scores", PythonScores(scores=scores))
        self.scored.add(run_id)

    # ----------------------------------------------------------------------- the end

    async def _finish(self, timeout: float | None) -> ExperimentResult:
        waiting = Waiting(enabled=self.show_progress)
        try:
            detail = await self._wait_for_server(timeout, waiting)
        except BaseException:
            waiting.close("stopped")
            raise
        waiting.close(f"experiment {detail.id}: finished")
        return await self._result(detail)

    async def _wait_for_server(
        self, timeout: float | None, shown: Waiting
    ) -> wire.ExperimentDetail:
        """Poll the experiment until the server finished it, scoring here each traced run
        this process grades once its trajectory is attached; say what it waits for."""
        experiment_id = self.experiment.id
        deadline = None if timeout is None else time.monotonic() + timeout
        polls = 0
        quiet_since = time.monotonic()
        last_seen: dict[str, int] | None = None
        while True:
            detail = await self.link.get(f"/api/experiments/{experiment_id}", wire.ExperimentDetail)
            ready = [
                r.id
                for r in detail.run_list
                if r.id in self.awaiting and r.id not in self.scored and r.state in PAST_COLLECTING
            ]
            gone = [
                r.id
                for r in detail.run_list
                if r.id in self.awaiting and r.id not in self.scored and r.state == "errored"
            ]
            self.scored.update(gone)
            if ready:
                await asyncio.gather(*(self._score_traced(run_id) for run_id in ready))
                continue
            waiting = [r for r in self.awaiting if r not in self.scored]
            if detail.status == "finished" and not waiting:
                return detail
            shown.update(_waiting_for(detail))
            if deadline is not None and time.monotonic() > deadline:
                raise SdkError(
                    f"experiment {experiment_id} did not finish within {timeout:g} s "
                    f"({detail.by_state}); it goes on on the server: see `evalkit experiments "
                    f"show {experiment_id}`, and run_experiment(resume={experiment_id}, ...) "
                    "scores what is left"
                )
            if detail.by_state != last_seen:
                last_seen, quiet_since = dict(detail.by_state), time.monotonic()
            elif time.monotonic() - quiet_since > 60:
                say(
                    f"experiment {experiment_id}: nothing moved for a minute ({detail.by_state});"
                    " the server needs a worker (`evalkit worker`, or `evalkit server`) to "
                    "build trajectories and score runs"
                )
                quiet_since = time.monotonic()
            await asyncio.sleep(POLL_SECONDS[min(polls, len(POLL_SECONDS) - 1)])
            polls += 1

    async def _result(self, detail: wire.ExperimentDetail) -> ExperimentResult:
        scores = await self.link.get(f"/api/experiments/{detail.id}/scores")
        return ExperimentResult.of(detail, scores, self.link.base_url)


def _waiting_for(detail: wire.ExperimentDetail) -> str | None:
    """What the server still does with the experiment's runs: ``spans of 3 runs (run 12,
    13, 14)`` (traced runs in collecting, their session settling), and scoring."""
    collecting = [r.id for r in detail.run_list if r.state == "collecting"]
    scoring = [r.id for r in detail.run_list if r.state == "scoring"]
    parts = []
    if collecting:
        parts.append(f"spans of {runs_text(collecting)}")
    if scoring:
        parts.append(f"the server to score {runs_text(scoring)}")
    if not parts:
        live = {k: v for k, v in detail.by_state.items() if k not in ("done", "failed", "errored")}
        return f"the server to finish the experiment ({live})" if live else None
    return "; ".join(parts)
