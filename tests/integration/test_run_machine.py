"""The run state machine's retries, step by step against a real harness on loopback: what a
failing call waits before the next attempt (doubling, capped), how many attempts it gets,
and the reason the run ends with. The server's jobs and the CLI driver both take these
steps; they only differ in how they record them."""

from __future__ import annotations

import asyncio
import math
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from evalkit.harness.client import HarnessClient
from evalkit.harness.reference import Behaviour, ReferenceHarness
from evalkit.http1 import Http1Client
from evalkit.model.harness import Capabilities
from evalkit.model.runs import RunSettings, RunWork
from evalkit.runs import machine
from evalkit.serve import free_port


async def _no_fixtures(sha256: str) -> bytes:
    raise AssertionError(f"no input file expected, asked for {sha256}")


def make_env(
    url: str, http: Http1Client, caps: Capabilities | None = None, **kw: Any
) -> machine.Env:
    """The machine's environment for the harness at ``url`` (``kw``: the retry policy, the
    clock)."""
    return machine.Env(
        harness=HarnessClient(url, None, http),
        capabilities=caps or Capabilities(),
        fixture_bytes=_no_fixtures,
        **kw,
    )


def work(
    state: str = "starting",
    poll_interval: float = 0.01,
    run_timeout: float = 600,
    stop_grace: float = 1,
    **kw: object,
) -> RunWork:
    return RunWork(
        run_id=7,
        experiment_id=1,
        state=state,  # type: ignore[arg-type]
        case_id="add",
        repetition=1,
        input={"question": "What is 2 + 3?"},
        settings=RunSettings(
            run_timeout=run_timeout,
            poll_interval=poll_interval,
            stop_grace=stop_grace,
            trajectory_wait=1,
        ),
        **kw,  # type: ignore[arg-type]
    )


async def drive(
    run: RunWork,
    url: str,
    *,
    attempts: int,
    backoff: float,
    timeout: float = 2.0,
    caps: Capabilities | None = None,
) -> tuple[list[float], RunWork, str | None]:
    """Steps until the run leaves starting/running/stopping; returns the retry waits, the
    run, and its error. The waits are not slept: the step says them, the driver honours
    them."""
    async with Http1Client(None, timeout=timeout, connect_timeout=timeout) as http:
        env = make_env(url, http, caps, attempts=attempts, backoff=backoff)
        waits: list[float] = []
        error = None
        while run.state in ("starting", "running", "stopping"):
            step = await machine.step(run, env)
            if step.transition is None:  # a live run polled again later
                await asyncio.sleep(step.wait)
                continue
            if step.transition.attempts:  # the same call again, after this wait
                waits.append(step.wait)
            error = step.transition.error or error
            run = machine.advance(run, step.transition)
        return waits, run, error


@pytest.mark.parametrize(
    ("attempts", "backoff", "expected"),
    [(5, 1.0, [1.0, 2.0, 4.0, 8.0]), (8, 10.0, [10.0, 20.0, 40.0, 60.0, 60.0, 60.0, 60.0])],
)
async def test_5xx_is_retried_with_doubling_backoff_then_errors(attempts, backoff, expected):
    with ReferenceHarness(Behaviour(fail_first={"start": 100})) as ref:
        waits, run, error = await drive(work(), ref.url, attempts=attempts, backoff=backoff)
    assert waits == expected
    assert run.state == "errored" and run.attempts == 0
    assert error is not None
    assert error.startswith(f"starting the run (after {attempts} attempts): POST {ref.url}/runs")
    assert "answered 503" in error
    assert ref.counters.calls["start"] == attempts and ref.counters.runs_created == 0


async def test_connection_refused_is_retried_then_errors():
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    waits, run, error = await drive(work(), url, attempts=3, backoff=0.5)
    assert waits == [0.5, 1.0] and run.state == "errored"
    assert error is not None and "(after 3 attempts)" in error and "cannot connect" in error


async def test_a_hanging_harness_is_retried_then_errors():
    with ReferenceHarness(Behaviour(run_seconds=math.inf, hang_first={"status": 100})) as ref:
        # Started fine; every poll hangs past the client's timeout.
        waits, run, error = await drive(work(), ref.url, attempts=3, backoff=0.1, timeout=0.3)
    assert run.harness_run_id is not None and run.state == "errored"
    assert waits == [0.1, 0.2]
    assert error is not None
    assert error.startswith("polling the run (after 3 attempts)") and "no answer in time" in error
    assert ref.counters.calls["status"] == 3


async def test_garbage_json_is_retried_then_errors():
    with ReferenceHarness(Behaviour(run_seconds=math.inf, garbage_status=True)) as ref:
        waits, run, error = await drive(work(), ref.url, attempts=4, backoff=0.25)
    assert waits == [0.25, 0.5, 1.0] and run.state == "errored"
    assert error is not None and "(after 4 attempts)" in error and "not JSON" in error


async def test_a_recovered_call_resets_the_attempts():
    with ReferenceHarness(Behaviour(run_seconds=0.2, fail_first={"status": 2})) as ref:
        waits, run, error = await drive(work(), ref.url, attempts=3, backoff=0.01)
    # Two 503s on the poll, then the harness answers: the run goes on, its count reset.
    assert waits == [0.01, 0.02] and run.state == "collecting" and run.attempts == 0
    assert run.harness_status == "succeeded" and ref.counters.calls["status"] >= 3
    assert error is None


async def test_what_is_not_worth_retrying_errors_at_once():
    with ReferenceHarness() as ref:
        # A run the harness does not know is a 404: a 4xx is not retried.
        waits, run, error = await drive(
            work("running", harness_run_id="nope"), ref.url, attempts=5, backoff=1.0
        )
    assert waits == [] and run.state == "errored"
    assert error is not None and "polling the run: GET" in error and "answered 404" in error
    assert ref.counters.calls["status"] == 1


async def test_a_live_run_is_polled_every_poll_interval():
    with ReferenceHarness(Behaviour(run_seconds=math.inf)) as ref:
        async with Http1Client(None, timeout=2.0, connect_timeout=2.0) as http:
            env = make_env(ref.url, http)
            run = work(poll_interval=0.7)
            step = await machine.step(run, env)
            assert step.transition is not None and step.transition.to_state == "running"
            assert step.wait == 0.7
            run = machine.advance(run, step.transition)
            for _ in range(3):
                step = await machine.step(run, env)
                assert step.transition is None and step.wait == 0.7
    assert ref.counters.calls["status"] == 3 and ref.counters.runs_created == 1


async def test_the_run_timeout_bounds_a_run_whose_polls_hang():
    """Every poll hangs: past the deadline the run is stopped, given its grace and
    collected as timed out, instead of retrying its polls until it errors."""
    with ReferenceHarness(Behaviour(run_seconds=math.inf, hang_first={"status": 100})) as ref:
        began = time.monotonic()
        # The client's own timeout (3 s) is longer than the run timeout: the poll is cut
        # at the deadline, not at the client's timeout.
        _waits, run, error = await drive(
            work(run_timeout=1.0, stop_grace=0.6),
            ref.url,
            attempts=5,
            backoff=0.1,
            timeout=3.0,
            caps=ref.state.capabilities,
        )
        took = time.monotonic() - began
    assert run.state == "collecting" and run.timed_out
    assert run.stop_requested_at is not None
    assert sum(ref.counters.stops.values()) == 1
    assert error is not None and error.startswith("timed out after 1 s")
    assert "the harness was asked to stop but could not be polled" in error
    # Deadline 1 s, then a grace of 0.6 s; each poll past either gets at most 0.5 s.
    assert took < 1.0 + machine.MIN_POLL_SECONDS + 0.6 + machine.MIN_POLL_SECONDS + 0.5, took


async def test_a_poll_cut_at_its_bound_ends_the_wait_though_the_clock_lags():
    """The event loop's timers may fire a moment before the clock reaches the bound they
    were set for (uvloop's did in 8 of 200 timeouts here, by up to 0.7 ms). A clock that
    runs at 90% of time's speed makes that happen at every bound: a poll cut at the
    deadline still times the run out, and one cut at the end of the stop grace still
    collects it, with no retry of the poll (and no poll past the bound) in between."""
    began = datetime.now(UTC)

    def lagging() -> datetime:
        return began + (datetime.now(UTC) - began) * 0.9

    with ReferenceHarness(Behaviour(run_seconds=math.inf, hang_first={"status": 100})) as ref:
        async with Http1Client(None, timeout=3.0, connect_timeout=3.0) as http:
            env = make_env(ref.url, http, ref.state.capabilities, now=lagging)
            # longer than the shortest poll, so that each poll is cut at the bound itself
            bound = machine.MIN_POLL_SECONDS + 0.3
            run = work(run_timeout=bound, stop_grace=bound, poll_interval=5)
            states = []
            while run.state in ("starting", "running", "stopping"):
                step = await machine.step(run, env)
                assert step.transition is not None, "a hanging poll is never answered"
                states.append(step.transition.to_state)
                run = machine.advance(run, step.transition)
    assert states == ["running", "stopping", "collecting"]
    assert run.timed_out and ref.counters.calls["status"] == 2
    assert sum(ref.counters.stops.values()) == 1


async def test_a_failed_poll_wakes_the_run_at_its_deadline():
    """A failed poll before the deadline waits no longer than the deadline for its retry."""
    with ReferenceHarness(Behaviour(run_seconds=math.inf, fail_first={"status": 100})) as ref:
        async with Http1Client(None, timeout=2.0, connect_timeout=2.0) as http:
            env = make_env(ref.url, http, ref.state.capabilities, backoff=30.0)
            run = work(run_timeout=0.5, poll_interval=5)
            started = await machine.step(run, env)
            assert started.transition is not None
            run = machine.advance(run, started.transition)
            failed = await machine.step(run, env)
            assert failed.transition is not None and failed.transition.attempts == 1
            assert 0 < failed.wait <= 0.5
            run = machine.advance(run, failed.transition)
            await asyncio.sleep(failed.wait)
            timed_out = await machine.step(run, env)
    assert timed_out.transition is not None
    assert timed_out.transition.to_state == "stopping" and timed_out.transition.timed_out
    assert "its last poll failed" in (timed_out.transition.error or "")
    assert sum(ref.counters.stops.values()) == 1
