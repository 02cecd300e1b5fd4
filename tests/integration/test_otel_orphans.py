"""Traces whose root span never arrives: after otel.orphan_seconds without a new span, the
orphan job gives them the session one of their spans names, or leaves them without one and
lists them as orphan traces. Real spans through the edge; the job function is run directly,
with a clock set past the grace period."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from opentelemetry.sdk.trace.export import SpanExportResult

from evalkit.config import OtelSettings
from evalkit.db import Database
from evalkit.jobs.otel import settle_orphans
from tests.integration.datasets_helpers import login
from tests.integration.otel_helpers import (
    MAPPING,
    agent_session,
    api,
    collecting_run,
    exporter,
    make_agent,
    mint,
    recorder,
    sessions,
    settle_jobs,
)

GRACE = OtelSettings().orphan_seconds


@pytest.fixture
def agent_token(server, admin_token):
    make_agent(server, admin_token, "admin")
    return mint(server, admin_token, "admin")


async def run_job(server, *, after: float = GRACE + 1) -> dict[str, int]:
    """The orphan job as the scheduler would run it ``after`` seconds from now."""
    db = Database(server.db_url)
    await db.open()
    try:
        return await settle_orphans(
            db, OtelSettings(), now=datetime.now(UTC) + timedelta(seconds=after)
        )
    finally:
        await db.close()


def rootless(tracer, *, child_session: str | None, grandchild_session: str | None = None):
    """A trace whose root span is made but (by the caller) never sent: a child under it,
    and a grandchild under the child, each carrying the given session attribute."""

    def attrs(session):
        return {"session.id": session} if session else {}

    with (
        tracer.start_as_current_span("agent") as root,
        tracer.start_as_current_span("step", attributes=attrs(child_session)),
        tracer.start_as_current_span("llm", attributes=attrs(grandchild_session)),
    ):
        pass
    return root


def without_root(spans):
    return [s for s in spans if s.parent is not None]


async def test_a_rootless_trace_joins_the_session_its_topmost_span_names(server, agent_token):
    with recorder() as (tracer, memory):
        rootless(tracer, child_session="s1", grandchild_session="elsewhere")
        spans = memory.get_finished_spans()
    assert exporter(server, agent_token).export(without_root(spans)) == SpanExportResult.SUCCESS
    assert sessions(server) == {}  # held under the trace, waiting for its root

    assert await run_job(server, after=GRACE - 30) == {"assigned": 0, "orphans": 0}
    assert sessions(server) == {}  # still within the grace period
    assert await run_job(server) == {"assigned": 1, "orphans": 0}
    # the child (topmost span here) names s1; the grandchild's own attribute does not count
    assert {k: v["spans"] for k, v in sessions(server).items()} == {"s1": 2}
    assert await run_job(server) == {"assigned": 0, "orphans": 0}  # done once


async def test_a_waiting_run_gets_its_settle_job(server, admin_token):
    r = api(
        server,
        admin_token,
        "POST",
        "/api/workspaces/admin/agents",
        json={
            "name": "harnessed",
            "harness_url": "http://127.0.0.1:9",
            "trajectory_source": "otel",
            "mapping": MAPPING,
        },
    )
    assert r.status_code == 201, r.text
    token = mint(server, admin_token, "admin", "harnessed")
    collecting_run(server, admin_token, "admin", "harnessed", "run-7")
    with recorder() as (tracer, memory):
        rootless(tracer, child_session="run-7")
        spans = memory.get_finished_spans()
    assert exporter(server, token).export(without_root(spans)) == SpanExportResult.SUCCESS
    assert settle_jobs(server) == []
    assert await run_job(server) == {"assigned": 1, "orphans": 0}
    jobs = settle_jobs(server)
    assert [j["lock"] for j in jobs] == ["settle:1:run-7"] and not jobs[0]["later"]
    assert sessions(server)["run-7"]["spans"] == 2


async def test_a_trace_no_span_names_a_session_is_an_orphan_until_its_root_comes(
    server, cli, agent_token
):
    login(cli, server)
    with recorder() as (tracer, memory):
        root = rootless(tracer, child_session=None)
        spans = memory.get_finished_spans()
    trace = f"{root.get_span_context().trace_id:032x}"
    export = exporter(server, agent_token)
    assert export.export(without_root(spans)) == SpanExportResult.SUCCESS
    assert await run_job(server) == {"assigned": 0, "orphans": 1}
    assert sessions(server) == {}

    listed = cli("traces", "list", "--agent", "bot", "--json")
    assert listed.code == 0, listed.err
    [orphan] = listed.json
    assert orphan["session_id"] == trace and orphan["unassigned"] is True
    assert orphan["span_count"] == 2 and orphan["run_id"] is None
    everyone = cli("traces", "list", "--json").json
    assert [row["session_id"] for row in everyone] == [trace]
    text = cli("traces", "list", "--agent", "bot")
    assert "orphan trace" in text.out
    shown = cli("traces", "show", trace, "--agent", "bot")
    assert shown.code == 0, shown.err
    assert f"orphan trace {trace} of bot@admin" in shown.out
    assert "root span never arrived" in shown.out and "llm" in shown.out
    checked = cli("traces", "check", trace, "--agent", "bot", "--json")
    assert checked.json["session"]["unassigned"] is True
    assert checked.json["spans_read"] == 2
    text = cli("traces", "check", trace, "--agent", "bot")
    assert f"orphan trace {trace}" in text.out and "root span never arrived" in text.out
    assert cli("traces", "check", trace, "--json").json == checked.json  # no --agent needed

    assert await run_job(server) == {"assigned": 0, "orphans": 0}  # looked at once
    # the root comes after all, naming no session either: the trace is its own session
    assert export.export([s for s in spans if s.parent is None]) == SpanExportResult.SUCCESS
    assert {k: v["spans"] for k, v in sessions(server).items()} == {trace: 3}
    [listed] = cli("traces", "list", "--json").json
    assert (listed["session_id"], listed["unassigned"]) == (trace, False)


async def test_a_late_root_takes_the_orphan_into_its_session(server, cli, agent_token):
    login(cli, server)
    with recorder() as (tracer, memory):
        with (
            tracer.start_as_current_span("agent", attributes={"session.id": "late"}),
            tracer.start_as_current_span("step"),
        ):
            pass
        spans = memory.get_finished_spans()
    export = exporter(server, agent_token)
    assert export.export(without_root(spans)) == SpanExportResult.SUCCESS
    assert await run_job(server) == {"assigned": 0, "orphans": 1}
    assert export.export([s for s in spans if s.parent is None]) == SpanExportResult.SUCCESS
    assert sessions(server)["late"]["spans"] == 2
    assert [row["session_id"] for row in cli("traces", "list", "--json").json] == ["late"]


async def test_a_new_span_sends_an_orphan_back_to_the_job(server, agent_token):
    with recorder() as (tracer, memory):
        with tracer.start_as_current_span("agent") as root:
            with tracer.start_as_current_span("first"):
                pass
            with tracer.start_as_current_span("second", attributes={"session.id": "s2"}):
                pass
        spans = memory.get_finished_spans()
    first, second = (next(s for s in spans if s.name == name) for name in ("first", "second"))
    export = exporter(server, agent_token)
    assert export.export([first]) == SpanExportResult.SUCCESS
    assert await run_job(server) == {"assigned": 0, "orphans": 1}
    assert export.export([second]) == SpanExportResult.SUCCESS  # names a session
    assert await run_job(server) == {"assigned": 1, "orphans": 0}
    assert {k: v["spans"] for k, v in sessions(server).items()} == {"s2": 2}
    assert root.parent is None


async def test_traces_with_their_root_are_left_alone(server, agent_token):
    with recorder() as (tracer, memory):
        agent_session(tracer, "s1")
        spans = memory.get_finished_spans()
    assert exporter(server, agent_token).export(spans) == SpanExportResult.SUCCESS
    assert await run_job(server) == {"assigned": 0, "orphans": 0}
    assert {k: v["spans"] for k, v in sessions(server).items()} == {"s1": 3}
