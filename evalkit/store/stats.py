"""The scores of an experiment's current scoring round, as the statistics read them."""

from __future__ import annotations

import asyncio

from evalkit.db import Conn, Row
from evalkit.errors import NotFound
from evalkit.scoring.stats import ExperimentReadings, RunKey, ScoreRow


async def _scoring_of(conn: Conn, experiment_id: int) -> Row:
    experiment = await conn.one("experiment_scoring_get", experiment_id=experiment_id)
    if experiment is None:
        raise NotFound(
            f"no experiment {experiment_id}; see `evalkit experiments list`",
            code="no-such-experiment",
        )
    return experiment


async def readings_version(conn: Conn, experiment_id: int) -> tuple[int, int, int, int]:
    """What changes whenever :func:`experiment_readings` would: the scoring round, how
    many scores the round has and the newest one's id (scores are only ever inserted, and
    an experiment's runs are all made with it), and how many runs ended failed or errored
    (a run ends after its scores are stored)."""
    experiment = await _scoring_of(conn, experiment_id)
    round_ = experiment["scoring_round"]
    row = await conn.one("score_version_get", experiment_id=experiment_id, round=round_)
    return (round_, row["n"], row["last_id"], row["unanswered"]) if row else (round_, 0, 0, 0)


async def experiment_readings(conn: Conn, experiment_id: int) -> ExperimentReadings:
    """Runs (case, repetition) and score rows of the experiment's current round.

    The scores come as one row of columns per score name (reading 50,000 rows one by one,
    each with its raw JSON decoded, took most of a summary's time). A row's ``raw`` is
    given only where the statistics read it, a gauge's JSON number (as a float); it is
    None elsewhere."""
    experiment = await _scoring_of(conn, experiment_id)
    round_ = experiment["scoring_round"]
    keys = await conn.all("run_keys_for_experiment", experiment_id=experiment_id)
    columns = await conn.all(
        "score_columns_for_experiment", experiment_id=experiment_id, round=round_
    )
    # Off the event loop: made on it, 50,000 rows held up every other request for a while.
    scores = await asyncio.to_thread(_score_rows, columns)
    return ExperimentReadings(
        experiment_id=experiment_id,
        round=round_,
        repetitions=experiment["repetitions"],
        runs=[
            RunKey(k["run_id"], k["case_id"], k["repetition"], k["state"], k["error"]) for k in keys
        ],
        rows=scores,
    )


def _score_rows(columns: list[Row]) -> list[ScoreRow]:
    scores: list[ScoreRow] = []
    for c in columns:
        name = c["name"]
        raws = [None if raw is None else float(raw) for raw in c["raws"]]
        scores.extend(
            ScoreRow(
                run_id=run_id,
                name=name,
                value=value,
                kind=kind,
                skipped=skipped,
                error=error,
                raw=raw,
            )
            for run_id, value, kind, skipped, error, raw in zip(
                c["run_ids"], c["vals"], c["kinds"], c["skipped"], c["errors"], raws, strict=True
            )
        )
    return scores
