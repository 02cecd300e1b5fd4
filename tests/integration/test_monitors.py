"""Monitors end to end: a deployed agent exports 200 sessions with an agent token through
the real OpenTelemetry exporter; a monitor with sample 0.5 scores the sampled half once
each, with the judge in rate-limit mode; re-run jobs change nothing; `monitors check`
fails a gate the scores miss; `cases mine --monitor` writes the worst ten, lint-clean, and
a second run writes none."""

from __future__ import annotations

import time

import psycopg
from opentelemetry.sdk.trace.export import SpanExportResult

from evalkit.store.monitors import sampled
from tests.conftest import ADMIN_PASSWORD
from tests.integration.datasets_helpers import Repo, login
from tests.integration.judge_helpers import JudgeBehaviour, JudgeServer
from tests.integration.otel_helpers import agent_session, exporter, make_agent, mint, recorder
from tests.integration.runs_helpers import engine_server, login_token

SESSIONS = 200
WRONG_EVERY = 5
"""Every fifth session answers 7 to "What is 2 + 3?": the judge's rubric fails it."""


def _answer(n: int) -> str:
    return "7" if n % WRONG_EVERY == 0 else "5"


def _until(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _fast_settle(settings) -> None:
    settings.otel.settle_seconds = 0.5


def _scores(db_url: str) -> list[tuple]:
    with psycopg.connect(db_url) as conn:
        return conn.execute(
            "SELECT session_id, score_name, value, raw, error FROM monitor_scores "
            "ORDER BY session_id, score_name"
        ).fetchall()


def test_a_monitor_scores_the_sampled_half_once_and_feeds_case_mining(database_url, tmp_path, cli):
    judge = JudgeServer(JudgeBehaviour(script=["429"] * 3, retry_after="0")).start()
    engine = engine_server(database_url, tmp_path, extra=_fast_settle)
    try:
        login(cli, engine)
        token = login_token(engine, "admin", ADMIN_PASSWORD)
        cli.monkeypatch.setenv("JUDGE_KEY", "judge-key")
        made = cli("llm-providers", "create", "local", "--base-url", judge.base_url,
                   "--api-key-env", "JUDGE_KEY")  # fmt: skip
        assert made.code == 0, made.err
        assert cli("judge-default", "set", "--provider", "local", "--model", "judge-1").code == 0
        make_agent(engine, token, "admin")

        created = cli("monitors", "create", "helpful", "--agent", "bot@admin", "--sample", "0.5",
                      "--rubric", 'The answer to 2 + 3: expect "5"', "--evaluator", "latency",
                      "--evaluator", "steps", "--json")  # fmt: skip
        assert created.code == 0, created.err
        monitor_id = created.json["monitor"]["id"]
        assert created.json["monitor"]["version"] == 1

        with recorder() as (tracer, memory):
            for n in range(SESSIONS):
                agent_session(tracer, f"live-{n:03d}", answer=_answer(n))
            spans = memory.get_finished_spans()
        sender = exporter(engine, mint(engine, token, "admin"))
        assert sender.export(spans) == SpanExportResult.SUCCESS

        want = {
            f"live-{n:03d}" for n in range(SESSIONS) if sampled(monitor_id, f"live-{n:03d}", 0.5)
        }
        assert 70 <= len(want) <= 130, len(want)  # about half; the hash decides which

        def all_scored():
            shown = cli("monitors", "show", "helpful@admin", "--window", "1h", "--json")
            assert shown.code == 0, shown.err
            return shown.json if shown.json["scored"] == len(want) else None

        summary = _until(all_scored, 120, "the monitor to score every sampled session")
        assert summary["taken"] == len(want)
        rows = _scores(engine.db_url)
        assert {r[0] for r in rows} == want
        per_session = {}
        for session_id, name, *_ in rows:
            per_session.setdefault(session_id, []).append(name)
        assert all(sorted(names) == ["judge", "latency", "steps"] for names in per_session.values())

        wrong = {s for s in want if int(s[-3:]) % WRONG_EVERY == 0}
        judged = {r[0]: r[2] for r in rows if r[1] == "judge"}
        errors = {r[0] for r in rows if r[1] == "judge" and r[4] is not None}
        assert not errors, errors  # three 429s are retried, never more than 3 on one request
        assert {s for s, v in judged.items() if v == 0.0} == wrong
        steps = {r[3] for r in rows if r[1] == "steps"}
        assert steps == {2.0}  # each session: the LLM call's agent step and the final answer's
        judge_score = {s["name"]: s for s in summary["scores"]}["judge"]
        assert judge_score["n"] == len(want)
        assert abs(judge_score["mean"] - (1 - len(wrong) / len(want))) < 1e-9
        low, high = judge_score["pass_interval"]
        assert low < judge_score["pass_rate"] < high
        requests = len(judge.requests)
        assert requests == len(want) + 3

        # re-running every job changes nothing: the sweep, a backfill and each scoring job
        backfilled = cli("monitors", "backfill", "helpful@admin", "--since", "1h", "--json")
        assert backfilled.code == 0, backfilled.err
        assert backfilled.json["taken"] == 0
        _requeue_scoring(engine.db_url, monitor_id, sorted(want))
        _until(lambda: _none_waiting(engine.db_url), 60, "the re-queued scoring jobs to end")
        assert _scores(engine.db_url) == rows
        assert len(judge.requests) == requests

        # gates: the judge's mean is 0.8 or so, so 0.95 fails and 0.5 passes
        failed = cli("monitors", "check", "helpful@admin", "--gate", "judge>=0.95",
                     "--window", "24h", "--json")  # fmt: skip
        assert failed.code == 1, failed.out + failed.err
        assert failed.json["passed"] is False and "short by" in failed.json["gates"][0]["message"]
        passed = cli("monitors", "check", "helpful@admin", "--gate", "judge>=0.5",
                     "--gate", "latency.raw_mean<=60")  # fmt: skip
        assert passed.code == 0, passed.out + passed.err
        assert "PASS judge>=0.5" in passed.out
        missing = cli("monitors", "check", "helpful@admin", "--gate", "helpfulness>=0.5")
        assert missing.code == 1 and "no reading in the last 24h" in missing.out

        # mining: the worst ten sessions by the judge, lint-clean; a second run writes none
        suite = Repo(tmp_path / "repo").root / "cases" / "bad"
        mined = cli("cases", "mine", "--monitor", "helpful@admin", "--below", "judge=0.5",
                    "--limit", "10", "--into", str(suite), "--json")  # fmt: skip
        assert mined.code == 0, mined.err
        written = {item["session_id"] for item in mined.json["written"]}
        assert len(written) == min(10, len(wrong)) and written <= wrong
        linted = cli("lint", str(suite), "--offline")
        assert linted.code == 0, linted.out + linted.err
        again = cli("cases", "mine", "--monitor", "helpful@admin", "--below", "judge=0.5",
                    "--limit", "10", "--into", str(suite), "--json")  # fmt: skip
        assert again.code == 0, again.err
        assert again.json["written"] == [] and len(again.json["skipped"]) == len(written)
    finally:
        engine.stop()
        judge.stop()


def _requeue_scoring(db_url: str, monitor_id: int, sessions: list[str]) -> None:
    """Queue every taken session's scoring job again, as a replay after a crash would, with
    the sessions marked unscored so the jobs do the whole walk again."""
    import json

    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE monitor_sessions SET scored_at = NULL")
        for session_id in sessions:
            args = {"monitor_id": monitor_id, "version": 1, "session_id": session_id}
            conn.execute(
                "SELECT procrastinate_defer_jobs_v1(ARRAY[ROW('default', "
                "'score_monitored_session', 0, NULL, NULL, %s::jsonb, NULL)"
                "::procrastinate_job_to_defer_v1])",
                (json.dumps(args),),
            )


def _none_waiting(db_url: str) -> bool:
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM procrastinate_jobs WHERE task_name = 'score_monitored_session' "
            "AND status IN ('todo', 'doing')"
        ).fetchone()
        scored = conn.execute(
            "SELECT count(*) FROM monitor_sessions WHERE scored_at IS NULL"
        ).fetchone()
    return row[0] == 0 and scored[0] == 0


def test_bad_monitor_input_is_refused_with_the_fix(server, cli, admin_token, tmp_path):
    login(cli, server)
    make_agent(server, admin_token, "admin")

    def refused(*args: str) -> str:
        result = cli(*args)
        assert result.code != 0, result.out
        return result.err

    create = ("monitors", "create", "watch", "--agent", "bot@admin")
    assert "nothing to score with" in refused(*create)
    assert "out of range" in refused(*create, "--sample", "1.5", "--evaluator", "steps")
    unknown = refused(*create, "--evaluator", "exact_match")
    assert "neither a built-in gauge" in unknown and "tool_call_count" in unknown
    assert "[unknown-evaluator]" in unknown
    assert "positive number of sessions" in refused(
        *create, "--evaluator", "steps", "--cap-per-hour", "0"
    )
    assert "rubric is empty" in refused(*create, "--rubric", "  ")
    assert "--backfill takes a whole number" in refused(
        *create, "--evaluator", "steps", "--backfill", "a week"
    )
    assert "no agent" in refused("monitors", "create", "w", "--agent", "ghost@admin",
                                 "--evaluator", "steps").lower()  # fmt: skip
    made = cli(*create, "--evaluator", "steps", "--json")
    assert made.code == 0, made.err
    assert "exists already" in refused(*create, "--evaluator", "steps")

    assert "does not exist" in refused("monitors", "show", "ghost@admin")
    assert "--window takes a whole number" in refused("monitors", "show", "watch@admin",
                                                      "--window", "1 day")  # fmt: skip
    bad_gate = refused("monitors", "check", "watch@admin", "--gate", "steps>=80")
    assert "0.8, not 80" in bad_gate and "[bad-gate]" in bad_gate
    run_stat = cli("monitors", "check", "watch@admin", "--gate", "steps.diff>=0")
    assert run_stat.code == 1 and "needs an experiment's runs" in run_stat.out
    assert "1 to 1000" in refused("monitors", "sessions", "watch@admin", "--limit", "5000")
    judged = cli("monitors", "create", "judged", "--agent", "bot@admin", "--rubric", "Helpful?")
    assert judged.code == 0, judged.err
    assert "would have nothing to score with" in refused(
        "monitors", "update", "judged@admin", "--no-rubric"
    )
    assert cli("monitors", "delete", "judged@admin").code == 0

    suite = tmp_path / "cases" / "bad"
    assert "one of them" in refused("cases", "mine", "--into", str(suite))
    below_alone = refused(
        "cases", "mine", "--agent", "bot@admin", "--below", "judge=0.5", "--into", str(suite)
    )
    assert "give --monitor too" in below_alone
    assert "SCORE=VALUE" in refused("cases", "mine", "--monitor", "watch@admin",
                                    "--below", "judge", "--into", str(suite))  # fmt: skip

    # a no-op update keeps the version; a real change bumps it; delete removes it
    same = cli("monitors", "update", "watch@admin", "--evaluator", "steps", "--json")
    assert same.code == 0 and same.json["version"] == 1, same.err
    changed = cli("monitors", "update", "watch@admin", "--sample", "0.25", "--json")
    assert changed.code == 0 and changed.json["version"] == 2, changed.err
    listed = cli("monitors", "list", "--json")
    assert [m["name"] for m in listed.json] == ["watch"] and listed.json[0]["sample_rate"] == 0.25
    assert cli("monitors", "delete", "watch@admin").code == 0
    assert cli("monitors", "list", "--json").json == []
