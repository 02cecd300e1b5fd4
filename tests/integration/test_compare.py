"""Score summaries, comparisons and CI gates over real experiments: the reference harness on
loopback, the worker moving every run, then `evalkit experiments scores|compare` and the API.

The scores are written straight into ``scores`` with psycopg: scoring jobs belong to the
scoring work (another part of issue 6) and the cases here select no evaluators, so the
values under test are exactly the ones inserted below. Names are chosen that no built-in
evaluator uses, so scores that job may add are not counted here."""

from __future__ import annotations

import json
import statistics

import httpx
import msgspec
import psycopg
import pytest
from scipy import stats as sp

from evalkit.db import Database
from evalkit.scoring import stats
from evalkit.store.stats import experiment_readings
from tests.conftest import ADMIN_PASSWORD
from tests.integration.datasets_helpers import Repo, admin_api
from tests.integration.runs_helpers import (
    api,
    create_agent,
    engine_server,
    harness,
    login_token,
    write_suite,
)

CASES = {
    "add": ("What is 2 + 3?", "5"),
    "div": ("What is 8 / 2?", "4"),
    "mul": ("What is 6 * 7?", "42"),
    "sub": ("What is 10 - 4?", "6"),
}
# answer_ok (a check) and seconds (a gauge: no value, the measurement in raw), per case.
BASELINE = {"add": (1.0, 1.0), "div": (1.0, 4.0), "mul": (1.0, 2.0), "sub": (0.0, 3.0)}
NEW = {"add": (0.0, 2.0), "div": (1.0, 4.0), "mul": (1.0, 2.0), "sub": (1.0, 5.0)}


@pytest.fixture
def engine(database_url, tmp_path):
    running = engine_server(database_url, tmp_path)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def dev(engine, cli, tmp_path):
    """@dev with the suite synced and the reference harness as agent ref@dev."""
    token = login_token(engine, "admin", ADMIN_PASSWORD)
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", engine.url)
    cli.monkeypatch.setenv("EVALKIT_TOKEN", token)
    admin_api(engine, token, "POST", "/api/workspaces", json={"name": "dev"})
    suite = write_suite(Repo(tmp_path / "repo"), cases=CASES)
    assert cli("sync", str(suite), "--workspace", "dev").code == 0
    with harness() as ref:
        create_agent(engine, token, "dev", "ref", ref.url)
        yield token


def run(cli, *args: str) -> dict:
    result = cli("run", "finance@dev", "--agent", "ref@dev", *args, "--json")
    assert result.code == 0, result.err
    assert result.json["status"] == "finished"
    return result.json


def insert_scores(engine, experiment: dict, table: dict) -> None:
    """``table``: (case, repetition) or case -> (answer_ok, seconds); None skips a row."""
    with psycopg.connect(engine.db_url, autocommit=True) as conn:
        [(round_,)] = conn.execute(
            "SELECT scoring_round FROM experiments WHERE id = %s", [experiment["id"]]
        ).fetchall()
        for r in experiment["run_list"]:
            key = (r["case_id"], r["repetition"])
            answer_ok, seconds = table.get(key, table.get(r["case_id"], (None, None)))
            rows = [
                ("answer_ok", answer_ok, "evaluator", None),
                ("seconds", None, "gauge", seconds),
            ]
            for name, value, kind, raw in rows:
                if value is None and raw is None:
                    continue
                conn.execute(
                    "INSERT INTO scores (run_id, round, name, value, kind, evaluator, raw) "
                    "VALUES (%s, %s, %s, %s, %s, 'test', %s) "
                    "ON CONFLICT (run_id, round, name) DO UPDATE SET value = EXCLUDED.value",
                    [r["id"], round_, name, value, kind, None if raw is None else json.dumps(raw)],
                )


@pytest.fixture
def pair(engine, dev, cli):
    """Two experiments over the same four cases, scored: add regresses, sub improves."""
    a, b = run(cli), run(cli)
    insert_scores(engine, a, BASELINE)
    insert_scores(engine, b, NEW)
    return a["id"], b["id"]


def by_name(items: list[dict]) -> dict[str, dict]:
    return {item["name"]: item for item in items}


def test_scores_summary(engine, pair, cli):
    a, _ = pair
    result = cli("experiments", "scores", str(a), "--json")
    assert result.code == 0, result.err
    summary = result.json
    assert summary["experiment_id"] == a and summary["round"] == 1 and summary["runs"] == 4
    assert summary["ks"] == [] and summary["cases"] == []
    scores = by_name(summary["scores"])
    ok = scores["answer_ok"]
    assert (ok["readings"], ok["passes"], ok["mean"], ok["pass_rate"]) == (4, 3, 0.75, 0.75)
    wilson = sp.binomtest(3, 4).proportion_ci(method="wilson")
    assert ok["pass_rate_ci"] == pytest.approx({"low": wilson.low, "high": wilson.high})
    t_low, t_high = sp.t.interval(0.95, 3, loc=0.75, scale=sp.sem([1, 1, 1, 0]))
    assert ok["mean_ci"] == pytest.approx({"low": max(0.0, t_low), "high": min(1.0, t_high)})
    seconds = scores["seconds"]
    assert seconds["kind"] == "gauge" and seconds["mean"] is None and seconds["pass_rate"] is None
    assert seconds["raw_mean"] == pytest.approx(2.5) and seconds["readings"] == 4

    text = cli("experiments", "scores", str(a))
    assert text.code == 0, text.err
    assert f"experiment {a}, scoring round 1: 4 runs" in text.out
    row = next(line for line in text.out.splitlines() if line.startswith("answer_ok"))
    assert "4/4" in row and "0.750 [" in row and "75.0% [" in row
    assert "2.5 [" in next(line for line in text.out.splitlines() if line.startswith("seconds"))


def test_compare_gates_and_formats(engine, pair, cli):
    a, b = pair
    result = cli("experiments", "compare", str(a), str(b), "--json")
    assert result.code == 0, result.err  # no gates: nothing to fail
    comparison = result.json
    assert comparison["paired_by"] == "case" and comparison["passed"] is True
    ok = by_name(comparison["scores"])["answer_ok"]
    assert [(c["case_id"], c["a"], c["b"]) for c in ok["regressions"]] == [("add", 1.0, 0.0)]
    assert [c["case_id"] for c in ok["improvements"]] == ["sub"]
    assert ok["paired"] == 4 and ok["mean_diff"] == 0.0
    assert ok["mcnemar_p"] == pytest.approx(sp.binomtest(1, 2, 0.5).pvalue)
    seconds = by_name(comparison["scores"])["seconds"]
    diffs = [NEW[c][1] - BASELINE[c][1] for c in CASES]
    assert seconds["raw_diff"] == pytest.approx(statistics.fmean(diffs))
    assert seconds["raw_paired"] == 4
    low, high = seconds["raw_diff_ci"]["low"], seconds["raw_diff_ci"]["high"]
    assert min(diffs) <= low <= high <= max(diffs)
    again = cli("experiments", "compare", str(a), str(b), "--json").json
    assert by_name(again["scores"])["seconds"]["raw_diff_ci"] == seconds["raw_diff_ci"]

    # Gates: one passes, two fail; the exit code is 1 and every failure says by how much.
    gated = cli(
        "experiments",
        "compare",
        str(a),
        str(b),
        "--gate",
        "answer_ok>=0.7",
        "--gate",
        "answer_ok.pass_rate>=0.9",
        "--gate",
        "seconds.raw_mean<=3.5",
        "--gate-no-regressions",
    )
    assert gated.code == 1, gated.err
    out = gated.out
    assert "gates: FAILED" in out
    assert "ok   answer_ok>=0.7: answer_ok mean 0.75 >= 0.7" in out
    assert (
        "FAIL answer_ok.pass_rate>=0.9: answer_ok pass rate 0.75 is not >= 0.9 (short by 0.15)"
        in out
    )
    assert "ok   seconds.raw_mean<=3.5: seconds mean measurement 3.25 <= 3.5" in out
    assert "FAIL no regressions: 1 regression: answer_ok 1 (add)" in out
    assert out.index("regressions (1)") < out.index("BASELINE (95% CI)")  # regressions first

    passing = cli(
        "experiments", "compare", str(a), str(b), "--gate", "answer_ok>=0.75", "--format", "json"
    )
    assert passing.code == 0 and passing.json["passed"] is True

    md = cli(
        "experiments",
        "compare",
        str(a),
        str(b),
        "--gate",
        "answer_ok.pass_rate>=0.9",
        "--gate-no-regressions",
        "--format",
        "markdown",
    )
    assert md.code == 1
    text = md.out
    assert text.startswith(f"## evalkit: experiment {b} against baseline {a}")
    assert "**Gates: ❌ failed**" in text
    assert "| `answer_ok.pass_rate>=0.9` | ❌ answer_ok pass rate 0.75 is not >= 0.9" in text
    assert "### Regressions (1)" in text and "| answer_ok | add | 1.000 | 0.000 |" in text
    assert text.index("### Regressions") < text.index("### Scores")
    assert "| answer_ok | 0.750 [" in text and "| 75% → 75% | 1 / 1 |" in text
    assert "| seconds (gauge) | 2.5 [" in text
    assert "<summary>Improvements (1)</summary>" in text
    assert "evalkit: gate failed: no regressions: 1 regression: answer_ok 1 (add)" in md.err


def test_bad_gates_are_usage_errors(engine, pair, cli):
    a, b = pair
    bad = cli("experiments", "compare", str(a), str(b), "--gate", "answer_ok=>0.8")
    assert bad.code == 2 and "did you mean >=?" in bad.err
    bad = cli("experiments", "compare", str(a), str(b), "--gate", "answer_ok>=80")
    assert bad.code == 2 and "scores are fractions (0.8, not 80)" in bad.err
    missing = cli("experiments", "compare", str(a), str(b), "--gate", "accuracy>=0.5")
    assert missing.code == 1
    assert f"experiment {b} has no score named 'accuracy'" in missing.out
    unknown = cli("experiments", "compare", str(a), "999")
    assert unknown.code == 1 and "no experiment 999" in unknown.err


def test_unpaired_cases_and_repetitions(engine, pair, cli):
    a, _ = pair
    subset = run(cli, "--case-id", "add", "--case-id", "mul")
    insert_scores(engine, subset, {"add": (1.0, 1.0), "mul": (0.0, 1.0)})
    comparison = cli("experiments", "compare", str(a), str(subset["id"]), "--json").json
    assert comparison["cases_only_a"] == ["div", "sub"] and comparison["cases_only_b"] == []
    ok = by_name(comparison["scores"])["answer_ok"]
    assert ok["paired"] == 2 and ok["only_a"] == 2
    assert [c["case_id"] for c in ok["regressions"]] == ["mul"]
    text = cli("experiments", "compare", str(a), str(subset["id"])).out
    assert "Cases only in the baseline (unpaired): div, sub." in text

    # Three repetitions of two cases: add always passes, mul passes once.
    reps = run(cli, "--case-id", "add", "--case-id", "mul", "--repetitions", "3")
    table = {("add", n): (1.0, 1.0) for n in (1, 2, 3)}
    table |= {("mul", 1): (1.0, 1.0), ("mul", 2): (0.0, 1.0), ("mul", 3): (None, 1.0)}
    insert_scores(engine, reps, table)
    summary = cli("experiments", "scores", str(reps["id"]), "--json").json
    assert summary["ks"] == [1, 2, 3]
    cases = {c["case_id"]: c for c in summary["cases"] if c["name"] == "answer_ok"}
    assert cases["add"]["pass_at_k"] == {"1": 1.0, "2": 1.0, "3": 1.0}
    # mul: two readings (one missing value), one pass: pass@1 = 1/2, pass@2 = 1, pass^2 = 0.
    assert cases["mul"]["readings"] == 2 and cases["mul"]["flaky"] is True
    assert cases["mul"]["pass_at_k"] == {"1": 0.5, "2": 1.0, "3": None}
    assert cases["mul"]["pass_hat_k"] == {"1": 0.5, "2": 0.0, "3": None}
    ok = by_name(summary["scores"])["answer_ok"]
    assert ok["pass_at_k"] == {"1": 0.75, "2": 1.0, "3": 1.0} and ok["flaky_cases"] == 1
    assert ok["no_value"] == 0 and ok["missing"] == 1  # the run without an answer_ok row

    chosen = cli("experiments", "scores", str(reps["id"]), "--k", "2", "--json").json
    assert chosen["ks"] == [2]
    text = cli("experiments", "scores", str(reps["id"]))
    assert "flaky cases (1)" in text.out and "pass@k and pass^k" in text.out
    too_big = cli("experiments", "scores", str(reps["id"]), "--k", "4")
    assert (
        too_big.code == 1 and "k must be from 1 to the experiment's repetitions (3)" in too_big.err
    )

    with_itself = cli("experiments", "compare", str(reps["id"]), str(reps["id"]), "--json").json
    assert with_itself["paired_by"] == "case+repetition"
    assert by_name(with_itself["scores"])["answer_ok"]["paired"] == 5
    mixed = cli("experiments", "compare", str(a), str(reps["id"]), "--json").json
    assert mixed["paired_by"] == "case"
    ok = by_name(mixed["scores"])["answer_ok"]
    assert ok["paired"] == 2 and [c["case_id"] for c in ok["regressions"]] == []  # mul: 0.5


def test_api_reads_for_any_user(engine, pair, dev):
    a, b = pair
    admin_api(engine, dev, "POST", "/api/users", json={"username": "bob", "password": "bob-pass"})
    bob = login_token(engine, "bob", "bob-pass")
    scores = api(engine, bob, "GET", f"/api/experiments/{a}/scores")
    assert scores.status_code == 200, scores.text
    assert by_name(scores.json()["scores"])["answer_ok"]["mean"] == 0.75
    compared = api(
        engine,
        bob,
        "GET",
        f"/api/experiments/{a}/compare/{b}",
        params=[("gate", "answer_ok>=0.8"), ("no_regressions", "1"), ("seed", "5")],
    )
    assert compared.status_code == 200, compared.text
    body = compared.json()
    assert body["passed"] is False and body["seed"] == 5
    assert [g["passed"] for g in body["gates"]] == [False, False]
    assert body["gates"][0]["message"] == "answer_ok mean 0.75 is not >= 0.8 (short by 0.05)"

    def error(path: str, **kw) -> tuple[int, str, str]:
        r = api(engine, bob, "GET", path, **kw)
        return r.status_code, r.json()["error"]["code"], r.json()["error"]["message"]

    status, code, message = error(f"/api/experiments/{a}/compare/{b}", params={"gate": "x"})
    assert (status, code) == (400, "bad-gate") and "has no comparison" in message
    status, code, _ = error(f"/api/experiments/{a}/compare/424242")
    assert (status, code) == (404, "no-such-experiment")
    status, code, message = error(f"/api/experiments/{a}/scores", params={"k": "2"})
    assert (status, code) == (400, "bad-k") and "needs repetitions" in message
    status, _, message = error(f"/api/experiments/{a}/compare/{b}", params={"resamples": "5"})
    assert status == 400 and "resamples must be from 100" in message
    assert httpx.get(f"{engine.url}/api/experiments/{a}/scores").status_code == 401


# Rows of every shape the statistics tell apart, for test_readings_are_the_scores_table:
# (name, value, kind, skipped, error, raw as JSON text) per case; a case left out has no row.
ODD_ROWS = {
    "add": [
        ("odd_check", 0.25, "evaluator", None, None, "0.5"),
        ("odd_gauge", None, "gauge", None, None, "7"),
        ("odd_mixed", 1.0, "gauge", None, None, '"slow"'),
    ],
    "div": [
        ("odd_check", 0.75, "evaluator", "no answer", None, None),
        ("odd_gauge", None, "gauge", None, None, "true"),
        ("odd_mixed", 0.5, "evaluator", None, None, "12.5"),
    ],
    "mul": [
        ("odd_check", None, "evaluator", None, "the judge timed out", None),
        ("odd_gauge", None, "gauge", "not measured", None, "3.5"),
        ("odd_mixed", None, "gauge", None, None, '{"seconds": 2}'),
    ],
    "sub": [
        ("odd_check", None, "evaluator", None, "", None),
        ("odd_gauge", None, "gauge", None, None, "123456789012345678901234567890"),
    ],
}


async def test_readings_are_the_scores_table(engine, pair):
    """The statistics read each score name's rows as columns, with a gauge's JSON number
    in place of its raw: the readings, summaries and the comparison are what reading the
    table row by row (raw decoded) gives, for skipped, errored, valueless, mixed-kind rows,
    raw numbers, text, booleans and objects, runs without a row, and another round's rows."""
    with psycopg.connect(engine.db_url, autocommit=True) as conn:
        for experiment_id in pair:
            runs = conn.execute(
                "SELECT id, case_id FROM runs WHERE experiment_id = %s", [experiment_id]
            ).fetchall()
            for run_id, case_id in runs:
                for name, value, kind, skipped, error, raw in ODD_ROWS[case_id]:
                    conn.execute(
                        "INSERT INTO scores (run_id, round, name, value, kind, skipped, error, "
                        "evaluator, raw) VALUES (%s, 1, %s, %s, %s, %s, %s, 'test', %s)",
                        [run_id, name, value, kind, skipped, error, raw],
                    )
                conn.execute(  # another round: never read
                    "INSERT INTO scores (run_id, round, name, value, evaluator) "
                    "VALUES (%s, 2, 'answer_ok', 0.0, 'test')",
                    [run_id],
                )

    def by_rows(experiment_id: int) -> stats.ExperimentReadings:
        with psycopg.connect(engine.db_url) as conn:
            [(repetitions,)] = conn.execute(
                "SELECT repetitions FROM experiments WHERE id = %s", [experiment_id]
            ).fetchall()
            runs = conn.execute(
                "SELECT id, case_id, repetition FROM runs WHERE experiment_id = %s",
                [experiment_id],
            ).fetchall()
            rows = conn.execute(
                "SELECT s.run_id, s.name, s.value, s.kind, s.skipped, s.error, s.raw "
                "FROM scores s JOIN runs r ON r.id = s.run_id "
                "WHERE r.experiment_id = %s AND s.round = 1",
                [experiment_id],
            ).fetchall()
        return stats.ExperimentReadings(
            experiment_id,
            1,
            repetitions,
            [stats.RunKey(*run) for run in runs],
            [stats.ScoreRow(*row) for row in rows],
        )

    def shape(data: stats.ExperimentReadings) -> tuple[list, list]:
        """Runs, and every row as the statistics read it (NaN as None, to compare)."""
        fields = ("run_ids", "readings", "measurements", "gauge", "skipped", "errored")
        rows = []
        for name, columns in data.by_name().items():
            for row in zip(*(getattr(columns, f).tolist() for f in fields), strict=True):
                rows.append((name, *(None if x != x else x for x in row)))
        return sorted((k.run_id, k.case_id, k.repetition) for k in data.runs), sorted(rows)

    database = Database(engine.db_url)
    await database.open()
    try:
        async with database.connection() as conn:
            a, b = [await experiment_readings(conn, i) for i in pair]
    finally:
        await database.close()
    a_rows, b_rows = by_rows(pair[0]), by_rows(pair[1])
    assert shape(a) == shape(a_rows) and shape(b) == shape(b_rows)
    measured = {None if x != x else x for x in a.by_name()["odd_gauge"].measurements.tolist()}
    assert measured == {
        7.0,
        None,
        1.2345678901234568e29,
    }  # true is no number; a skipped row measures nothing
    encode = msgspec.json.encode
    assert encode(stats.summarize(b)) == encode(stats.summarize(b_rows))
    gates = [stats.parse_gate("odd_gauge.raw_diff<=1")]
    assert encode(stats.compare(a, b, gates=gates, no_regressions=True)) == encode(
        stats.compare(a_rows, b_rows, gates=gates, no_regressions=True)
    )
