"""Judge alignment's pure parts: which runs become examples, which judges can be aligned,
and the prompt hash that pins the examples."""

from __future__ import annotations

import pytest

from evalkit.cases.model import JudgeConfig
from evalkit.errors import BadRequest
from evalkit.model.judge_alignment import Example
from evalkit.scoring import alignment
from evalkit.scoring.judge_library import LIBRARY
from evalkit.scoring.judge_prompt import PROMPT_HASH, build_messages, examples_hash
from tests.unit.test_judge_prompt import context


def candidate(run_id: int, scored: float, *labels: float, why: str = "") -> alignment.Candidate:
    return alignment.Candidate(
        run_id=run_id,
        case_id=f"c{run_id}",
        task={"q": run_id},
        answer=str(run_id),
        scored=scored,
        labelled=list(labels),
        comments=[why] if why else [],
    )


def test_disagreements_come_first_then_kept_examples_then_agreements_of_both_verdicts():
    kept = Example(run_id=9, case_id="c9", task={}, answer="9", verdict="pass")
    relabelled = Example(run_id=2, case_id="c2", task={}, answer="2", verdict="fail")
    found = alignment.choose_examples(
        [
            candidate(1, 1.0, 1.0),  # agrees, pass
            candidate(2, 1.0, 0.0, why="wrong sum"),  # disagrees
            candidate(3, 0.0, 0.0),  # agrees, fail
            candidate(4, 1.0, 1.0, 0.0),  # tied labellers: no verdict, never an example
            candidate(5, 1.0, 1.0),  # agrees, pass
        ],
        [kept, relabelled],
        limit=4,
    )
    assert [(e.run_id, e.verdict) for e in found] == [
        (2, "fail"),
        (9, "pass"),
        (3, "fail"),
        (1, "pass"),
    ]
    assert found[0].why == "wrong sum"


@pytest.mark.parametrize(
    ("text", "score"),
    [("judge", "judge"), ("groundedness", "judge.groundedness"),
     ("judges.groundedness", "judge.groundedness"), ("judge.tool_use", "judge.tool_use")],
)  # fmt: skip
def test_judges_are_named_as_scores(text, score):
    assert alignment.judge_score(text) == score


def test_other_scores_are_not_judges():
    with pytest.raises(BadRequest) as refused:
        alignment.judge_score("exact_match")
    assert refused.value.code == "not-a-judge" and "groundedness" in refused.value.message


def test_examples_change_the_hash_and_none_keep_it():
    one = [Example(run_id=1, case_id="c1", task={"q": 1}, answer="1", verdict="fail")]
    assert examples_hash(PROMPT_HASH, []) == PROMPT_HASH
    assert alignment.prompt_hash("judge", one) not in (
        PROMPT_HASH,
        alignment.prompt_hash("judge", []),
    )
    library = LIBRARY["groundedness"].prompt_hash
    assert alignment.prompt_hash("judge.groundedness", []) == library
    assert alignment.prompt_hash("judge.groundedness", one) != alignment.prompt_hash("judge", one)


def test_the_examples_come_first_in_the_user_message():
    ctx = context(answer="y")
    shown = [Example(run_id=1, case_id="c1", task={"q": 1}, answer="a\nb", verdict="fail")]
    plain = build_messages(ctx, JudgeConfig(rubric="r"), plain=False)[1]["content"]
    user = build_messages(ctx, JudgeConfig(rubric="r"), plain=False, examples=shown)[1]["content"]
    assert user.endswith(plain) and user.startswith("<examples>\n")
    assert 'Task: {"q":1}\nAnswer: a b\nPeople\'s verdict: fail\nWhy: (no comment)' in user
