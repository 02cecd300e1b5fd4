"""What an evaluator sees of a run and what it gives back: the contract between the
scoring job and every evaluator (built-in checks, the LLM judge, remote evaluators)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, Protocol

import msgspec

from evalkit.atif.model import Trajectory
from evalkit.model.harness import Provides

ScoreKind = Literal["evaluator", "gauge"]

RUN_FAILED = "the run failed, so there is no answer to judge"
"""How the ``skipped`` reason of a failed run's evaluator scores starts (docs/scoring.md)."""


def not_judged_reason(run_id: int | str) -> str:
    """Why an evaluator gave run ``run_id``, which the agent failed, no verdict."""
    return f"{RUN_FAILED} (`evalkit runs show {run_id}` says why it failed)"


class RunContext(msgspec.Struct, kw_only=True):
    """One run, ready to be scored."""

    run_id: int
    experiment_id: int
    workspace_id: int
    """The workspace of the run's agent (remote evaluators are looked up there)."""
    case_id: str
    repetition: int
    case: dict[str, Any]
    """The case's effective content (overlay applied): input, expected, tags, split,
    evaluators, metadata."""
    answer: str | None
    output: Any
    trajectory: Trajectory | None
    """The ATIF trajectory when one was collected and is valid; None otherwise."""
    trajectory_valid: bool | None
    provides: Provides
    """What the agent declares it provides; an evaluator whose input is not provided is
    skipped as neutral (a ``ScoreItem`` with ``skipped`` set), never failed."""
    model: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    state: str
    """The run's state when scoring started (``scoring``); ``harness_status`` says how the
    agent's run ended (``succeeded``, ``failed``, ``stopped``, or None)."""
    harness_status: str | None = None
    timed_out: bool = False
    trajectory_unreadable: bool = False
    """The stored trajectory is valid but could not be read into the ATIF Structs."""


class ScoreItem(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One score. ``value`` in [0, 1], or None when there is no reading (skipped, error)."""

    name: str
    value: float | None
    kind: ScoreKind = "evaluator"
    explanation: str | None = None
    error: str | None = None
    """Recorded, never fatal: the evaluator failed or timed out."""
    skipped: str | None = None
    """Why the evaluator did not run (an input the agent does not provide)."""
    evaluator: str
    """Who scored: ``builtin:exact_match``, ``judge``, ``remote:<name>``."""
    evaluator_version: str | None = None
    judge_model: str | None = None
    prompt_hash: str | None = None
    raw: Any = None
    """A measurement behind a gauge (seconds, tokens, USD, count), when there is one."""


class Evaluator(Protocol):
    async def __call__(self, ctx: RunContext, config: Any) -> list[ScoreItem]: ...
