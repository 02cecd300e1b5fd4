"""The SDK's own storage: an experiment's pinned cases, Python evaluators' scores, scoring
rounds opened from a script, and traced trajectories read again."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalkit.cases.suite import apply_overlay
from evalkit.db import Conn
from evalkit.model import sdk as wire
from evalkit.model.runs import TrajectoryRecord
from evalkit.store import runs as runs_store
from evalkit.store import scores as scores_store


async def experiment_cases(conn: Conn, experiment_id: int) -> list[wire.PinnedCase]:
    rows = await conn.all("sdk_experiment_cases", experiment_id=experiment_id)
    return [
        wire.PinnedCase(
            case_id=row["case_id"],
            version=row["version"],
            content=(
                row["content"]
                if row["target_content"] is None
                else apply_overlay(row["target_content"], row["content"])
            ),
        )
        for row in rows
    ]


async def insert_python_scores(
    conn: Conn, run_id: int, round: int, scores: list[wire.PythonScore]
) -> list[str]:
    """Store the scores (evaluator ``python:<name>``); returns the names written."""
    written = await insert_python_scores_of_runs(conn, round, {run_id: scores})
    return written.get(run_id, [])


async def insert_python_scores_of_runs(
    conn: Conn, round: int, scores: Mapping[int, list[wire.PythonScore]]
) -> dict[int, list[str]]:
    """:func:`insert_python_scores` for several runs (``scores`` by run id), in one
    statement; the names written, by run. Of two scores of a run with one name the first is
    kept, as storing them one after the other keeps it (one statement cannot write a row
    twice)."""
    first: dict[tuple[int, str], wire.PythonScore] = {}
    for run_id, given in scores.items():
        for score in given:
            first.setdefault((run_id, score.name), score)
    pairs = [(run_id, score) for (run_id, _), score in first.items()]
    if not pairs:
        return {}
    evaluators = [_identity(s) for _, s in pairs]
    rows = await conn.all(
        "sdk_scores_upsert", round=round, **scores_store.score_columns(pairs, evaluators)
    )
    written: dict[int, list[str]] = {}
    for row in rows:
        written.setdefault(row["run_id"], []).append(row["name"])
    return written


def _identity(score: wire.PythonScore) -> str:
    return "judge" if score.identity == "judge" else wire.PYTHON_PREFIX + score.evaluator


async def carry_forward(
    conn: Conn, experiment_id: int, round: int, rerun: list[str], rescore_runs: list[int]
) -> None:
    await conn.execute(
        "sdk_scores_carry_forward",
        experiment_id=experiment_id,
        round=round,
        rerun=[wire.PYTHON_PREFIX + name for name in rerun],
        rescore_runs=rescore_runs,
    )


async def run_for_refetch(conn: Conn, run_id: int) -> dict[str, Any] | None:
    return await conn.one("sdk_run_for_refetch", run_id=run_id)


async def replace_trajectory(conn: Conn, run_id: int, record: TrajectoryRecord) -> dict[str, Any]:
    """Validate and store ``record`` as the run's trajectory; returns the stored fields."""
    checked = runs_store._checked(record)
    await conn.execute("sdk_trajectory_replace", run_id=run_id, **checked)
    return checked


async def run_states(conn: Conn, experiment_id: int, run_ids: list[int]) -> dict[int, str]:
    """The state of each run among ``run_ids`` that belongs to the experiment."""
    rows = await conn.all("sdk_runs_of_experiment", experiment_id=experiment_id, run_ids=run_ids)
    return {row["id"]: row["state"] for row in rows}
