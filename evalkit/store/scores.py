"""Scores: the context a run is scored in, storing scores, rounds, and reading them back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from evalkit.atif.model import Trajectory
from evalkit.cases.model import canonical_json
from evalkit.cases.suite import apply_overlay
from evalkit.db import Buffer, Conn
from evalkit.errors import NotFound
from evalkit.model import scores as wire
from evalkit.model.harness import Provides
from evalkit.scoring.model import RunContext, ScoreItem

_json = msgspec.json.Encoder()
_trajectory = msgspec.json.Decoder(Trajectory)


class JobCounts(msgspec.Struct, frozen=True):
    """A scoring round's jobs (``evalkit.jobs.procrastinate_adapter.jobs_per_round``)."""

    pending: int = 0
    """Waiting or running."""
    failed: int = 0
    """Failed for good."""


class Loaded(msgspec.Struct, kw_only=True):
    ctx: RunContext
    round: int
    """The round asked for, or the experiment's current one."""
    stored: frozenset[str]
    """Evaluators (``ScoreItem.evaluator``) that already stored scores in that round."""
    driver: str
    judged_by_sdk: bool
    """The SDK's process grades the experiment's rubrics (its judge is not the server's)."""


async def run_context(conn: Conn, run_id: int, round: int | None = None) -> Loaded:
    """The run as its evaluators see it (see :func:`context_from_row`), in ``round``."""
    found = await run_contexts(conn, [run_id], round)
    if not found:
        raise NotFound(f"no run {run_id}; see `evalkit experiments show ID`", code="no-such-run")
    return found[0]


async def run_contexts(conn: Conn, run_ids: list[int], round: int | None = None) -> list[Loaded]:
    """:func:`run_context` of each run among ``run_ids`` that exists, in one statement."""
    rows = await conn.all_decoding_json(
        "score_context_list", _decode_trajectory, run_ids=run_ids, round=round
    )
    return [
        Loaded(
            ctx=context_from_row(row),
            round=row["round"],
            stored=frozenset(row["stored"]),
            driver=row["driver"],
            judged_by_sdk=row["judged_by_sdk"],
        )
        for row in rows
    ]


def context_from_row(row: dict[str, Any]) -> RunContext:
    """The case's effective content is its pinned version with the overlay applied; the
    agent's ``provides`` overrides, key by key, what the experiment recorded; a run with
    only structured output has that output, as canonical JSON, for its answer. A valid
    trajectory comes decoded straight into the ATIF Structs from the text PostgreSQL sent
    (:func:`_decode_trajectory`: no dict of it is built), or as the text of why it could
    not be."""
    content = row["content"]
    if row["target_content"] is not None:
        content = apply_overlay(row["target_content"], content)
    answer, output = row["answer"], row["output"]
    if answer is None and output is not None:
        answer = canonical_json(output).decode()
    valid = row["trajectory_valid"]
    stored = row["trajectory"] if valid else None
    return RunContext(
        run_id=row["run_id"],
        experiment_id=row["experiment_id"],
        workspace_id=row["agent_workspace_id"],
        case_id=row["case_id"],
        repetition=row["repetition"],
        case=content,
        answer=answer,
        output=output,
        trajectory=stored if isinstance(stored, Trajectory) else None,
        trajectory_valid=valid,
        trajectory_unreadable=isinstance(stored, str),
        provides=provides_of(row["capabilities"], row["agent_provides"]),
        model=row["model"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        state=row["state"],
        harness_status=row["harness_status"],
        timed_out=row["timed_out"],
    )


def _decode_trajectory(text: Buffer) -> Trajectory | str:
    """A stored valid trajectory as Structs, or why it cannot be read as them (valid by the
    validator's walk, refused by the Structs: a gap between the two)."""
    try:
        return _trajectory.decode(text)
    except (msgspec.DecodeError, ValueError) as exc:
        return str(exc)


def provides_of(
    capabilities: dict[str, Any] | None, agent_provides: dict[str, Any] | None
) -> Provides:
    merged = dict((capabilities or {}).get("provides") or {})
    merged.update(agent_provides or {})
    known = {name: bool(merged[name]) for name in Provides.__struct_fields__ if name in merged}
    return Provides(**known)


async def insert_scores(conn: Conn, run_id: int, round: int, items: list[ScoreItem]) -> None:
    """Store ``items``; a name already stored for the run and round is left as it was."""
    await insert_scores_of_runs(conn, round, {run_id: items})


async def insert_scores_of_runs(
    conn: Conn, round: int, items: Mapping[int, list[ScoreItem]]
) -> None:
    """:func:`insert_scores` for several runs (``items`` by run id), in one statement."""
    pairs = [(run_id, item) for run_id, found in items.items() for item in found]
    if not pairs:
        return
    evaluators = [item.evaluator for _, item in pairs]
    await conn.execute("scores_insert", round=round, **score_columns(pairs, evaluators))


def score_columns(pairs: list[tuple[int, Any]], evaluators: list[str]) -> dict[str, list[Any]]:
    """The array parameters of a statement that stores scores (``scores_insert``,
    ``sdk_scores_upsert``): (run id, score) pairs, any score with ScoreItem's fields, and
    each one's evaluator identity."""
    return {
        "run_ids": [run_id for run_id, _ in pairs],
        "names": [s.name for _, s in pairs],
        "values": [s.value for _, s in pairs],
        "kinds": [s.kind for _, s in pairs],
        "explanations": [s.explanation for _, s in pairs],
        "errors": [s.error for _, s in pairs],
        "skipped": [s.skipped for _, s in pairs],
        "evaluators": evaluators,
        "versions": [s.evaluator_version for _, s in pairs],
        "judge_models": [s.judge_model for _, s in pairs],
        "prompt_hashes": [s.prompt_hash for _, s in pairs],
        "raws": [None if s.raw is None else _json.encode(s.raw).decode() for _, s in pairs],
    }


async def run_scores(conn: Conn, run_id: int, round: int | None = None) -> list[wire.Score]:
    """A run's scores, newest round first (one round with ``round``)."""
    rows = await conn.all("scores_list_by_run", run_id=run_id, round=round)
    return [wire.Score(**row) for row in rows]


def as_item(score: wire.Score) -> ScoreItem:
    fields = msgspec.structs.asdict(score)
    del fields["round"], fields["created_at"]
    return ScoreItem(**fields)


async def open_round(
    conn: Conn, experiment_id: int, evaluators: list[str] | None, created_by: int | None
) -> int:
    """The experiment's next scoring round, recorded (call inside a transaction)."""
    row = await conn.one("experiment_round_next", experiment_id=experiment_id)
    if row is None:
        raise NotFound(
            f"no experiment {experiment_id}; see `evalkit experiments list`",
            code="no-such-experiment",
        )
    round_: int = row["scoring_round"]
    await conn.execute(
        "scoring_round_insert",
        experiment_id=experiment_id,
        round=round_,
        evaluators=evaluators,
        created_by=created_by,
    )
    return round_


async def carry_forward(
    conn: Conn, experiment_id: int, round: int, rerun: list[str], rerun_custom: bool
) -> None:
    """Copy round ``round - 1``'s scores into ``round``, but those of the evaluators in
    ``rerun`` (identities, e.g. ``builtin:regex``) and, with ``rerun_custom``, of every
    remote evaluator."""
    await conn.execute(
        "scores_carry_forward",
        experiment_id=experiment_id,
        round=round,
        rerun=rerun,
        rerun_custom=rerun_custom,
    )


async def scorable_runs(conn: Conn, experiment_id: int) -> list[int]:
    return [row["id"] for row in await conn.all("runs_scorable", experiment_id=experiment_id)]


async def python_evaluators(conn: Conn, experiment_id: int) -> list[str]:
    """Names of the Python evaluators that scored the experiment (any round)."""
    rows = await conn.all("experiment_python_evaluators", experiment_id=experiment_id)
    return [row["name"] for row in rows]


async def rounds(
    conn: Conn, experiment_id: int, jobs: Mapping[int, JobCounts]
) -> list[wire.ScoringRound]:
    """Every round of the experiment, newest first, with totals per score name and its
    scoring ``jobs`` (by round)."""
    totals: dict[int, list[wire.ScoreTotals]] = {}
    for row in await conn.all("scores_totals_by_round", experiment_id=experiment_id):
        round_ = row.pop("round")
        totals.setdefault(round_, []).append(wire.ScoreTotals(**row))
    found = []
    for row in await conn.all("scoring_rounds_list", experiment_id=experiment_id):
        counts = jobs.get(row["round"], JobCounts())
        found.append(
            wire.ScoringRound(
                experiment_id=experiment_id,
                **row,
                pending_jobs=counts.pending,
                failed_jobs=counts.failed,
                totals=totals.get(row["round"], []),
            )
        )
    return found


async def run_round(conn: Conn, run_id: int) -> int:
    """The current scoring round of the run's experiment (NotFound for no such run)."""
    row = await conn.one("run_scoring_round_get", run_id=run_id)
    if row is None:
        raise NotFound(f"no run {run_id}; see `evalkit experiments show ID`", code="no-such-run")
    current: int = row["scoring_round"]
    return current
