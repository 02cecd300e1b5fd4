"""Turn a benchmark file (JSON lines with `question` and an `answer` ending in `#### N`, the
layout of grade-school math sets) into an evalkit suite: one case YAML per line.

    uv run python examples/own_benchmark/to_cases.py benchmark.jsonl cases/gradeschool

Each case gets the question as its input and its grading data (the reference number) under
`evaluators.custom.final_number`, where the Python evaluator of the same name reads it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml


def convert(source: Path, suite: Path) -> int:
    suite.mkdir(parents=True, exist_ok=True)
    count = 0
    for number, line in enumerate(source.read_text().splitlines(), 1):
        if not line.strip():
            continue
        item = json.loads(line)
        reference = item["answer"].rsplit("####", 1)[1].strip()
        case = {
            "input": {"question": item["question"]},
            "expected": {"answer": reference},
            "tags": ["gradeschool-math"],
            "evaluators": {"custom": {"final_number": {"reference": reference}}},
        }
        path = suite / f"q{number:04d}.yaml"
        path.write_text(yaml.safe_dump(case, sort_keys=False, allow_unicode=True))
        count += 1
    return count


if __name__ == "__main__":
    written = convert(Path(sys.argv[1]), Path(sys.argv[2]))
    print(f"{written} cases written to {sys.argv[2]}")
