"""What the SDK hands to a task and an evaluator, and what they hand back."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import msgspec

if TYPE_CHECKING:
    from evalkit.model.runs import ExperimentDetail

ScoreKind = Literal["evaluator", "gauge"]


class SdkError(Exception):
    """run_experiment cannot go on: the message says what is wrong and how to fix it."""


@dataclass(frozen=True)
class Fixture:
    """One file the case attaches (``input.files``), downloaded before the task is called."""

    name: str
    """The fixture key the case names."""
    path: Path
    """Where the file sits on this machine."""
    context: str | None = None
    """The file's description from the fixture registry (evalkit.yaml), if it has one."""
    sha256: str = ""
    size: int = 0


@dataclass
class RunResult:
    """What a task may return instead of a plain answer (str) or structured output (dict).

    ``session_id`` names the trace session the agent wrote, when it is not the SDK's own
    (the SDK moves its ``evalkit.run`` span into it); ``trajectory`` is an ATIF document
    (a dict or JSON text) pushed instead of tracing; ``model`` is the model the agent
    really used (evaluators see it)."""

    answer: str | None = None
    output: Any = None
    model: str | None = None
    session_id: str | None = None
    trajectory: dict[str, Any] | str | None = None


@dataclass(frozen=True)
class ScoreItem:
    """One named score from a Python evaluator: ``score`` from 0 (worst) to 1 (best), or
    None for no reading. ``kind`` defaults to the evaluator's own; ``raw`` is a gauge's
    measurement (seconds, tokens, a count)."""

    name: str
    score: float | None
    explanation: str | None = None
    kind: ScoreKind | None = None
    raw: Any = None


@dataclass(frozen=True)
class EvalCase:
    """The case as it was pinned for the run (the Custom Evaluator API's ``case``), with
    this evaluator's ``config`` from the case's ``evaluators.custom.<name>``."""

    id: str
    input: dict[str, Any]
    expected: Any = None
    tags: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    config: Any = None


@dataclass(frozen=True)
class EvalRun:
    """What the agent did (the Custom Evaluator API's ``run``); ``trajectory`` is the ATIF
    document as a dict, or None when there is none or it is not valid ATIF."""

    id: str
    answer: str | None
    output: Any = None
    trajectory: dict[str, Any] | None = None
    model: str | None = None
    experiment_id: int | None = None
    repetition: int = 1


@dataclass(frozen=True)
class Judge:
    """The LLM judge of an SDK experiment: an OpenAI-compatible endpoint and a model. Its
    key is read from ``credentials.llm_providers`` in evalkit.yaml, keyed by ``base_url``."""

    base_url: str
    model: str
    timeout: float = 120.0


@dataclass
class ExperimentResult:
    """What run_experiment returns once every run has ended and been scored."""

    id: int
    url: str
    status: str
    summary: dict[str, Any] | None
    """Runs by state, timed-out runs and seconds, as the server counted them."""
    scores: list[dict[str, Any]]
    """Per score name: mean, pass rate and their intervals (``evalkit experiments scores``)."""
    runs: list[dict[str, Any]]
    experiment: dict[str, Any]

    @classmethod
    def of(
        cls, detail: ExperimentDetail, scores: dict[str, Any], base_url: str
    ) -> ExperimentResult:
        """The result of an experiment as the server shows it (``detail``, and the body of
        its ``/scores``), with its page on the server at ``base_url``."""
        return cls(
            id=detail.id,
            url=f"{base_url}/experiments/{detail.id}",
            status=detail.status,
            summary=detail.summary,
            scores=list(scores.get("scores") or []),
            runs=[msgspec.to_builtins(r) for r in detail.run_list],
            experiment=msgspec.to_builtins(detail),
        )

    @property
    def by_state(self) -> dict[str, int]:
        return dict(self.experiment.get("by_state") or {})

    def __str__(self) -> str:
        states = ", ".join(f"{n} {s}" for s, n in sorted(self.by_state.items()))
        lines = [f"experiment {self.id} ({self.status}): {states}", self.url]
        for score in self.scores:
            mean = score.get("mean")
            shown = "-" if mean is None else f"{mean:.3f}"
            failed = score.get("failed") or 0
            note = f" ({failed} failed, not judged)" if failed else ""
            lines.append(
                f"  {score['name']}: mean {shown} over {score.get('readings', 0)} runs{note}"
            )
        return "\n".join(lines)


@dataclass
class DryRunCase:
    """One case of a dry run: what the task gave and what the server made of the session."""

    case_id: str
    session_id: str
    answer: str | None = None
    output: Any = None
    error: str | None = None
    trajectory: dict[str, Any] | None = None
    trajectory_error: str | None = None
    spans: int = 0
    scores: list[ScoreItem] = field(default_factory=list)
    own_session: str = ""
    """The SDK's session id for the run (``session_id`` is the task's, when it gave one)."""
