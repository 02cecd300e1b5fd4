"""Tracing for SDK runs with the real OpenTelemetry SDK and OTLP/HTTP exporter: spans made
in the task's process, an agent in another process that continues the trace over HTTP, a
task that returns the agent's own session, and work wrapped in ``tracing.eval_run``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import httpx
import pytest
from opentelemetry import context as otel_context
from opentelemetry import propagate
from opentelemetry.sdk.trace import TracerProvider

from evalkit.sdk import RunResult, SdkError, evaluator, run_experiment, tracing
from tests import otel_agents
from tests.integration import sdk_helpers
from tests.integration.otel_helpers import mint
from tests.integration.runs_helpers import until
from tests.integration.test_sdk_experiment import trajectory_for
from tests.web.test_pages_http import logged_in

engine = sdk_helpers.engine
dev = sdk_helpers.dev

QUESTION = "What is the weather in Paris?"


@evaluator(name="tool_use", requires_trajectory=True)
def tool_use(case, run) -> float:
    """Reads the trajectory the server built from the run's spans."""
    return float(any(step.get("tool_calls") for step in run.trajectory["steps"]))


@pytest.fixture
def traced(dev):
    text = sdk_helpers.case_text(QUESTION, otel_agents.ANSWER, custom="tool_use: {}")
    dev.repo.case("weather", "paris", text)
    dev.agent(trajectory_wait=20)
    provider = TracerProvider()
    tracing.register(agent="mine", provider=provider)
    try:
        yield provider
    finally:
        tracing.unregister()
        provider.shutdown()


def session_spans(dev, session_id: str) -> list[dict]:
    r = dev.api("GET", f"/api/workspaces/alice/agents/mine/sessions/{session_id}")
    assert r.status_code == 200, r.text
    return r.json()["spans"]


def llm_span(tracer, answer: str) -> None:
    """One OpenInference LLM call, with no session attribute of its own."""
    with tracer.start_as_current_span(
        "ChatCompletion",
        attributes={
            "openinference.span.kind": "LLM",
            "llm.model_name": "gpt-test",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": QUESTION,
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": answer,
        },
    ):
        pass


def test_an_instrumented_agent_in_process(dev, traced):
    tracer = traced.get_tracer("weather-agent")
    sessions = []

    def task(input: dict, metadata: dict) -> str:
        sessions.append(metadata["session_id"])
        otel_agents.openinference_agent(tracer, session="the-agents-own")
        llm_span(tracer, "follow-up")
        return otel_agents.ANSWER

    result = run_experiment(
        dataset="weather", agent="mine", task=task, evaluators=[tool_use], progress=False
    )
    assert result.by_state == {"done": 1}
    assert dev.scores(result.runs[0]["id"])["tool_use"]["value"] == 1.0
    run = dev.run(result.runs[0]["id"], trajectory=True)
    [session] = sessions
    assert run["session_id"] == session and run["trajectory_source"] == "otel"
    assert run["trajectory_valid"] is True and run["trajectory_partial"] is False
    steps = run["trajectory"]["steps"]
    assert any(s.get("tool_calls") for s in steps)
    assert steps[-1]["message"] == "follow-up"
    spans = {s["name"]: s for s in session_spans(dev, session)}
    root = spans["evalkit.run"]
    assert root.get("parent_span_id") is None
    assert root["attributes"]["session.id"] == session
    assert root["attributes"]["evalkit.experiment_id"] == result.id
    assert root["attributes"]["evalkit.case_id"] == "paris"
    assert root["attributes"]["evalkit.repetition"] == 1
    assert root["attributes"]["output.value"] == otel_agents.ANSWER
    # Spans made under the run inherit its session unless they carry their own.
    assert spans["weather-agent"]["attributes"]["session.id"] == "the-agents-own"
    under = [s for s in session_spans(dev, session) if s.get("parent_span_id") == root["span_id"]]
    [follow_up] = [s for s in under if s["name"] == "ChatCompletion"]
    assert follow_up["attributes"]["session.id"] == session


REMOTE_AGENT = textwrap.dedent(
    """
    import json, sys
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from opentelemetry import propagate
    from opentelemetry.sdk.trace import TracerProvider
    from evalkit.sdk import tracing

    provider = TracerProvider()
    tracing.register(agent="mine", provider=provider)   # EVALKIT_OTEL_TOKEN: an agent token
    tracer = provider.get_tracer("remote-agent")

    class Agent(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            parent = propagate.extract({k.lower(): v for k, v in self.headers.items()})
            answer = "18 degrees and cloudy"
            with tracer.start_as_current_span("remote-agent", context=parent, attributes={
                "openinference.span.kind": "AGENT", "session.id": "remote-own-session",
                "input.value": body["question"]}) as span:
                with tracer.start_as_current_span("llm", attributes={
                    "openinference.span.kind": "LLM",
                    "llm.input_messages.0.message.role": "user",
                    "llm.input_messages.0.message.content": body["question"],
                    "llm.output_messages.0.message.role": "assistant",
                    "llm.output_messages.0.message.content": answer}):
                    pass
                span.set_attribute("output.value", answer)
            tracing.flush()
            data = json.dumps({"answer": answer}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Agent)
    print("ready", flush=True)
    server.serve_forever()
    """
)


@pytest.fixture
def remote_agent(dev, traced, tmp_path):
    from evalkit.serve import free_port

    token = mint(dev.server, dev.token, "alice", "mine")
    script = tmp_path / "remote_agent.py"
    script.write_text(REMOTE_AGENT)
    port = free_port()
    env = {
        "PATH": "/usr/bin:/bin",
        "EVALKIT_SERVER_URL": dev.server.url,
        "EVALKIT_OTEL_TOKEN": token,
        "EVALKIT_CLI_CONFIG_DIR": str(tmp_path / "nobody"),
    }
    process = subprocess.Popen(
        [sys.executable, str(script), str(port)],
        env=env,
        cwd=str(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.strip() == "ready", process.stderr.read() if process.stderr else line
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_an_agent_in_another_process_continues_the_trace(dev, remote_agent):
    sessions = []

    def task(input: dict, metadata: dict) -> str:
        sessions.append(metadata["session_id"])
        headers: dict[str, str] = {}
        propagate.inject(headers)  # traceparent of the run's evalkit.run span
        return httpx.post(remote_agent, json=input, headers=headers, timeout=30).json()["answer"]

    result = run_experiment(dataset="weather", agent="mine", task=task, progress=False)
    run = dev.run(result.runs[0]["id"], trajectory=True)
    [session] = sessions
    assert run["state"] == "done" and run["session_id"] == session
    assert run["trajectory_valid"] is True
    assert run["trajectory"]["steps"][-1]["message"] == "18 degrees and cloudy"
    spans = session_spans(dev, session)
    names = {s["name"] for s in spans}
    assert names == {"evalkit.run", "remote-agent", "llm"}
    # Every span of the trace belongs to the root's session, whatever its own says.
    assert len({s["trace_id"] for s in spans}) == 1
    r = dev.api("GET", "/api/workspaces/alice/agents/mine/sessions/remote-own-session")
    assert r.status_code == 404


def test_a_run_result_session_moves_the_run_span(dev, traced):
    tracer = traced.get_tracer("queued-agent")
    sdk_sessions = []

    def task(input: dict, metadata: dict) -> RunResult:
        sdk_sessions.append(metadata["session_id"])
        # The agent opens its own trace and session (no trace context reached it).
        token = otel_context.attach(otel_context.Context())
        try:
            with tracer.start_as_current_span(
                "queued-agent",
                attributes={"openinference.span.kind": "AGENT", "session.id": "job-77"},
            ) as span:
                llm_span(tracer, "from the queue")
                span.set_attribute("output.value", "from the queue")
        finally:
            otel_context.detach(token)
        return RunResult(answer="from the queue", session_id="job-77")

    result = run_experiment(dataset="weather", agent="mine", task=task, progress=False)
    run = dev.run(result.runs[0]["id"], trajectory=True)
    assert run["session_id"] == "job-77" and run["trajectory_valid"] is True
    assert run["trajectory"]["steps"][-1]["message"] == "from the queue"
    names = sorted(s["name"] for s in session_spans(dev, "job-77"))
    assert names == ["ChatCompletion", "evalkit.run", "queued-agent"]
    [own] = sdk_sessions
    r = dev.api("GET", f"/api/workspaces/alice/agents/mine/sessions/{own}")
    assert r.status_code == 404  # no empty session left behind


def test_eval_run_wraps_work_done_elsewhere(dev, traced):
    tracer = traced.get_tracer("worker")
    jobs: list[dict] = []
    done = threading.Event()

    def worker() -> None:
        # Another thread knows nothing of the task's context: only the metadata it got.
        while not jobs:
            time.sleep(0.01)
        with tracing.eval_run(jobs[0]):
            llm_span(tracer, "worked elsewhere")
        done.set()

    threading.Thread(target=worker, daemon=True).start()

    def task(input: dict, metadata: dict) -> str:
        token = otel_context.attach(otel_context.Context())
        try:
            jobs.append(dict(metadata))
            assert done.wait(10)
        finally:
            otel_context.detach(token)
        return "worked elsewhere"

    result = run_experiment(dataset="weather", agent="mine", task=task, progress=False)
    run = dev.run(result.runs[0]["id"], trajectory=True)
    session = jobs[0]["session_id"]
    assert run["session_id"] == session and run["trajectory_valid"] is True
    spans = session_spans(dev, session)
    assert sorted(s["name"] for s in spans) == ["ChatCompletion", "evalkit.run", "evalkit.run"]
    assert len({s["trace_id"] for s in spans}) == 2
    assert all(s["attributes"]["session.id"] == session for s in spans)


def test_an_agent_given_the_session_id_joins_the_run(dev, traced):
    """The third way in from another process: the agent gets metadata["session_id"] with the
    job and puts it on its own root span, in a trace of its own; the task returns only the
    answer, and the run's trajectory is built from the agent's spans."""
    tracer = traced.get_tracer("weather-agent")
    given: list[str] = []

    def task(input: dict, metadata: dict) -> str:
        token = otel_context.attach(otel_context.Context())  # no trace context crosses over
        try:
            given.append(metadata["session_id"])
            otel_agents.openinference_agent(tracer, session=metadata["session_id"])
        finally:
            otel_context.detach(token)
        return otel_agents.ANSWER

    result = run_experiment(dataset="weather", agent="mine", task=task, progress=False)
    run = dev.run(result.runs[0]["id"], trajectory=True)
    assert run["session_id"] == given[0] and run["trajectory_valid"] is True
    assert any(step.get("tool_calls") for step in run["trajectory"]["steps"])
    spans = session_spans(dev, given[0])
    assert {"weather-agent", "evalkit.run"} <= {s["name"] for s in spans}
    assert len({s["trace_id"] for s in spans}) == 2


def test_register_says_what_it_needs(dev, monkeypatch):
    monkeypatch.delenv("EVALKIT_SERVER_URL")
    with pytest.raises(SdkError, match="EVALKIT_SERVER_URL"):
        tracing.register(agent="mine", provider=TracerProvider())
    monkeypatch.setenv("EVALKIT_SERVER_URL", dev.server.url)
    monkeypatch.delenv("EVALKIT_TOKEN")
    with pytest.raises(SdkError, match="EVALKIT_OTEL_TOKEN"):
        tracing.register(agent="mine", provider=TracerProvider())
    monkeypatch.setenv("EVALKIT_TOKEN", dev.token)
    with pytest.raises(SdkError, match="no agent nobody@alice"):
        tracing.register(agent="nobody", provider=TracerProvider())
    assert not tracing.is_registered()


def test_tracing_for_another_agent_is_refused(dev, traced):
    dev.agent("other")
    with pytest.raises(SdkError, match="registered for agent mine@alice"):
        run_experiment(dataset="weather", agent="other", task=lambda input: "x", progress=False)


# --------------------------------------------------------------------------- dry runs


def test_dry_run_shows_what_the_server_made_of_the_session(dev, traced, capsys):
    tracer = traced.get_tracer("weather-agent")

    def task(input: dict) -> str:
        otel_agents.openinference_agent(tracer, session="ignored-by-the-root-rule")
        return otel_agents.ANSWER

    [case] = run_experiment(
        dataset="weather", agent="mine", task=task, evaluators=[tool_use], dry_run=True
    )
    assert case.case_id == "paris" and case.answer == otel_agents.ANSWER
    assert case.trajectory is not None and case.trajectory_error is None
    assert case.spans == 5 and [s.score for s in case.scores] == [1.0]
    out = capsys.readouterr().out
    assert f"case paris: session {case.session_id}" in out
    assert "session: 5 spans; trajectory: 4 steps, 1 tool calls" in out
    assert "python:tool_use tool_use: 1" in out
    assert dev.api("GET", "/api/experiments").json() == []  # no experiment was made
    spans = session_spans(dev, case.session_id)
    [root] = [s for s in spans if s["name"] == "evalkit.run"]
    assert root["attributes"]["evalkit.dry_run"] is True
    assert "evalkit.experiment_id" not in root["attributes"]


def test_a_dry_runs_session_page_names_its_case_and_question(dev, traced):
    """A dry run makes no run, so the session page names the case (and its question) from
    the evalkit.run span; a session no SDK run made says only that no run claimed it."""
    tracer = traced.get_tracer("weather-agent")

    def task(input: dict) -> str:
        otel_agents.openinference_agent(tracer, session="ignored-by-the-root-rule")
        return otel_agents.ANSWER

    [case] = run_experiment(dataset="weather", agent="mine", task=task, dry_run=True)
    with logged_in(dev.server, "alice", "alice-pw") as client:
        page = client.get(f"/runs/alice/mine/{case.session_id}")
        assert page.status_code == 200, page.text
        named = "a dry run (<code>run_experiment(dry_run=...)</code>) of case <code>paris</code>"
        assert named in page.text
        assert f"Question: <q>{QUESTION}</q>" in page.text

        with tracer.start_as_current_span("agent", attributes={"session.id": "plain"}):
            pass
        assert tracing.flush()
        until(lambda: client.get("/runs/alice/mine/plain").status_code == 200)
        plain = client.get("/runs/alice/mine/plain")
        assert "a dry run" not in plain.text and "No run." in plain.text


def test_a_dry_run_goes_on_when_a_session_cannot_be_read(dev, capsys):
    dev.repo.case("weather", "paris", sdk_helpers.case_text(QUESTION, "sunny"))
    dev.repo.case("weather", "rome", sdk_helpers.case_text("Weather in Rome?", "warm"))
    dev.agent(trajectory_wait=1)

    seen: list[dict] = []

    def task(input: dict, metadata: dict) -> RunResult | str:
        seen.append(metadata)
        if "Paris" in input["question"]:
            # The agent's session, but nothing exports its spans.
            return RunResult(answer="sunny", session_id="a-session-never-sent")
        return RunResult(answer="warm", trajectory=trajectory_for("Weather in Rome?", "warm"))

    paris, rome = run_experiment(dataset="weather", agent="mine", task=task, dry_run=2)
    assert [m["experiment_id"] for m in seen] == [None, None]  # a dry run has no experiment
    assert paris.session_id == "a-session-never-sent" and paris.trajectory is None
    assert "no span of session a-session-never-sent" in paris.trajectory_error
    assert rome.answer == "warm" and rome.trajectory["steps"][-1]["message"] == "warm"
    out = capsys.readouterr().out
    assert "trajectory read failed: no span of session a-session-never-sent" in out
    assert "case rome" in out and "trajectory (returned by the task): 2 steps" in out
