"""A refused exporter, surfaced: ``tracing.register`` asks the collector (with the
exporter's own credentials) before the first run and fails with the reason; a run whose
spans never arrived says so on its page and in ``evalkit runs show``; and while the SDK
waits for spans it says for which runs and how long. Real OpenTelemetry exporters, a
real server with its worker, the real CLI."""

from __future__ import annotations

import re

import pytest
from opentelemetry.sdk.trace import TracerProvider

from evalkit.sdk import SdkError, run_experiment, tracing
from tests import otel_agents
from tests.conftest import Cli
from tests.integration import sdk_helpers
from tests.integration.otel_helpers import mint
from tests.web.test_pages_http import logged_in

engine = sdk_helpers.engine
dev = sdk_helpers.dev

QUESTION = "What is the weather in Paris?"


@pytest.fixture
def weather(dev):
    dev.repo.case("weather", "paris", sdk_helpers.case_text(QUESTION, otel_agents.ANSWER))
    dev.agent(trajectory_wait=3)
    yield dev
    tracing.unregister()


def register(**kw) -> None:
    tracing.register(provider=TracerProvider(), **kw)


def test_register_asks_the_server_before_the_first_run(weather, monkeypatch):
    dev = weather
    dev.agent("other")
    agent_token = mint(dev.server, dev.token, "alice", "mine")

    with pytest.raises(SdkError) as refused:
        register(agent="mine", token="not-a-token-the-server-made")
    text = str(refused.value)
    assert "the server at" in text and "refuses spans sent with the token passed as token=" in text
    assert "log in again (`evalkit login" in text

    monkeypatch.setenv("EVALKIT_OTEL_TOKEN", agent_token)
    with pytest.raises(SdkError, match=r"another agent's|agent-token-scope") as refused:
        register(agent="other")
    assert "mine@alice" in str(refused.value)  # whose token it is
    assert "evalkit tokens create --agent other" in str(refused.value)
    assert not tracing.is_registered()

    # An agent token and the bare name: the server names the agent and its session attributes.
    register(agent="mine")
    assert tracing._registered is not None and tracing._registered.agent == "mine@alice"
    assert "session.id" in tracing.session_names()
    tracing.unregister()

    revoked = dev.api("GET", "/api/tokens").json()[0]["id"]
    assert dev.api("POST", f"/api/tokens/{revoked}/revoke").status_code in (200, 204)
    with pytest.raises(SdkError, match="EVALKIT_OTEL_TOKEN") as refused:
        register(agent="mine")
    assert "mint a new agent token (`evalkit tokens create --agent mine`)" in str(refused.value)


def test_tracing_for_another_agent_makes_no_experiment(weather):
    weather.agent("other")
    register(agent="mine")
    with pytest.raises(SdkError, match="registered for agent mine@alice, but this runs agent "):
        run_experiment(dataset="weather", agent="other", task=lambda input: "x", progress=False)
    assert weather.api("GET", "/api/experiments").json() == []


def test_a_run_whose_spans_never_arrived_says_so(weather, capsys, monkeypatch):
    """The exporter's token is revoked after register checked it: the collector refuses
    every span (one line in OpenTelemetry's log), the run ends done with no trajectory, and
    the SDK, the run's page and `runs show` say what happened."""
    dev = weather
    # The SDK says what it waits for once a wait passes its 2 s grace. The wait it sees is
    # the trajectory wait less the time from the run's end to its first poll, which took
    # over a second on a loaded machine when the wait was 3 s: 6 leaves room for that.
    edited = dev.api("PATCH", "/api/workspaces/alice/agents/mine", json={"trajectory_wait": 6})
    assert edited.status_code == 200, edited.text
    monkeypatch.setenv("EVALKIT_OTEL_TOKEN", mint(dev.server, dev.token, "alice", "mine"))
    register(agent="mine")
    [token] = dev.api("GET", "/api/tokens").json()
    dev.api("POST", f"/api/tokens/{token['id']}/revoke")

    result = run_experiment(dataset="weather", agent="mine", task=lambda input: "sunny")
    [run] = result.runs
    assert run["state"] == "done" and run["trajectory_valid"] is False
    err = capsys.readouterr().err
    waiting = re.findall(r"waiting for spans of 1 run \(run (\d+)\): (\d+) s", err)
    assert waiting and waiting[0][0] == str(run["id"]), err
    assert len(waiting) <= 2, err  # piped: a line every few seconds, not every poll
    assert f"experiment {result.id}: finished after" in err

    shown = Cli(capsys, monkeypatch)("runs", "show", str(run["id"]), token=dev.token)
    assert shown.code == 0, shown.err
    assert "none, no spans arrived: no span of session" in shown.out
    assert "a revoked agent token is refused" in shown.out

    with logged_in(dev.server, "alice", "alice-pw") as client:
        page = client.get(f"/runs/{run['id']}").text
    assert "<strong>No spans arrived</strong>" in page
    assert "breaks ATIF rules" not in page
    assert 'href="/runs?workspace=alice&amp;agent=mine"' in page


def test_a_dry_run_says_it_waits_for_spans(weather, capsys):
    from evalkit.sdk import RunResult

    def task(input: dict) -> RunResult:
        return RunResult(answer="sunny", session_id="never-sent")

    [case] = run_experiment(dataset="weather", agent="mine", task=task, dry_run=True)
    assert case.trajectory is None
    err = capsys.readouterr().err
    assert re.search(
        r"waiting for spans of session never-sent \(case paris\): \d s of at most 3 s", err
    ), err
    assert "no spans arrived after 3 s of waiting" in err
