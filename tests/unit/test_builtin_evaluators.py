"""The built-in evaluators: every one passing, failing, skipped and on its edge cases, over
real ATIF trajectories (the reference harness's agent) and hand-made valid ones."""

from __future__ import annotations

import copy
import http.server
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from evalkit.atif import validate_trajectory
from evalkit.cases.model import BUILTIN_EVALUATORS
from evalkit.harness import _agent
from evalkit.model.harness import Provides
from evalkit.scoring import builtins
from evalkit.scoring.builtins import (
    BUILTINS,
    EVALUATOR_VERSION,
    read_number,
    tool_call_names,
)
from evalkit.scoring.model import RunContext, ScoreItem
from evalkit.scoring.run import Selected, _checked, _unique, identities, select_evaluators

ALL = Provides(trajectory=True, tool_calls=True, thinking=True, token_usage=True)
STARTED = 1_767_600_000.0


def agent_trajectory(
    question: str = "What is 6 * 7?",
    *,
    files: tuple[str, ...] = (),
    seconds: float = 2.5,
    **kw: Any,
) -> dict[str, Any]:
    """What the reference harness's agent sends for one run (validated)."""
    read = [_agent.ReadFile(name, 3, "0" * 64, b"abc") for name in files]
    work = _agent.solve({"question": question}, read)
    doc = _agent.trajectory(
        work,
        session_id="s-1",
        model=None,
        started=STARTED,
        finished=STARTED + seconds,
        outcome="succeeded",
        **kw,
    )
    assert validate_trajectory(doc) == []
    return doc


def ctx(**overrides: Any) -> RunContext:
    fields: dict[str, Any] = dict(
        run_id=7,
        experiment_id=3,
        workspace_id=1,
        case_id="mul",
        repetition=1,
        case={"input": {"question": "What is 6 * 7?"}, "expected": {"answer": "42"}},
        answer="42",
        output={"result": 42},
        trajectory=agent_trajectory(),
        trajectory_valid=True,
        provides=ALL,
        state="scoring",
        harness_status="succeeded",
    )
    fields.update(overrides)
    if isinstance(fields["trajectory"], dict):  # as the scoring job reads it: typed
        fields["trajectory"] = msgspec.convert(fields["trajectory"], _trajectory_type())
    return RunContext(**fields)


async def score(name: str, config: Any, context: RunContext | None = None) -> ScoreItem:
    items = await BUILTINS[name](context or ctx(), config)
    assert len(items) == 1
    item = items[0]
    assert item.name == name
    assert item.evaluator == f"builtin:{name}"
    assert item.evaluator_version == EVALUATOR_VERSION
    return item


def passed(item: ScoreItem) -> bool:
    assert item.error is None and item.skipped is None, item
    assert item.kind == "evaluator" and item.value in (0.0, 1.0), item
    return item.value == 1.0


def test_every_built_in_name_has_an_evaluator():
    assert tuple(BUILTINS) == BUILTIN_EVALUATORS


# --------------------------------------------------------------------------- exact_match


async def test_exact_match_with_the_expected_answer():
    item = await score("exact_match", True)
    assert passed(item) and item.explanation == "the answer equals '42'"
    assert not passed(await score("exact_match", True, ctx(answer="41")))


async def test_exact_match_strips_by_default_and_can_ignore_case():
    assert passed(await score("exact_match", "Paris", ctx(answer="  Paris\n")))
    assert not passed(
        await score("exact_match", {"value": "Paris", "strip": False}, ctx(answer=" Paris"))
    )
    assert not passed(await score("exact_match", "Paris", ctx(answer="paris")))
    assert passed(
        await score("exact_match", {"value": "Paris", "ignore_case": True}, ctx(answer="PARIS"))
    )


async def test_exact_match_reads_a_number_as_its_json_text():
    case = {"input": {}, "expected": {"answer": 42}}
    assert passed(await score("exact_match", True, ctx(case=case, answer="42")))
    case = {"input": {}, "expected": {"answer": 4.5}}
    assert passed(await score("exact_match", {}, ctx(case=case, answer="4.5")))


async def test_exact_match_fails_a_run_without_answer():
    item = await score("exact_match", True, ctx(answer=None))
    assert not passed(item) and item.explanation == "the run has no answer to check"


async def test_exact_match_without_a_reference_is_an_error_not_a_fail():
    item = await score("exact_match", True, ctx(case={"input": {}}))
    assert item.value is None and item.skipped is None
    assert item.error is not None and "no `expected.answer`" in item.error
    bad = await score("exact_match", {"value": "x", "colour": "red"})
    assert bad.value is None and bad.error is not None and "colour" in bad.error


# --------------------------------------------------------------------------- contains


async def test_contains_needs_every_string():
    answer = "Revenue was 4.2 million in Q3."
    assert passed(await score("contains", ["4.2", "million"], ctx(answer=answer)))
    assert passed(await score("contains", "Q3", ctx(answer=answer)))
    item = await score("contains", ["4.2", "billion", "Q4"], ctx(answer=answer))
    assert not passed(item) and item.explanation == "the answer lacks 'billion', 'Q4'"


async def test_contains_ignore_case_and_no_answer():
    config = {"values": ["MILLION"], "ignore_case": True}
    assert passed(await score("contains", config, ctx(answer="4.2 million")))
    assert not passed(await score("contains", {"values": "MILLION"}, ctx(answer="4.2 million")))
    assert not passed(await score("contains", "x", ctx(answer=None)))
    bad = await score("contains", [], ctx())
    assert bad.value is None and bad.error is not None


async def test_not_contains_names_what_it_found():
    refusal = "I cannot help, as an AI model."
    item = await score("not_contains", ["I cannot", "as an AI", "sorry"], ctx(answer=refusal))
    assert not passed(item) and item.explanation == "the answer contains 'I cannot', 'as an AI'"
    assert passed(await score("not_contains", ["I cannot"], ctx(answer="42")))
    ignore = {"values": ["i CANNOT"], "ignore_case": True}
    assert not passed(await score("not_contains", ignore, ctx(answer=refusal)))
    assert not passed(await score("not_contains", ["x"], ctx(answer=None)))


# --------------------------------------------------------------------------- regex


async def test_regex_searches_every_pattern():
    assert passed(await score("regex", r"^\$?\d+(\.\d+)?M$", ctx(answer="$4.2M")))
    assert not passed(await score("regex", r"^\d+$", ctx(answer="about 42")))
    assert passed(await score("regex", r"\d+", ctx(answer="about 42")))  # searched
    item = await score(
        "regex", {"pattern": ["revenue", "q3"], "ignore_case": True}, ctx(answer="Revenue")
    )
    assert not passed(item) and item.explanation == "the answer does not match 'q3'"
    assert passed(
        await score("regex", {"pattern": "REVENUE", "ignore_case": True}, ctx(answer="revenue"))
    )


async def test_a_pattern_that_backtracks_without_end_is_stopped(monkeypatch):
    monkeypatch.setattr(builtins, "REGEX_TIMEOUT_SECONDS", 0.2)  # 2 s in production
    item = await score("regex", "(a|aa)+$", ctx(answer="a" * 60 + "b"))
    assert item.value is None and item.error is not None
    assert "was stopped after 0.2 s" in item.error and "simplify" in item.error


async def test_regex_that_does_not_compile_is_an_error():
    item = await score("regex", "([a-z]", ctx())
    assert item.value is None and item.error is not None and "does not compile" in item.error


# --------------------------------------------------------------------------- numeric


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("42", 42.0),
        ("The answer is 42.", 42.0),
        ("The total is $4,200.50.", 4200.5),
        ("Q3 revenue was 4.2M", 4.2),
        ("between 3 and 5, so 4", 4.0),
        ("-17 degrees", -17.0),
        ("\u22123.5", -3.5),
        ("1.5e3 requests", 1500.0),
        ("about .5", 0.5),
        ("v2 of the model", None),
        ("no number here", None),
        ("", None),
    ],
)
def test_read_number(text, number):
    assert read_number(text) == number


async def test_numeric_against_the_expected_answer():
    assert passed(await score("numeric", True, ctx(answer="The product is 42.")))
    item = await score("numeric", True, ctx(answer="41"))
    assert not passed(item)
    assert item.explanation == "read 41 from the answer; expected 42 within 0, off by 1"


async def test_numeric_tolerances():
    assert passed(await score("numeric", {"value": 3.5, "tolerance": 0.01}, ctx(answer="3.509")))
    assert not passed(await score("numeric", {"value": 3.5, "tolerance": 0.01}, ctx(answer="3.52")))
    relative = {"value": 4_200_000, "tolerance": 0.05, "relative": True}
    assert passed(await score("numeric", relative, ctx(answer="4,400,000")))
    assert not passed(await score("numeric", relative, ctx(answer="4,500,000")))
    assert passed(await score("numeric", 0.3, ctx(answer=str(0.1 + 0.2))))  # float slack
    assert passed(await score("numeric", 42, ctx(answer="42")))


async def test_numeric_without_a_number():
    item = await score("numeric", 42, ctx(answer="forty-two"))
    assert not passed(item) and "states no number" in (item.explanation or "")
    assert not passed(await score("numeric", 42, ctx(answer=None)))
    case = {"input": {}, "expected": {"answer": "Paris"}}
    broken = await score("numeric", True, ctx(case=case))
    assert broken.value is None and "states no number" in (broken.error or "")
    case = {"input": {}, "expected": {"answer": "$42.00"}}
    assert passed(await score("numeric", {}, ctx(case=case, answer="42")))


# --------------------------------------------------------------------------- json_schema


SCHEMA = {
    "type": "object",
    "required": ["citations"],
    "properties": {"citations": {"type": "array", "items": {"type": "string"}}},
}


async def test_json_schema_validates_the_output():
    item = await score("json_schema", SCHEMA, ctx(output={"citations": ["a", "b"]}))
    assert passed(item) and item.explanation == "the output validates against the schema"
    item = await score("json_schema", SCHEMA, ctx(output={"citations": ["a", 3]}))
    assert not passed(item)
    assert (
        item.explanation
        == "the output breaks the schema: $.citations[1]: 3 is not of type 'string'"
    )
    item = await score("json_schema", SCHEMA, ctx(output=[1]))
    assert not passed(item) and "is not of type 'object'" in (item.explanation or "")


async def test_json_schema_reads_a_json_answer_without_output():
    item = await score("json_schema", SCHEMA, ctx(output=None, answer='{"citations": []}'))
    assert passed(item) and "answer (read as JSON)" in (item.explanation or "")
    item = await score("json_schema", SCHEMA, ctx(output=None, answer="just text"))
    assert not passed(item) and "no structured output" in (item.explanation or "")


async def test_json_schema_lists_at_most_five_problems_and_honours_schema_dialect():
    schema = {"type": "object", "properties": {f"k{i}": {"type": "string"} for i in range(8)}}
    item = await score("json_schema", schema, ctx(output={f"k{i}": i for i in range(8)}))
    assert not passed(item) and item.explanation is not None
    assert item.explanation.endswith("(and 3 more)")
    draft4 = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "maximum": 5,
        "exclusiveMaximum": True,
    }
    assert not passed(await score("json_schema", draft4, ctx(output=5)))
    assert passed(await score("json_schema", draft4, ctx(output=4)))


async def test_json_schema_that_is_not_a_schema_is_an_error():
    item = await score("json_schema", {"type": "lemon"}, ctx())
    assert item.value is None and "not a valid JSON Schema" in (item.error or "")


async def test_json_schema_never_fetches_a_remote_ref():
    """jsonschema would fetch a remote $ref itself, from the worker, past the egress policy."""
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            body = b'{"type": "string"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler) as served:
        thread = threading.Thread(target=served.serve_forever, daemon=True)
        thread.start()
        try:
            url = f"http://127.0.0.1:{served.server_address[1]}/s.json"
            item = await score("json_schema", {"$ref": url}, ctx(output="text"))
        finally:
            served.shutdown()
    assert hits == []
    assert item.value is None and "cannot be applied" in (item.error or ""), item
    local = {"$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s"}
    assert passed(await score("json_schema", local, ctx(output="text")))


# --------------------------------------------------------------------------- tool_calls


async def test_tool_calls_over_a_harness_trajectory():
    traj = agent_trajectory(files=("report",))
    context = ctx(trajectory=traj)
    assert tool_call_names(msgspec.convert(traj, _trajectory_type())) == ["read_file", "calculator"]
    item = await score("tool_calls", {"required": ["calculator"]}, context)
    assert (
        passed(item) and item.explanation == "tool calls as required (calculator 1x, read_file 1x)"
    )
    item = await score("tool_calls", {"required": ["search", "calculator"]}, context)
    assert not passed(item) and item.explanation == "never called search"
    item = await score("tool_calls", {"forbidden": ["calculator", "delete_file"]}, context)
    assert not passed(item) and item.explanation == "called forbidden calculator (1x)"
    assert passed(await score("tool_calls", {"order": ["read_file", "calculator"]}, context))
    item = await score("tool_calls", {"order": ["calculator", "read_file"]}, context)
    assert not passed(item)
    assert item.explanation == (
        "first calls came in the order read_file -> calculator, not calculator -> read_file"
    )
    item = await score("tool_calls", {"order": ["search", "calculator"]}, context)
    assert not passed(item) and item.explanation == "the ordered tools search were never called"


async def test_tool_calls_count_a_subagent_where_it_was_called():
    traj = delegating_trajectory()
    names = tool_call_names(msgspec.convert(traj, _trajectory_type()))
    assert names == ["plan", "delegate", "search", "answer"]
    context = ctx(trajectory=traj)
    assert passed(await score("tool_calls", {"order": ["delegate", "search", "answer"]}, context))
    assert not passed(await score("tool_calls", {"forbidden": ["search"]}, context))
    count = await score("tool_call_count", True, context)
    assert count.raw == 4


async def test_tool_calls_need_the_capability_and_a_trajectory():
    no_calls = ctx(provides=Provides(trajectory=True, tool_calls=False))
    item = await score("tool_calls", {"required": ["calculator"]}, no_calls)
    assert item.value is None and item.error is None
    assert (
        item.skipped == "the agent does not provide its tool calls (provides.tool_calls is false)"
    )
    item = await score(
        "tool_calls", {"required": ["x"]}, ctx(trajectory=None, trajectory_valid=None)
    )
    assert item.skipped == "no trajectory was collected for this run"
    item = await score(
        "tool_calls",
        {"required": ["x"]},
        ctx(trajectory=None, trajectory_valid=None, provides=Provides(tool_calls=True)),
    )
    assert item.skipped == "the agent provides no trajectory (provides.trajectory is false)"
    item = await score(
        "tool_calls", {"required": ["x"]}, ctx(trajectory=None, trajectory_valid=False)
    )
    assert (
        item.skipped is not None
        and "not valid ATIF" in item.skipped
        and "runs show 7" in item.skipped
    )
    empty = await score("tool_calls", {}, ctx())
    assert empty.value is None and "at least one" in (empty.error or "")


async def test_a_trajectory_in_hand_counts_even_when_not_declared():
    """A traced agent's harness may say provides.trajectory false while its spans give one."""
    context = ctx(provides=Provides(trajectory=False, tool_calls=True))
    assert passed(await score("tool_calls", {"required": ["calculator"]}, context))
    assert passed(await score("max_steps", 5, context))


# --------------------------------------------------------------------------- max_steps


async def test_max_steps_counts_agent_steps():
    context = ctx()  # user, agent (tool call), agent (answer)
    item = await score("max_steps", 2, context)
    assert passed(item) and item.explanation == "2 agent steps, at most 2 allowed"
    item = await score("max_steps", 1, context)
    assert not passed(item) and item.explanation == "2 agent steps, at most 1 allowed"
    skipped = await score("max_steps", 3, ctx(trajectory=None, trajectory_valid=None))
    assert skipped.value is None and skipped.skipped is not None
    bad = await score("max_steps", 0, context)
    assert bad.value is None and "at least 1" in (bad.error or "")


# --------------------------------------------------------------------------- gauges


def gauge(item: ScoreItem) -> Any:
    assert item.kind == "gauge" and item.value is None, item
    assert item.error is None and item.skipped is None, item
    return item.raw


async def test_latency_from_the_trajectory_then_from_the_run():
    item = await score("latency", True, ctx())
    assert gauge(item) == pytest.approx(2.5)
    assert item.explanation == "2.500 s by the trajectory's timestamps"
    start = datetime(2026, 1, 1, tzinfo=UTC)
    run_timed = ctx(
        trajectory=None,
        trajectory_valid=None,
        started_at=start,
        finished_at=start + timedelta(seconds=4),
    )
    item = await score("latency", True, run_timed)
    assert gauge(item) == 4.0 and "from the run's start" in (item.explanation or "")
    none = await score("latency", True, ctx(trajectory=None, trajectory_valid=None))
    assert none.kind == "gauge" and none.value is None and none.skipped is not None


async def test_tokens_and_cost_as_the_trajectory_reports_them():
    traj = agent_trajectory()
    final = traj["final_metrics"]
    tokens = await score("tokens", True, ctx(trajectory=traj))
    total = final["total_prompt_tokens"] + final["total_completion_tokens"]
    assert gauge(tokens) == total
    assert tokens.explanation == (
        f"{total} tokens: {final['total_prompt_tokens']} prompt, "
        f"{final['total_completion_tokens']} completion, 0 cached"
    )
    cost = await score("cost", True, ctx(trajectory=traj))
    assert gauge(cost) == pytest.approx(final["total_cost_usd"])


async def test_tokens_and_cost_need_token_usage():
    lacking = ctx(provides=Provides(trajectory=True, tool_calls=True, token_usage=False))
    for name in ("tokens", "cost"):
        item = await score(name, True, lacking)
        assert item.kind == "gauge" and item.value is None and item.raw is None
        assert (
            item.skipped == "the agent does not report token usage (provides.token_usage is false)"
        )
    silent = ctx(trajectory=agent_trajectory(token_usage=False))  # declared, but not reported
    assert (await score("tokens", True, silent)).skipped == "the trajectory reports no token counts"
    assert (await score("cost", True, silent)).skipped == "the trajectory reports no cost"


async def test_steps_and_tool_call_count():
    context = ctx(trajectory=agent_trajectory(files=("a", "b")))
    steps = await score("steps", True, context)
    assert gauge(steps) == 2 and steps.explanation == "2 agent steps of 3 in all"
    calls = await score("tool_call_count", True, context)
    assert gauge(calls) == 3 and calls.explanation == "calculator 1x, read_file 2x"
    echo = ctx(trajectory=agent_trajectory("hello there"))  # no tool call at all
    assert gauge(await score("tool_call_count", True, echo)) == 0
    gated = await score("tool_call_count", True, ctx(provides=Provides(trajectory=True)))
    assert gated.skipped is not None and gated.raw is None


# --------------------------------------------------------------------------- selection


def test_select_evaluators_from_a_case_block():
    block = {
        "exact_match": True,
        "numeric": False,
        "contains": None,
        "latency": True,
        "tokens": False,
        "judge": {"rubric": "r"},
        "custom": {"citations": {"n": 2}, "tone": {}},
    }
    chosen = select_evaluators(block)
    assert [(s.key, s.identity, s.kind) for s in chosen] == [
        ("exact_match", "builtin:exact_match", "evaluator"),
        ("latency", "builtin:latency", "gauge"),
        ("judge", "judge", "evaluator"),
        ("custom.citations", "remote:citations", "evaluator"),
        ("custom.tone", "remote:tone", "evaluator"),
    ]
    assert chosen[3].config == {"n": 2} and chosen[3].score_name == "citations"
    assert [s.key for s in select_evaluators(block, ["latency", "custom.tone"])] == [
        "latency",
        "custom.tone",
    ]
    assert [s.key for s in select_evaluators(block, ["custom"])] == [
        "custom.citations",
        "custom.tone",
    ]
    assert select_evaluators(None) == [] and select_evaluators({}, ["judge"]) == []
    assert select_evaluators({"colour": 1}) == [Selected("colour", "unknown", 1)]


def test_identities_of_a_limited_round():
    assert identities(["regex", "judge", "custom.tone"]) == (
        ["builtin:regex", "judge", "remote:tone"],
        False,
    )
    assert identities(["custom"]) == ([], True)


# --------------------------------------------------------------------------- helpers


def _trajectory_type() -> type:
    from evalkit.atif.model import Trajectory

    return Trajectory


def delegating_trajectory() -> dict[str, Any]:
    """An agent that plans, hands a search to an embedded subagent, then answers."""
    sub = {
        "schema_version": "ATIF-v1.8",
        "trajectory_id": "sub-1",
        "agent": {"name": "searcher", "version": "1"},
        "steps": [
            {"step_id": 1, "source": "user", "message": "find it"},
            {
                "step_id": 2,
                "source": "agent",
                "message": "searching",
                "tool_calls": [{"tool_call_id": "s1", "function_name": "search", "arguments": {}}],
            },
        ],
    }
    doc = {
        "schema_version": "ATIF-v1.8",
        "agent": {"name": "lead", "version": "1"},
        "steps": [
            {"step_id": 1, "source": "user", "message": "question"},
            {
                "step_id": 2,
                "source": "agent",
                "message": "plan, then delegate",
                "tool_calls": [
                    {"tool_call_id": "c1", "function_name": "plan", "arguments": {}},
                    {"tool_call_id": "c2", "function_name": "delegate", "arguments": {}},
                ],
                "observation": {
                    "results": [
                        {"source_call_id": "c1", "content": "ok"},
                        {
                            "source_call_id": "c2",
                            "subagent_trajectory_ref": [{"trajectory_id": "sub-1"}],
                        },
                    ]
                },
            },
            {
                "step_id": 3,
                "source": "agent",
                "message": "answering",
                "tool_calls": [{"tool_call_id": "c3", "function_name": "answer", "arguments": {}}],
            },
        ],
        "subagent_trajectories": [sub],
    }
    assert validate_trajectory(doc) == []
    return copy.deepcopy(doc)


def test_scores_the_database_would_refuse_become_error_scores():
    """A remote evaluator's bug must not fail the job on the scores table's checks."""
    remote = Selected("custom.tone", "remote:tone", {})

    def item(**kw: Any) -> ScoreItem:
        return ScoreItem(**{"name": "tone", "value": 0.5, "evaluator": "remote:tone", **kw})

    assert _checked(remote, item()) == item()
    assert _checked(remote, item(value=1)).value == 1.0
    for bad, says in [
        (item(value=1.5), "outside [0, 1]"),
        (item(value=float("nan")), "outside [0, 1]"),
        (item(kind="score"), "of kind 'score'"),
        (item(name=""), "a score with no name"),
        (item(raw=object()), "raw value that is not JSON"),
    ]:
        checked = _checked(remote, bad)
        assert checked.value is None and says in (checked.error or ""), checked
        assert checked.evaluator == "remote:tone" and checked.name == (bad.name or "tone")
    assert _checked(remote, "0.5").error == "custom.tone gave str, not a ScoreItem"
    long = _checked(remote, item(explanation="x" * 10_000)).explanation
    assert long is not None and len(long) == 4000 and long.endswith("...")
    assert [i.value for i in _unique([item(), item(value=0.1)])] == [0.5]
