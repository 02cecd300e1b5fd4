"""What the SDK says while it waits for the server (evalkit.sdk._progress.Waiting), and what
the run page and `runs show` say about a traced run that got no spans
(evalkit.otel.missing): the shapes of their text, without a server."""

from __future__ import annotations

import io
import sys
import time
from datetime import UTC, datetime

import pytest

from evalkit.model.otel import TraceSession
from evalkit.model.runs import Run, TrajectoryError
from evalkit.otel.missing import no_spans
from evalkit.sdk._progress import Waiting, runs_text


def test_runs_text_names_the_runs_and_counts_the_rest():
    assert runs_text([14, 12, 13]) == "3 runs (run 12, 13, 14)"
    assert runs_text([7]) == "1 run (run 7)"
    assert runs_text(list(range(1, 9))) == "8 runs (run 1, 2, 3, 4, 5 and 3 more)"


def test_piped_waiting_prints_a_line_every_few_seconds_not_every_poll(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    waiting = Waiting(every=0.3, grace=0.0)
    for _ in range(10):  # polls every 0.1 s for a second
        waiting.update("spans of 3 runs (run 12, 13, 14)")
        time.sleep(0.1)
    waiting.close("experiment 4: finished")
    lines = err.getvalue().splitlines()
    waits = [line for line in lines if line.startswith("waiting for spans of 3 runs")]
    assert 2 <= len(waits) <= 4, lines
    assert waits[0] == "waiting for spans of 3 runs (run 12, 13, 14): 0 s"
    assert lines[-1] == "experiment 4: finished after 1 s of waiting"


def test_a_short_wait_shows_nothing(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    waiting = Waiting(grace=5.0)
    waiting.update("spans of 1 run (run 1)", limit=15)
    waiting.close()
    quiet = Waiting(enabled=False, grace=0.0)
    quiet.update("spans of 1 run (run 1)")
    quiet.close()
    assert err.getvalue() == ""


def test_a_bounded_wait_says_its_bound(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    Waiting(grace=0.0).update("spans of session s (case paris)", limit=15)
    assert err.getvalue() == "waiting for spans of session s (case paris): 0 s of at most 15 s\n"


def _run(**kw) -> Run:
    now = datetime.now(UTC)
    fields = dict(
        id=3,
        experiment_id=1,
        case_id="paris",
        case_version=1,
        repetition=1,
        state="done",
        harness_run_id=None,
        harness_status="succeeded",
        session_id="sess-1",
        answer="x",
        output=None,
        error=None,
        timed_out=False,
        attempts=0,
        created_at=now,
        started_at=now,
        deadline_at=None,
        stop_requested_at=None,
        harness_done_at=now,
        finished_at=now,
        trajectory_source="otel",
        trajectory_valid=False,
        trajectory_partial=True,
        trajectory_errors=[
            TrajectoryError(path="", rule="not-collected", message="no span of session ...")
        ],
    )
    return Run(**{**fields, **kw})


def _session(agent: str, workspace: str) -> TraceSession:
    now = datetime.now(UTC)
    return TraceSession(
        agent=agent,
        workspace=workspace,
        session_id="sess-1",
        run_id=None,
        span_count=2,
        bytes=10,
        rejected_spans=0,
        truncated=False,
        first_span_at=now,
        last_span_at=now,
        first_received_at=now,
        last_received_at=now,
    )


def test_no_spans_tells_none_arrived_from_arrived_elsewhere_and_arrived():
    nothing = no_spans(_run(), "mine@alice", [])
    assert nothing is not None
    assert nothing.summary == "no spans arrived: no span of session sess-1 reached the server"
    assert any("revoked agent token is refused" in check for check in nothing.checks)

    elsewhere = no_spans(_run(), "mine@alice", [_session("other", "alice")])
    assert elsewhere is not None
    assert elsewhere.summary == (
        "no spans arrived for mine@alice: the spans of session sess-1 went to other@alice"
    )
    assert "tracing.register names other@alice" in elsewhere.checks[0]

    # Its own agent has the session: spans came; the stored error says what went wrong.
    assert no_spans(_run(), "mine@alice", [_session("mine", "alice")]) is None


@pytest.mark.parametrize(
    "kw",
    [
        {"trajectory_source": "harness"},
        {"session_id": None},
        {"trajectory_valid": True, "trajectory_errors": []},
        {"trajectory_errors": [TrajectoryError(path="/steps", rule="x", message="bad")]},
    ],
)
def test_no_spans_is_only_for_traced_runs_with_nothing_collected(kw):
    assert no_spans(_run(**kw), "mine@alice", []) is None
