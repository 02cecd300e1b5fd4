"""The scores of an experiment's current scoring round, as the statistics read them."""

from __future__ import annotations

from evalkit.db import Conn
from evalkit.errors import NotFound
from evalkit.scoring.stats import ExperimentReadings, RunKey, ScoreRow


async def readings_version(conn: Conn, experiment_id: int) -> tuple[int, int, int]:
    """What changes whenever :func:`experiment_readings` would: the scoring round, and how
    many scores the round has and the newest one's id (scores are only ever inserted, and
    an experiment's runs are all made with it)."""
    experiment = await conn.one("experiment_scoring_get", experiment_id=experiment_id)
    if experiment is None:
        raise NotFound(
            f"no experiment {experiment_id}; see `evalkit experiments list`",
            code="no-such-experiment",
        )
    round_ = experiment["scoring_round"]
    row = await conn.one("score_version_get", experiment_id=experiment_id, round=round_)
    return (round_, row["n"], row["last_id"]) if row else (round_, 0, 0)


async def experiment_readings(conn: Conn, experiment_id: int) -> ExperimentReadings:
    """Runs (case, repetition) and score rows of the experiment's current round."""
    experiment = await conn.one("experiment_scoring_get", experiment_id=experiment_id)
    if experiment is None:
        raise NotFound(
            f"no experiment {experiment_id}; see `evalkit experiments list`",
            code="no-such-experiment",
        )
    rows = await conn.all(
        "score_list_for_experiment",
        experiment_id=experiment_id,
        round=experiment["scoring_round"],
    )
    runs: dict[int, RunKey] = {}
    scores: list[ScoreRow] = []
    for row in rows:
        runs.setdefault(row["run_id"], RunKey(row["run_id"], row["case_id"], row["repetition"]))
        if row["name"] is not None:
            scores.append(
                ScoreRow(
                    run_id=row["run_id"],
                    name=row["name"],
                    value=row["value"],
                    kind=row["kind"],
                    skipped=row["skipped"],
                    error=row["error"],
                    raw=row["raw"],
                )
            )
    return ExperimentReadings(
        experiment_id=experiment_id,
        round=experiment["scoring_round"],
        repetitions=experiment["repetitions"],
        runs=list(runs.values()),
        rows=scores,
    )
