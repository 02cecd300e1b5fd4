"""The judge library: each judge's rubric is in docs/judge.md verbatim, its prompt shows
the steps only where it declares them, its gates skip with a reason, and lint refuses bad
names."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.cases.model import LIBRARY_JUDGES
from evalkit.model.harness import Provides
from evalkit.scoring import judge_library
from evalkit.scoring.judge_library import LIBRARY, gate, library_messages
from evalkit.scoring.judge_prompt import NO_STEPS, PROMPT_HASH, SYSTEM_PROMPT
from evalkit.scoring.run import select_evaluators
from tests.unit.test_judge_prompt import code_blocks, context, sample_trajectory

PAGE = (Path(__file__).parents[2] / "docs" / "judge.md").read_text()


def library_section() -> str:
    start = PAGE.index("\n## The judge library\n")
    end = PAGE.find("\n## ", start + 1)
    return PAGE[start:] if end < 0 else PAGE[start:end]


def test_the_case_model_and_the_library_agree():
    assert {n: j.needs for n, j in LIBRARY.items()} == LIBRARY_JUDGES
    assert set(LIBRARY) >= {
        "task_completion",
        "answer_correctness",
        "groundedness",
        "tool_use",
        "unnecessary_steps",
        "safety",
    }


@pytest.mark.parametrize("name", list(LIBRARY))
def test_docs_show_each_rubric_and_hash(name):
    spec = LIBRARY[name]
    section = library_section()
    assert spec.rubric in code_blocks(section), f"docs/judge.md lacks {name}'s rubric verbatim"
    assert f"| `{name}` | {', '.join(spec.needs) or '-'} | `{spec.prompt_hash}` |" in section


@pytest.mark.parametrize("name", list(LIBRARY))
def test_each_prompt_is_the_documented_rubric_with_steps_where_declared(name):
    spec = LIBRARY[name]
    ctx = context(
        trajectory=sample_trajectory(), provides=Provides(trajectory=True, tool_calls=True)
    )
    system, user = library_messages(spec, ctx)
    assert system["content"] == SYSTEM_PROMPT
    assert user["content"].startswith(f"<rubric>\n{spec.rubric}\n</rubric>")
    if spec.shows_steps:
        assert "<steps>\n3 steps; 1 tool call;" in user["content"]
        assert 'call calculator {"expression":"6 * 7"}' in user["content"]
    else:
        assert "<steps>" not in user["content"] and NO_STEPS in user["content"]
    assert spec.prompt_hash != PROMPT_HASH
    assert len({j.prompt_hash for j in LIBRARY.values()}) == len(LIBRARY)


def test_missing_capabilities_skip_with_a_reason():
    bare = context()
    assert "provides.trajectory is false" in gate(LIBRARY["groundedness"], bare)
    assert "provides.trajectory is false" in gate(LIBRARY["unnecessary_steps"], bare)
    assert "provides.tool_calls is false" in gate(LIBRARY["tool_use"], bare)
    assert "`expected`" in gate(LIBRARY["answer_correctness"], context(case={"input": {}}))
    assert gate(LIBRARY["task_completion"], bare) is None
    assert gate(LIBRARY["safety"], bare) is None
    item = judge_library.skipped_item(LIBRARY["tool_use"], "why")
    assert (item.name, item.evaluator, item.value) == ("judge.tool_use", "judge:tool_use", None)


def test_selection_by_name():
    chosen = select_evaluators({"judges": {"safety": True, "tool_use": {"model": "m"}}})
    assert [(s.key, s.identity, s.score_name) for s in chosen] == [
        ("judges.safety", "judge:safety", "judge.safety"),
        ("judges.tool_use", "judge:tool_use", "judge.tool_use"),
    ]
    assert select_evaluators({"judges": {"safety": False}}) == []
    assert [s.key for s in select_evaluators({"judges": {"safety": True}}, ["judges"])] == [
        "judges.safety"
    ]
