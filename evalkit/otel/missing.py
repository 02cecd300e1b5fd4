"""A traced run whose trajectory was built from no spans: what the run page and ``evalkit
runs show`` say about it, from where the run's session is (or is not) on the server.

An exporter the collector refuses (an expired login, a revoked token, a token of another
agent) drops its spans with one line in its own log, and the run still ends ``done``, with
no trajectory. Looking the run's session id up in every agent tells "no span of this
session arrived" from "they went to another agent" and from "they arrived, but the
trajectory failed for another reason" (the stored error says which)."""

from __future__ import annotations

from dataclasses import dataclass

from evalkit.model.otel import TraceSession
from evalkit.model.runs import Run

NOT_COLLECTED = "not-collected"
"""The rule of a trajectory error that says nothing was collected (see store.runs)."""


@dataclass(frozen=True)
class NoSpans:
    """Why a traced run has no trajectory: the headline, and what to check, in order."""

    summary: str
    checks: list[str]


def awaited_spans(run: Run) -> bool:
    """The run's trajectory was to be built from its session's spans, and none was built."""
    return (
        run.trajectory_source == "otel"
        and bool(run.session_id)
        and run.trajectory_valid is False
        and any(e.rule == NOT_COLLECTED for e in run.trajectory_errors)
    )


def no_spans(run: Run, agent: str, found: list[TraceSession]) -> NoSpans | None:
    """What to say about ``run`` of ``agent`` (``name@workspace``) given the sessions with
    its session id in every agent (``found``); None when its own agent has that session
    (spans did arrive: the stored error says what went wrong) or it waited for none."""
    if not awaited_spans(run):
        return None
    mine = [s for s in found if f"{s.agent}@{s.workspace}" == agent]
    if mine:
        return None
    others = sorted({f"{s.agent}@{s.workspace}" for s in found})
    if others:
        return NoSpans(
            summary=(
                f"no spans arrived for {agent}: the spans of session {run.session_id} went "
                f"to {', '.join(others)}"
            ),
            checks=[
                f"tracing.register names {others[0]}, or its token (EVALKIT_OTEL_TOKEN) is "
                f"{others[0]}'s: register tracing for {agent}, the agent the experiment runs",
                "an agent in another process sends its spans with its own exporter: point it "
                f"at {agent} too",
            ],
        )
    return NoSpans(
        summary=f"no spans arrived: no span of session {run.session_id} reached the server",
        checks=[
            f"the agent's exporter sends to this server's /api/otel/v1/traces for {agent} "
            "(with the SDK: tracing.register in the process that makes the spans, before "
            "the first run)",
            "the exporter's token is accepted: a login expires and a revoked agent token is "
            "refused, and a refused exporter only logs a line and drops every span; a "
            "deployed agent uses an agent token (`evalkit tokens create --agent "
            f"{agent}`)",
            "an agent in another process continues the run's trace (traceparent) or uses "
            "the run's session id (metadata['session_id'], or tracing.eval_run)",
            "the spans carry the session id under an attribute the agent's span mapping "
            "names (`evalkit traces list` shows the sessions that did arrive)",
        ],
    )
