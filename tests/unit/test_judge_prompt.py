"""The judge's prompt: what it shows of a run, the compact trajectory, the strict verdict
parser, and the docs that must show the prompt verbatim."""

from __future__ import annotations

import json
import re
from pathlib import Path

import msgspec
import pytest

from evalkit.atif.model import Trajectory
from evalkit.cases.model import JudgeConfig
from evalkit.harness import _agent
from evalkit.model.harness import Provides
from evalkit.scoring import judge, judge_prompt
from evalkit.scoring.judge import (
    NO_STEPS,
    PLAIN_JSON_INSTRUCTION,
    PROMPT_HASH,
    SYSTEM_PROMPT,
    build_messages,
    parse_verdict,
    render_trajectory,
)
from evalkit.scoring.model import RunContext

DOCS = Path(__file__).parents[2] / "docs"


def context(**kw) -> RunContext:
    base = dict(
        run_id=1,
        experiment_id=1,
        workspace_id=1,
        case_id="c",
        repetition=1,
        case={"input": {"question": "Q?"}, "expected": {"answer": "A"}},
        answer="A.",
        output=None,
        trajectory=None,
        trajectory_valid=None,
        provides=Provides(),
        state="scoring",
    )
    return RunContext(**{**base, **kw})


def typed(doc: dict) -> Trajectory:
    """A trajectory as the scoring job reads it."""
    return msgspec.convert(doc, Trajectory)


def sample_trajectory(model: str = "gpt-5") -> Trajectory:
    work = _agent.solve({"question": "What is 6 * 7?"}, [])
    return typed(
        _agent.trajectory(
            work, session_id="s", model=model, started=1e9, finished=1e9 + 2, outcome="succeeded"
        )
    )


def test_messages_fill_every_section():
    system, user = build_messages(context(), JudgeConfig(rubric="  Be right.\n"), plain=False)
    assert system == {"role": "system", "content": SYSTEM_PROMPT}
    text = user["content"]
    assert text.startswith("<rubric>\nBe right.\n</rubric>\n\n<task>\n{\n")
    assert '<expected>\n{\n  "answer": "A"\n}\n</expected>' in text
    assert "<answer>\nA.\n</answer>" in text
    assert "<structured_output>\n(none)\n</structured_output>" in text
    assert NO_STEPS in text and text.endswith("Grade the answer against the rubric.")
    plain = build_messages(context(), JudgeConfig(rubric="x"), plain=True)[1]["content"]
    assert plain.endswith("\n\n" + PLAIN_JSON_INSTRUCTION)


def test_missing_parts_say_so():
    ctx = context(case={"input": {"q": 1}}, answer=None)
    text = build_messages(ctx, JudgeConfig(rubric="r"), plain=False)[1]["content"]
    assert "<expected>\n(none)\n</expected>" in text
    assert f"<answer>\n{judge_prompt.NO_ANSWER_TEXT}\n</answer>" in text
    # a trajectory the agent does not declare is not shown
    traj = sample_trajectory()
    hidden = build_messages(context(trajectory=traj), JudgeConfig(rubric="r"), plain=False)
    assert "<steps>" not in hidden[1]["content"]
    shown = build_messages(
        context(trajectory=traj, provides=Provides(trajectory=True)),
        JudgeConfig(rubric="r"),
        plain=False,
    )
    assert "<steps>\n3 steps; 1 tool call;" in shown[1]["content"]


def test_long_parts_are_cut_and_say_how_much():
    ctx = context(answer="x" * (judge_prompt.MAX_ANSWER + 10))
    text = build_messages(ctx, JudgeConfig(rubric="r"), plain=False)[1]["content"]
    assert "x" * judge_prompt.MAX_ANSWER + " [... 10 more characters cut]" in text


def test_trajectory_rendering_details():
    traj = {
        "schema_version": "ATIF-v1.6",
        "agent": {"name": "a", "version": "1"},
        "steps": [
            {"step_id": 1, "source": "system", "message": "Hi.", "is_copied_context": True},
            {"step_id": 2, "source": "user", "message": [
                {"type": "text", "text": "Describe"},
                {"type": "image", "source": {"media_type": "image/png", "path": "a.png"}},
            ]},
            {
                "step_id": 3,
                "source": "agent",
                "message": "  several\n  lines  ",
                "reasoning_content": "r" * 400,
                "tool_calls": [
                    {"tool_call_id": "c1", "function_name": "look", "arguments": {"q": "y" * 400}},
                    {"tool_call_id": "c2", "function_name": "ask", "arguments": {}},
                ],
                "observation": {"results": [
                    {"source_call_id": "c1", "content": "z" * 600},
                    {"source_call_id": "c2", "subagent_trajectory_ref": [{"session_id": "s2"}]},
                    {"content": None},
                ]},
            },
        ],
        "subagent_trajectories": [{
            "schema_version": "ATIF-v1.6",
            "agent": {"name": "b", "version": "1"},
            "steps": [{"step_id": 1, "source": "user", "message": "sub"}],
        }],
    }  # fmt: skip
    text = render_trajectory(typed(traj), thinking=True)
    lines = text.splitlines()
    assert lines[0] == "2 steps; 2 tool calls; 1 subagent trajectories (not shown)"
    assert lines[1] == "[2] user: Describe [image]"
    assert lines[2] == "[3] agent: several lines"
    assert lines[3].startswith("    thinking: " + "r" * 300 + " [... 100 more characters cut]")
    assert lines[4].startswith('    call look {"q":"' + "y" * 293)
    assert lines[4].endswith("more characters cut]")
    assert lines[5] == "    call ask {}"
    assert lines[6] == "    result of look: " + "z" * 500 + " [... 100 more characters cut]"
    assert lines[7] == "    result of ask: [handed to a subagent]"
    assert lines[8] == "    result: (empty)"
    assert "thinking" not in render_trajectory(typed(traj))


def test_long_trajectories_keep_the_first_and_last_steps():
    steps = [
        {"step_id": i, "source": "agent", "message": f"step number {i} " + "w" * 80}
        for i in range(1, 301)
    ]
    traj = {"schema_version": "ATIF-v1.6", "agent": {"name": "a", "version": "1"}, "steps": steps}
    text = render_trajectory(typed(traj), limit=2000)
    assert len(text) <= 2000
    lines = text.splitlines()
    assert lines[0] == "300 steps; 0 tool calls"
    assert lines[1].startswith("[1] agent: step number 1 ")
    assert lines[-1].startswith("[300] agent: step number 300 ")
    gap = next(line for line in lines if line.startswith("[... "))
    shown = len(lines) - 2
    assert gap == f"[... {300 - shown} steps left out ...]"


@pytest.mark.parametrize(
    ("content", "plain", "value"),
    [
        ('{"reasoning": "ok", "score": 0.7}', False, 0.7),
        ('{"reasoning": "ok", "score": 1}', False, 1.0),
        ('{"reasoning": "ok", "score": true}', False, 1.0),
        ('{"reasoning": "ok", "score": "fail"}', False, 0.0),
        ('```json\n{"reasoning": "ok", "score": 0.5}\n```', True, 0.5),
        ('<think>hmm {"score": 0}</think>\n{"reasoning": "ok", "score": 0.25}', True, 0.25),
    ],
)
def test_verdicts_that_parse(content, plain, value):
    assert parse_verdict(content, plain=plain).value == value


@pytest.mark.parametrize(
    ("content", "plain", "problem"),
    [
        ('```json\n{"reasoning": "ok", "score": 0.5}\n```', False, "not a JSON object"),
        ('{"reasoning": "ok", "score": 0.5, "confidence": 1}', False, "unknown field"),
        ('{"reasoning": "", "score": 0.5}', False, "length >= 1"),
        ('{"reasoning": "ok", "score": -0.1}', False, ">= 0.0"),
        ('{"reasoning": "ok", "score": "maybe"}', False, "Invalid enum value"),
        ('{"reasoning": "ok"}', False, "missing required field `score`"),
        ('{"reasoning": "ok", "score": 0.5', False, "not valid JSON"),
        ("Score: 1", True, "not a JSON object"),
    ],
)
def test_verdicts_that_do_not(content, plain, problem):
    with pytest.raises(judge_prompt.Unreadable) as caught:
        parse_verdict(content, plain=plain)
    assert problem in caught.value.problem


def test_the_prompt_hash_covers_every_text_and_the_schema(monkeypatch):
    assert re.fullmatch(r"[0-9a-f]{16}", PROMPT_HASH)
    assert judge_prompt._prompt_hash() == PROMPT_HASH
    monkeypatch.setattr(judge_prompt, "SYSTEM_PROMPT", SYSTEM_PROMPT + " ")
    assert judge_prompt._prompt_hash() != PROMPT_HASH


def code_blocks(markdown: str) -> list[str]:
    blocks: list[str] = []
    current: list[str] | None = None
    for line in markdown.splitlines():
        if line.startswith("```"):
            if current is None:
                current = []
            else:
                blocks.append("\n".join(current))
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def test_docs_show_the_prompt_verbatim():
    """docs/judge.md shows every text the judge is given, its hash and a real rendering."""
    text = (DOCS / "judge.md").read_text()
    blocks = code_blocks(text)
    for part in (
        judge.SYSTEM_PROMPT,
        judge.USER_TEMPLATE,
        judge.STEPS_TEMPLATE,
        judge.NO_STEPS,
        judge.PLAIN_JSON_INSTRUCTION,
        judge.CORRECTION_TEMPLATE,
        judge_prompt.EXAMPLES_TEMPLATE,
        judge_prompt.EXAMPLE_TEMPLATE,
        json.dumps(judge.RESPONSE_SCHEMA, indent=2),
        render_trajectory(sample_trajectory()),
    ):
        assert part in blocks, f"docs/judge.md lacks, verbatim in a code block:\n{part}"
    assert f"`{PROMPT_HASH}`" in text
    assert f"{judge.DEFAULT_MALFORMED_ATTEMPTS} answers at most" in text
    assert f"{judge.DEFAULT_ATTEMPTS} requests at most" in text
    assert f"no answer within {judge.DEFAULT_TIMEOUT:g} s" in text
    assert f"passing {judge.DEFAULT_BUDGET:g} s" in text
