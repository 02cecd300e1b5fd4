"""Issue 20: a worker killed with SIGKILL while a monitor's judge calls are in flight, then
started again, leaves every taken session scored exactly once, and asks the judge again
only for the sessions whose verdict the kill lost.

The edge runs in this process without a worker; the worker is the real ``evalkit worker``
in a subprocess. The judge answers slowly, so the kill lands with requests open.
"""

from __future__ import annotations

from opentelemetry.sdk.trace.export import SpanExportResult

from tests.conftest import ADMIN_PASSWORD, start_server
from tests.faults.processes import query
from tests.faults.test_worker_kill import WorkerProcess
from tests.integration.judge_helpers import JudgeBehaviour, JudgeServer
from tests.integration.otel_helpers import agent_session, exporter, make_agent, mint, recorder
from tests.integration.runs_helpers import api, fast_engine, login_token, until

SESSIONS = 24


def _configure(settings) -> None:
    fast_engine(settings)
    settings.otel.settle_seconds = 0.3


def test_a_worker_killed_mid_judging_scores_each_session_once(database_url, tmp_path, cli):
    judge = JudgeServer(JudgeBehaviour(script=["slow"] * 12, slow_seconds=1.5)).start()
    edge = start_server(database_url, tmp_path, worker=False, configure=_configure)
    worker = WorkerProcess(database_url, edge.settings, tmp_path, EVALKIT_OTEL_SETTLE_SECONDS="0.3")
    try:
        token = login_token(edge, "admin", ADMIN_PASSWORD)
        cli.monkeypatch.setenv("EVALKIT_SERVER_URL", edge.url)
        cli.monkeypatch.setenv("EVALKIT_TOKEN", token)
        cli.monkeypatch.setenv("JUDGE_KEY", "judge-key")
        made = cli("llm-providers", "create", "local", "--base-url", judge.base_url,
                   "--api-key-env", "JUDGE_KEY")  # fmt: skip
        assert made.code == 0, made.err
        assert cli("judge-default", "set", "--provider", "local", "--model", "judge-1").code == 0
        make_agent(edge, token, "admin")
        created = api(edge, token, "POST", "/api/monitors",
                      json={"name": "watch", "agent": "bot@admin", "rubric": 'expect "5"',
                            "evaluators": ["steps"]})  # fmt: skip
        assert created.status_code == 201, created.text
        worker.start()
        worker.wait_registered("monitor kill")
        with recorder() as (tracer, memory):
            for n in range(SESSIONS):
                agent_session(tracer, f"k-{n:02d}")
            spans = memory.get_finished_spans()
        assert exporter(edge, mint(edge, token, "admin")).export(spans) == SpanExportResult.SUCCESS

        until(lambda: len(judge.requests) >= 4, timeout=60, what="judge requests in flight")
        in_flight = worker.doing().count("score_monitored_session")
        assert in_flight > 0, "the kill must land while sessions are being scored"
        worker.kill()
        asked_before_restart = len(judge.requests)
        (scored_before,) = query(
            database_url,
            "SELECT count(*) FROM monitor_scores WHERE score_name = 'judge'",
        )
        worker.start()
        worker.wait_registered("monitor kill, restart")

        def all_scored() -> bool:
            (left,) = query(
                database_url, "SELECT count(*) FROM monitor_sessions WHERE scored_at IS NULL"
            )
            (taken,) = query(database_url, "SELECT count(*) FROM monitor_sessions")
            return taken[0] == SESSIONS and left[0] == 0

        until(all_scored, timeout=120, what="every session scored after the restart")
        per_session = query(
            database_url,
            "SELECT session_id, count(*) FILTER (WHERE score_name = 'judge'), "
            "count(*) FILTER (WHERE score_name = 'steps') FROM monitor_scores "
            "GROUP BY session_id",
        )
        assert len(per_session) == SESSIONS
        assert all(judged == 1 and steps == 1 for _, judged, steps in per_session), per_session
        # The judge was asked again only for verdicts the kill lost: at most one request per
        # session not judged before the kill, beyond those already sent.
        lost = SESSIONS - scored_before[0]
        assert len(judge.requests) <= asked_before_restart + lost, (
            len(judge.requests),
            asked_before_restart,
            lost,
        )
        (values,) = query(
            database_url,
            "SELECT count(*) FROM monitor_scores WHERE value = 1.0 AND score_name = 'judge'",
        )
        assert values[0] == SESSIONS
    finally:
        worker.stop()
        edge.stop()
        judge.stop()
