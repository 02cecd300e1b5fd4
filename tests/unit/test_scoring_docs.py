"""docs/scoring.md against the built-ins: every YAML example of the built-in checks and
gauges selects real evaluators whose configs are accepted, and every explanation the page
quotes is what the evaluator says on such a run."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalkit.scoring.builtins import BUILTINS
from evalkit.scoring.run import select_evaluators
from tests.unit.test_builtin_evaluators import agent_trajectory, ctx, score

PAGE = (Path(__file__).parents[2] / "docs" / "scoring.md").read_text()


def section(title: str) -> str:
    start = PAGE.index(f"\n## {title}\n")
    end = PAGE.find("\n## ", start + 1)
    return PAGE[start:end]


def yaml_examples() -> list[dict[str, Any]]:
    text = section("Built-in checks") + section("Gauges")
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)
    return [doc for block in blocks for doc in yaml.safe_load_all(block)]


def test_every_built_in_has_an_example():
    shown = {name for doc in yaml_examples() for name in doc["evaluators"]}
    assert shown == set(BUILTINS)


@pytest.mark.parametrize(
    "example",
    yaml_examples(),
    ids=lambda doc: "+".join(doc["evaluators"]),
)
async def test_each_example_selects_built_ins_that_accept_its_config(example):
    selected = select_evaluators(example["evaluators"])
    assert {s.key for s in selected} == set(example["evaluators"])
    for chosen in selected:
        item = await score(chosen.key, chosen.config)
        assert item.error is None, (chosen.key, chosen.config, item.error)


def trajectory_with_calls(*names: str, agent_steps: int = 1) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [{"step_id": 1, "source": "user", "message": "go"}]
    for i in range(agent_steps):
        step: dict[str, Any] = {"step_id": i + 2, "source": "agent", "message": f"step {i}"}
        if i == 0 and names:
            step["tool_calls"] = [
                {"tool_call_id": f"c{n}", "function_name": name, "arguments": {}}
                for n, name in enumerate(names)
            ]
        steps.append(step)
    return {"schema_version": "ATIF-v1.8", "agent": {"name": "a", "version": "1"}, "steps": steps}


QUOTED = [
    ("exact_match", {"value": "Paris", "ignore_case": True}, {"answer": "paris"},
     "the answer equals 'Paris'"),
    ("exact_match", {"value": "Paris", "ignore_case": True}, {"answer": "Lyon"},
     "the answer 'Lyon' is not 'Paris'"),
    ("contains", ["4.2", "million"], {"answer": "$4.2M"}, "the answer lacks 'million'"),
    ("not_contains", {"values": ["I cannot", "as an AI"], "ignore_case": True},
     {"answer": "I cannot say."}, "the answer contains 'I cannot'"),
    ("numeric", {"tolerance": 0.5}, {"answer": "42", "case": {"expected": {"answer": "40"}}},
     "read 42 from the answer; expected 40 within 0.5, off by 2"),
    ("numeric", True, {"answer": "forty-two"}, "the answer 'forty-two' states no number"),
    ("json_schema",
     {"type": "object", "required": ["citations"],
      "properties": {"citations": {"type": "array", "items": {"type": "string"}}}},
     {"output": {"citations": ["a", 3]}},
     "the output breaks the schema: $.citations[1]: 3 is not of type 'string'"),
    ("tool_calls", {"required": ["search"], "forbidden": ["delete_file"]},
     {"trajectory": trajectory_with_calls("delete_file", "delete_file")},
     "never called search; called forbidden delete_file (2x)"),
    ("tool_calls", {"required": ["search"], "order": ["search", "answer"]},
     {"trajectory": trajectory_with_calls("search", "answer", "search")},
     "tool calls as required (answer 1x, search 2x)"),
    ("max_steps", 10, {"trajectory": trajectory_with_calls(agent_steps=12)},
     "12 agent steps, at most 10 allowed"),
    ("tokens", True,
     {"trajectory": {**agent_trajectory(), "final_metrics": {
         "total_prompt_tokens": 120, "total_completion_tokens": 30, "total_cached_tokens": 0}}},
     "150 tokens: 120 prompt, 30 completion, 0 cached"),
    ("tool_call_count", True,
     {"trajectory": trajectory_with_calls("read_file", "calculator", "read_file")},
     "calculator 1x, read_file 2x"),
    ("tokens", True, {"trajectory": agent_trajectory(token_usage=False)},
     "the trajectory reports no token counts"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "config", "run", "quoted"), QUOTED, ids=[f"{q[0]}-{i}" for i, q in enumerate(QUOTED)]
)
async def test_the_explanations_the_page_quotes(name, config, run, quoted):
    assert quoted in PAGE, f"docs/scoring.md no longer quotes {quoted!r}"
    run = dict(run)
    case = run.pop("case", None)
    context = ctx(**run, **({"case": case} if case else {}))
    item = await score(name, config, context)
    assert quoted in (item.explanation or item.skipped or ""), item
