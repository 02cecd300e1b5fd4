"""The fake agents of tests/otel_agents.py sent through the real OTLP/HTTP exporter (and as
OTLP/JSON) to the edge, read back from the database, and built with the shipped starters:
the trajectory is the expected one, step by step, the same as from the in-memory spans."""

from __future__ import annotations

import httpx
import pytest
from opentelemetry.sdk.trace.export import SpanExportResult

from evalkit.atif import validate_trajectory
from evalkit.db import Database
from evalkit.otel.build import build_trajectory
from evalkit.otel.mapping import load_starter, parse_mapping
from evalkit.store.otel import spans_for_session
from tests.integration.otel_helpers import TRACES, exporter, json_body, make_agent, mint
from tests.otel_agents import (
    ANSWER,
    GENAI_FORMS,
    expected_trajectory,
    genai_agent,
    openinference_agent,
    spans_of,
    tracer_and_exporter,
)


async def stored(server, session: str) -> list:
    db = Database(server.db_url)
    await db.open()
    try:
        async with db.connection() as conn:
            return await spans_for_session(conn, 1, session)
    finally:
        await db.close()


def send(server, token: str, memory, how: str) -> None:
    spans = memory.get_finished_spans()
    if how == "json":
        r = httpx.post(
            server.url + TRACES,
            json=json_body(spans),
            headers={"Authorization": f"Bearer {token}"},
        )
        assert r.status_code == 200, r.text
    else:
        export = exporter(server, token, gzip=how == "gzip")
        assert export.export(spans) == SpanExportResult.SUCCESS


@pytest.mark.parametrize("how", ["protobuf", "gzip", "json"])
async def test_openinference_agent_through_the_collector(server, admin_token, how):
    make_agent(server, admin_token, "admin", mapping=load_starter("openinference"))
    token = mint(server, admin_token, "admin")
    tracer, memory = tracer_and_exporter()
    openinference_agent(tracer, "sess-oi")
    send(server, token, memory, how)

    spans = await stored(server, "sess-oi")
    assert len(spans) == 4
    mapping = parse_mapping(load_starter("openinference"))
    result = build_trajectory(spans, mapping, session_id="sess-oi", agent_name="weather")
    assert validate_trajectory(result.trajectory) == []
    expected = expected_trajectory(
        spans,
        session="sess-oi",
        version="1.2.0",
        tool_span="get_weather",
        llm_span="ChatCompletion",
        cost=True,
        extra_metrics={"reasoning_tokens": 8},
    )
    for got, want in zip(result.trajectory["steps"], expected["steps"], strict=True):
        assert got == want
    assert result.trajectory == expected
    assert (result.answer, result.unread) == (ANSWER, [])
    local = build_trajectory(spans_of(memory), mapping, session_id="sess-oi", agent_name="weather")
    assert local.trajectory == result.trajectory


@pytest.mark.parametrize("form", GENAI_FORMS)
async def test_genai_agent_through_the_collector(server, admin_token, form):
    make_agent(server, admin_token, "admin", mapping=load_starter("genai"))
    token = mint(server, admin_token, "admin")
    tracer, memory = tracer_and_exporter()
    genai_agent(tracer, form, "sess-genai")
    send(server, token, memory, "protobuf")

    spans = await stored(server, "sess-genai")
    assert len(spans) == 4
    result = build_trajectory(
        spans, parse_mapping(load_starter("genai")), session_id="sess-genai", agent_name="weather"
    )
    assert validate_trajectory(result.trajectory) == []
    expected = expected_trajectory(
        spans,
        session="sess-genai",
        version="0.9.1",
        tool_span="execute_tool get_weather",
        llm_span="chat gpt-4o-mini",
        reasoning=form != "message_events",
    )
    for got, want in zip(result.trajectory["steps"], expected["steps"], strict=True):
        assert got == want
    assert result.trajectory == expected
    assert (result.answer, result.unread) == (ANSWER, [])
