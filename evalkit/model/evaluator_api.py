"""Custom Evaluator API v1: what evalkit POSTs to a named remote evaluator, and the scores
it reads back.

A remote evaluator is one URL (``evaluators create NAME --endpoint URL``) that answers one
POST per scored run, synchronously::

    POST <endpoint>     EvaluateRequest -> EvaluateResponse (200)

The request carries ``Authorization: Bearer <key>`` when the evaluator has a key. Errors,
timeouts and answers that break this contract are recorded on the run's scores; they
never fail the run. Answers are read leniently about extra fields.

Field descriptions live in ``Meta(description=...)`` so the exported contract
(``evalkit contracts export``) carries them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from evalkit.atif.model import Trajectory

API_VERSION = "1"

ScoreKind = Literal["score", "gauge"]


class _Wire(msgspec.Struct, kw_only=True, omit_defaults=True):
    pass


class EvaluatedCase(_Wire, kw_only=True):
    """The case as it was pinned for the run."""

    id: str
    input: Annotated[
        dict[str, Any],
        Meta(description="The case's `input` mapping as written, `files` (fixture keys) included."),
    ]
    expected: Any = None
    tags: list[str] = []
    metadata: dict[str, Any] = {}


class EvaluatedRun(_Wire, kw_only=True):
    """What the agent did in the run being scored."""

    id: Annotated[str, Meta(description="evalkit's run id (the `evalkit_run_id` the harness got).")]
    answer: Annotated[
        str | None,
        Meta(
            description="The final text. When the harness sent only `output`, this is that "
            "output as canonical JSON (sorted keys, no spaces): read `output` instead."
        ),
    ]
    output: Annotated[Any, Meta(description="The structured result the harness sent, or null.")] = (
        None
    )
    trajectory: Annotated[
        Trajectory | None,
        Meta(description="The run's ATIF trajectory; null when there is none or it is invalid."),
    ] = None
    model: Annotated[
        str | None, Meta(description="The model the experiment asked for, if any.")
    ] = None
    experiment_id: int
    repetition: Annotated[int, Meta(ge=1)] = 1


class EvaluateRequest(_Wire, kw_only=True):
    """One run to score."""

    api_version: str = API_VERSION
    evaluator: Annotated[
        str, Meta(description="The evaluator's name: NAME in the case file's `custom.NAME`.")
    ]
    config: Annotated[
        Any,
        Meta(description="The case's config for this evaluator (under `custom.NAME`), verbatim."),
    ] = None
    case: EvaluatedCase
    run: EvaluatedRun


class Score(_Wire, kw_only=True):
    """One named score."""

    name: Annotated[
        str, Meta(description="Shown beside the evaluator's name; one evaluator may give several.")
    ]
    score: Annotated[
        Annotated[float, Meta(ge=0.0, le=1.0)] | None,
        Meta(description="From 0 (worst) to 1 (best); null means no reading (did not apply)."),
    ]
    explanation: str | None = None
    kind: Annotated[
        ScoreKind | None,
        Meta(
            description="`score` counts towards pass/fail, a `gauge` is only measured and "
            "shown; absent: the kind the evaluator was registered with."
        ),
    ] = None


class EvaluateResponse(_Wire, kw_only=True):
    """The evaluator's answer: one or more named scores."""

    scores: Annotated[list[Score], Meta(min_length=1)]
