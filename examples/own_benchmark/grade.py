"""The grader of the benchmark: a Python evaluator named like the key the cases use
(`evaluators.custom.final_number`), and a script that runs an agent over the suite.

    uv run evalkit sync cases/gradeschool         # W-CUSTOM-UNKNOWN final_number is expected
    uv run python examples/own_benchmark/grade.py
"""

from __future__ import annotations

import re

from evalkit.sdk import ScoreItem, evaluator, run_experiment

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


@evaluator(name="final_number")
def final_number(case, run) -> ScoreItem:
    """1 when the last number in the answer is the reference number."""
    found = _NUMBER.findall((run.answer or "").replace(",", ""))
    reference = str(case.config["reference"])
    last = found[-1] if found else None
    return ScoreItem(
        name="final_number",
        score=1.0 if last is not None and float(last) == float(reference) else 0.0,
        explanation=f"last number {last!r}, reference {reference}",
    )


def task(input: dict) -> str:
    """Replace with a call to your agent."""
    raise NotImplementedError("call your agent here with input['question']")


if __name__ == "__main__":
    result = run_experiment(
        dataset="gradeschool", agent="myagent", task=task, evaluators=[final_number]
    )
    print(result)
