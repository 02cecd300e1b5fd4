"""The scores of an experiment's current scoring round, as the statistics read them."""

from __future__ import annotations

import asyncio

from evalkit.db import Conn, Row
from evalkit.errors import NotFound
from evalkit.scoring.arrays import ScoreColumns
from evalkit.scoring.stats import ExperimentReadings, RunKey


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

    The scores come as one row of arrays per score name (reading 50,000 rows one by one,
    each with its raw JSON decoded, took most of a summary's time) and become numpy
    columns (:class:`ScoreColumns`), never one object per row. A row's raw is given only
    where the statistics read it, a gauge's JSON number (as text)."""
    experiment = await _scoring_of(conn, experiment_id)
    round_ = experiment["scoring_round"]
    keys = await conn.all("run_keys_for_experiment", experiment_id=experiment_id)
    columns = await conn.all(
        "score_columns_for_experiment", experiment_id=experiment_id, round=round_
    )
    # Off the event loop: 10,000 runs and 50,000 scores are some milliseconds of work.
    runs, by_name = await asyncio.to_thread(_readings, keys, columns)
    return ExperimentReadings(
        experiment_id=experiment_id,
        round=round_,
        repetitions=experiment["repetitions"],
        runs=runs,
        columns=by_name,
    )


def _readings(keys: list[Row], columns: list[Row]) -> tuple[list[RunKey], dict[str, ScoreColumns]]:
    runs = [
        RunKey(k["run_id"], k["case_id"], k["repetition"], k["state"], k["error"]) for k in keys
    ]
    by_name = {
        c["name"]: ScoreColumns.from_database(
            c["run_ids"], c["vals"], c["gauge"], c["skipped"], c["errored"], c["raws"]
        )
        for c in sorted(columns, key=lambda c: c["name"])
    }
    return runs, by_name
