"""Kept score summaries and comparisons follow new scores: the API answers from memory
only while the experiments' score versions are the same (see tests/unit/test_stats_memory.py
for the memory itself)."""

from __future__ import annotations

import psycopg

from tests.integration import test_compare
from tests.integration.runs_helpers import api
from tests.integration.test_compare import by_name

# the engine, @dev with the reference harness, and two scored experiments of test_compare
engine = test_compare.engine
dev = test_compare.dev
pair = test_compare.pair


def add_score(engine, experiment_id: int, name: str, value: float) -> None:
    """A new score of the current round for every run of the experiment (scores are only
    ever inserted)."""
    with psycopg.connect(engine.db_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO scores (run_id, round, name, value, kind, evaluator) "
            "SELECT r.id, e.scoring_round, %s, %s, 'evaluator', 'test' "
            "FROM runs r JOIN experiments e ON e.id = r.experiment_id WHERE e.id = %s",
            [name, value, experiment_id],
        )


def test_kept_answers_follow_new_scores(engine, pair, dev):
    a, b = pair
    first = api(engine, dev, "GET", f"/api/experiments/{a}/scores")
    assert first.status_code == 200, first.text
    assert set(by_name(first.json()["scores"])) == {"answer_ok", "seconds"}
    again = api(engine, dev, "GET", f"/api/experiments/{a}/scores")
    assert again.json() == first.json()
    compared = api(engine, dev, "GET", f"/api/experiments/{a}/compare/{b}")
    assert compared.status_code == 200, compared.text
    assert "extra" not in by_name(compared.json()["scores"])

    add_score(engine, a, "extra", 1.0)
    add_score(engine, b, "extra", 0.0)

    summary = by_name(api(engine, dev, "GET", f"/api/experiments/{a}/scores").json()["scores"])
    assert summary["extra"]["mean"] == 1.0
    assert summary["answer_ok"]["mean"] == 0.75
    compared = api(engine, dev, "GET", f"/api/experiments/{a}/compare/{b}")
    extra = by_name(compared.json()["scores"])["extra"]
    assert len(extra["regressions"]) == 4
    # another query of the same experiments is its own answer
    gated = api(
        engine, dev, "GET", f"/api/experiments/{a}/compare/{b}", params={"gate": "extra>=0.5"}
    )
    assert gated.json()["passed"] is False
