"""Spans -> ATIF trajectory, read with an agent's span mapping.

The spans are sorted by start time, then span id, so the same spans in any order give the
same trajectory, byte for byte. Steps, in time order:

- a ``system`` or ``user`` step for each system or user message an LLM call is the first to
  send (later calls repeat the history; only messages not seen before make new steps);
- an ``agent`` step per LLM call: its reply, reasoning, tool calls, model and token counts,
  with the results of its tool calls as the step's observation (from the tool spans that
  answer them, else from the tool messages a later LLM call sent);
- an ``agent`` step with ``llm_call_count: 0`` for a tool span no LLM call asked for.

What the mapping names but a span lacks is listed in :attr:`BuildResult.unread`, one line
per thing, with the span id; what was read but looks wrong (the mapping does not fit the
instrumentation) in :attr:`BuildResult.findings` (:mod:`evalkit.otel.findings`).
"""

from __future__ import annotations

import bisect
import fnmatch
import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import msgspec

from evalkit.atif.model import LATEST_SCHEMA_VERSION
from evalkit.otel import _messages, _values
from evalkit.otel._messages import Message
from evalkit.otel.findings import Finding, convention_kind, envelope_path, kinds_by_convention
from evalkit.otel.mapping import (
    AnswerSource,
    AttributeRef,
    Mapping,
    SpanMatch,
    attributes_label,
    label,
    names,
)
from evalkit.otel.model import Span

__all__ = ["BuildResult", "build_trajectory"]

MAX_UNREAD: Final = 200
TRUNCATED_NOTE: Final = (
    "Built from a truncated session: the collector refused spans past otel.max_session_bytes, "
    "so later steps may be missing."
)


@dataclass(frozen=True, slots=True)
class BuildResult:
    trajectory: dict[str, Any]
    """The ATIF document (passes ``evalkit.atif.validate_trajectory``)."""
    answer: str | None
    unread: list[str]
    """What the mapping could not read, one line each: ``span <id>: <what> missing``."""
    steps: int
    truncated: bool
    spans: int = 0
    """Spans read (after ``exclude_spans``)."""
    excluded: int = 0
    findings: list[Finding] = field(default_factory=list)
    """What looks wrong though it was read (:mod:`evalkit.otel.findings`)."""


@dataclass
class _Call:
    id: str
    """The id in the trajectory (made unique)."""
    original: str | None
    name: str
    arguments: dict[str, Any]
    result: Any = None
    answered: bool = False
    result_from: tuple[str, str | AttributeRef] | None = None
    """The span id and the attribute (or message) the result was read from."""


class _CallIndex:
    """The LLM calls' tool calls by original id and by function name, in step order, and
    the steps' start times, to find the call a tool span answers without a full scan."""

    def __init__(self, steps: list[_Step]) -> None:
        self.starts = [s.span.start_ns if s.span is not None else 0 for s in steps]
        self.by_id: dict[str, list[tuple[int, _Call]]] = {}
        self.by_name: dict[str, list[tuple[int, _Call]]] = {}
        for i, step in enumerate(steps):
            for call in step.calls:
                if call.original is not None:
                    self.by_id.setdefault(call.original, []).append((i, call))
                self.by_name.setdefault(call.name, []).append((i, call))
        self.name_steps = {n: [i for i, _ in entries] for n, entries in self.by_name.items()}


@dataclass
class _Step:
    """A step before numbering; ``key`` orders the steps."""

    key: tuple[int, str, int, int]
    body: dict[str, Any]
    calls: list[_Call] = field(default_factory=list)
    span: Span | None = None
    where: str = ""
    """The message a system or user step was read from."""


def build_trajectory(
    spans: list[Span],
    mapping: Mapping,
    *,
    session_id: str,
    agent_name: str,
    truncated: bool = False,
) -> BuildResult:
    """Build the ATIF trajectory of one session from its spans with ``mapping``."""
    return _Builder(spans, mapping).build(session_id, agent_name, truncated)


class _Builder:
    def __init__(self, spans: list[Span], mapping: Mapping) -> None:
        self.m = mapping
        self.unread: list[str] = []
        ordered = _dedupe(sorted(spans, key=lambda s: (s.start_ns, s.span_id, s.trace_id)))
        self.by_id = {(s.trace_id, s.span_id): s for s in ordered}
        excluded = {id(s) for s in ordered if self._excluded(s)}
        self.spans = [s for s in ordered if id(s) not in excluded]
        self.excluded = len(ordered) - len(self.spans)
        self.kind = {id(s): self._kind(s) for s in self.spans}
        self.call_ids: Counter[str] = Counter()
        self._of_kind: dict[str, list[Span]] = {}

    # ------------------------------------------------------------------ the tree

    def _parent(self, span: Span) -> Span | None:
        if span.parent_span_id is None:
            return None
        return self.by_id.get((span.trace_id, span.parent_span_id))

    def _ancestors(self, span: Span) -> list[Span]:
        chain, seen, parent = [], {id(span)}, self._parent(span)
        while parent is not None and id(parent) not in seen:
            chain.append(parent)
            seen.add(id(parent))
            parent = self._parent(parent)
        return chain

    def _excluded(self, span: Span) -> bool:
        rules = self.m.exclude_spans
        return bool(rules) and any(
            _matches(s, rule) for s in (span, *self._ancestors(span)) for rule in rules
        )

    def _kind(self, span: Span) -> str | None:
        kinds = self.m.span_kinds
        for kind, rules in (("llm", kinds.llm), ("tool", kinds.tool), ("agent", kinds.agent)):
            if any(_matches(span, rule) for rule in rules):
                return kind
        return None

    def _nested(self, span: Span, kind: str) -> bool:
        """An LLM span inside an LLM span (two instrumentations of one call), or a tool span
        inside a tool span: the outer one stands for both."""
        return any(self.kind.get(id(a)) == kind for a in self._ancestors(span))

    def of_kind(self, kind: str) -> list[Span]:
        found = self._of_kind.get(kind)
        if found is None:
            found = [
                s for s in self.spans if self.kind[id(s)] == kind and not self._nested(s, kind)
            ]
            self._of_kind[kind] = found
        return found

    def _tops(self) -> list[Span]:
        return [s for s in self.spans if self._parent(s) is None]

    def _agents(self) -> list[Span]:
        return self.of_kind("agent")

    # ------------------------------------------------------------------ reading

    def note(self, span: Span, text: str) -> None:
        line = f"span {span.span_id}: {text}"
        if line not in self.unread:
            self.unread.append(line)

    def first(self, span: Span, rule: Any, *, report: bool = False) -> Any:
        value = _values.first(span.attributes, rule)
        if value is None and report and names(rule):
            self.note(span, f"{attributes_label(rule)} missing")
        return value

    def _number(self, span: Span, rule: Any, *, whole: bool, report: bool) -> int | float | None:
        value = self.first(span, rule, report=report)
        if value is None:
            return None
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                value = None
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            self.note(span, f"{label(rule)} is not a number of 0 or more")
            return None
        if whole:
            if value != int(value):
                self.note(span, f"{label(rule)} is not a whole number")
                return None
            return int(value)
        return value

    def _metrics(self, span: Span) -> dict[str, Any]:
        usage = self.m.llm.usage
        metrics: dict[str, Any] = {}
        for key, rule, report in (
            ("prompt_tokens", usage.prompt_tokens, True),
            ("completion_tokens", usage.completion_tokens, True),
            ("cached_tokens", usage.cached_tokens, False),
        ):
            value = self._number(span, rule, whole=True, report=report)
            if value is not None:
                metrics[key] = value
        cost = self._number(span, usage.cost_usd, whole=False, report=False)
        if cost is not None:
            metrics["cost_usd"] = cost
        extra = {}
        for key, rule in usage.extra.items():
            value = self._number(span, rule, whole=False, report=False)
            if value is not None:
                extra[key] = value
        cached, prompt = metrics.get("cached_tokens"), metrics.get("prompt_tokens")
        if cached is not None and prompt is not None and cached > prompt:
            self.note(
                span,
                f"cached tokens ({cached}) exceed prompt tokens ({prompt}); the prompt count "
                "must include them, so cached_tokens went to metrics.extra",
            )
            extra["cached_tokens"] = metrics.pop("cached_tokens")
        if extra:
            metrics["extra"] = extra
        return metrics

    def _arguments(self, span: Span, value: Any, where: str) -> dict[str, Any]:
        if value is None or value == "":
            return {}
        decoded, problem = _messages.decode_json(value)
        if problem:
            self.note(span, f"{where} {problem}; kept as text under 'value'")
            return {"value": value}
        if isinstance(decoded, dict):
            return decoded
        self.note(span, f"{where} is not a JSON object; kept under 'value'")
        return {"value": decoded}

    def _call(self, span: Span, call: _messages.Call, n: int) -> _Call:
        original = call.id
        if original is None:
            self.note(span, f"{call.where} has no tool call id; made one up")
        unique = self._unique(original or f"{span.span_id}-{n}")
        name = call.name
        if name is None:
            self.note(span, f"{call.where} has no function name")
            name = "unknown"
        return _Call(
            id=unique,
            original=original,
            name=name,
            arguments=self._arguments(span, call.arguments, f"{call.where} arguments"),
        )

    def source_value(self, source: AnswerSource, *, last: bool) -> str | None:
        return self.source_read(source, last=last)[0]

    def source_read(self, source: AnswerSource, *, last: bool) -> tuple[str | None, Span | None]:
        """An answer (or input) source's text and the span it came from."""
        if source.span == "last_llm":
            llms = self.of_kind("llm")
            if not llms:
                return None, None
            span = llms[-1]
            if source.attribute is None:
                out = self._output(span, report=False)
                return (out.text if out is not None else None), span
            value = self.first(span, source.attribute)
        else:
            pool = self._tops() if source.span == "root" else self._agents()
            if not pool:
                return None, None
            # the answer: the span that ended last (ties: the later one); the input: the first
            span = max(reversed(pool), key=lambda s: s.end_ns) if last else pool[0]
            value = self.first(span, source.attribute)
        if source.plain_text and _values.json_container(value):
            return None, span
        return _text(value), span

    def _output(self, span: Span, *, report: bool) -> Message | None:
        note = (lambda text: self.note(span, text)) if report else (lambda text: None)
        outputs = _messages.read(span, self.m.llm.output_messages, note, output=True)
        replies = [m for m in outputs if m.role in (None, "assistant", "model")]
        return replies[0] if replies else (outputs[0] if outputs else None)

    # ------------------------------------------------------------------ building

    def build(self, session_id: str, agent_name: str, truncated: bool) -> BuildResult:
        steps = self._span_steps()
        answer, answered_by = self._answer()
        if not steps:
            # An agent's own span (or none): its answer is the one agent step.
            self.unread.append("steps: no span is an LLM call or a tool (see span_kinds)")
            steps.append(
                _Step(
                    key=(0, "", 0, 0),
                    body={"source": "agent", "message": answer or "", "llm_call_count": 0},
                )
            )
        if not any(s.body["source"] == "user" for s in steps):
            self._input_step(steps)
        bodies = [{"step_id": i, **step.body} for i, step in enumerate(steps, start=1)]
        trajectory = self._document(bodies, session_id, agent_name, truncated)
        findings = [
            *self._span_findings(),
            *self._answer_findings(answer, answered_by),
            *self._result_findings(steps),
            *self._user_step_findings(steps),
        ]
        unread = self.unread
        if len(unread) > MAX_UNREAD:
            unread = [*unread[:MAX_UNREAD], f"... and {len(unread) - MAX_UNREAD} more"]
        return BuildResult(
            trajectory=trajectory,
            answer=answer,
            unread=unread,
            steps=len(bodies),
            truncated=truncated,
            spans=len(self.spans),
            excluded=self.excluded,
            findings=findings,
        )

    def _span_steps(self) -> list[_Step]:
        """The steps the LLM and tool spans give, in order: each LLM call with the prompt
        steps before it, the tool calls, and each call's observed result."""
        steps: list[_Step] = []
        seen: Counter[tuple[str, str]] = Counter()
        llm_steps: list[_Step] = []
        later_inputs: list[tuple[Span, list[Message]]] = []
        for span in self.of_kind("llm"):
            inputs = _messages.read(
                span, self.m.llm.input_messages, lambda t, s=span: self.note(s, t), output=False
            )
            if not inputs:
                self.note(
                    span,
                    f"input messages missing ({_messages.describe(self.m.llm.input_messages)})",
                )
            later_inputs.append((span, inputs))
            steps += self._prompt_steps(span, inputs, seen)
            step = self._llm_step(span)
            llm_steps.append(step)
            steps.append(step)
        steps += self._tool_steps(llm_steps)
        self._results_from_messages(llm_steps, later_inputs)
        for step in steps:
            if step.calls:
                self._observe(step)
        steps.sort(key=lambda s: s.key)
        return steps

    def _answer(self) -> tuple[str | None, tuple[int, AnswerSource, Span | None] | None]:
        """The final answer from the first of the mapping's answer sources that gives one,
        and which source (its place, itself, the span read); a note when none does."""
        for i, source in enumerate(self.m.answer):
            answer, span = self.source_read(source, last=True)
            if answer:
                return answer, (i, source, span)
        self.unread.append(
            "answer: no answer source gave a value ("
            + "; ".join(_describe_source(s) for s in self.m.answer)
            + ")"
        )
        return None, None

    # ------------------------------------------------------------------ findings

    def _span_findings(self) -> list[Finding]:
        if self.spans and all(self.kind[id(s)] is None for s in self.spans):
            return [self._nothing_read()]
        missed: dict[tuple[str, str], list[Span]] = {}
        for span in self.spans:
            marked = convention_kind(span)
            if marked is not None and self.kind[id(span)] is None:
                missed.setdefault((marked[1], marked[2]), []).append(span)
        findings = []
        for (kind, marker), spans in missed.items():
            what = {"llm": "LLM calls", "tool": "tool executions", "agent": "agent runs"}[kind]
            findings.append(
                Finding(
                    "unclassified-span",
                    spans[0].span_id,
                    marker.split("=", 1)[0],
                    f"{len(spans)} span(s) marked {marker}, which its convention uses for "
                    f"{what}, match no span_kinds.{kind} rule, so the trajectory leaves them "
                    f'out; add {{"attribute": "{marker.split("=", 1)[0]}", "values": '
                    f'["{marker.split("=", 1)[1]}"]}} to span_kinds.{kind}',
                )
            )
        return findings

    def _nothing_read(self) -> Finding:
        seen = kinds_by_convention(self.spans)
        if seen:
            hint = (
                "they follow the " + " and ".join(seen) + " convention(s): use that starter "
                f"(`evalkit agents mapping starter {next(iter(seen))}`) or `auto`"
            )
        else:
            hint = (
                "add span_kinds rules matching their names or attributes (see `evalkit traces "
                "show`)"
            )
        return Finding(
            "nothing-read",
            None,
            "span_kinds",
            f"the mapping classifies none of the session's {len(self.spans)} spans as an LLM "
            f"call, a tool or an agent, so it read nothing from them; {hint}",
        )

    def _answer_findings(
        self, answer: str | None, answered_by: tuple[int, AnswerSource, Span | None] | None
    ) -> list[Finding]:
        if answer is None or answered_by is None or not _values.json_container(answer):
            return []
        index, source, span = answered_by
        llms = self.of_kind("llm")
        reply = self._output(llms[-1], report=False) if llms else None
        if reply is None or not reply.text or _values.json_container(reply.text):
            return []
        return [
            Finding(
                "answer-is-json",
                span.span_id if span is not None else None,
                label(source.attribute) or "the last LLM reply",
                f"the answer (answer[{index}], {_describe_source(source)}) is a JSON "
                f"{'object' if answer.lstrip().startswith('{') else 'list'} of "
                f"{len(answer)} characters, while the last LLM reply is text; add "
                f'"plain_text": true to answer[{index}] so that a JSON value is skipped and a '
                'later source ({"span": "last_llm"}) gives the answer',
            )
        ]

    def _result_findings(self, steps: list[_Step]) -> list[Finding]:
        findings = []
        for step in steps:
            for call in step.calls:
                path = envelope_path(call.result) if call.answered else None
                if path is None or call.result_from is None:
                    continue
                span_id, name = call.result_from
                attribute = name if isinstance(name, str) else label(name)
                fix = (
                    f'read the text with {{"attribute": "{attribute}", "path": "{path}"}} in '
                    "tool.result"
                    if isinstance(name, str) and name in names(self.m.tool.result)
                    else "read the tool spans' result attribute at that path (tool.result)"
                )
                findings.append(
                    Finding(
                        "tool-result-envelope",
                        span_id,
                        attribute,
                        f"the result of tool call {call.id} ({call.name}) is a JSON envelope "
                        f"around the tool's text, which is at {path!r}; {fix}",
                    )
                )
        return findings

    def _user_step_findings(self, steps: list[_Step]) -> list[Finding]:
        findings = []
        for step in steps:
            if step.body["source"] != "user" or step.body.get("message"):
                continue
            findings.append(
                Finding(
                    "empty-user-step",
                    step.span.span_id if step.span is not None else None,
                    step.where or "llm.input_messages",
                    "a user message with no text made a user step (tool results sent back "
                    'as a user message do this); add "drop_empty": true to its '
                    "llm.input_messages source, so that such a message counts for its tool "
                    "results only",
                )
            )
        return findings

    def _prompt_steps(
        self, span: Span, inputs: list[Message], seen: Counter[tuple[str, str]]
    ) -> list[_Step]:
        """System and user messages this call is the first to send."""
        steps = []
        here: Counter[tuple[str, str]] = Counter()
        for msg in inputs:
            if msg.role not in ("system", "user"):
                continue
            key = (msg.role, msg.text or "")
            here[key] += 1
            if here[key] <= seen[key]:
                continue
            seen[key] += 1
            steps.append(
                _Step(
                    key=(span.start_ns, span.span_id, 0, len(steps)),
                    body={
                        "timestamp": _iso(span.start_ns),
                        "source": msg.role,
                        "message": msg.text or "",
                        "extra": {"span_id": span.span_id},
                    },
                    span=span,
                    where=msg.where,
                )
            )
        return steps

    def _llm_step(self, span: Span) -> _Step:
        out = self._output(span, report=True)
        if out is None:
            self.note(
                span,
                f"output messages missing ({_messages.describe(self.m.llm.output_messages)})",
            )
        elif out.text is None and not out.calls:
            self.note(span, f"{out.where} has neither text nor tool calls")
        body: dict[str, Any] = {"timestamp": _iso(span.end_ns), "source": "agent"}
        model = self.first(span, self.m.llm.model, report=True)
        if model is not None:
            body["model_name"] = _text(model)
        body["message"] = (out.text if out else None) or ""
        reasoning = out.reasoning if out else None
        reasoning = reasoning or _text(self.first(span, self.m.llm.reasoning))
        if reasoning:
            body["reasoning_content"] = reasoning
        calls = [self._call(span, c, n) for n, c in enumerate(out.calls if out else [])]
        metrics = self._metrics(span)
        if metrics:
            body["metrics"] = metrics
        body["llm_call_count"] = 1
        body["extra"] = {"span_id": span.span_id}
        return _Step(key=(span.start_ns, span.span_id, 1, 0), body=body, calls=calls, span=span)

    def _tool_steps(self, llm_steps: list[_Step]) -> list[_Step]:
        """Match each tool span to the call it answers; the rest become steps of their own."""
        steps = []
        tool = self.m.tool
        index = _CallIndex(llm_steps)
        for span in self.of_kind("tool"):
            name = _text(self.first(span, tool.name, report=True))
            call_id = _text(self.first(span, tool.call_id))
            result_name, result = _values.first_named(span.attributes, tool.result)
            if result is None and span.status_code == 2:
                result = f"error: {_error_text(span)}"
            where = (span.span_id, result_name) if result_name is not None else None
            call = self._match_call(span, index, call_id, name)
            if call is not None:
                if result is not None:
                    call.result, call.answered, call.result_from = result, True, where
                continue
            if result is None and names(tool.result):
                self.note(span, f"{attributes_label(tool.result)} missing")
            where = label(tool.arguments) or "tool arguments"
            own = _Call(
                id=self._unique(call_id or span.span_id),
                original=call_id,
                name=name or span.name,
                arguments=self._arguments(span, self.first(span, tool.arguments), where),
            )
            own.result, own.answered, own.result_from = result, result is not None, where
            steps.append(
                _Step(
                    key=(span.start_ns, span.span_id, 1, 0),
                    body={
                        "timestamp": _iso(span.end_ns),
                        "source": "agent",
                        "message": "",
                        "llm_call_count": 0,
                        "extra": {"span_id": span.span_id},
                    },
                    calls=[own],
                    span=span,
                )
            )
        return steps

    def _unique(self, base: str) -> str:
        self.call_ids[base] += 1
        return base if self.call_ids[base] == 1 else f"{base}#{self.call_ids[base]}"

    def _match_call(
        self, span: Span, index: _CallIndex, call_id: str | None, name: str | None
    ) -> _Call | None:
        """The call a tool span answers: by call id when an LLM call has that id, else by
        function name; in the latest LLM call started before the tool span that still waits
        for such a result."""
        before = bisect.bisect_right(index.starts, span.start_ns)
        if call_id is not None and call_id in index.by_id:
            for step, call in reversed(index.by_id[call_id]):
                if step < before and not call.answered:
                    return call
            return None
        if name is None or name not in index.by_name:
            return None
        entries = index.by_name[name]
        found = None
        for k in range(bisect.bisect_left(index.name_steps[name], before) - 1, -1, -1):
            step, call = entries[k]
            if found is not None and step != found[0]:
                break
            if not call.answered:
                found = (step, call)  # keep going: the first such call of that step
        return None if found is None else found[1]

    def _results_from_messages(
        self, llm_steps: list[_Step], inputs: list[tuple[Span, list[Message]]]
    ) -> None:
        """Calls no tool span answered: look for a tool message in a later call's input."""
        for index, step in enumerate(llm_steps):
            for call in step.calls:
                if call.answered or call.original is None:
                    continue
                for span, msgs in inputs[index + 1 :]:
                    found = [r for m in msgs for r in m.results if r.call_id == call.original]
                    if found:
                        call.result, call.answered = found[0].content, True
                        call.result_from = (span.span_id, found[0].where)
                        break

    def _observe(self, step: _Step) -> None:
        step.body["tool_calls"] = [
            {"tool_call_id": c.id, "function_name": c.name, "arguments": c.arguments}
            for c in step.calls
        ]
        results = []
        for call in step.calls:
            if not call.answered:
                if step.span is not None and step.body.get("llm_call_count") == 1:
                    self.note(
                        step.span,
                        f"no result for tool call {call.id} ({call.name}): no tool span "
                        "answers it and no later LLM call sent its result",
                    )
                continue
            results.append({"source_call_id": call.id, "content": _content(call.result)})
        if results:
            step.body["observation"] = {"results": results}
        # keep the step's keys in ATIF's order: observation and metrics after the calls
        for key in ("metrics", "llm_call_count", "extra"):
            if key in step.body:
                step.body[key] = step.body.pop(key)

    def _input_step(self, steps: list[_Step]) -> None:
        """No LLM call carried a user message: the user's request from ``input``."""
        for source in self.m.input:
            text = self.source_value(source, last=False)
            if not text:
                continue
            pool = self._tops() if source.span == "root" else self._agents()
            span = pool[0] if pool else None
            lead = 0
            while lead < len(steps) and steps[lead].body["source"] == "system":
                lead += 1
            body: dict[str, Any] = {"source": "user", "message": text}
            if span is not None:
                body = {"timestamp": _iso(span.start_ns), **body}
                body["extra"] = {"span_id": span.span_id}
            steps.insert(lead, _Step(key=(0, "", 0, 0), body=body, span=span))
            return

    def _document(
        self, steps: list[dict[str, Any]], session_id: str, agent_name: str, truncated: bool
    ) -> dict[str, Any]:
        version = None
        tops = self._tops()
        for span in [*self._agents()[:1], *tops[:1]]:
            value = _values.first(span.attributes, self.m.agent_version)
            if value is None:
                value = _values.first(span.resource, self.m.agent_version)
            if value is not None:
                version = _text(value)
                break
        agent: dict[str, Any] = {"name": agent_name, "version": version or "unknown"}
        models = [s["model_name"] for s in steps if s.get("model_name")]
        if models:
            agent["model_name"] = models[0]
        doc: dict[str, Any] = {
            "schema_version": LATEST_SCHEMA_VERSION,
            "session_id": session_id,
            "agent": agent,
            "steps": steps,
        }
        if truncated:
            doc["notes"] = TRUNCATED_NOTE
        doc["final_metrics"] = _final_metrics(steps)
        doc["extra"] = {
            "evalkit": {
                "built_from": "otel",
                "spans": len(self.spans),
                "spans_excluded": self.excluded,
                "truncated": truncated,
            }
        }
        return doc


# --------------------------------------------------------------------------- helpers


def _dedupe(spans: list[Span]) -> list[Span]:
    """One span per (trace id, span id); of differing copies, the same one whatever the
    input order (the smallest encoding)."""
    kept: dict[tuple[str, str], Span] = {}
    for span in spans:
        key = (span.trace_id, span.span_id)
        other = kept.get(key)
        if other is None or _encoded(span) < _encoded(other):
            kept[key] = span
    return sorted(kept.values(), key=lambda s: (s.start_ns, s.span_id, s.trace_id))


def _encoded(span: Span) -> bytes:
    return msgspec.json.encode(span)


def _matches(span: Span, rule: SpanMatch) -> bool:
    if rule.name is not None and not fnmatch.fnmatchcase(span.name, rule.name):
        return False
    if rule.attribute is not None:
        if rule.attribute not in span.attributes:
            return False
        if rule.values is not None:
            value = span.attributes[rule.attribute]
            return any(_values.same(value, v) for v in rule.values)
    return True


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _content(value: Any) -> str:
    return _text(value) or ""


def _error_text(span: Span) -> str:
    for ev in span.events:
        if ev.name == "exception":
            message = ev.attributes.get("exception.message")
            kind = ev.attributes.get("exception.type")
            if message or kind:
                return ": ".join(str(x) for x in (kind, message) if x)
    return span.status_message or "the tool failed"


def _describe_source(source: AnswerSource) -> str:
    where = {"root": "the root span", "agent": "the agent span", "last_llm": "the last LLM call"}
    attribute = label(source.attribute) or "its reply"
    return f"{where[source.span]}: {attribute}"


def _iso(ns: int) -> str:
    seconds, rest = divmod(ns, 1_000_000_000)
    stamp = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{rest // 1000:06d}Z"


def _final_metrics(steps: list[dict[str, Any]]) -> dict[str, Any]:
    totals: dict[str, Any] = {}
    for key, total in (
        ("prompt_tokens", "total_prompt_tokens"),
        ("completion_tokens", "total_completion_tokens"),
        ("cached_tokens", "total_cached_tokens"),
        ("cost_usd", "total_cost_usd"),
    ):
        values = [s["metrics"][key] for s in steps if key in s.get("metrics", {})]
        if values:
            totals[total] = round(sum(values), 10) if key == "cost_usd" else sum(values)
    totals["total_steps"] = len(steps)
    return totals
