"""What the server makes of a trace session: the trajectory its agent's active mapping
builds from the stored spans, and what the mapping could not read (`evalkit traces check`)."""

from __future__ import annotations

from evalkit.atif import validate_trajectory
from evalkit.auth import access
from evalkit.edge.endpoint import Call, Endpoint
from evalkit.errors import NotFound
from evalkit.model import otel as wire
from evalkit.otel.build import build_trajectory
from evalkit.otel.mapping import parse_mapping
from evalkit.store import otel as store
from evalkit.store.agents import active_mapping, get_agent
from evalkit.store.workspaces import get_workspace


async def traces_check(call: Call) -> wire.TraceCheck:
    access.require_read(call.actor)
    session_id = call.param("session")
    async with call.db.connection() as conn:
        ws = await get_workspace(conn, call.actor, call.param("workspace"))
        agent = await get_agent(conn, ws.id, call.param("agent"))
        row = await store.session_row(conn, agent.id, session_id)
        if row is None:  # or an orphan trace, by its trace id
            row = await store.orphan_row(conn, agent.id, session_id)
        if row is None:
            raise NotFound(
                f"agent {agent.ref} has no session {session_id!r}: no span with that session "
                "id reached the collector (check the exporter's endpoint and token, and that "
                f"the spans carry the attribute the mapping names); see `evalkit traces list "
                f"--agent {agent.ref}`",
                code="no-such-session",
            )
        mapping = await active_mapping(conn, agent.id)
        if mapping is None:
            raise NotFound(
                f"agent {agent.ref} has no active span mapping; set one with `evalkit agents "
                f"mapping set {agent.ref} FILE --activate`",
                code="no-active-mapping",
            )
        spans = await store.spans_for_row(conn, agent.id, row)
    session = store.session_from_row(row)
    built = build_trajectory(
        spans,
        parse_mapping(mapping[1]),
        session_id=session_id,
        agent_name=agent.name,
        truncated=session.truncated,
    )
    errors = validate_trajectory(built.trajectory)
    return wire.TraceCheck(
        session=session,
        mapping_version=mapping[0],
        spans_read=built.spans,
        spans_excluded=built.excluded,
        answer=built.answer,
        unread=built.unread,
        steps=[_step_line(step) for step in built.trajectory.get("steps", [])],
        trajectory_valid=not errors,
        trajectory_errors=[f"{e.path or '(document)'}: [{e.rule}] {e.message}" for e in errors],
        trajectory=built.trajectory,
        findings=[
            wire.TraceFinding(
                rule=f.rule, span_id=f.span_id, attribute=f.attribute, message=f.message
            )
            for f in built.findings
        ],
    )


def _step_line(step: dict) -> wire.TraceCheckStep:
    message = step.get("message")
    text = message if isinstance(message, str) else ("(parts)" if message else "")
    calls = [c.get("function_name", "?") for c in step.get("tool_calls") or []]
    results = len((step.get("observation") or {}).get("results") or [])
    return wire.TraceCheckStep(
        step_id=step.get("step_id", 0),
        source=step.get("source", "?"),
        message=" ".join(text.split())[:120],
        tool_calls=calls,
        observations=results,
    )


ENDPOINTS = [
    Endpoint(
        "GET",
        "/api/workspaces/{workspace}/agents/{agent}/sessions/{session}/check",
        traces_check,
        "The trajectory the agent's active mapping builds from a session's spans, and what "
        "it could not read",
        returns=wire.TraceCheck,
        tags=["otel"],
    ),
]
