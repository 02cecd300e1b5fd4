"""Judge alignment (``evalkit judge align``): few-shot examples for a judge, chosen from
the runs people labelled, so the judge learns how they read its rubric.

A proposal starts from the examples the workspace already accepted for the score and adds
every labelled run where the judge and the people disagree (with the people's verdict),
then, while room is left, runs where they agree, alternating the two verdicts so the judge
sees both. Its prompt hash is the judge's own with the examples pinned in
(:func:`evalkit.scoring.judge_prompt.examples_hash`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from evalkit.errors import BadRequest
from evalkit.model.judge_alignment import Example
from evalkit.scoring import judge_library
from evalkit.scoring.agreement import people_verdict
from evalkit.scoring.judge_prompt import PROMPT_HASH, examples_hash
from evalkit.scoring.stats import passes

RUBRIC_SCORE = "judge"


@dataclass(frozen=True, slots=True)
class Candidate:
    """A labelled run of the experiment, as an example could show it."""

    run_id: int
    case_id: str
    task: Any
    answer: str
    scored: float
    labelled: list[float]
    """Each labeller's latest label."""
    comments: list[str]

    @property
    def people(self) -> bool | None:
        return people_verdict(self.labelled)

    @property
    def disagrees(self) -> bool:
        return self.people is not None and self.people != passes(self.scored)


def judge_score(text: str) -> str:
    """The judge score ``text`` names: ``judge`` (a case's rubric), or ``judge.NAME`` for
    the library judge NAME (written ``judge.NAME``, ``judges.NAME`` or ``NAME``)."""
    if text == RUBRIC_SCORE:
        return text
    name = text.removeprefix("judges.").removeprefix(judge_library.SCORE_PREFIX)
    if name in judge_library.LIBRARY:
        return judge_library.SCORE_PREFIX + name
    known = ", ".join(judge_library.LIBRARY)
    raise BadRequest(
        f"{text!r} is not a judge evalkit can align: name `judge` (the cases' rubric judge) "
        f"or a library judge ({known})",
        code="not-a-judge",
    )


def base_hash(score: str) -> str:
    """The prompt hash of the judge behind ``score`` without examples."""
    if score == RUBRIC_SCORE:
        return PROMPT_HASH
    return judge_library.LIBRARY[score.removeprefix(judge_library.SCORE_PREFIX)].prompt_hash


def prompt_hash(score: str, examples: Sequence[Example]) -> str:
    return examples_hash(base_hash(score), tuple(examples))


def evaluator_key(score: str) -> str:
    """The ``--evaluator`` selector that re-grades ``score``: ``judge`` or ``judges.NAME``."""
    if score == RUBRIC_SCORE:
        return RUBRIC_SCORE
    return "judges." + score.removeprefix(judge_library.SCORE_PREFIX)


def example_of(candidate: Candidate) -> Example:
    verdict: Literal["pass", "fail"] = "pass" if candidate.people else "fail"
    return Example(
        run_id=candidate.run_id,
        case_id=candidate.case_id,
        task=candidate.task,
        answer=candidate.answer,
        verdict=verdict,
        why=" / ".join(candidate.comments),
    )


def choose_examples(
    candidates: Sequence[Candidate], current: Sequence[Example], limit: int
) -> list[Example]:
    """The proposal's examples: the disagreements first, then the accepted examples (a run
    labelled again is shown with its new verdict), then agreements alternating pass and
    fail; ``limit`` in all."""
    usable = [c for c in candidates if c.people is not None]
    relabelled = {c.run_id for c in usable}
    chosen = [example_of(c) for c in usable if c.disagrees]
    chosen += [e for e in current if e.run_id not in relabelled]
    agreeing = [c for c in usable if not c.disagrees]
    passing = [c for c in agreeing if c.people]
    failing = [c for c in agreeing if not c.people]
    while passing or failing:
        for side in (failing, passing):
            if side:
                chosen.append(example_of(side.pop(0)))
    return chosen[:limit]
