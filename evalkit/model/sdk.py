"""Wire objects of the Python SDK's own routes: the pinned cases of an experiment (what
its Python evaluators read) and the scores they give."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from evalkit.model.api import Input, Output
from evalkit.model.runs import Transition

PYTHON_PREFIX = "python:"
"""Scores of a Python evaluator are stored with ``evaluator = python:<name>``."""


class PythonScore(Input, kw_only=True):
    """One score a Python evaluator gave in the SDK's process."""

    evaluator: Annotated[str, Meta(min_length=1, max_length=200)]
    """The evaluator's name (``@evaluator(name=...)``); stored as ``python:<name>``."""
    name: Annotated[str, Meta(min_length=1, max_length=200)]
    value: Annotated[float, Meta(ge=0.0, le=1.0)] | None
    kind: Literal["evaluator", "gauge"] = "evaluator"
    explanation: str | None = None
    error: str | None = None
    skipped: str | None = None
    raw: Any = None
    identity: Literal["python", "judge"] = "python"
    """``judge``: the LLM judge, called from the SDK's process (stored as ``judge``, so the
    server does not grade the run again)."""
    judge_model: str | None = None
    prompt_hash: str | None = None
    evaluator_version: str | None = None


class PythonScores(Input, kw_only=True):
    scores: Annotated[list[PythonScore], Meta(max_length=1000)]
    round: Annotated[int, Meta(ge=1)] | None = None
    """The scoring round; None: the experiment's current one."""


class PythonScoresStored(Output, kw_only=True):
    run_id: int
    round: int
    stored: list[str]
    """Score names written (new, or in place of a server skip for an unknown remote
    evaluator of the same name)."""
    kept: list[str] = msgspec.field(default_factory=list)
    """Score names the run already had from another evaluator; those were left as they were."""


class PinnedCase(Output, kw_only=True):
    case_id: str
    version: int
    content: dict[str, Any]
    """The pinned version's content, its overlay applied."""


class ExperimentCases(Output, kw_only=True):
    experiment_id: int
    cases: list[PinnedCase]


class SdkRound(Input, kw_only=True):
    """A new scoring round of an SDK experiment (``evaluate_experiment``)."""

    evaluators: Annotated[list[str], Meta(max_length=100)]
    """The Python evaluators it re-runs (their names); their scores of the round before are
    not carried forward, every other score is."""
    rescore_runs: list[int] = msgspec.field(default_factory=list)
    """Runs whose trajectory was read again: the server's evaluators score them afresh in
    the new round (their other scores are not carried forward)."""


class SdkRoundOpened(Output, kw_only=True):
    experiment_id: int
    round: int
    rescored: list[int] = msgspec.field(default_factory=list)


class TrajectoryRefetched(Output, kw_only=True):
    run_id: int
    session_id: str | None
    changed: bool
    """False when the spans gave the same trajectory as before."""
    valid: bool | None
    partial: bool | None
    spans: int


class RunScores(Input, kw_only=True):
    run_id: int
    scores: Annotated[list[PythonScore], Meta(max_length=1000)]


class SdkBatch(Input, kw_only=True):
    """Steps of several runs of one experiment, applied in order in one transaction (each
    by compare-and-set, as ``POST /api/runs/{run}/transition`` applies one), then Python
    scores (the current round) of runs whose last step here was applied."""

    steps: Annotated[list[Transition], Meta(max_length=2000)] = msgspec.field(default_factory=list)
    scores: Annotated[list[RunScores], Meta(max_length=1000)] = msgspec.field(default_factory=list)


class SdkBatchResult(Output, kw_only=True):
    applied: list[bool]
    """One per step, in order: False when the run had moved on (a replay, or another
    process drives it)."""
    states: dict[str, str]
    """Each run's state after the batch, by run id."""
    scored: list[int] = msgspec.field(default_factory=list)
    """Runs whose scores were stored."""
