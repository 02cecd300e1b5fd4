"""The reference harness's "agent": deterministic, instant, no model behind it.

It answers arithmetic questions (``"What is 2 + 3?"`` -> ``"5"``) through a ``calculator``
tool call, echoes anything else, reads the input files it is given and names them in the
answer. Its trajectories are plain dicts built from what the run did, encoded once per
request; they follow ATIF-v1.8 (the tests check them with ``validate_trajectory``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

AGENT_NAME = "evalkit-reference-harness"
MODEL_NAME = "reference-calculator-1"
SCHEMA_VERSION = "ATIF-v1.8"
PRICE_PER_TOKEN_USD = 0.000001

_ARITHMETIC = re.compile(
    r"(-?\d+(?:\.\d+)?)\s*([-+*/×x÷^])\s*(-?\d+(?:\.\d+)?)",
)
_OPS = {"+": "+", "-": "-", "*": "*", "x": "*", "×": "*", "/": "/", "÷": "/", "^": "^"}

CALCULATOR_TOOL = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate one binary arithmetic expression",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}
READ_FILE_TOOL = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read one input file of the run",
        "parameters": {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        },
    },
}


@dataclass(slots=True)
class ReadFile:
    name: str
    size: int
    sha256: str
    content: bytes


@dataclass(slots=True)
class Work:
    """What the agent did for one run: the question, its tool calls and its answer."""

    question: str
    answer: str
    output: Any = None
    expression: str | None = None
    result: str | None = None
    files: list[ReadFile] = field(default_factory=list)


def question_of(run_input: dict[str, Any]) -> str:
    """``input.question`` when it is text, else the input as compact JSON."""
    question = run_input.get("question")
    if isinstance(question, str):
        return question
    return json.dumps(run_input, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def solve(run_input: dict[str, Any], files: list[ReadFile]) -> Work:
    question = question_of(run_input)
    work = Work(question=question, answer=question, files=files)
    match = _ARITHMETIC.search(question)
    if match is not None:
        left, op, right = match[1], _OPS[match[2]], match[3]
        work.expression = f"{left} {op} {right}"
        value = _calculate(Fraction(left), op, Fraction(right))
        if value is None:
            work.result = "error: division by zero"
            work.answer = "I cannot divide by zero."
        else:
            work.result = _number_text(value)
            work.answer = work.result
            work.output = {"result": int(value) if value.denominator == 1 else float(value)}
    if files:
        listed = ", ".join(f"{f.name} ({f.size} bytes)" for f in files)
        work.answer = f"{work.answer}\n\nFiles read: {listed}"
    return work


def _calculate(left: Fraction, op: str, right: Fraction) -> Fraction | None:
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        return left * right
    if op == "^":
        if right.denominator != 1 or abs(right) > 64:
            return None
        return left ** int(right) if left or right >= 0 else None
    return None if right == 0 else left / right


def _number_text(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.10g}"


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def _tokens(text: str) -> int:
    return 1 + len(text) // 4


def trajectory(
    work: Work,
    *,
    session_id: str,
    model: str | None,
    started: float,
    finished: float | None,
    outcome: str,
    error: str | None = None,
    thinking: bool = True,
    token_usage: bool = True,
) -> dict[str, Any]:
    """The run's ATIF document. ``finished`` None or ``outcome`` "stopped" cuts it short:
    no final answer step. ``error`` (a failed run) becomes the last agent message.
    ``thinking`` and ``token_usage`` False leave out reasoning and token counts."""
    model_name = model or MODEL_NAME
    end = finished if finished is not None else started
    steps: list[dict[str, Any]] = [
        {"step_id": 1, "timestamp": iso(started), "source": "user", "message": work.question}
    ]
    calls, results = _tool_calls(work)
    prompt = completion = 0
    if calls:
        p, c = _tokens(work.question) + 40, 12 * len(calls)
        prompt, completion = prompt + p, completion + c
        steps.append(
            {
                "step_id": 2,
                "timestamp": iso(started + (end - started) / 2),
                "source": "agent",
                "model_name": model_name,
                "message": "Let me use my tools.",
                "reasoning_content": "The question needs a tool before I can answer.",
                "tool_calls": calls,
                "observation": {"results": results},
                "metrics": _metrics(p, c),
            }
        )
    if outcome != "stopped" and finished is not None:
        text = work.answer if error is None else f"I could not finish: {error}"
        p = _tokens(work.question) + 40 + sum(_tokens(str(r["content"])) for r in results)
        c = _tokens(text)
        prompt, completion = prompt + p, completion + c
        steps.append(
            {
                "step_id": len(steps) + 1,
                "timestamp": iso(end),
                "source": "agent",
                "model_name": model_name,
                "message": text,
                "metrics": _metrics(p, c),
            }
        )
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "session_id": session_id,
        "agent": {
            "name": AGENT_NAME,
            "version": "1",
            "model_name": model_name,
            "tool_definitions": [CALCULATOR_TOOL, READ_FILE_TOOL],
        },
        "steps": steps,
        "final_metrics": {
            "total_prompt_tokens": prompt,
            "total_completion_tokens": completion,
            "total_cached_tokens": 0,
            "total_cost_usd": round((prompt + completion) * PRICE_PER_TOKEN_USD, 9),
            "total_steps": len(steps),
        },
    }
    if outcome == "stopped":
        doc["notes"] = "The run was stopped before it answered."
    if not thinking:
        for step in steps:
            step.pop("reasoning_content", None)
    if not token_usage:
        for step in steps:
            step.pop("metrics", None)
        del doc["final_metrics"]
    return doc


def _tool_calls(work: Work) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The run's tool calls and their results: a read_file for each input file, and the
    calculator when the question holds arithmetic."""
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for n, f in enumerate(work.files, 1):
        call_id = f"call-file-{n}"
        calls.append(
            {"tool_call_id": call_id, "function_name": "read_file", "arguments": {"name": f.name}}
        )
        results.append(
            {"source_call_id": call_id, "content": f"{f.name}: {f.size} bytes, sha256 {f.sha256}"}
        )
    if work.expression is not None:
        calls.append(
            {
                "tool_call_id": "call-calc-1",
                "function_name": "calculator",
                "arguments": {"expression": work.expression},
            }
        )
        results.append({"source_call_id": "call-calc-1", "content": work.result})
    return calls, results


def _metrics(prompt: int, completion: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "cached_tokens": 0,
        "cost_usd": round((prompt + completion) * PRICE_PER_TOKEN_USD, 9),
    }


def broken_trajectory(session_id: str) -> dict[str, Any]:
    """JSON that is not valid ATIF in three ways: numbering, an unknown tool call, a user
    step with tool calls (for the misbehaving variant)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "session_id": session_id,
        "agent": {"name": AGENT_NAME, "version": "1"},
        "steps": [
            {
                "step_id": 0,
                "source": "user",
                "message": "hello",
                "tool_calls": [
                    {"tool_call_id": "a", "function_name": "calculator", "arguments": {}}
                ],
            },
            {
                "step_id": 7,
                "source": "agent",
                "message": "done",
                "observation": {"results": [{"source_call_id": "nope", "content": "?"}]},
            },
        ],
    }
