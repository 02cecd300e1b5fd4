"""Experiments in the web UI and the paged reads behind them, over real experiments: the
reference harness on loopback and the worker moving and scoring every run.

Over HTTP: the runs page's filters and paging, charts, the case-by-case comparison, the
list's filters, the start form's refusals (the API's own messages), schedules. In a real
browser: open an experiment, compare two, start one, a phone-width page."""

from __future__ import annotations

import asyncio
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx
import psycopg
import pytest

from evalkit.harness.reference import Behaviour
from evalkit.otel.mapping import load_starter
from evalkit.web.pages import experiments as experiments_page
from evalkit.web.pages.experiments import FMT, Memo
from tests.conftest import ADMIN_PASSWORD, with_database
from tests.integration.datasets_helpers import add_user, admin_api
from tests.integration.runs_helpers import create_agent, engine_server, harness, wait_finished
from tests.web.test_pages_http import csrf_of, logged_in

EVALUATORS = {
    "exact_match": True,
    "tool_calls": {"required": ["calculator"]},
    "latency": True,
    "cost": True,
}
QUESTIONS = {"add": "What is 2 + 3?", "mul": "What is 6 * 7?", "sub": "What is 10 - 4?"}
# v1 expects a wrong answer for sub, v2 for mul: experiment B (on v2) regresses on mul and
# improves on sub against experiment A (on v1).
V1 = {"add": "5", "mul": "42", "sub": "7"}
V2 = {"add": "5", "mul": "41", "sub": "6"}


def cases(expected: dict[str, str]) -> list[dict]:
    return [
        {
            "id": case_id,
            "content": {
                "input": {"question": QUESTIONS[case_id]},
                "expected": {"answer": answer},
                "tags": ["math", "easy"] if case_id == "add" else ["math"],
                "split": "test",
                "evaluators": EVALUATORS,
            },
        }
        for case_id, answer in expected.items()
    ]


@dataclass
class Seeded:
    server: object
    token: str
    a: int
    """Experiment A: finance@dev on v1 with ref@dev."""
    b: int
    """Experiment B: finance@dev on v2 with ref@dev."""
    broken: int
    """An experiment whose harness answers invalid trajectories (case add only)."""
    repeated: int
    """again@dev (the reference harness) on add and mul of v2, three times each."""
    stuck: int = 0
    """Set by tests that add a run the harness never finishes (test_runs_pages.py)."""
    tokens: dict[str, str] = field(default_factory=dict)

    def api(self, path: str, token: str | None = None, **params) -> httpx.Response:
        return httpx.get(
            self.server.url + path,  # type: ignore[attr-defined]
            params=params,
            headers={"Authorization": f"Bearer {token or self.token}"},
            timeout=30,
        )


def start(server, token: str, **body) -> int:
    r = httpx.post(
        f"{server.url}/api/experiments",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert r.status_code == 201, r.text
    experiment_id = r.json()["id"]
    wait_finished(server, token, experiment_id)
    return experiment_id


def seed(server, ref_url: str, broken_url: str) -> Seeded:
    """@dev (shared) with finance (v1, then v2), ref@dev and broken@dev; alice writes dev
    and has a personal agent; rita only reviews dev; sdkbot@dev is code-driven."""
    token = httpx.post(
        f"{server.url}/api/auth/login", json={"username": "admin", "password": ADMIN_PASSWORD}
    ).json()["token"]
    admin_api(server, token, "POST", "/api/workspaces", json={"name": "dev"})
    tokens = {
        "alice": add_user(server, token, "alice", member_of="dev"),
        "rita": add_user(server, token, "rita", member_of="dev", role="reviewer"),
    }
    sync = "/api/workspaces/dev/datasets/finance/sync"
    admin_api(server, token, "POST", sync, json={"cases": cases(V1)})
    create_agent(server, token, "dev", "ref", ref_url)
    create_agent(server, token, "dev", "broken", broken_url)
    sdkbot = {"name": "sdkbot", "mapping": load_starter("openinference")}
    admin_api(server, token, "POST", "/api/workspaces/dev/agents", json=sdkbot)
    httpx.post(
        f"{server.url}/api/workspaces/alice/agents",
        json={"name": "mine", "harness_url": ref_url},
        headers={"Authorization": f"Bearer {tokens['alice']}"},
    ).raise_for_status()
    a = start(server, token, dataset="finance@dev", agent="ref@dev")
    admin_api(server, token, "POST", sync, json={"cases": cases(V2)})
    b = start(server, token, dataset="finance@dev", agent="ref@dev")
    broken = start(server, token, dataset="finance@dev", agent="broken@dev", case_ids=["add"])
    create_agent(server, token, "dev", "again", ref_url)
    repeated = start(
        server,
        token,
        dataset="finance@dev",
        agent="again@dev",
        repetitions=3,
        case_ids=["add", "mul"],
    )
    return Seeded(server, token, a, b, broken, repeated, tokens)


@pytest.fixture(scope="module")
def seeded(pg_admin_url, template_url, tmp_path_factory):
    """One stack for the module (seeding runs experiments through the worker): the
    tests read it, and the few that write add things no other test counts."""
    name = "evalkit_web_experiments"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name} TEMPLATE evalkit_template")
    running = engine_server(with_database(pg_admin_url, name), tmp_path_factory.mktemp("web"))
    try:
        with harness() as ref, harness(Behaviour(invalid_trajectory=True)) as bad:
            yield seed(running, ref.url, bad.url)
    finally:
        running.stop()
        with psycopg.connect(pg_admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


# --------------------------------------------------------------------------- the API


def test_runs_page_filters_and_pages(seeded):
    path = f"/api/experiments/{seeded.b}/runs"
    page = seeded.api(path).json()
    assert page["experiment"]["id"] == seeded.b and page["experiment"]["by_state"] == {"done": 3}
    assert page["total"] == 3 and [r["case_id"] for r in page["runs"]] == ["add", "mul", "sub"]
    assert page["tags"] == ["easy", "math"]
    add = page["runs"][0]
    scores = {s["name"]: s for s in add["scores"]}
    assert scores["exact_match"]["value"] == 1.0 and scores["tool_calls"]["value"] == 1.0
    assert scores["latency"]["kind"] == "gauge" and isinstance(scores["latency"]["raw"], float)
    assert add["cost_usd"] == pytest.approx(scores["cost"]["raw"]) and add["cost_usd"] > 0
    assert add["seconds"] is not None and add["trajectory_valid"] is True
    assert add["tags"] == ["math", "easy"]

    failing = seeded.api(path, score="exact_match", below="0.5").json()
    assert [r["case_id"] for r in failing["runs"]] == ["mul"] and failing["total"] == 1
    assert [r["case_id"] for r in seeded.api(path, tag="easy").json()["runs"]] == ["add"]
    assert seeded.api(path, state="errored").json()["total"] == 0
    assert [r["case_id"] for r in seeded.api(path, case="sub").json()["runs"]] == ["sub"]
    second = seeded.api(path, limit="1", offset="1").json()
    assert second["total"] == 3 and [r["case_id"] for r in second["runs"]] == ["mul"]
    beyond = seeded.api(path, offset="10").json()
    assert beyond["total"] == 3 and beyond["runs"] == []

    for params, words in [
        ({"state": "finished"}, "state is one of"),
        ({"below": "0.5"}, "below needs score"),
        ({"score": "exact_match", "below": "half"}, "below must be a number"),
        ({"limit": "0"}, "limit must be a whole number from 1 to 200"),
        ({"offset": "-1"}, "offset must be a whole number"),
    ]:
        r = seeded.api(path, **params)
        assert r.status_code == 400 and words in r.json()["error"]["message"], (params, r.text)
    r = seeded.api("/api/experiments/999999/runs")
    assert r.status_code == 404 and r.json()["error"]["code"] == "no-such-experiment"


def test_charts_count_every_scored_run(seeded):
    charts = seeded.api(f"/api/experiments/{seeded.b}/charts").json()
    by_name = {s["name"]: s["histogram"]["counts"] for s in charts["scores"]}
    assert set(by_name) == {"exact_match", "tool_calls"}  # gauges are measures, not values
    assert by_name["exact_match"][0] == 1 and by_name["exact_match"][9] == 2
    assert sum(by_name["tool_calls"]) == 3
    assert charts["latency"]["runs"] == 3 and charts["latency"]["unit"] == "s"
    assert sum(charts["latency"]["histogram"]["counts"]) == 3
    assert charts["cost"]["runs"] == 3 and charts["cost"]["p50"] > 0
    assert charts["cost"]["histogram"]["low"] == 0


def test_compare_cases_puts_regressions_first(seeded):
    path = f"/api/experiments/{seeded.a}/compare/{seeded.b}/cases"
    found = seeded.api(path).json()
    assert found["a"]["id"] == seeded.a and found["b"]["id"] == seeded.b
    assert found["names"] == ["exact_match", "tool_calls"]
    assert [c["case_id"] for c in found["cases"]] == ["mul", "sub", "add"]
    mul = {s["name"]: s for s in found["cases"][0]["scores"]}["exact_match"]
    assert (mul["a"], mul["b"], mul["change"]) == (1.0, 0.0, "regression")
    sub = {s["name"]: s for s in found["cases"][1]["scores"]}["exact_match"]
    assert sub["change"] == "improvement"
    assert [c["regressions"] for c in found["cases"]] == [1, 0, 0]
    changed = seeded.api(path, changed="1").json()
    assert changed["total"] == 2 and [c["case_id"] for c in changed["cases"]] == ["mul", "sub"]
    only = seeded.api(path, score="tool_calls").json()
    assert all(s["name"] == "tool_calls" for c in only["cases"] for s in c["scores"])
    late = seeded.api(path, offset="5").json()
    assert late["total"] == 3 and late["cases"] == []


def test_experiment_list_filters_and_means(seeded):
    every = seeded.api("/api/experiment-list").json()
    assert every["total"] >= 3
    ids = [e["id"] for e in every["experiments"]]
    assert ids == sorted(ids, reverse=True)
    ref = seeded.api("/api/experiment-list", agent="ref@dev", dataset="finance@dev").json()
    assert [e["id"] for e in ref["experiments"]] == [seeded.b, seeded.a]
    means = {s["name"]: s for s in ref["experiments"][0]["scores"]}
    assert means["exact_match"]["mean"] == pytest.approx(2 / 3)
    assert means["exact_match"]["readings"] == 3 and means["latency"]["kind"] == "gauge"
    assert means["latency"]["mean"] is None and means["latency"]["raw_mean"] is not None
    paged = seeded.api("/api/experiment-list", agent="ref@dev", limit="1", offset="1").json()
    assert paged["total"] == 2 and [e["id"] for e in paged["experiments"]] == [seeded.a]
    assert seeded.api("/api/experiment-list", status="running").json()["experiments"] == []
    brief = seeded.api(f"/api/experiments/{seeded.broken}/brief").json()
    assert brief["agent"] == "broken@dev" and brief["runs"] == 1
    r = seeded.api("/api/experiment-list", agent="nobody@dev")
    assert r.status_code == 404
    r = seeded.api("/api/experiment-list", status="done")
    assert r.status_code == 400 and "running or finished" in r.text


def test_kept_answers_follow_new_scores(seeded):
    """Means and case tables are kept in memory by keys that change with any new score."""
    listed = seeded.api("/api/experiment-list", agent="broken@dev").json()["experiments"]
    assert "extra" not in {s["name"] for s in listed[0]["scores"]}
    path = f"/api/experiments/{seeded.a}/compare/{seeded.broken}/cases"
    assert "extra" not in seeded.api(path).json()["names"]
    with psycopg.connect(seeded.server.db_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO scores (run_id, round, name, value, kind, evaluator) "
            "SELECT id, 1, 'extra', 0.25, 'evaluator', 'test' FROM runs "
            "WHERE experiment_id = %s",
            [seeded.broken],
        )
    listed = seeded.api("/api/experiment-list", agent="broken@dev").json()["experiments"]
    extra = {s["name"]: s for s in listed[0]["scores"]}["extra"]
    assert extra["mean"] == 0.25 and extra["readings"] == 1
    brief = seeded.api(f"/api/experiments/{seeded.broken}/brief").json()
    assert "extra" in {s["name"] for s in brief["scores"]}
    cases = seeded.api(path).json()
    assert "extra" in cases["names"]
    add = next(c for c in cases["cases"] if c["case_id"] == "add")
    assert {"name": "extra", "a": None, "b": 0.25, "change": "only_b"} in add["scores"]


# --------------------------------------------------------------------------- pages


def test_experiment_pages_render(seeded):
    server = seeded.server
    with logged_in(server) as web:
        listed = web.get("/experiments")
        assert listed.status_code == 200
        assert f'href="/experiments/{seeded.b}"' in listed.text
        assert "Start an experiment" in listed.text and 'value="ref@dev"' in listed.text
        assert 'value="sdkbot@dev"' not in listed.text.split('id="start"')[1].split("</details>")[0]

        trend = web.get("/experiments", params={"dataset": "finance", "workspace": "dev"})
        assert trend.status_code == 200 and "Score trend of finance@dev" in trend.text
        assert trend.text.count('<svg class="chart"') >= 2  # a chart per score name
        assert f'href="/experiments/{seeded.a}"' in trend.text  # points link to experiments

        detail = settled(web, f"/experiments/{seeded.b}")
        assert detail.status_code == 200
        text = detail.text
        assert "<h1>Experiment" in text and "exact_match" in text and "pass@" not in text
        assert "66.7%" in text  # exact_match's pass rate, 2 of 3
        assert "Distribution of exact_match" in text and "Latency per run" in text
        assert 'href="/runs/' in text and 'name="other"' in text

        repeated = settled(web, f"/experiments/{seeded.repeated}").text
        for column in ("pass@1", "pass@2", "pass@3", "pass^2", "pass^3"):
            assert f">{column}</th>" in repeated
        assert "50.0%" in repeated  # add passes every time, mul never: pass@k is 1/2

        failing = web.get(
            f"/experiments/{seeded.b}", params={"score": "exact_match", "below": "0.5"}
        )
        assert failing.text.count('href="/runs/') == 1 and "1–1 of 1 runs" in failing.text

        chosen = web.get(f"/experiments/{seeded.b}/compare", params={"other": str(seeded.a)})
        assert chosen.status_code == 303
        assert chosen.headers["location"] == f"/experiments/{seeded.a}/compare/{seeded.b}"

        compared = settled(web, f"/experiments/{seeded.a}/compare/{seeded.b}")
        assert compared.status_code == 200
        assert "1 regression" in compared.text and "McNemar" in compared.text
        assert compared.text.index(">mul<") < compared.text.index(">sub<")

        bad = web.get("/experiments/abc")
        assert bad.status_code == 400 and "whole numbers" in bad.text
        missing = web.get("/experiments/999999")
        assert missing.status_code == 404 and "no experiment 999999" in missing.text


def test_failed_runs_show_as_failed_not_as_wrong(seeded):
    """A harness that fails every run, as its own agents (no other test counts them): the
    experiment page says how many runs failed and keeps them out of the means;
    the compare page shows each side's failed runs and the new ones."""
    server, token = seeded.server, seeded.token
    with harness() as ref, harness(Behaviour(fail_runs=True)) as failing:
        create_agent(server, token, "dev", "steady", ref.url)
        create_agent(server, token, "dev", "crashing", failing.url)
        a = start(server, token, dataset="finance@dev", agent="steady@dev")
        b = start(server, token, dataset="finance@dev", agent="crashing@dev")
    listed = seeded.api("/api/experiment-list", agent="crashing@dev").json()["experiments"]
    means = {m["name"]: m for m in listed[0]["scores"]}
    assert means["exact_match"]["readings"] == 0 and means["exact_match"]["mean"] is None
    with logged_in(server) as web:
        page = settled(web, f"/experiments/{b}").text
        assert "3 of 3 runs failed</strong>" in page and 'href="?state=failed#runs"' in page
        assert "<th>Of all runs</th>" in page and "3 runs failed" in page
        assert "Distribution of exact_match" not in page  # no judged run to draw
        clean = settled(web, f"/experiments/{a}").text
        assert 'id="failed-runs"' not in clean and "<th>Of all runs</th>" not in clean
        compared = settled(web, f"/experiments/{a}/compare/{b}").text
        assert 'id="failed-runs" class="warn"' in compared
        assert "A <strong>0 of 3</strong>" in compared and ">3 of 3</strong>" in compared
        assert "more of B's runs failed than A's" in compared
        assert "Failed in B only (3)" in compared and "fails every run" in compared
        assert "0/1 failed" in compared  # the cases table, per case
        swapped = settled(web, f"/experiments/{b}/compare/{a}").text
        assert 'id="failed-runs" class="warn"' not in swapped


def settled(web: httpx.Client, path: str, **params) -> httpx.Response:
    """The page once its statistics are in: a page that is still computing them says so,
    asks the browser to reload (Refresh: 2), and is asked again here."""
    for _ in range(100):
        r = web.get(path, params=params)
        if "reloads by itself" not in r.text:
            return r
        assert r.headers["refresh"] == "2"
        time.sleep(0.2)
    raise AssertionError(f"{path} never finished computing its statistics")


def _start(web: httpx.Client, **fields) -> httpx.Response:
    csrf = csrf_of(web.get("/experiments").text)
    return web.post("/experiments", data={"csrf": csrf, **fields})


def test_start_form_refusals_are_the_apis(seeded):
    server = seeded.server
    with logged_in(server, "alice", "alice-password") as web:
        # the form posts no capabilities: the server would drive it, which it never does
        personal = _start(web, dataset="finance@dev", agent="mine@alice")
        assert personal.status_code == 403, personal.text
        assert "<code>server-cannot-drive-personal-agent</code>" in personal.text
        assert "agent mine@alice is personal, so the server" in personal.text
        assert "evalkit run DATASET --agent mine" in personal.text
        code = _start(web, dataset="finance@dev", agent="sdkbot@dev")
        assert code.status_code == 400 and "has no harness URL: it is code-driven" in code.text
        bad = _start(web, dataset="finance@dev", agent="ref@dev", repetitions="many")
        assert bad.status_code == 400 and "ExperimentCreate" in bad.text
        stale = web.post("/experiments", data={"csrf": "0" * 64, "dataset": "finance@dev"})
        assert stale.status_code == 403 and "CSRF" in stale.text
    with logged_in(server, "rita", "rita-password") as web:
        # rita reviews dev and so may not write there, but anyone starts a server-driven run
        mine = _start(web, dataset="finance@dev", agent="mine@alice")
        assert mine.status_code == 403 and "personal-agent-owner-only" in mine.text
        page = web.get("/experiments").text
        form = page.split('id="start"')[1].split("</details>")[0]
        assert 'value="finance@dev"' in form and 'value="ref@dev"' in form
        assert 'value="mine@alice"' not in form  # the form offers shared harness agents only
        schedules = web.get("/schedules").text.split('id="create"')[1]
        assert 'value="finance@dev"' not in schedules  # a schedule is a write: writers only


def test_start_form_starts_a_server_driven_experiment(seeded):
    with logged_in(seeded.server, "alice", "alice-password") as web:
        r = _start(web, dataset="finance@dev", agent="ref@dev", split="test", repetitions="1")
        assert r.status_code == 303, r.text
        found = re.fullmatch(r"/experiments/(\d+)", r.headers["location"])
        assert found
        detail = wait_finished(seeded.server, seeded.token, int(found[1]))
        assert detail["driver"] == "server" and detail["created_by"] == "alice"
        assert detail["split"] == "test" and detail["runs"] == 3


def test_schedules_page_create_and_delete(seeded):
    server = seeded.server
    with logged_in(server, "alice", "alice-password") as web:
        csrf = csrf_of(web.get("/schedules").text)
        bad = web.post(
            "/schedules",
            data={"csrf": csrf, "dataset": "finance@dev", "agent": "ref@dev", "cron": "nightly"},
        )
        assert bad.status_code == 400 and "cron" in bad.text
        made = web.post(
            "/schedules",
            data={
                "csrf": csrf,
                "dataset": "finance@dev",
                "agent": "ref@dev",
                "cron": "0 3 * * *",
                "name": "nightly",
            },
        )
        assert made.status_code == 303 and made.headers["location"] == "/schedules"
        shown = web.get("/schedules").text
        assert "<strong>nightly</strong>@dev" in shown and "<code>0 3 * * *</code>" in shown
        assert 'action="/schedules/' in shown
    schedule_id = next(
        s["id"] for s in seeded.api("/api/schedules").json() if s["name"] == "nightly"
    )
    with logged_in(server, "rita", "rita-password") as web:
        page = web.get("/schedules").text
        assert "nightly" in page and f'action="/schedules/{schedule_id}/delete"' not in page
        refused = web.post(f"/schedules/{schedule_id}/delete", data={"csrf": csrf_of(page)})
        assert refused.status_code == 403 and "rita" in refused.text
    with logged_in(server, "alice", "alice-password") as web:
        page = web.get("/schedules").text
        gone = web.post(f"/schedules/{schedule_id}/delete", data={"csrf": csrf_of(page)})
        assert gone.status_code == 303
        assert "<strong>nightly</strong>" not in web.get("/schedules").text


# --------------------------------------------------------------------------- the browser


def test_browser_open_an_experiment(seeded, page, log_in):
    url = seeded.server.url
    log_in(url)
    page.get_by_role("link", name="Experiments", exact=True).click()
    page.wait_for_url(f"{url}/experiments")
    page.shot("list")
    page.get_by_role("link", name=str(seeded.b), exact=True).click()
    page.wait_for_url(f"{url}/experiments/{seeded.b}")
    assert page.get_by_role("heading", name=f"Experiment {seeded.b}").is_visible()
    page.get_by_role("cell", name="exact_match", exact=True).first.wait_for()  # reloads
    assert page.locator("svg.chart").count() >= 3
    page.shot("experiment")
    page.locator("select[name=state]").select_option("done")
    page.wait_for_url(re.compile(r".*state=done.*"))
    assert page.locator("table.runs tbody tr").count() == 3
    page.get_by_role("link", name="failing runs").first.click()
    page.wait_for_url(re.compile(r".*below=0\.5.*"))
    assert page.locator("table.runs tbody tr").count() == 1
    page.shot("failing-runs")
    page.goto(f"{url}/experiments?dataset=finance%40dev")
    assert page.get_by_role("heading", name="Score trend of finance@dev").is_visible()
    page.get_by_role("link", name=re.compile(rf"#{seeded.a}: ")).first.focus()  # keyboard
    page.shot("trend")


def test_browser_compare_two(seeded, page, log_in):
    url = seeded.server.url
    log_in(url)
    page.goto(f"{url}/experiments/{seeded.b}")
    page.get_by_label("Compare with another experiment").select_option(str(seeded.a))
    page.get_by_role("button", name="Compare").click()
    page.wait_for_url(f"{url}/experiments/{seeded.a}/compare/{seeded.b}")
    page.wait_for_selector("text=McNemar", timeout=20_000)  # reloads until the stats are in
    assert page.get_by_role("heading", name="Regressions").is_visible()
    first_case = page.locator("#cases ~ .scroll tbody tr").first
    assert "mul" in first_case.inner_text() and "regression" in first_case.inner_text()
    page.shot("compare")
    page.set_viewport_size({"width": 390, "height": 800})
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the compare page is {overflow}px wider than a phone screen"
    page.shot("compare-phone")


def score_cells(score: dict) -> list[str]:
    """The cells of a score's row on the compare page, as it shows a score of
    ``evalkit experiments compare --json``."""
    name = score["name"]

    def interval(ci: dict | None, show=lambda x: f"{x:.3f}") -> str:
        return f" [{show(ci['low'])}, {show(ci['high'])}]" if ci else ""

    def mean(value: float | None, ci: dict | None, form: str = ".3f") -> str:
        return "—" if value is None else f"{value:{form}}" + interval(ci)

    def measured(value: float | None, ci: dict | None, sign: str = "") -> str:
        def show(x: float) -> str:
            return FMT.measure(name, x)

        return "—" if value is None else sign + show(value) + interval(ci, show)

    a, b = score["a"] or {}, score["b"] or {}
    if score["kind"] == "gauge":
        diff = score["raw_diff"]
        return [
            f"{name} gauge",
            measured(a.get("raw_mean"), a.get("raw_mean_ci")),
            measured(b.get("raw_mean"), b.get("raw_mean_ci")),
            measured(diff, score["raw_diff_ci"], "+" if (diff or 0) >= 0 else ""),
            *["—"] * 4,
            str(score["raw_paired"]),
        ]
    only = (score["only_a"], score["only_b"])
    return [
        name,
        mean(a.get("mean"), a.get("mean_ci")),
        mean(b.get("mean"), b.get("mean_ci")),
        mean(score["mean_diff"], score["mean_diff_ci"], "+.3f"),
        f"{FMT.pct(a.get('pass_rate'))} → {FMT.pct(b.get('pass_rate'))}",
        str(len(score["regressions"])),
        str(len(score["improvements"])),
        FMT.p(score["mcnemar_p"]),
        f"{score['paired']}" + (" (+{}/{})".format(*only) if any(only) else ""),
    ]


def test_browser_compare_is_complete_on_first_view_and_agrees_with_the_cli(
    seeded, page, log_in, cli
):
    """Two small experiments compared for the first time (A against baseline B: no other
    test compares them this way round): the first response is the whole table, intervals
    and tests included, with no "Computing" notice and no reload asked for, however short
    the wait for larger experiments (0 here: a page of few runs waits for its statistics
    instead of racing a timer); and every number in it is what
    `evalkit experiments compare --json` prints."""
    url = seeded.server.url
    log_in(url)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(experiments_page, "COMPARE_WAIT", 0)
        first = page.goto(f"{url}/experiments/{seeded.b}/compare/{seeded.a}")
    assert first is not None and first.status == 200
    assert "refresh" not in first.headers
    assert page.get_by_text("Computing the intervals").count() == 0
    assert page.get_by_role("heading", name="Regressions").is_visible()
    page.shot("compare-first-view")

    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", url)
    cli.monkeypatch.setenv("EVALKIT_TOKEN", seeded.token)
    result = cli("experiments", "compare", str(seeded.b), str(seeded.a), "--json")
    assert result.code == 0, result.err
    scores = result.json["scores"]
    assert [s["name"] for s in scores] == ["cost", "exact_match", "latency", "tool_calls"]
    assert page.locator("tr[data-score]").count() == len(scores)
    for score in scores:
        cells = page.locator(f'tr[data-score="{score["name"]}"] td').all_inner_texts()
        assert [" ".join(cell.split()) for cell in cells] == score_cells(score), score["name"]
    exact_match = next(s for s in scores if s["name"] == "exact_match")
    assert exact_match["mean_diff_ci"] is not None and len(exact_match["regressions"]) == 1


def test_browser_a_page_still_computing_says_so_and_reloads_itself(seeded, page, log_in):
    """Above ``INLINE_RUNS`` runs a compare page waits ``COMPARE_WAIT`` seconds for its
    statistics (both set to 0 here, as for experiments too large to wait for). Once a new
    score comes in, the page shows the statistics it has, says newer ones are being
    computed and asks to be reloaded (Refresh: 2); the browser reloads it by itself until
    the new score's row is in, with no reload from the test."""
    server, token = seeded.server, seeded.token
    with harness() as ref:
        create_agent(server, token, "dev", "again2", ref.url)
        a = start(server, token, dataset="finance@dev", agent="again2@dev", case_ids=["add"])
        b = start(server, token, dataset="finance@dev", agent="again2@dev", case_ids=["add"])
    url = server.url
    log_in(url)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(experiments_page, "INLINE_RUNS", 0)
        patch.setattr(experiments_page, "COMPARE_WAIT", 0)
        page.goto(f"{url}/experiments/{a}/compare/{b}")
        page.wait_for_selector('tr[data-score="exact_match"]')  # perhaps after reloads
        [run] = seeded.api(f"/api/experiments/{b}/runs").json()["runs"]
        with psycopg.connect(server.db_url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO scores (run_id, round, name, value, evaluator) "
                "VALUES (%s, 1, 'late_check', 1.0, 'test')",
                [run["id"]],
            )
        stale = page.goto(f"{url}/experiments/{a}/compare/{b}")
        assert stale is not None and stale.headers.get("refresh") == "2"
        notice = page.get_by_text("newer ones are being computed")
        assert notice.is_visible() and "reloads by itself" in notice.inner_text()
        assert page.locator('tr[data-score="late_check"]').count() == 0
        page.wait_for_selector('tr[data-score="late_check"]', timeout=15_000)
        assert page.get_by_text("newer ones are being computed").count() == 0


def test_browser_start_an_experiment(seeded, page, log_in):
    url = seeded.server.url
    log_in(url, "alice", "alice-password")
    page.goto(f"{url}/experiments")
    page.get_by_text("Start an experiment").click()
    page.locator("#start select[name=dataset]").select_option("finance@dev")
    page.locator("#start select[name=agent]").select_option("ref@dev")
    page.locator("#start").get_by_role("button", name="Start").click()
    page.wait_for_url(re.compile(rf"{url}/experiments/\d+$"))
    assert page.get_by_role("heading", name=re.compile(r"Experiment \d+")).is_visible()
    page.shot("started")


def test_browser_a_reviewer_starts_the_regression_run(seeded, page, log_in):
    """Seed row 5 in the UI: rita only reviews dev, and starts finance@dev on ref@dev;
    the experiment is kept in @dev."""
    url = seeded.server.url
    log_in(url, "rita", "rita-password")
    page.goto(f"{url}/experiments")
    page.get_by_text("Start an experiment").click()
    page.locator("#start select[name=dataset]").select_option("finance@dev")
    page.locator("#start select[name=agent]").select_option("ref@dev")
    page.locator("#start").get_by_role("button", name="Start").click()
    page.wait_for_url(re.compile(rf"{url}/experiments/\d+$"))
    experiment_id = int(page.url.rsplit("/", 1)[1])
    detail = wait_finished(seeded.server, seeded.token, experiment_id)
    assert (detail["workspace"], detail["created_by"]) == ("dev", "rita")
    assert detail["driver"] == "server"
    page.shot("reviewer-started")


def test_browser_experiment_fits_a_phone(seeded, page, log_in):
    log_in(seeded.server.url)
    page.set_viewport_size({"width": 390, "height": 800})
    for path in (f"/experiments/{seeded.b}", "/experiments?dataset=finance%40dev", "/schedules"):
        page.goto(seeded.server.url + path)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{path} is {overflow}px wider than a phone screen"
    page.goto(f"{seeded.server.url}/experiments/{seeded.b}")
    page.shot("phone")


def test_memo_computes_once_and_forgets_failures():
    async def main() -> None:
        memo = Memo(size=2)
        calls: list[str] = []

        async def slow() -> int:
            calls.append("slow")
            await asyncio.sleep(0.2)
            return 42

        async def broken() -> int:
            raise ValueError("no")

        assert await memo.get("k", slow, wait=0.01) is None  # not ready: the page says so
        assert await memo.get("k", slow) == 42 and calls == ["slow"]
        with pytest.raises(ValueError):
            await memo.get("e", broken)
        assert await memo.get("e", slow) == 42  # a failure is not kept
        await memo.get("x", slow)
        assert await memo.get("k", slow) == 42 and len(calls) == 4  # evicted: the oldest

        async def newer() -> int:
            await asyncio.sleep(0.2)
            return 43

        assert await memo.get(("v", 1), slow, family="v") == 42
        assert await memo.get(("v", 2), newer, wait=0.01, family="v") is None
        assert memo.latest("v") == 42  # the older version's answer, while the newer computes
        assert await memo.get(("v", 2), newer, family="v") == 43 and memo.latest("v") == 43

        # Started before its key is known (a page's first comparison), then kept under it.
        early = memo.start(newer, family="w")
        assert memo.latest("w") is None
        memo.keep(("w", 1), early)
        assert await memo.get(("w", 1), slow, family="w") == 43 and memo.latest("w") == 43
        assert len(calls) == 5  # the kept task answered: slow was not called
        failing = memo.start(broken, family="f")
        memo.keep(("f", 1), failing)
        with pytest.raises(ValueError):
            await failing
        assert await memo.get(("f", 1), slow, family="f") == 42  # a failure is not kept

    # A thread of its own: Playwright's sync API may hold this thread's event loop.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, main()).result()
