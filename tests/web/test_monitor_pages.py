"""Monitors in a browser: the list, one monitor's scores with a chart per score and its
worst sessions linked, and Save as case on the session page (the YAML shown, and the
download lints), all over sessions sent through the real OpenTelemetry exporter and
scored by the real worker."""

from __future__ import annotations

import time

import httpx
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.conftest import ADMIN_PASSWORD
from tests.integration.datasets_helpers import Repo
from tests.integration.otel_helpers import agent_session, exporter, make_agent, mint, recorder
from tests.integration.runs_helpers import api, engine_server, login_token


def _fast_settle(settings) -> None:
    settings.otel.settle_seconds = 0.3


def test_browser_monitor_page_links_the_worst_sessions_and_saves_one_as_a_case(
    database_url, tmp_path, page, log_in, cli
):
    engine = engine_server(database_url, tmp_path, extra=_fast_settle)
    try:
        token = login_token(engine, "admin", ADMIN_PASSWORD)
        make_agent(engine, token, "admin")
        made = api(engine, token, "POST", "/api/monitors",
                   json={"name": "watch", "agent": "bot@admin",
                         "evaluators": ["steps", "latency"]})  # fmt: skip
        assert made.status_code == 201, made.text
        with recorder() as (tracer, memory):
            for n in range(6):
                agent_session(tracer, f"web-{n}", question=f"What is {n} + 1?")
            spans = memory.get_finished_spans()
        assert exporter(engine, mint(engine, token, "admin")).export(spans) == (
            SpanExportResult.SUCCESS
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            shown = api(engine, token, "GET", "/api/monitors/watch@admin").json()
            if shown["scored"] == 6:
                break
            time.sleep(0.2)
        assert shown["scored"] == 6, shown

        log_in(engine.url)
        page.get_by_role("link", name="Monitors").click()
        page.get_by_role("link", name="watch@admin").click()
        page.wait_for_url(f"{engine.url}/monitors/admin/watch")
        assert "6 sessions taken, 6 scored" in page.inner_text("main")
        charts = page.locator("svg.chart")
        assert charts.count() == 2  # latency and steps, one per score
        labels = {charts.nth(i).get_attribute("aria-label") for i in range(2)}
        assert labels == {
            "daily mean latency (measured) over 1 day, oldest first",
            "daily mean steps (measured) over 1 day, oldest first",
        }
        worst = page.locator("#worst ~ table tbody tr")
        assert worst.count() == 6
        page.shot("monitor")

        worst.first.get_by_role("link").click()
        page.wait_for_url(f"{engine.url}/runs/admin/bot/web-*")
        session_id = page.url.rsplit("/", 1)[1]
        shown_yaml = page.locator("pre.case-yaml").inner_text()
        question = f"What is {session_id[-1]} + 1?"
        assert question in shown_yaml and f"session: {session_id}" in shown_yaml
        page.shot("save-as-case")

        with page.expect_download() as download_info:
            page.get_by_role("link", name="download it").click()
        download = download_info.value
        assert download.suggested_filename == f"traffic-{session_id}.yaml"
        suite = Repo(tmp_path / "repo").root / "cases" / "traffic"
        suite.mkdir(parents=True)
        target = suite / download.suggested_filename
        download.save_as(target)
        assert target.read_text() == shown_yaml + ("\n" if not shown_yaml.endswith("\n") else "")
        linted = cli("lint", str(suite), "--offline")
        assert linted.code == 0, linted.out + linted.err

        # the page's session cookie: the download is a web page, behind the web login
        with_answer = page.request.get(
            f"{engine.url}/cases/from-session?workspace=admin&agent=bot&session={session_id}"
            "&expected=answer"
        )
        assert with_answer.status == 200
        assert "# REVIEW:" in with_answer.text() and "answer: '5'" in with_answer.text()
        nameless = page.request.get(f"{engine.url}/cases/from-session")
        assert nameless.status == 400 and "names its session" in nameless.text()
        anonymous = httpx.get(f"{engine.url}/cases/from-session", follow_redirects=False)
        assert anonymous.status_code == 303  # to the login page
    finally:
        engine.stop()
