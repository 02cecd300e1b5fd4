"""Checks of the `evaluators:` block: known names, and the shape of each config."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import regex
from yaml.nodes import Node

from evalkit.cases._check import Sink, is_number, is_str_list, kind, suggest
from evalkit.cases._yaml import entries
from evalkit.cases.model import BUILTIN_EVALUATORS, CUSTOM_NAME_RE, GAUGES
from evalkit.cases.model import LIBRARY_JUDGES as LIBRARY

EVALUATOR_KEYS = (*BUILTIN_EVALUATORS, "judge", "judges", "custom")
CONFIG = "E-EVALUATOR-CONFIG"


@dataclass
class EvalContext:
    sink: Sink
    overlay: bool
    expected: Any
    fixture_refs: list[tuple[str, int]] = field(default_factory=list)
    custom_refs: list[tuple[str, int]] = field(default_factory=list)


def check_evaluators(ctx: EvalContext, value: Any, node: Node) -> None:
    sink = ctx.sink
    if not isinstance(value, dict):
        sink.error("E-SCHEMA-TYPE", node, f"`evaluators` must be a mapping, got {kind(value)}")
        return
    for name, (key_node, value_node) in entries(node).items():
        config = value[name]
        if name not in EVALUATOR_KEYS:
            if name.startswith("custom."):
                hint = f"; write it as `custom: {{{name[7:]}: ...}}`"
            else:
                hint = suggest(name, EVALUATOR_KEYS) or (
                    f"; a custom evaluator goes under `custom: {{{name}: ...}}`"
                )
            sink.error(
                "E-EVALUATOR-UNKNOWN", key_node, f"unknown built-in evaluator `{name}`{hint}"
            )
            continue
        if config is None:  # not set (in an overlay: removed from the target)
            continue
        _CHECKS[name](ctx, name, config, value_node)
    _check_conflicts(ctx, value, node)


def _err(ctx: EvalContext, node: Node, message: str) -> None:
    ctx.sink.error(CONFIG, node, message)


def _mapping(
    ctx: EvalContext, name: str, config: dict[str, Any], node: Node, allowed: tuple[str, ...]
) -> bool:
    ok = True
    for key, (key_node, _) in entries(node).items():
        if key not in allowed:
            _err(
                ctx,
                key_node,
                f"`{name}` has no option `{key}`{suggest(key, allowed)}; "
                f"options: {', '.join(allowed)}",
            )
            ok = False
    for key, (_, value_node) in entries(node).items():
        if key in ("ignore_case", "strip", "relative") and not isinstance(config[key], bool):
            _err(ctx, value_node, f"`{name}.{key}` must be true or false, got {kind(config[key])}")
            ok = False
    return ok


def _needs_answer(ctx: EvalContext, name: str, node: Node) -> None:
    if ctx.overlay:
        return  # the target case may hold expected.answer
    if not isinstance(ctx.expected, dict) or "answer" not in ctx.expected:
        _err(
            ctx,
            node,
            f"`{name}` without a value compares with `expected.answer`, which this case "
            "lacks: add `expected.answer` or give the value",
        )


def _check_exact_match(ctx: EvalContext, name: str, config: Any, node: Node) -> None:
    if config is True:
        _needs_answer(ctx, name, node)
    elif isinstance(config, dict):
        if _mapping(ctx, name, config, node, ("value", "ignore_case", "strip")):
            if config.get("value") is None:
                _needs_answer(ctx, name, node)
            elif not isinstance(config["value"], str):
                _err(
                    ctx,
                    entries(node)["value"][1],
                    f"`{name}.value` must be a string, got {kind(config['value'])}: quote it",
                )
    elif not isinstance(config, bool | str):
        _err(
            ctx,
            node,
            f"`{name}` takes true, a string, or {{value, ignore_case, strip}}; got {kind(config)}",
        )


def _strings(ctx: EvalContext, label: str, value: Any, node: Node) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not is_str_list(value) or not value or not all(value):
        _err(
            ctx, node, f"`{label}` must be a non-empty string or a list of them, got {kind(value)}"
        )
        return []
    return list(value)


def _check_text(ctx: EvalContext, name: str, config: Any, node: Node) -> None:
    if isinstance(config, dict):
        if _mapping(ctx, name, config, node, ("values", "ignore_case")):
            if "values" not in config:
                _err(ctx, node, f"`{name}` needs `values:` (a string or a list of strings)")
            else:
                _strings(ctx, f"{name}.values", config["values"], entries(node)["values"][1])
    else:
        _strings(ctx, name, config, node)


def _check_regex(ctx: EvalContext, name: str, config: Any, node: Node) -> None:
    flags = 0
    if isinstance(config, dict):
        if not _mapping(ctx, name, config, node, ("pattern", "ignore_case")):
            return
        if "pattern" not in config:
            _err(ctx, node, "`regex` needs `pattern:` (a regex or a list of them)")
            return
        flags = regex.IGNORECASE if config.get("ignore_case") else 0
        node, config = entries(node)["pattern"][1], config["pattern"]
    for pattern in _strings(ctx, name, config, node):
        # The engine and flags the regex evaluator scores with (evalkit.scoring.builtins).
        try:
            regex.compile(pattern, flags | regex.VERSION0)
        except regex.error as exc:
            _err(ctx, node, f"`regex` pattern {pattern!r} does not compile: {exc}")
        except RecursionError:
            _err(ctx, node, f"`regex` pattern {pattern[:40]!r}... nests groups too deeply")


def _check_numeric(ctx: EvalContext, name: str, config: Any, node: Node) -> None:
    if config is True:
        _needs_answer(ctx, name, node)
    elif isinstance(config, dict):
        if not _mapping(ctx, name, config, node, ("value", "tolerance", "relative")):
            return
        found = entries(node)
        if config.get("value") is None:
            _needs_answer(ctx, name, node)
        elif not is_number(config["value"]):
            _err(
                ctx,
                found["value"][1],
                f"`numeric.value` must be a number, got {kind(config['value'])}",
            )
        tol = config.get("tolerance", 0)
        if not is_number(tol) or tol < 0:
            _err(
                ctx,
                found["tolerance"][1],
                f"`numeric.tolerance` must be a number >= 0, got {kind(tol)}",
            )
    elif not is_number(config) and config is not False:
        _err(
            ctx,
            node,
            "`numeric` takes a number, true, or {value, tolerance, relative}; "
            f"got {kind(config)}",
        )


_JSON_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")


def _check_json_schema(ctx: EvalContext, name: str, config: Any, node: Node) -> None:
    if not isinstance(config, dict):
        _err(ctx, node, f"`json_schema` must be a JSON Schema (a mapping), got {kind(config)}")
        return
    kinds = config.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not is_str_list(kinds) or any(k not in _JSON_TYPES for k in kinds):
            _err(
                ctx,
                entries(node)["type"][1],
                f"`json_schema.type` must be one of {', '.join(_JSON_TYPES)} (or a list of them)",
            )


def _check_tool_calls(ctx: EvalContext, name: str, config: Any, node: Node) -> None:
    if not isinstance(config, dict):
        _err(
            ctx,
            node,
            "`tool_calls` takes {required, forbidden, order} (lists of tool names), "
            f"got {kind(config)}",
        )
        return
    allowed = ("required", "forbidden", "order")
    if not _mapping(ctx, name, config, node, allowed):
        return
    found = entries(node)
    lists: dict[str, list[str]] = {}
    for key in allowed:
        names = config.get(key)
        if names is None:
            continue
        if not is_str_list(names) or not all(names):
            _err(
                ctx,
                found[key][1],
                f"`tool_calls.{key}` must be a list of tool names, got {kind(names)}",
            )
        else:
            lists[key] = names
    if not any(config.get(key) for key in allowed):
        _err(ctx, node, "`tool_calls` is empty: list tools under required, forbidden or order")
    forbidden = set(lists.get("forbidden", []))
    for key in ("required", "order"):
        clash = sorted(forbidden & set(lists.get(key, [])))
        if clash:
            _err(
                ctx,
                found[key][1],
                f"`tool_calls.{key}` lists {', '.join(clash)}, which `forbidden` also lists",
            )


def _check_max_steps(ctx: EvalContext, name: str, config: Any, node: Node) -> None:
    if not isinstance(config, int) or isinstance(config, bool) or config < 1:
        _err(ctx, node, f"`max_steps` must be a whole number >= 1, got {kind(config)}")


def _check_gauge(ctx: EvalContext, name: str, config: Any, node: Node) -> None:
    if not isinstance(config, bool):
        _err(
            ctx, node, f"`{name}` is a gauge: write `{name}: true` to record it, got {kind(config)}"
        )


def _check_judge(ctx: EvalContext, name: str, config: Any, node: Node) -> None:
    if not isinstance(config, dict):
        _err(ctx, node, f'`judge` takes a mapping: `judge: {{rubric: "..."}}`, got {kind(config)}')
        return
    if not _mapping(ctx, name, config, node, ("rubric", "model")):
        return
    found = entries(node)
    rubric = config.get("rubric")
    if not isinstance(rubric, str) or not rubric.strip():
        where = found["rubric"][1] if "rubric" in found else node
        _err(
            ctx,
            where,
            "`judge.rubric` must be non-empty text telling the judge what a good answer "
            f"is, got {kind(rubric)}",
        )
    model = config.get("model")
    if model is not None and (not isinstance(model, str) or not model):
        _err(
            ctx,
            found["model"][1],
            f"`judge.model` must be a model name (a string), got {kind(model)}",
        )


def _check_library(ctx: EvalContext, name: str, config: Any, node: Node) -> None:
    known = tuple(LIBRARY)
    if not isinstance(config, dict):
        _err(
            ctx,
            node,
            "`judges` maps library judge names to true or {model}: "
            f"`judges: {{task_completion: true}}`, got {kind(config)}; known: {', '.join(known)}",
        )
        return
    for judge_name, (key_node, value_node) in entries(node).items():
        value = config[judge_name]
        if judge_name not in LIBRARY:
            ctx.sink.error(
                "E-EVALUATOR-UNKNOWN",
                key_node,
                f"unknown library judge `{judge_name}`{suggest(judge_name, known)}; "
                f"the library has {', '.join(known)}",
            )
            continue
        if isinstance(value, dict):
            _mapping(ctx, f"judges.{judge_name}", value, value_node, ("model",))
            model = value.get("model")
            if model is not None and (not isinstance(model, str) or not model):
                _err(
                    ctx,
                    value_node,
                    f"`judges.{judge_name}.model` must be a model name (a string), "
                    f"got {kind(model)}",
                )
        elif value is not None and not isinstance(value, bool):
            _err(
                ctx,
                value_node,
                f"`judges.{judge_name}` takes true, false or {{model: NAME}}, got {kind(value)}",
            )
            continue
        if value is False or value is None:
            continue
        if (
            "expected" in LIBRARY[judge_name]
            and not ctx.overlay
            and (not isinstance(ctx.expected, dict) or not ctx.expected)
        ):
            _err(
                ctx,
                key_node,
                f"`judges.{judge_name}` grades the answer against the case's `expected` "
                "block, which this case lacks: add `expected:` (for example "
                "`expected: {answer: ...}`) or drop the judge",
            )


def _check_custom(ctx: EvalContext, name: str, config: Any, node: Node) -> None:
    if not isinstance(config, dict):
        _err(
            ctx,
            node,
            "`custom` maps evaluator names to their configs: "
            f"`custom: {{my_check: {{...}}}}`, got {kind(config)}",
        )
        return
    for custom, (key_node, _) in entries(node).items():
        if CUSTOM_NAME_RE.match(custom):
            ctx.custom_refs.append((custom, key_node.start_mark.line + 1))
        else:
            _err(
                ctx,
                key_node,
                f"custom evaluator name {custom!r} is not valid: "
                "use letters, digits, '_', '.', '-'",
            )


def _check_conflicts(ctx: EvalContext, value: dict[str, Any], node: Node) -> None:
    def texts(config: Any) -> set[str]:
        if isinstance(config, dict):
            config = config.get("values")
        if isinstance(config, str):
            return {config}
        return set(config) if is_str_list(config) else set()

    clash = sorted(texts(value.get("contains")) & texts(value.get("not_contains")))
    if clash:
        _err(
            ctx,
            entries(node)["not_contains"][1],
            f"`not_contains` and `contains` both list {', '.join(map(repr, clash))}: "
            "no answer can pass",
        )


_CHECKS = {
    "exact_match": _check_exact_match,
    "contains": _check_text,
    "not_contains": _check_text,
    "regex": _check_regex,
    "numeric": _check_numeric,
    "json_schema": _check_json_schema,
    "tool_calls": _check_tool_calls,
    "max_steps": _check_max_steps,
    **dict.fromkeys(GAUGES, _check_gauge),
    "judge": _check_judge,
    "judges": _check_library,
    "custom": _check_custom,
}
