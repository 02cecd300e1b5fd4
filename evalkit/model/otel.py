"""Wire objects of agent tokens and stored traces (sessions and their spans)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from evalkit.model.api import Input, Output
from evalkit.otel.model import Span


class AgentTokenCreate(Input):
    note: str | None = None
    """Free text to tell tokens apart later (where it is deployed, who holds it)."""


class AgentToken(Output):
    id: int
    agent: str
    workspace: str
    hint: str
    """The token's first characters; the token itself is never shown again."""
    note: str | None
    created_at: datetime
    created_by: str | None
    last_used_at: datetime | None
    revoked_at: datetime | None


class AgentTokenCreated(Output):
    token: str
    """Send as ``Authorization: Bearer <token>`` to the collector; shown once."""
    info: AgentToken


class CollectorTarget(Output):
    """The agent the collector stores spans for, given these credentials (an agent token,
    or a login with ``X-Evalkit-Agent``): what ``tracing.register`` checks before a run."""

    agent: str
    """``name@workspace``."""
    session_names: list[str]
    """The attribute names the agent's active mapping reads the session id from."""


class TraceSession(Output):
    agent: str
    workspace: str
    session_id: str
    run_id: int | None
    span_count: int
    bytes: int
    rejected_spans: int
    truncated: bool
    """Spans were refused because the session reached ``otel.max_session_bytes``."""
    first_span_at: datetime | None
    last_span_at: datetime | None
    first_received_at: datetime
    last_received_at: datetime
    unassigned: bool = False
    """Not a session but an orphan trace: its root span never arrived (within
    ``otel.orphan_seconds``) and none of its spans carries the session attribute the agent's
    mapping names, so it belongs to no session; ``session_id`` is its trace id (hex)."""


class TraceSessionDetail(Output):
    session: TraceSession
    spans: list[Span]


class TraceCheckStep(Output):
    step_id: int
    source: str
    message: str
    tool_calls: list[str]
    observations: int


class TraceFinding(Output):
    """Something that looks wrong in the built trajectory though it was read: ``rule`` (see
    docs/tracing.md), the span and attribute concerned, and what to change."""

    rule: str
    span_id: str | None
    attribute: str
    message: str


class TraceCheck(Output):
    """What the server makes of a session with the agent's active mapping."""

    session: TraceSession
    mapping_version: int
    spans_read: int
    spans_excluded: int
    answer: str | None
    unread: list[str]
    steps: list[TraceCheckStep]
    trajectory_valid: bool
    trajectory_errors: list[str]
    trajectory: dict[str, Any]
    findings: list[TraceFinding] = msgspec.field(default_factory=list)
