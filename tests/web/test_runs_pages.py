"""The run page and its trajectory viewer over real runs (the reference harness and the
worker): steps in order, reasoning, tool calls paired with their results, metrics and
timing bars, scores with explanations; an invalid trajectory says which rules it breaks.
Plus the viewer's reading of documents that are not valid ATIF."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

import psycopg
import pytest

from evalkit.harness.reference import Behaviour
from evalkit.web.pages.runs import STEP_PAGE, content_parts, trajectory_view
from tests.conftest import with_database
from tests.integration.runs_helpers import create_agent, engine_server, harness
from tests.web.test_experiments_pages import Seeded, seed, start
from tests.web.test_pages_http import logged_in


@pytest.fixture(scope="module")
def seeded(pg_admin_url, template_url, tmp_path_factory):
    name = "evalkit_web_runs"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name} TEMPLATE evalkit_template")
    running = engine_server(with_database(pg_admin_url, name), tmp_path_factory.mktemp("runs"))
    stuck = Behaviour(run_seconds=math.inf, ignore_stop=True)
    try:
        with (
            harness() as ref,
            harness(Behaviour(invalid_trajectory=True)) as bad,
            harness(stuck) as slow,
        ):
            seeded = seed(running, ref.url, bad.url)
            create_agent(
                running, seeded.token, "dev", "stuck", slow.url, run_timeout=0.3, stop_grace=0.3
            )
            seeded.stuck = start(
                running, seeded.token, dataset="finance@dev", agent="stuck@dev", case_ids=["add"]
            )
            yield seeded
    finally:
        running.stop()
        with psycopg.connect(pg_admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def run_id(seeded: Seeded, experiment: int, case_id: str) -> int:
    runs = seeded.api(f"/api/experiments/{experiment}/runs", case=case_id).json()["runs"]
    return int(runs[0]["id"])


# --------------------------------------------------------------------------- over HTTP


def test_run_page_shows_the_trajectory_and_scores(seeded):
    mul = run_id(seeded, seeded.b, "mul")
    with logged_in(seeded.server) as web:
        r = web.get(f"/runs/{mul}")
    assert r.status_code == 200
    text = r.text
    assert f"<h1>Run {mul}" in text and "s-done" in text
    assert 'href="/w/dev/datasets/finance/cases/mul"' in text
    assert '<pre class="answer">42</pre>' in text
    # Steps in order, the tool call with its arguments and its paired result.
    assert text.index('class="step src-user"') < text.index('class="step src-agent"')
    assert "What is 6 * 7?" in text
    assert '<span class="tool">calculator</span>' in text
    assert "&#34;expression&#34;" in text or "&quot;expression&quot;" in text
    call = text.split('<span class="tool">calculator</span>')[1].split('class="call"')[0]
    assert "result" in call and ">42<" in call
    assert "<summary>Reasoning" in text and "The question needs a tool" in text
    assert 'class="barbox"' in text and "prompt tokens" in text
    # Scores with their explanations: mul expects 41 in v2, so exact_match fails.
    scores = text.split('id="scores"')[1].split('id="trajectory"')[0]
    assert "exact_match" in scores and 'class="sv fail"' in scores
    assert "41" in scores  # the explanation names the expected answer
    assert "builtin:exact_match" in scores
    assert "latency" in scores and "gauge" in scores


def test_invalid_trajectory_says_which_rules_it_breaks(seeded):
    broken = run_id(seeded, seeded.broken, "add")
    run = seeded.api(f"/api/runs/{broken}").json()
    assert run["trajectory_valid"] is False and run["trajectory_errors"]
    with logged_in(seeded.server) as web:
        r = web.get(f"/runs/{broken}")
    assert r.status_code == 200
    assert "This trajectory breaks ATIF rules" in r.text
    for problem in run["trajectory_errors"]:
        assert f'<span class="tag">{problem["rule"]}</span>' in r.text


def test_partial_trajectory_says_the_run_was_cut_short(seeded):
    stuck = run_id(seeded, seeded.stuck, "add")
    run = seeded.api(f"/api/runs/{stuck}").json()
    assert run["timed_out"] is True and run["trajectory_partial"] is True
    with logged_in(seeded.server) as web:
        text = web.get(f"/runs/{stuck}").text
    assert "<strong>Partial:</strong> the run was cut short" in text
    assert '<span class="tag">timed out</span>' in text
    assert "stop grace" in text  # the run's error, as recorded
    assert 'class="step src-user"' in text  # the steps it did take are shown


def test_run_page_refusals(seeded):
    with logged_in(seeded.server) as web:
        missing = web.get("/runs/999999")
        assert missing.status_code == 404 and "no run 999999" in missing.text
        bad = web.get("/runs/first")
        assert bad.status_code == 400 and "whole numbers" in bad.text
    with logged_in(seeded.server, "rita", "rita-password") as web:  # any user reads runs
        assert web.get(f"/runs/{run_id(seeded, seeded.a, 'add')}").status_code == 200


# --------------------------------------------------------------------------- the viewer


def test_viewer_reads_documents_that_break_the_rules():
    start = datetime(2026, 1, 1, tzinfo=UTC)
    doc = {
        "agent": "not an object",
        "steps": [
            {"step_id": 1, "source": "user", "message": 42, "timestamp": "yesterday"},
            {
                "step_id": "two",
                "source": "agent",
                "message": [{"type": "text", "text": "look"}, {"type": "image", "source": {}}],
                "timestamp": "2026-01-01T00:00:02Z",
                "tool_calls": [{"tool_call_id": "c1", "function_name": "f"}, "junk"],
                "observation": {"results": [{"source_call_id": "c9", "content": "loose"}]},
                "metrics": {"prompt_tokens": "many", "secret": 1},
            },
            "not a step",
        ],
        "final_metrics": [],
    }
    view = trajectory_view(doc, started=start, ended=None)
    assert view is not None and view.total_steps == 3 and view.agent == {}
    first, second, third = view.steps
    assert [p.text for p in first.message] == ["42"] and first.at is None and first.span is None
    assert [p.kind for p in second.message] == ["text", "image"] and second.at == 2.0
    assert [c.name for c in second.calls] == ["f", "?"] and second.calls[0].results == []
    assert [p.text for r in second.results for p in r] == ["loose"]  # answers no call
    assert second.metrics == {"prompt_tokens": "many"}
    assert third.source == "?" and third.message == []
    assert trajectory_view("not json", started=None, ended=None) is None
    assert [p.kind for p in content_parts({"odd": True})] == ["other"]


def test_viewer_pages_long_trajectories_and_times_steps():
    steps = [
        {
            "step_id": i + 1,
            "source": "agent",
            "message": f"m{i}",
            "timestamp": f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z",
        }
        for i in range(STEP_PAGE + 5)
    ]
    view = trajectory_view({"steps": steps}, started=None, ended=None, offset=STEP_PAGE)
    assert view is not None and [s.step_id for s in view.steps] == list(
        range(STEP_PAGE + 1, STEP_PAGE + 6)
    )
    assert view.duration == STEP_PAGE + 4
    assert view.steps[-1].span is not None and view.steps[-1].span.left == 100.0


# --------------------------------------------------------------------------- the browser


def test_browser_open_a_runs_trajectory(seeded, page, log_in):
    url = seeded.server.url
    log_in(url)
    page.goto(f"{url}/experiments/{seeded.b}")
    page.get_by_role("link", name=str(run_id(seeded, seeded.b, "mul")), exact=True).click()
    page.wait_for_url(re.compile(rf"{url}/runs/\d+$"))
    assert page.get_by_role("heading", name="Trajectory").is_visible()
    steps = page.locator("ol.steps > li")
    assert steps.count() == 3
    assert steps.nth(0).locator(".source").inner_text().lower() == "user"
    call = page.locator(".call").first
    assert call.locator(".tool").inner_text() == "calculator"
    assert "expression" in call.locator("pre").first.inner_text()
    assert "42" in call.inner_text()
    reasoning = page.locator("details.reasoning").first
    assert not reasoning.locator(".msg").is_visible()
    reasoning.locator("summary").click()
    assert reasoning.locator(".msg").is_visible()
    page.shot("run")
    page.set_viewport_size({"width": 390, "height": 800})
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the run page is {overflow}px wider than a phone screen"
    page.shot("run-phone")


def test_browser_invalid_trajectory(seeded, page, log_in):
    log_in(seeded.server.url)
    page.goto(f"{seeded.server.url}/runs/{run_id(seeded, seeded.broken, 'add')}")
    assert page.get_by_role("alert").filter(has_text="breaks ATIF rules").is_visible()
    page.shot("invalid")


def test_browser_label_a_run_pass_then_fail(seeded, page, log_in):
    url = seeded.server.url
    add = run_id(seeded, seeded.b, "add")
    log_in(url)
    page.goto(f"{url}/runs/{add}")
    assert page.get_by_text("No human label yet.").is_visible()
    form = page.get_by_role("form", name="Label this run")
    form.locator("select[name=name]").select_option("exact_match")
    form.get_by_role("button", name="Pass").click()
    page.wait_for_url(re.compile(rf"/runs/{add}\?done=label"))
    form = page.get_by_role("form", name="Label this run")
    form.locator("input[name=comment]").fill("on second thought")
    form.get_by_role("button", name="Fail").click()
    page.wait_for_url(re.compile(rf"/runs/{add}\?done=label"))
    rows = page.locator("#labels + table tbody tr")
    assert rows.count() == 2
    assert "pass" in rows.nth(0).inner_text() and "admin" in rows.nth(0).inner_text()
    assert "fail" in rows.nth(1).inner_text() and "on second thought" in rows.nth(1).inner_text()
    stored = seeded.api(f"/api/runs/{add}/labels").json()
    assert [(x["value"], x["comment"]) for x in stored] == [(1.0, None), (0.0, "on second thought")]
    page.shot("run-labels")
    # The experiment page: admin's latest label (fail) against exact_match's pass.
    page.goto(f"{url}/experiments/{seeded.b}")
    assert page.get_by_role("heading", name="Agreement with human labels").is_visible()
    row = page.locator("#agreement + .scroll tbody tr", has_text="exact_match")
    assert row.locator("td").nth(1).inner_text().startswith("0%")
    row.get_by_role("link", name="add").click()
    page.wait_for_url(re.compile(rf"/runs/{add}$"))
