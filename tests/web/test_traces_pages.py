"""Traces: GET /api/trace-sessions (filters, pages, refusals), the /runs list and a
session's page over HTTP, the spans tree, and in a browser a session a real run claimed
(spans sent through the real OpenTelemetry exporter, the run driven by the real worker)."""

from __future__ import annotations

import re

import pytest
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import Status, StatusCode

from evalkit.harness.reference import Behaviour
from evalkit.otel.model import Span, SpanEvent
from evalkit.web.pages.traces import PAGE_SIZE, span_tree
from tests.conftest import ADMIN_PASSWORD
from tests.integration.datasets_helpers import Repo, admin_api
from tests.integration.otel_helpers import MAPPING, agent_session, exporter, mint, recorder
from tests.integration.runs_helpers import api, engine_server, harness, until, wait_finished
from tests.otel_agents import openinference_agent, tracer_and_exporter
from tests.web.test_pages_http import logged_in


def make_agent(server, token: str, workspace: str, name: str, *, mapping=MAPPING) -> str:
    body: dict = {"name": name}
    if mapping is not None:
        body["mapping"] = mapping
    else:  # a harness agent needs no mapping; its spans are stored all the same
        body["harness_url"] = "http://203.0.113.10:8700"
    admin_api(server, token, "POST", f"/api/workspaces/{workspace}/agents", json=body)
    return mint(server, token, workspace, name)


def send_sessions(server, agent_token: str, session_ids: list[str]) -> None:
    """One agent turn per session id, exported in one batch by the real OTLP exporter."""
    with recorder() as (tracer, memory):
        for session_id in session_ids:
            agent_session(tracer, session_id)
        spans = memory.get_finished_spans()
    assert exporter(server, agent_token).export(spans) == SpanExportResult.SUCCESS


@pytest.fixture
def traced(server, admin_token):
    """bot@admin with sessions s1, s2; other@dev with s3; nomap@admin (no mapping) with s4."""
    admin_api(server, admin_token, "POST", "/api/workspaces", json={"name": "dev"})
    send_sessions(server, make_agent(server, admin_token, "admin", "bot"), ["s1", "s2"])
    send_sessions(server, make_agent(server, admin_token, "dev", "other"), ["s3"])
    send_sessions(server, make_agent(server, admin_token, "admin", "nomap", mapping=None), ["s4"])
    return admin_token


# --------------------------------------------------------------------------- the API


def test_trace_sessions_api_filters_and_pages(server, traced):
    def listed(**query) -> dict:
        r = api(server, traced, "GET", "/api/trace-sessions", params=query)
        assert r.status_code == 200, r.text
        return r.json()

    every = listed()
    assert sorted(s["session_id"] for s in every["sessions"]) == ["s1", "s2", "s3", "s4"]
    assert every["more"] is False and every["offset"] == 0 and every["limit"] == 50
    s3 = next(s for s in every["sessions"] if s["session_id"] == "s3")
    assert (s3["agent"], s3["workspace"], s3["span_count"], s3["run"]) == ("other", "dev", 3, None)
    assert s3["bytes"] > 0 and s3["truncated"] is False and s3["first_span_at"]
    assert {s["session_id"] for s in listed(workspace="dev")["sessions"]} == {"s3"}
    assert {s["session_id"] for s in listed(agent="bot@admin")["sessions"]} == {"s1", "s2"}
    assert {s["session_id"] for s in listed(agent="bot", workspace="admin")["sessions"]} == {
        "s1",
        "s2",
    }
    assert [s["session_id"] for s in listed(agent="bot@admin", session="s2")["sessions"]] == ["s2"]
    first = listed(limit=3)
    assert len(first["sessions"]) == 3 and first["more"] is True
    rest = listed(limit=3, offset=3)
    assert len(rest["sessions"]) == 1 and rest["more"] is False
    seen = [s["session_id"] for s in first["sessions"] + rest["sessions"]]
    assert sorted(seen) == ["s1", "s2", "s3", "s4"]


@pytest.mark.parametrize(
    ("query", "status", "words"),
    [
        ({"limit": "0"}, 400, "limit must be a whole number from 1 to 500"),
        ({"offset": "-1"}, 400, "offset must be a whole number"),
        ({"agent": "bot"}, 400, "say which workspace agent 'bot' is in"),
        ({"agent": "bot@admin", "workspace": "dev"}, 400, "is not in workspace 'dev'"),
        ({"workspace": "nope"}, 404, "no workspace named 'nope'"),
        ({"session": "s1"}, 400, "say whose session 's1' is"),
        ({"agent": "ghost@admin"}, 404, "ghost"),
    ],
)
def test_trace_sessions_api_refusals_say_what_to_fix(server, traced, query, status, words):
    r = api(server, traced, "GET", "/api/trace-sessions", params=query)
    assert r.status_code == status, r.text
    assert words in r.json()["error"]["message"]


def test_trace_sessions_api_needs_a_login(server):
    import httpx

    r = httpx.get(f"{server.url}/api/trace-sessions")
    assert r.status_code == 401 and r.json()["error"]["code"] == "login-required"


# --------------------------------------------------------------------------- pages over HTTP


def test_sessions_list_filters_by_workspace_and_agent(server, traced):
    with logged_in(server) as client:
        every = client.get("/runs").text
        for sid in ("s1", "s2", "s3", "s4"):
            assert f"<code>{sid}</code>" in every
        assert 'href="/runs/dev/other/s3"' in every
        assert "no run" in every
        dev = client.get("/runs", params={"workspace": "dev"}).text
        assert "<code>s3</code>" in dev and "<code>s1</code>" not in dev
        assert '<option value="other" ' in dev
        bot = client.get("/runs", params={"workspace": "admin", "agent": "bot"}).text
        assert "<code>s1</code>" in bot and "<code>s4</code>" not in bot
        # An agent left over from another workspace is dropped, not an error page.
        stale = client.get("/runs", params={"workspace": "dev", "agent": "bot"})
        assert stale.status_code == 200 and "<code>s3</code>" in stale.text


def test_the_tabs_old_addresses_redirect_to_runs(server, traced):
    """The Runs tab was Traces at /sessions: every old address answers a permanent redirect
    to the same page under /runs, its query and an escaped session id kept; before a login
    it asks for one, and the login then lands on the old address, so on the new page."""
    import httpx

    with logged_in(server) as client:
        listing = client.get("/runs").text
        assert "<h1>Runs</h1>" in listing and "<title>Runs · evalkit</title>" in listing
        assert '<a href="/runs" aria-current="page">Runs</a>' in listing
        assert ">Traces</a>" not in listing
        for old, new in (
            ("/sessions", "/runs"),
            ("/sessions?workspace=dev&agent=other", "/runs?workspace=dev&agent=other"),
            ("/sessions/admin/bot/s1", "/runs/admin/bot/s1"),
            ("/sessions/admin/odd/a/b%20%3Ci%3E", "/runs/admin/odd/a/b%20%3Ci%3E"),
        ):
            r = client.get(old, follow_redirects=False)
            assert (r.status_code, r.headers["location"]) == (301, new), old
        followed = client.get("/sessions/admin/bot/s1", follow_redirects=True)
        assert followed.status_code == 200 and "<code>s1</code>" in followed.text
    anonymous = httpx.get(f"{server.url}/sessions/admin/bot/s1", follow_redirects=False)
    assert anonymous.status_code == 303
    assert anonymous.headers["location"].startswith("/login?next=%2Fsessions%2Fadmin%2Fbot%2Fs1")


def test_sessions_list_pages_through_many_sessions(server, admin_token):
    agent_token = make_agent(server, admin_token, "admin", "busy")
    send_sessions(server, agent_token, [f"busy-{i:03d}" for i in range(PAGE_SIZE + 5)])
    with logged_in(server) as client:
        first = client.get("/runs").text
        assert first.count('href="/runs/admin/busy/') == PAGE_SIZE
        assert 'rel="next"' in first and 'rel="prev"' not in first
        older = re.search(r'href="([^"]+)" rel="next"', first)[1].replace("&amp;", "&")
        assert older == f"/runs?offset={PAGE_SIZE}"
        second = client.get(older).text
        assert second.count('href="/runs/admin/busy/') == 5
        assert 'rel="prev"' in second and 'rel="next"' not in second
        listed = re.findall(r"busy-\d{3}", first + second)
        assert len(set(listed)) == PAGE_SIZE + 5


def test_session_page_shows_spans_and_what_the_mapping_made_of_them(server, traced):
    with logged_in(server) as client:
        r = client.get("/runs/admin/bot/s1")
    assert r.status_code == 200, r.text
    text = r.text
    assert "<h1>Session <code>s1</code></h1>" in text
    # the tree: the agent root, its llm and calculator children indented under it
    names = re.findall(r'<span class="sname" style="padding-left: (\d+)px">(\w+)', text)
    assert names == [("0", "agent"), ("14", "llm"), ("14", "calculator")]
    assert "<code>openinference.span.kind</code>" in text and "thinking" in text
    assert "What the mapping could not read" in text
    assert "Trajectory steps built from the spans" in text
    assert "What is 2 + 3?" in text
    assert "No run." in text


def test_session_page_without_a_mapping_still_shows_the_spans(server, traced):
    with logged_in(server) as client:
        r = client.get("/runs/admin/nomap/s4")
    assert r.status_code == 200
    assert "has no active span mapping" in r.text
    assert r.text.count('<span class="sname"') == 3


def test_unknown_session_is_a_404_page_naming_it(server, traced):
    with logged_in(server) as client:
        r = client.get("/runs/admin/bot/nope")
        assert r.status_code == 404 and "has no session &#39;nope&#39;" in r.text
        r = client.get("/runs/admin/ghost/s1")
        assert r.status_code == 404


def test_session_ids_with_slashes_and_markup_are_safe(server, admin_token):
    agent_token = make_agent(server, admin_token, "admin", "odd")
    with recorder() as (tracer, memory):
        with tracer.start_as_current_span(
            "<script>alert(1)</script>",
            attributes={"session.id": "a/b <i>", "input.value": "<img src=x onerror=alert(2)>"},
        ) as span:
            span.set_status(Status(StatusCode.ERROR, "<b>boom</b>"))
        spans = memory.get_finished_spans()
    assert exporter(server, agent_token).export(spans) == SpanExportResult.SUCCESS
    with logged_in(server) as client:
        listing = client.get("/runs").text
        link = re.search(r'href="(/runs/admin/odd/[^"]+)"', listing)[1]
        assert link == "/runs/admin/odd/a/b%20%3Ci%3E"
        r = client.get(link)
    assert r.status_code == 200, r.text
    assert "<script>alert(1)" not in r.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in r.text
    assert "<img" not in r.text and "<b>boom" not in r.text
    assert "&lt;b&gt;boom&lt;/b&gt;" in r.text and 's-failed">error' in r.text


async def test_orphan_traces_are_listed_by_trace_id_and_open(server, admin_token):
    """A trace whose root never came and whose spans name no session: after the orphan
    job, the list shows it by its trace id, marked, and its page shows its spans."""
    from datetime import UTC, datetime, timedelta

    from evalkit.config import OtelSettings
    from evalkit.db import Database
    from evalkit.jobs.otel import settle_orphans

    agent_token = make_agent(server, admin_token, "admin", "bot")
    with recorder() as (tracer, memory):
        with (
            tracer.start_as_current_span("agent"),
            tracer.start_as_current_span("step"),
            tracer.start_as_current_span("llm"),
        ):
            pass
        spans = [s for s in memory.get_finished_spans() if s.parent is not None]
    assert exporter(server, agent_token).export(spans) == SpanExportResult.SUCCESS
    trace_id = f"{spans[0].context.trace_id:032x}"
    db = Database(server.db_url)
    await db.open()
    try:
        later = datetime.now(UTC) + timedelta(seconds=OtelSettings().orphan_seconds + 1)
        assert await settle_orphans(db, OtelSettings(), now=later) == {
            "assigned": 0,
            "orphans": 1,
        }
    finally:
        await db.close()
    r = api(server, admin_token, "GET", "/api/trace-sessions", params={"agent": "bot@admin"})
    [listed] = r.json()["sessions"]
    assert (listed["session_id"], listed["unassigned"], listed["span_count"]) == (trace_id, True, 2)
    one = api(
        server,
        admin_token,
        "GET",
        "/api/trace-sessions",
        params={"agent": "bot@admin", "session": trace_id},
    )
    assert [s["session_id"] for s in one.json()["sessions"]] == [trace_id]
    with logged_in(server) as client:
        listing = client.get("/runs").text
        assert f'href="/runs/admin/bot/{trace_id}"' in listing and "orphan trace" in listing
        page = client.get(f"/runs/admin/bot/{trace_id}")
    assert page.status_code == 200, page.text
    assert f"<h1>Orphan trace <code>{trace_id}</code></h1>" in page.text
    assert "parent missing" in page.text  # "step" hangs under the root that never came
    names = re.findall(r'<span class="sname" style="padding-left: (\d+)px">(\w+)', page.text)
    assert names == [("0", "step"), ("14", "llm")]


# --------------------------------------------------------------------------- the tree


def _span(span_id: str, parent: str | None, start: int, end: int, trace: str = "t1") -> Span:
    return Span(
        trace_id=trace * 8,
        span_id=span_id * 4,
        parent_span_id=parent * 4 if parent else None,
        name=f"n{span_id}",
        start_ns=start,
        end_ns=end,
        events=[SpanEvent(name="e", time_ns=start + 5)],
    )


def test_span_tree_orders_parents_first_and_siblings_by_start():
    spans = [
        _span("0004", "0001", 50, 60),
        _span("0001", None, 0, 100),
        _span("0003", "0001", 10, 40),
        _span("0005", "0003", 20, 30),
        _span("0009", "0042", 70, 80),  # parent never arrived
        _span("0002", None, 100, 200, trace="t2"),  # a second trace of the session
    ]
    lines, total_ms = span_tree(spans)
    assert [(line.span.name, line.depth) for line in lines] == [
        ("n0001", 0),
        ("n0003", 1),
        ("n0005", 2),
        ("n0004", 1),
        ("n0009", 0),
        ("n0002", 0),
    ]
    assert [line.orphan for line in lines] == [False, False, False, False, True, False]
    assert total_ms == 200 / 1e6
    root, child = lines[0], lines[1]
    assert (root.left, root.width) == (0, 50) and (child.left, child.width) == (5, 15)
    assert lines[-1].events[0][1] == 105 / 1e6


def test_span_tree_survives_a_parent_cycle_and_empty_sessions():
    looped = [_span("0001", "0002", 0, 10), _span("0002", "0001", 0, 10)]
    lines, _ = span_tree(looped)  # neither is a root; both are still shown
    assert [(line.span.name, line.depth) for line in lines] == [("n0001", 0), ("n0002", 1)]
    assert span_tree([]) == ([], 0.0)


# --------------------------------------------------------------------------- in a browser


@pytest.fixture
def engine(database_url, tmp_path):
    def quick_settle(settings) -> None:
        settings.otel.settle_seconds = 0.3

    running = engine_server(database_url, tmp_path, extra=quick_settle)
    try:
        yield running
    finally:
        running.stop()


def test_browser_sessions_list_and_a_claimed_sessions_spans_tree(
    engine, cli, tmp_path, page, log_in
):
    """A traced agent's run claims its session; the Runs tab (named as the docs name it)
    links the run, experiment and case; the session page shows the spans tree, a span's
    attributes and the steps; the tab's old addresses (/sessions...) redirect."""
    token = api_token(engine)
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", engine.url)
    cli.monkeypatch.setenv("EVALKIT_TOKEN", token)
    admin_api(engine, token, "POST", "/api/workspaces", json={"name": "dev"})
    repo = Repo(tmp_path / "repo")
    repo.case("weather", "paris", "input:\n  question: 'What is the weather in Paris?'\n")
    assert cli("sync", str(repo.suite("weather")), "--workspace", "dev").code == 0
    with harness(Behaviour(run_seconds=1.0, without=frozenset({"trajectory"}))) as ref:
        body = {
            "name": "weather",
            "harness_url": ref.url,
            "trajectory_source": "otel",
            "mapping": MAPPING,
            "poll_interval": 0.05,
            "trajectory_wait": 20,
        }
        admin_api(engine, token, "POST", "/api/workspaces/dev/agents", json=body)
        agent_token = mint(engine, token, "dev", "weather")
        started = cli("run", "weather@dev", "--agent", "weather@dev", "--no-wait", "--json")
        assert started.code == 0, started.err
        experiment_id = started.json["id"]
        detail = api(engine, token, "GET", f"/api/experiments/{experiment_id}").json()
        run_id = str(detail["run_list"][0]["id"])
        until(lambda: ref.run_for(run_id) is not None, what="the harness run")
        session_id = ref.run_for(run_id).id
        tracer, memory = tracer_and_exporter()
        openinference_agent(tracer, session_id, tool_ok=False)
        sent = exporter(engine, agent_token).export(memory.get_finished_spans())
        assert sent == SpanExportResult.SUCCESS
        wait_finished(engine, token, experiment_id)

    log_in(engine.url)
    main_nav = page.get_by_role("navigation", name="Main")
    assert main_nav.get_by_role("link", name="Traces").count() == 0
    main_nav.get_by_role("link", name="Runs", exact=True).click()
    page.wait_for_url(f"{engine.url}/runs")
    assert page.get_by_role("heading", name="Runs", exact=True).is_visible()
    current = main_nav.locator("[aria-current=page]")
    assert current.inner_text() == "Runs"
    row = page.locator("table.sessions tbody tr").filter(has_text=session_id)
    assert row.get_by_role("link", name=f"run {run_id}").get_attribute("href") == f"/runs/{run_id}"
    assert row.get_by_role("link", name=f"experiment {experiment_id}").is_visible()
    case_link = row.get_by_role("link", name="paris")
    assert case_link.get_attribute("href") == "/w/dev/datasets/weather/cases/paris"
    page.get_by_label("Workspace").select_option("dev")
    page.wait_for_url(re.compile(r".*/runs\?workspace=dev"))
    page.get_by_label("Agent").select_option("weather")
    page.wait_for_url(re.compile(r".*/runs\?workspace=dev&agent=weather"))
    page.shot("sessions")
    row.get_by_role("link", name=session_id).click()
    page.wait_for_url(re.compile(rf".*/runs/dev/weather/{session_id}$"))
    assert page.get_by_role("heading", name=f"Session {session_id}").is_visible()
    spans = page.locator("ol.spans > li > details > summary .sname")
    assert spans.all_inner_texts() == [
        "weather-agent",
        "ChatCompletion",
        "get_weather",
        "ChatCompletion",
    ]
    # The failed tool span is marked, and opening it shows its attributes and status.
    tool = page.locator("ol.spans > li > details").nth(2)
    assert tool.locator("> summary .state").inner_text() == "error"
    tool.locator("> summary").click()
    assert tool.get_by_text("Status message: weather service down").is_visible()
    assert tool.get_by_role("row", name=re.compile(r"tool\.name\s+get_weather")).is_visible()
    assert page.get_by_role("heading", name="What the mapping could not read").is_visible()
    steps = page.locator("#steps ~ div table tbody tr")
    assert steps.count() >= 3
    assert any("get_weather" in row for row in steps.all_inner_texts())
    page.shot("session")
    assert current.inner_text() == "Runs"
    page.get_by_role("link", name=f"run {run_id}").first.click()
    page.wait_for_url(f"{engine.url}/runs/{run_id}")
    assert current.inner_text() == "Experiments"  # a run of an experiment

    # The old addresses of the tab land on the new ones, filters and session kept.
    page.goto(f"{engine.url}/sessions?workspace=dev&agent=weather")
    page.wait_for_url(f"{engine.url}/runs?workspace=dev&agent=weather")
    assert page.get_by_label("Agent").input_value() == "weather"
    page.goto(f"{engine.url}/sessions/dev/weather/{session_id}")
    page.wait_for_url(f"{engine.url}/runs/dev/weather/{session_id}")
    assert page.get_by_role("heading", name=f"Session {session_id}").is_visible()


def test_browser_session_page_fits_a_phone(server, traced, page, log_in):
    log_in(server.url)
    page.set_viewport_size({"width": 390, "height": 800})
    for path in ("/runs", "/runs/admin/bot/s1"):
        page.goto(server.url + path)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{path} is {overflow}px wider than a phone screen"
    page.locator("ol.spans > li > details > summary").first.click()
    page.shot("phone")


def api_token(server) -> str:
    from tests.integration.runs_helpers import login_token

    return login_token(server, "admin", ADMIN_PASSWORD)
