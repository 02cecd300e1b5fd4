"""Wire objects of judge alignment (``evalkit judge align``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from evalkit.model.api import Input, Output
from evalkit.model.stats import Agreement

ProposalStatus = Literal["grading", "ready", "accepted", "stale"]

DEFAULT_EXAMPLES = 8
"""Few-shot examples a proposal shows unless asked for another number."""
MAX_EXAMPLES = 32


class Example(msgspec.Struct, kw_only=True, frozen=True):
    """A labelled run shown to the judge as a few-shot example (``evalkit judge align``):
    the people's verdict on it, which may differ from the judge's."""

    run_id: int
    case_id: str
    task: Any
    answer: str
    verdict: Literal["pass", "fail"]
    why: str = ""


class AlignRequest(Input, kw_only=True):
    score: str
    """The judge to align: ``judge`` (the cases' rubric judge) or ``judge.NAME``."""
    max_examples: Annotated[int, Meta(ge=1, le=MAX_EXAMPLES)] = DEFAULT_EXAMPLES


class JudgeProposal(Output, kw_only=True):
    """Few-shot examples proposed for one judge score of a workspace, tried on the
    experiment's labelled runs in a trial round of their own."""

    id: int
    experiment_id: int
    workspace: str
    """The workspace whose judge would show the examples once accepted."""
    score: str
    status: ProposalStatus
    """``grading`` (the trial round is being scored), ``ready`` (to accept), ``accepted``,
    or ``stale`` (the workspace's examples changed since: propose again)."""
    prompt_hash: str
    """The judge's prompt hash with these examples."""
    base_hash: str
    """The prompt hash in use when the proposal was made."""
    trial_round: int
    """The scoring round (below zero) that holds the re-graded scores."""
    runs: int
    """Labelled runs re-graded."""
    pending_runs: int = 0
    failed_runs: int = 0
    examples: list[Example]
    before: Agreement
    """Agreement with the people as the judge graded the runs before."""
    after: Agreement | None = None
    """Agreement of the re-graded runs (None while grading)."""
    created_by: str | None
    created_at: datetime
    accepted_by: str | None = None
    accepted_at: datetime | None = None
