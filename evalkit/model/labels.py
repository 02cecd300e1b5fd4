"""Wire objects for human labels on runs (``evalkit runs label``, the run page)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from evalkit.model.api import Input, Output


class LabelRequest(Input, kw_only=True):
    name: str
    """The score read: an evaluator score the run has (``correctness``, ``judge``...)."""
    value: float
    """1 for pass, 0 for fail, or a number in the score's range [0, 1]."""
    comment: str | None = None


class Label(Output, kw_only=True):
    """One person's reading of one score of a run. Labels are never replaced: a new
    reading is a new label, so every person's readings are kept."""

    id: int
    run_id: int
    name: str
    value: float
    comment: str | None = None
    labelled_by: str | None
    """Who gave it (None once that user is deleted)."""
    created_at: datetime


class QueuedRun(Output, kw_only=True):
    """One entry of a labelling queue: a run's judge score that no person has read yet."""

    run_id: int
    case_id: str
    name: str
    """The judge score to label: ``judge`` or ``judge.NAME``."""
    value: float
    explanation: str | None = None
    judge_model: str | None = None
    prompt_hash: str | None = None
    input: Any = None
    """The case's input, as the agent got it."""


class LabelQueue(Output, kw_only=True):
    """One page of an experiment's labelling queue, in its stable sampled order."""

    experiment_id: int
    score: str | None
    """The score the queue was limited to (None: every judge score)."""
    total: int
    """Entries in the whole queue; labelling one removes it."""
    offset: int
    limit: int
    runs: list[QueuedRun]
