"""The run state machine: the one place that decides what happens to a run next.

::

    queued -> starting -> running -> collecting -> scoring -> done | failed
                 |          |  \\-> stopping (timeout) -> collecting
                 \\----------\\-> errored (the harness could not be reached or broke the contract,
                                or the server gave up on a run its jobs could not move)

:func:`step` looks at one run (a :class:`RunWork`), makes at most one harness call and
returns a :class:`Step`: the :class:`Transition` to record, if any, and how long to wait
before the next step. Every transition of every driver is built here (:func:`transition`
and the helpers after it) and allowed by :data:`ALLOWED`; the database refuses any other.

The machine never touches storage. :func:`evalkit.runs.engine.record` records a transition
(by compare-and-set on (state, attempts), so a step replayed after a crash records nothing
twice) for the server's jobs and for the runs the CLI and the SDK post; a harness run is
started at most once because ``POST /runs`` carries the run's id as an idempotency key.
"""

from __future__ import annotations

import asyncio
import base64
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

import msgspec

from evalkit.errors import EvalkitError
from evalkit.harness.client import HarnessClient, HarnessError
from evalkit.model.harness import (
    FINAL_STATUSES,
    Capabilities,
    InputFile,
    RunMetadata,
    RunStart,
    RunStatus,
)
from evalkit.model.runs import RunState, RunWork, TrajectoryRecord, Transition, agent_failed

ALLOWED: dict[str, frozenset[str]] = {
    "queued": frozenset({"starting", "errored"}),
    "starting": frozenset({"starting", "running", "collecting", "errored"}),
    "running": frozenset({"running", "stopping", "collecting", "errored"}),
    "stopping": frozenset({"stopping", "collecting", "errored"}),
    "collecting": frozenset({"collecting", "scoring", "errored"}),
    "scoring": frozenset({"done", "failed", "errored"}),
}
"""Every transition a driver may record; a state maps to itself only to count an attempt.
The database holds the same table (``run_transitions_allowed``, checked by a trigger on
``runs``); a test fails when the two differ."""


class Position(Protocol):
    """Where a run is: enough to build a transition from it."""

    @property
    def run_id(self) -> int: ...
    @property
    def state(self) -> RunState: ...
    @property
    def attempts(self) -> int: ...


MAX_BACKOFF_SECONDS = 60.0
MIN_POLL_SECONDS = 0.5
"""A poll bounded by the run's deadline or stop grace still gets this long to answer."""


class PollCutAtBound(HarnessError):
    """A poll with no answer by its bound, the run's deadline or the end of its stop grace:
    that moment has come. (The clock, read just after, may still say a millisecond before
    it: the event loop's timers can fire that early.)"""


def is_allowed(from_state: str, to_state: str) -> bool:
    return to_state in ALLOWED.get(from_state, frozenset())


def not_allowed(run_id: int, from_state: str, to_state: str) -> str:
    """Why a step is refused, with the steps the run may take instead."""
    onward = sorted(ALLOWED.get(from_state, frozenset()) - {from_state})
    instead = (
        f"from {from_state} it may go to {', '.join(onward)}"
        if onward
        else (f"{from_state} is final: the run does not move again")
    )
    return f"run {run_id} cannot go from {from_state} to {to_state}; {instead}"


@dataclass
class Env:
    """What a step may use: the harness, the clock, fixture bytes and the retry policy."""

    harness: HarnessClient
    capabilities: Capabilities
    fixture_bytes: Callable[[str], Awaitable[bytes]]
    attempts: int = 5
    backoff: float = 1.0
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    score: Callable[[RunWork], Awaitable[None]] | None = None
    """Scores the run (the server's evaluators, judge and remote evaluators). Without it
    (a CLI driver) the run is handed off at ``scoring`` and the server scores it."""

    def retry_wait(self, attempt: int) -> float:
        return min(self.backoff * 2.0 ** max(attempt - 1, 0), MAX_BACKOFF_SECONDS)


@dataclass
class Step:
    transition: Transition | None
    wait: float = 0.0
    """Seconds before the next step; 0 means go on at once (unless the run is terminal)."""
    handoff: bool = False
    """The driver stops here and the server takes the run on: its settle job collects a
    traced run's trajectory, and its jobs score a run a CLI drove."""


async def step(work: RunWork, env: Env) -> Step:
    if work.state == "starting":
        return await _start(work, env)
    if work.state in ("running", "stopping"):
        return await _poll(work, env)
    if work.state == "collecting":
        return await _collect(work, env)
    if work.state == "scoring":
        return await _score(work, env)
    raise ValueError(f"run {work.run_id} is {work.state}: no step to take")


def transition(run: Position, state: str, *, attempts: int = 0, **fields: object) -> Transition:
    """The step of ``run`` from where it is to ``state``, carrying ``fields`` (what the step
    learned). Raises ValueError for a step :data:`ALLOWED` does not have."""
    if not is_allowed(run.state, state):
        raise ValueError(not_allowed(run.run_id, run.state, state))
    return Transition(
        run_id=run.run_id,
        from_state=run.state,
        from_attempts=run.attempts,
        to_state=state,  # type: ignore[arg-type]
        attempts=attempts,
        **fields,  # type: ignore[arg-type]
    )


def claim(run: Position) -> Transition:
    """queued -> starting: the run takes one of the agent's slots."""
    return transition(run, "starting")


def attach_trajectory(
    run: Position, record: TrajectoryRecord, *, session_id: str | None = None
) -> Transition:
    """collecting -> scoring with the trajectory collected for the run (from the spans of
    ``session_id``, when it was built from traces)."""
    return transition(run, "scoring", trajectory=record, session_id=session_id)


def give_up(run: Position, error: str) -> Transition:
    """Any live state -> errored: nothing can move the run on (its job failed for good)."""
    return transition(run, "errored", error=error)


def advance(work: RunWork, taken: Transition) -> RunWork:
    """``work`` as it is after the step ``taken`` was recorded (saves reading it back)."""
    changes = {
        name: getattr(taken, name)
        for name in (
            "harness_run_id",
            "harness_status",
            "session_id",
            "started_at",
            "deadline_at",
            "stop_requested_at",
        )
        if getattr(taken, name) is not None
    }
    return msgspec.structs.replace(
        work,
        state=taken.to_state,
        attempts=taken.attempts,
        timed_out=work.timed_out or taken.timed_out,
        **changes,
    )


# --------------------------------------------------------------------------- the steps


async def _start(work: RunWork, env: Env) -> Step:
    try:
        status = await env.harness.start(await _run_start(work, env))
    except EvalkitError as exc:
        return _failed_call(work, env, "starting the run", exc)
    now = env.now()
    begun = transition(
        work,
        "running",
        harness_run_id=status.id,
        harness_status=status.status,
        started_at=now,
        deadline_at=now + timedelta(seconds=work.settings.run_timeout),
    )
    if status.status in FINAL_STATUSES:
        return Step(_finished_harness_run(work, status, now, begun))
    return Step(begun, wait=work.settings.poll_interval)


async def _poll(work: RunWork, env: Env) -> Step:
    assert work.harness_run_id is not None
    try:
        status = await _status_before(work, env, _poll_ends(work))
    except EvalkitError as exc:
        return await _failed_poll(work, env, exc)
    now = env.now()
    if status.status in FINAL_STATUSES:
        finished = transition(work, "collecting")
        if status.status == "stopped" and _past_deadline(work, now):
            # evalkit stops runs only at their timeout: a run found stopped past it was
            # stopped by us, even if the step that recorded the stop was lost in a crash.
            finished = transition(work, "collecting", timed_out=True, error=_timeout_text(work))
        return Step(_finished_harness_run(work, status, now, finished))
    recovered = (
        transition(work, work.state, note="the harness answered again") if work.attempts else None
    )
    if work.state == "running":
        if not _past_deadline(work, now):
            wait = min(work.settings.poll_interval, _seconds_until_deadline(work, now))
            return Step(recovered, wait=wait)
        return await _time_out(work, env, now)
    grace_ends = _grace_ends(work)
    if now < grace_ends:
        wait = min(work.settings.poll_interval, (grace_ends - now).total_seconds())
        return Step(recovered, wait=max(wait, 0.0))
    grace = work.settings.stop_grace
    said = f"still said '{status.status}' after the {grace:g} s stop grace"
    return Step(_stop_grace_over(work, said, harness_status=status.status))


async def _status_before(work: RunWork, env: Env, ends: datetime | None) -> RunStatus:
    """Poll the harness, giving up at ``ends`` (the run's deadline or the end of its stop
    grace) when that comes before the client's own timeout."""
    assert work.harness_run_id is not None
    if ends is None:
        return await env.harness.status(work.harness_run_id)
    seconds = max((ends - env.now()).total_seconds(), MIN_POLL_SECONDS)
    try:
        async with asyncio.timeout(seconds):
            return await env.harness.status(work.harness_run_id)
    except TimeoutError:
        until = "the stop grace ends" if work.state == "stopping" else "the run timeout"
        raise PollCutAtBound(
            f"no answer within the {seconds:.3g} s left before {until}", retryable=True
        ) from None


def _poll_ends(work: RunWork) -> datetime | None:
    """When the poll about to be sent must have answered by: the deadline of a running run
    or the end of a stopping run's grace (None: no bound beyond the client's timeout)."""
    return _grace_ends(work) if work.state == "stopping" else work.deadline_at


async def _failed_poll(work: RunWork, env: Env, exc: EvalkitError) -> Step:
    """A poll that failed. Past the deadline, or cut at it, the run times out whatever the
    poll did; in the stop grace it is retried until the grace ends, or a poll is cut at its
    end, then the run is collected."""
    now = env.now()
    cut = isinstance(exc, PollCutAtBound)
    if work.state == "running" and (cut or _past_deadline(work, now)):
        return await _time_out(work, env, now, poll_error=exc)
    if work.state == "stopping":
        grace_left = (_grace_ends(work) - now).total_seconds()
        retryable = isinstance(exc, HarnessError) and exc.retryable
        if cut or not retryable or grace_left <= 0:
            grace = work.settings.stop_grace
            unanswered = f"could not be polled within the {grace:g} s stop grace (last: {exc})"
            return Step(_stop_grace_over(work, unanswered))
        attempt = work.attempts + 1
        again = transition(
            work, "stopping", attempts=attempt, note=f"polling the stopping run failed: {exc}"
        )
        return Step(again, wait=min(env.retry_wait(attempt), grace_left))
    failed = _failed_call(work, env, "polling the run", exc)
    if failed.transition is not None and failed.transition.to_state == "running":
        # Wake at the deadline at the latest, so that a run whose polls fail still times out.
        failed.wait = min(failed.wait, _seconds_until_deadline(work, now))
    return failed


def _stop_grace_over(
    work: RunWork, what_happened: str, *, harness_status: str | None = None
) -> Transition:
    return transition(
        work,
        "collecting",
        harness_status=harness_status,
        error=f"{_timeout_text(work)}; the harness was asked to stop but {what_happened}",
    )


async def _time_out(
    work: RunWork, env: Env, now: datetime, *, poll_error: EvalkitError | None = None
) -> Step:
    assert work.harness_run_id is not None
    reason = _timeout_text(work)
    if poll_error is not None:
        reason += f" (its last poll failed: {poll_error})"
    if not env.capabilities.accepts.stop:
        return Step(
            transition(
                work,
                "collecting",
                timed_out=True,
                error=(
                    f"{reason}; the harness does not accept stop "
                    "(capabilities.accepts.stop is false), so the run may still be going there"
                ),
            )
        )
    try:
        await env.harness.stop(work.harness_run_id)
    except EvalkitError as exc:
        return Step(
            transition(
                work,
                "collecting",
                timed_out=True,
                error=f"{reason}; asking the harness to stop failed: {exc}",
            )
        )
    stopping = transition(
        work,
        "stopping",
        timed_out=True,
        stop_requested_at=now,
        error=f"{reason}; evalkit asked the harness to stop it",
    )
    return Step(stopping, wait=min(work.settings.poll_interval, work.settings.stop_grace))


def fetches_trajectory_next(work: RunWork, env: Env) -> bool:
    """Whether the next step of ``work`` is at once a call for its trajectory to the harness,
    which always ends in a step (a driver may record the step that led here with it)."""
    return work.state == "collecting" and _harness_gives_trajectory(work, env)


def _harness_gives_trajectory(work: RunWork, env: Env) -> bool:
    return (
        work.trajectory_source != "otel"
        and env.capabilities.provides.trajectory
        and work.harness_run_id is not None
    )


async def _collect(work: RunWork, env: Env) -> Step:
    if work.trajectory_source == "otel":
        return Step(None, handoff=True)
    if not _harness_gives_trajectory(work, env):
        return Step(transition(work, "scoring"))
    assert work.harness_run_id is not None  # _harness_gives_trajectory checked it
    partial = work.timed_out and work.harness_status not in FINAL_STATUSES
    try:
        raw = await env.harness.trajectory(work.harness_run_id)
    except EvalkitError as exc:
        retry = isinstance(exc, HarnessError) and exc.retryable and not work.timed_out
        if retry and work.attempts + 1 < env.attempts:
            return _failed_call(work, env, "fetching the trajectory", exc)
        # After a timeout the trajectory is fetched once: what comes is what is kept.
        record = TrajectoryRecord(source="harness", partial=partial, fetch_error=str(exc))
        return Step(transition(work, "scoring", trajectory=record))
    return Step(
        transition(
            work,
            "scoring",
            trajectory=TrajectoryRecord(source="harness", received=raw, partial=partial),
        )
    )


async def _score(work: RunWork, env: Env) -> Step:
    if env.score is None:
        return Step(None, handoff=True)
    await env.score(work)  # evaluator errors are recorded on the scores, never raised
    return Step(scored(work, harness_status=work.harness_status, timed_out=work.timed_out))


def scored(run: Position, *, harness_status: str | None, timed_out: bool) -> Transition:
    """scoring -> done, or failed when the agent failed the run: its scores are stored
    (by the server's job, or in place with the step that brought it to scoring)."""
    if not agent_failed(harness_status, timed_out):
        return transition(run, "done")
    if harness_status == "stopped":
        return transition(run, "failed", error="the harness stopped the run before it finished")
    return transition(run, "failed")


# --------------------------------------------------------------------------- helpers


def _finished_harness_run(
    work: RunWork, status: RunStatus, now: datetime, base: Transition
) -> Transition:
    error = status.error if status.status == "failed" else None
    if status.status == "failed" and not error:
        error = "the harness reported the run as failed without saying why"
    return msgspec.structs.replace(
        base,
        to_state="collecting",
        harness_run_id=base.harness_run_id or status.id,
        harness_status=status.status,
        answer=status.answer,
        output=status.output,
        # A traced harness puts its run id on its spans as the session id unless it says
        # otherwise (path 3c: Harness API for invocation, traces for trajectories).
        session_id=status.session_id or base.harness_run_id or work.harness_run_id,
        error=error or base.error,
        harness_done_at=now,
    )


def _failed_call(work: RunWork, env: Env, doing: str, exc: EvalkitError) -> Step:
    attempt = work.attempts + 1
    retryable = isinstance(exc, HarnessError) and exc.retryable
    if retryable and attempt < env.attempts:
        again = transition(
            work, work.state, attempts=attempt, error=None, note=f"{doing} failed, retrying: {exc}"
        )
        return Step(again, wait=env.retry_wait(attempt))
    tried = f" (after {attempt} attempts)" if retryable else ""
    return Step(transition(work, "errored", error=f"{doing}{tried}: {exc}"))


def _past_deadline(work: RunWork, now: datetime) -> bool:
    return work.deadline_at is not None and now >= work.deadline_at


def _seconds_until_deadline(work: RunWork, now: datetime) -> float:
    if work.deadline_at is None:
        return math.inf
    return max((work.deadline_at - now).total_seconds(), 0.0)


def _grace_ends(work: RunWork) -> datetime:
    assert work.stop_requested_at is not None
    return work.stop_requested_at + timedelta(seconds=work.settings.stop_grace)


def _timeout_text(work: RunWork) -> str:
    return f"timed out after {work.settings.run_timeout:g} s"


async def _run_start(work: RunWork, env: Env) -> RunStart:
    return RunStart(
        evalkit_run_id=str(work.run_id),
        input=work.input,
        files=[await _file_for(f, env) for f in work.files],
        model=work.model,
        metadata=RunMetadata(
            experiment_id=work.experiment_id,
            case_id=work.case_id,
            repetition=work.repetition,
            tags=work.tags,
            split=work.split,
        ),
    )


async def _file_for(pin: InputFile, env: Env) -> InputFile:
    """The file as this harness takes it: by signed URL when it accepts URLs and the server
    signed one, else inline."""
    accepts = env.capabilities.accepts
    if accepts.file_urls and pin.url:
        return msgspec.structs.replace(pin, content_base64=None)
    if accepts.files:
        data = await env.fixture_bytes(pin.sha256)
        return msgspec.structs.replace(
            pin, url=None, content_base64=base64.b64encode(data).decode("ascii")
        )
    raise HarnessError(
        f"the case attaches file '{pin.name}' but the harness accepts neither files nor "
        "file URLs (capabilities.accepts)",
        retryable=False,
    )
