"""Wire objects for scores and scoring rounds (``evalkit evaluate``, ``runs show``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec

from evalkit.model.api import Input, Output


class Score(Output, kw_only=True):
    """One stored score of a run in one scoring round."""

    round: int
    name: str
    value: float | None
    """In [0, 1]; None when there is no reading (a gauge, a skip, an error)."""
    kind: Literal["evaluator", "gauge"]
    explanation: str | None = None
    error: str | None = None
    skipped: str | None = None
    evaluator: str
    """Who scored: ``builtin:NAME``, ``judge``, ``remote:NAME``."""
    evaluator_version: str | None = None
    judge_model: str | None = None
    prompt_hash: str | None = None
    raw: Any = None
    """A gauge's measurement (seconds, tokens, USD, a count)."""
    created_at: datetime


class EvaluateRequest(Input, kw_only=True):
    evaluators: list[str] | None = None
    """Only these evaluators (a built-in name, ``judge``, ``custom.NAME`` or ``custom``);
    None: every evaluator each case selects."""


class ScoreTotals(Output, kw_only=True):
    """One score name over the runs of one round."""

    name: str
    kind: Literal["evaluator", "gauge"]
    runs: int
    mean: float | None
    """The mean value of the readings (checks); None when no run had one."""
    raw_mean: float | None = None
    """The mean measurement (gauges)."""
    skipped: int = 0
    errors: int = 0


class ScoringRound(Output, kw_only=True):
    """One scoring pass over an experiment's runs: round 1 when the runs finished, later
    ones from ``evalkit evaluate``."""

    experiment_id: int
    round: int
    evaluators: list[str] | None = None
    """The evaluators the round was limited to (None: every one the cases select)."""
    created_at: datetime | None = None
    created_by: str | None = None
    runs: int | None = None
    """Runs the round was queued for (in the answer to ``evaluate`` only)."""
    runs_scored: int = 0
    scores: int = 0
    errors: int = 0
    skipped: int = 0
    pending_jobs: int = 0
    """Scoring jobs of this round still waiting or running."""
    failed_jobs: int = 0
    """Scoring jobs of this round that failed for good (their runs lack this round's scores)."""
    totals: list[ScoreTotals] = msgspec.field(default_factory=list)
