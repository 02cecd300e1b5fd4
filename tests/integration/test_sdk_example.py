"""The "bring your own benchmark" example: a benchmark file turned into case YAML, synced,
run, and graded by its Python evaluator."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from evalkit.sdk import run_experiment
from tests.integration import sdk_helpers

engine = sdk_helpers.engine
dev = sdk_helpers.dev

EXAMPLE = Path(__file__).parents[2] / "examples" / "own_benchmark"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def test_own_benchmark_example(dev):
    to_cases, grade = load("to_cases"), load("grade")
    source = EXAMPLE / "benchmark.jsonl"
    assert to_cases.convert(source, dev.repo.suite("gradeschool")) == 5
    references = {
        json.loads(line)["question"]: json.loads(line)["answer"].rsplit("#### ", 1)[1]
        for line in source.read_text().splitlines()
    }
    dev.agent("myagent")

    def task(input: dict) -> str:
        # Right on every question but the last, whose answer keeps the remainder wrong.
        if input["question"].startswith("Sam"):
            return "He needs 13 days, 250 / 18 = 13"
        return f"The answer is {references[input['question']]}."

    result = run_experiment(
        dataset="gradeschool",
        agent="myagent",
        task=task,
        evaluators=[grade.final_number],
        progress=False,
    )
    [score] = [s for s in result.scores if s["name"] == "final_number"]
    assert score["readings"] == 5 and score["mean"] == 0.8
