"""Wire objects for monitors: online scoring of a deployed agent's sessions."""

from __future__ import annotations

from datetime import date, datetime

import msgspec

from evalkit.model.api import Input, Output
from evalkit.model.stats import GateResult


class MonitorCreate(Input, kw_only=True):
    name: str
    agent: str
    """``AGENT@WORKSPACE``; the monitor lives in the agent's workspace."""
    sample_rate: float = 1.0
    cap_per_hour: int | None = None
    evaluators: list[str] = msgspec.field(default_factory=list)
    """Built-in gauges (latency, steps, tokens, cost, tool_call_count) and remote
    evaluators of the agent's workspace, by name."""
    rubric: str | None = None
    """The judge's rubric; its score is named ``judge``."""
    backfill_seconds: float | None = None
    """Also score the stored sessions of this many seconds before now."""


class MonitorUpdate(Input, kw_only=True):
    """What to change; a field left out stays as it is."""

    sample_rate: float | None = None
    cap_per_hour: int | None = None
    no_cap: bool = False
    evaluators: list[str] | None = None
    rubric: str | None = None
    no_rubric: bool = False


class MonitorBackfill(Input, kw_only=True):
    since_seconds: float


class Monitor(Output, kw_only=True):
    id: int
    name: str
    workspace: str
    agent: str
    """``AGENT@WORKSPACE``."""
    version: int
    """Goes up on every change of what it scores with; each version scores a session once."""
    sample_rate: float
    cap_per_hour: int | None
    gauges: list[str]
    evaluators: list[str]
    rubric: str | None
    capped_sessions: int
    """Sessions passed over because the hour's cap was reached."""
    scanned_until: datetime
    created_at: datetime
    updated_at: datetime


class MonitorBackfilled(Output, kw_only=True):
    considered: int
    taken: int
    """Sessions sampled in and queued for scoring."""


class MonitorCreated(Output, kw_only=True):
    monitor: Monitor
    backfill: MonitorBackfilled | None = None


class MonitorDay(Output, kw_only=True):
    day: date
    n: int
    mean: float | None
    pass_rate: float | None
    raw_mean: float | None


class MonitorScore(Output, kw_only=True):
    """One score over the window: its readings, mean, pass rate and measurement, per day."""

    name: str
    kind: str
    n: int
    """Readings (evaluators: values; gauges: measurements)."""
    mean: float | None
    pass_rate: float | None
    pass_interval: list[float] | None
    raw_mean: float | None
    errors: int
    skipped: int
    days: list[MonitorDay]


class MonitorSummary(Output, kw_only=True):
    monitor: Monitor
    window_seconds: float
    since: datetime
    taken: int
    """Sessions taken for scoring in the window."""
    scored: int
    scores: list[MonitorScore]


class MonitorSession(Output, kw_only=True):
    session_id: str
    agent: str
    settled_at: datetime
    scores: dict[str, float | None]
    """Evaluator values and gauge measurements, by score name."""


class MonitorCheck(Output, kw_only=True):
    monitor: str
    window_seconds: float
    passed: bool
    gates: list[GateResult]
