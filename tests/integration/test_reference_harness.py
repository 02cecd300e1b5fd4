"""The reference harness on loopback, driven through evalkit's own HarnessClient: every
endpoint, idempotent start, stop, and each misbehaviour as the error evalkit would see."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import math
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import pytest

from evalkit.atif import parse_trajectory, validate_trajectory
from evalkit.harness.client import HarnessClient, HarnessError
from evalkit.harness.reference import Behaviour, ReferenceHarness
from evalkit.http1 import Http1Client
from evalkit.model.harness import InputFile, RunMetadata, RunStart, RunStatus


@asynccontextmanager
async def harness(
    behaviour: Behaviour | None = None,
    *,
    api_key: str | None = None,
    client_key: str | None = None,
    timeout: float = 5.0,
) -> AsyncIterator[tuple[ReferenceHarness, HarnessClient]]:
    ref = ReferenceHarness(behaviour, api_key=api_key).start()
    try:
        async with Http1Client(None, timeout=timeout, connect_timeout=timeout) as http:
            yield ref, HarnessClient(ref.url, client_key or api_key, http)
    finally:
        ref.stop()


def start_body(run_id: str, question: str = "What is 2 + 3?", **kw: Any) -> RunStart:
    return RunStart(
        evalkit_run_id=run_id,
        input={"question": question},
        metadata=RunMetadata(case_id=f"case-{run_id}", experiment_id=1),
        **kw,
    )


def inline(name: str, data: bytes) -> InputFile:
    return InputFile(
        name=name,
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        content_base64=base64.b64encode(data).decode(),
    )


async def until(check: Callable[[], Any], timeout: float = 5.0) -> Any:
    """Poll ``check`` (a coroutine function) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        result = await check()
        if result or time.monotonic() > deadline:
            return result
        await asyncio.sleep(0.02)


async def test_every_endpoint_through_the_client():
    async with harness() as (_ref, client):
        caps = await client.capabilities()
        assert caps.api_version == "1"
        assert (caps.accepts.stop, caps.accepts.files, caps.accepts.file_urls) == (True,) * 3
        p = caps.provides
        assert p.trajectory and p.tool_calls and p.token_usage and p.workspace and p.run_listing
        assert not p.artifacts

        started = await client.start(start_body("1"))
        assert started.status == "succeeded" and started.answer == "5"
        assert started.output == {"result": 5}
        status = await client.status(started.id)
        assert status == started
        assert status.started_at and status.finished_at and status.session_id == started.id

        traj = parse_trajectory(await client.trajectory(started.id))
        assert [s.source for s in traj.steps] == ["user", "agent", "agent"]
        assert traj.steps[0].message == "What is 2 + 3?"
        call = traj.steps[1].tool_calls[0]
        assert (call.function_name, call.arguments) == ("calculator", {"expression": "2 + 3"})
        result = traj.steps[1].observation.results[0]
        assert (result.source_call_id, result.content) == (call.tool_call_id, "5")
        assert traj.steps[2].message == "5" and traj.steps[2].metrics.completion_tokens
        assert traj.final_metrics.total_prompt_tokens > 0
        assert traj.final_metrics.total_steps == 3

        listing = await client.workspace(started.id)
        assert [(f.path, f.size) for f in listing.files] == [("answer.txt", 1)]
        assert await client.workspace_file(started.id, "answer.txt") == b"5"
        with pytest.raises(HarnessError) as missing:
            await client.workspace_file(started.id, "nope.txt")
        assert missing.value.status == 404 and not missing.value.retryable
        with pytest.raises(HarnessError) as unknown:
            await client.status("ref-999999")
        assert unknown.value.status == 404 and not unknown.value.retryable


async def test_echo_and_files_inline_and_by_url():
    async with harness() as (ref, client):
        data = b"id,amount\n1,12.50\n"
        first = await client.start(
            start_body("f1", "Summarise the ledger", files=[inline("ledger.csv", data)])
        )
        assert first.status == "succeeded"
        assert first.answer == "Summarise the ledger\n\nFiles read: ledger.csv (18 bytes)"
        assert await client.workspace_file(first.id, "inputs/ledger.csv") == data
        # The same bytes by URL: the harness downloads them (here from its own workspace
        # route) and checks the sha256.
        url = f"{ref.url}/runs/{first.id}/workspace/inputs/ledger.csv"
        by_url = InputFile(
            name="copy.csv", sha256=hashlib.sha256(data).hexdigest(), size=len(data), url=url
        )
        second = await client.start(start_body("f2", "What is 6 * 7?", files=[by_url]))
        assert second.answer == "42\n\nFiles read: copy.csv (18 bytes)"
        traj = parse_trajectory(await client.trajectory(second.id))
        names = [c.function_name for c in traj.steps[1].tool_calls]
        assert names == ["read_file", "calculator"]
        # Each file read is observed with the size and digest of the bytes the harness got.
        digest = hashlib.sha256(data).hexdigest()
        assert [(r.source_call_id, r.content) for r in traj.steps[1].observation.results] == [
            ("call-file-1", f"copy.csv: 18 bytes, sha256 {digest}"),
            ("call-calc-1", "42"),
        ]
        # Bytes that do not match their sha256 fail the run and say which file.
        wrong = InputFile(name="bad.csv", sha256="0" * 64, size=len(data), url=url)
        failed = await client.start(start_body("f3", files=[wrong]))
        assert failed.status == "failed" and "bad.csv" in failed.error
        assert "sha256" in failed.error
        assert validate_trajectory(msgspec.json.decode(await client.trajectory(failed.id))) == []


async def test_start_is_idempotent_on_the_evalkit_run_id():
    async with harness() as (ref, client):
        one = await client.start(start_body("42"))
        again = await client.start(start_body("42", "something else entirely"))
        assert again == one
        together = await asyncio.gather(*(client.start(start_body("43")) for _ in range(5)))
        assert len({r.id for r in together}) == 1
        assert ref.counters.starts == {"42": 2, "43": 5}
        assert ref.counters.runs_created == 2


async def test_run_listing_pages_with_a_cursor():
    async with harness() as (_ref, client):
        ids = [(await client.start(start_body(str(n)))).id for n in range(105)]
        first = await client.list_runs()
        assert len(first.runs) == 100 and first.next_cursor
        rest = await client.list_runs(first.next_cursor)
        assert rest.next_cursor is None
        assert [r.id for r in first.runs + rest.runs] == ids
        with pytest.raises(HarnessError) as bad:
            await client.list_runs("not-a-cursor")
        assert bad.value.status == 400 and not bad.value.retryable


async def test_slow_runs_stop_and_the_live_count():
    async with harness(Behaviour(run_seconds=math.inf)) as (ref, client):
        runs = [await client.start(start_body(str(n))) for n in range(3)]
        assert {r.status for r in runs} == {"running"}
        assert ref.counters.max_live == 3 and ref.live_runs() == 3
        assert (await client.status(runs[0].id)).answer is None
        stopped = await client.stop(runs[0].id)
        assert stopped is not None and stopped.status == "stopped" and stopped.finished_at
        assert (await client.status(runs[0].id)).status == "stopped"
        assert ref.counters.stops[runs[0].id] == 1 and ref.live_runs() == 2
        # A stopped run's trajectory is valid and has no final answer.
        traj = parse_trajectory(await client.trajectory(runs[0].id))
        assert [s.source for s in traj.steps] == ["user", "agent"]
        assert "stopped" in (traj.notes or "")
        # Stopping a final run changes nothing.
        assert (await client.stop(runs[0].id)).status == "stopped"
        # The trajectory of a live run is valid too (a partial view).
        live = parse_trajectory(await client.trajectory(runs[1].id))
        assert live.steps[-1].tool_calls


async def test_runs_finish_after_run_seconds_and_stop_takes_stop_seconds():
    async with harness(Behaviour(run_seconds=0.3, stop_seconds=0.2)) as (ref, client):
        a = await client.start(start_body("a"))
        b = await client.start(start_body("b"))
        assert a.status == b.status == "running"
        stopping = await client.stop(b.id)
        assert stopping.status == "running"
        done = await until(lambda: _status_is(client, a.id, "succeeded"), timeout=3)
        assert done.answer == "5"
        assert (await client.status(b.id)).status == "stopped"
        assert ref.live_runs() == 0 and ref.counters.max_live == 2


async def _status_is(client: HarnessClient, run_id: str, value: str) -> RunStatus | None:
    status = await client.status(run_id)
    return status if status.status == value else None


async def test_api_key():
    async with harness(api_key="s3cret", client_key="wrong") as (_ref, client):
        with pytest.raises(HarnessError) as refused:
            await client.capabilities()
        assert refused.value.status == 401 and not refused.value.retryable
    async with harness(api_key="s3cret") as (_ref, client):
        assert (await client.capabilities()).api_version == "1"


async def test_5xx_on_the_first_calls_is_retryable():
    async with harness(Behaviour(fail_first={"start": 2, "trajectory": 1})) as (ref, client):
        for _ in range(2):
            with pytest.raises(HarnessError) as err:
                await client.start(start_body("1"))
            assert err.value.status == 503 and err.value.retryable
        run = await client.start(start_body("1"))
        with pytest.raises(HarnessError) as err:
            await client.trajectory(run.id)
        assert err.value.retryable
        assert validate_trajectory(msgspec.json.decode(await client.trajectory(run.id))) == []
        assert ref.counters.runs_created == 1 and ref.counters.calls["start"] == 3


async def test_a_hanging_start_has_started_the_run_and_a_retry_finds_it():
    behaviour = Behaviour(hang_first={"start": 1})
    async with harness(behaviour, timeout=0.3) as (ref, client):
        with pytest.raises(HarnessError) as err:
            await client.start(start_body("7"))
        assert err.value.retryable and "no answer in time" in err.value.message
        assert ref.run_for("7") is not None
        again = await client.start(start_body("7"))
        assert again.id == ref.run_for("7").id
        assert ref.counters.runs_created == 1 and ref.counters.starts["7"] == 2


async def test_hanging_and_garbage_status_are_retryable():
    async with harness(Behaviour(hang_first={"status": 1}), timeout=0.3) as (_ref, client):
        run = await client.start(start_body("1"))
        with pytest.raises(HarnessError) as err:
            await client.status(run.id)
        assert err.value.retryable
        assert (await client.status(run.id)).status == "succeeded"
    async with harness(Behaviour(garbage_status=True)) as (_ref, client):
        run = await client.start(start_body("1"))
        with pytest.raises(HarnessError) as err:
            await client.status(run.id)
        assert err.value.retryable and "not JSON" in err.value.message


async def test_invalid_trajectory_is_json_that_breaks_atif():
    async with harness(Behaviour(invalid_trajectory=True)) as (_ref, client):
        run = await client.start(start_body("1"))
        errors = validate_trajectory(msgspec.json.decode(await client.trajectory(run.id)))
        rules = {e.rule for e in errors}
        assert {"step-id-sequence", "agent-only-field"} <= rules


async def test_ignore_stop_keeps_the_run_going():
    async with harness(Behaviour(run_seconds=math.inf, ignore_stop=True)) as (ref, client):
        run = await client.start(start_body("1"))
        answer = await client.stop(run.id)
        assert answer.status == "running"
        assert (await client.status(run.id)).status == "running"
        assert ref.counters.stops[run.id] == 1 and ref.live_runs() == 1


async def test_a_lying_harness_declares_what_it_does_not_serve():
    async with harness(Behaviour(lie=True, without=frozenset({"stop", "run_listing"}))) as (
        _ref,
        client,
    ):
        caps = await client.capabilities()
        assert caps.accepts.stop and caps.provides.trajectory and caps.provides.run_listing
        run = await client.start(start_body("1"))
        with pytest.raises(HarnessError) as stop:
            await client.stop(run.id)
        assert stop.value.status == 501
        for call in (client.trajectory(run.id), client.list_runs()):
            with pytest.raises(HarnessError) as err:
                await call
            assert err.value.status == 404 and not err.value.retryable
        assert (await client.workspace(run.id)).files  # what it does serve still works


async def test_failing_every_run():
    async with harness(Behaviour(fail_runs=True)) as (_ref, client):
        run = await client.start(start_body("1"))
        assert run.status == "failed" and "fails every run" in run.error
        assert run.answer is None
        traj = parse_trajectory(await client.trajectory(run.id))
        assert traj.steps[-1].message.startswith("I could not finish")


async def test_an_honest_harness_without_a_capability_refuses_it():
    lacks = frozenset({"file_urls", "workspace", "thinking"})
    async with harness(Behaviour(without=lacks)) as (ref, client):
        caps = await client.capabilities()
        assert not caps.accepts.file_urls and caps.accepts.files
        assert not caps.provides.workspace and not caps.provides.thinking
        url_file = InputFile(name="a", sha256="0" * 64, size=1, url=f"{ref.url}/x")
        with pytest.raises(HarnessError) as err:
            await client.start(start_body("1", files=[url_file]))
        assert err.value.status == 400 and not err.value.retryable
        run = await client.start(start_body("2"))
        with pytest.raises(HarnessError) as err:
            await client.workspace(run.id)
        assert err.value.status == 404


def test_behaviour_names_are_checked():
    with pytest.raises(ValueError, match="unknown endpoint"):
        Behaviour(fail_first={"begin": 1})
    with pytest.raises(ValueError, match="unknown capabilities"):
        Behaviour(without=frozenset({"teleport"}))
