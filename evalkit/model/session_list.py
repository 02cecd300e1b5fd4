"""Wire objects of the trace session list: sessions of every agent, filtered and paged, each
with the run (and its experiment and case) that claimed it."""

from __future__ import annotations

from datetime import datetime

from evalkit.model.api import Output


class SessionRun(Output):
    """The run that claimed a session, and where its experiment and case live."""

    id: int
    state: str
    experiment_id: int
    case_id: str
    repetition: int
    dataset: str
    dataset_workspace: str
    """The case's page is /w/{dataset_workspace}/datasets/{dataset}/cases/{case_id}."""


class SessionListed(Output):
    agent: str
    workspace: str
    session_id: str
    span_count: int
    bytes: int
    rejected_spans: int
    truncated: bool
    """Spans were refused because the session reached ``otel.max_session_bytes``."""
    first_span_at: datetime | None
    last_span_at: datetime | None
    first_received_at: datetime
    last_received_at: datetime
    run: SessionRun | None
    """None until a run claims the session (its trajectory settle job)."""
    unassigned: bool = False
    """Not a session but an orphan trace: its root span never arrived and none of its spans
    names a session; ``session_id`` is its trace id (hex), as ``traces list`` shows it."""


class SessionPage(Output):
    sessions: list[SessionListed]
    offset: int
    limit: int
    more: bool
    """True when sessions past this page exist (ask again with offset + limit)."""
