"""Remote evaluators: one POST per named evaluator to a Custom Evaluator API endpoint.

A case selects one with ``evaluators.custom.<name>: <config>``; the run's agent's workspace
must have a remote evaluator of that name (``evalkit evaluators create``). :func:`evaluate`
sends :class:`~evalkit.model.evaluator_api.EvaluateRequest` (the config verbatim, the case,
the answer, the output and the ATIF trajectory) and reads back one or more named scores.

One attempt per run, within the evaluator's timeout (the whole call, connection to last
byte). Failures, timeouts and answers that break the contract are recorded on the scores,
never raised; ``evalkit evaluate`` scores again.

Score names: a score named like its evaluator keeps that name; any other is
``<evaluator>.<score name>``, so two evaluators never write the same name.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from typing import Any

import httpx
import msgspec

from evalkit.auth.secrets import SecretBox, hide
from evalkit.cases.model import canonical_json
from evalkit.errors import EvalkitError
from evalkit.model.evaluator_api import API_VERSION, Score
from evalkit.outbound import once_more_if_dropped
from evalkit.scoring.model import RunContext, ScoreItem
from evalkit.store import evaluators as store

__all__ = ["RemoteEvaluator", "build_request", "evaluate", "load_evaluators", "score_name"]

MAX_REPLY_BYTES = 4 * 2**20
MAX_SCORES = 100
MAX_SCORE_NAME = 100
MAX_EXPLANATION = 10_000


@dataclass(frozen=True, slots=True)
class RemoteEvaluator:
    """A remote evaluator ready to call; ``api_key`` is in clear (never shown by repr),
    ``key_error`` says why a stored key could not be read."""

    name: str
    workspace: str
    endpoint: str
    kind: str = "score"
    """``score`` or ``gauge``: the kind of its scores when they do not say."""
    timeout: float = 30.0
    api_key: str | None = field(default=None, repr=False)
    key_error: str | None = None


async def load_evaluators(
    conn: Any, box: SecretBox, workspace_id: int
) -> dict[str, RemoteEvaluator]:
    """The workspace's remote evaluators by name, with their keys decrypted."""
    found: dict[str, RemoteEvaluator] = {}
    for target in await store.scoring_targets(conn, workspace_id):
        key: str | None = None
        key_error: str | None = None
        if target.api_key is not None:
            try:
                key = box.decrypt(target.api_key, store.key_context(target.id))
            except EvalkitError as exc:
                key_error = (
                    f"the key of evaluator {target.name}@{target.workspace} cannot be read: "
                    f"{exc.message}"
                )
        found[target.name] = RemoteEvaluator(
            name=target.name,
            workspace=target.workspace,
            endpoint=target.endpoint,
            kind=target.kind,
            timeout=target.timeout,
            api_key=key,
            key_error=key_error,
        )
    return found


def score_name(evaluator: str, name: str) -> str:
    """The stored name of score ``name`` from ``evaluator``."""
    return evaluator if name == evaluator else f"{evaluator}.{name}"


def build_request(ctx: RunContext, name: str, config: Any) -> dict[str, Any]:
    """The Custom Evaluator API request for one run (an ``EvaluateRequest``) as JSON-ready
    builtins, with nullable fields sent as explicit nulls. When the harness sent only
    structured output, the answer is that output as canonical JSON."""
    case = ctx.case or {}
    answer = ctx.answer
    if answer is None and ctx.output is not None:
        answer = canonical_json(ctx.output).decode()
    return {
        "api_version": API_VERSION,
        "evaluator": name,
        "config": config,
        "case": {
            "id": ctx.case_id,
            "input": case.get("input") or {},
            "expected": case.get("expected"),
            "tags": list(case.get("tags") or []),
            "metadata": dict(case.get("metadata") or {}),
        },
        "run": {
            "id": str(ctx.run_id),
            "answer": answer,
            "output": ctx.output,
            # the stored ATIF (validated when it was collected; explicit nulls left out)
            "trajectory": ctx.trajectory,
            "model": ctx.model,
            "experiment_id": ctx.experiment_id,
            "repetition": ctx.repetition,
        },
    }


class _Reply(msgspec.Struct):
    scores: list[Any]


_reply_decoder = msgspec.json.Decoder(_Reply)


def _snippet(body: bytes) -> str:
    try:
        data = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return " ".join(body[:300].decode(errors="replace").split()) or "(empty body)"
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:300]
        for key in ("error", "message", "detail"):
            if isinstance(data.get(key), str):
                return str(data[key])[:300]
    return " ".join(body[:300].decode(errors="replace").split())


async def _post(
    http: httpx.AsyncClient, evaluator: RemoteEvaluator, body: dict[str, Any]
) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if evaluator.api_key:
        headers["Authorization"] = f"Bearer {evaluator.api_key}"
    async with http.stream(
        "POST",
        evaluator.endpoint,
        content=msgspec.json.encode(body),
        headers=headers,
        timeout=evaluator.timeout,
    ) as response:
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > MAX_REPLY_BYTES:
                raise _Refused(f"the answer is over {MAX_REPLY_BYTES} bytes; not read")
            chunks.append(chunk)
        return response.status_code, hide(b"".join(chunks), evaluator.api_key)


class _Refused(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _check_name(raw: Any) -> str | None:
    """A usable score name, or None."""
    if not isinstance(raw, str):
        return None
    name = raw.strip()
    if not name or len(name) > MAX_SCORE_NAME or any(not c.isprintable() for c in name):
        return None
    return name


def _read_scores(name: str, default_kind: str, raw: bytes) -> list[ScoreItem]:
    """The scores in a 200 answer; every entry that breaks the contract becomes an error
    score (named after the entry when it has a usable name, else after the evaluator)."""
    try:
        reply = _reply_decoder.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise _Refused(
            f"the answer breaks the Custom Evaluator API (an object with a list of scores): {exc}"
        ) from None
    if not reply.scores:
        raise _Refused("the answer has no scores: send at least one (score: null = no reading)")
    reader = _ScoreReader(name, default_kind)
    for index, entry in enumerate(reply.scores[:MAX_SCORES]):
        reader.read(index, entry)
    if len(reply.scores) > MAX_SCORES:
        reader.problems.append(
            f"{len(reply.scores) - MAX_SCORES} scores past the first {MAX_SCORES} were left out"
        )
    return reader.scores()


def _stored_kind(kind: str | None) -> str:
    """A score's kind as stored: ``gauge``, else ``evaluator`` (the API's ``score``)."""
    return "gauge" if kind == "gauge" else "evaluator"


@dataclass
class _ScoreReader:
    """The entries of one answer read into scores by full name, and the problems found in
    them, which end up on the evaluator's own score."""

    name: str
    default_kind: str
    items: dict[str, ScoreItem] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def evaluator(self) -> str:
        return f"remote:{self.name}"

    @property
    def kind(self) -> str:
        return _stored_kind(self.default_kind)

    def read(self, index: int, entry: Any) -> None:
        raw_name = entry.get("name") if isinstance(entry, dict) else None
        entry_name = _check_name(raw_name)
        try:
            score = msgspec.convert(entry, Score)
        except msgspec.ValidationError as exc:
            self._broken(index, raw_name, entry_name, exc)
            return
        if entry_name is None:
            self.problems.append(
                f"score #{index + 1}: the name must be 1 to {MAX_SCORE_NAME} printable characters"
            )
            return
        if score.score is not None and not math.isfinite(score.score):
            self.problems.append(f"score {entry_name!r}: not a finite number")
            return
        full = score_name(self.name, entry_name)
        if full in self.items:
            self.problems.append(f"score {entry_name!r} appears twice; the first one was kept")
            return
        explanation = score.explanation
        if explanation is not None and len(explanation) > MAX_EXPLANATION:
            explanation = explanation[:MAX_EXPLANATION] + " [cut]"
        self.items[full] = ScoreItem(
            name=full,
            value=None if score.score is None else float(score.score),
            kind=_stored_kind(score.kind or self.default_kind),
            explanation=explanation,
            evaluator=self.evaluator,
        )

    def _broken(
        self, index: int, raw_name: Any, entry_name: str | None, exc: msgspec.ValidationError
    ) -> None:
        """An entry that is not a score: an error score under its name when it has a usable
        one (the first such entry of a name wins), else a problem."""
        label = repr(raw_name) if entry_name else f"#{index + 1}"
        if entry_name is None:
            self.problems.append(f"score {label}: {exc}")
            return
        full = score_name(self.name, entry_name)
        if full not in self.items:
            self.items[full] = ScoreItem(
                name=full,
                value=None,
                kind=self.kind,
                error=f"score {label} breaks the Custom Evaluator API: {exc}",
                evaluator=self.evaluator,
            )

    def scores(self) -> list[ScoreItem]:
        """The scores, the problems noted on the evaluator's own score: in its explanation
        when it is a reading (a reading stays a reading), else in its error."""
        if self.problems:
            note = "; ".join(self.problems)
            first = self.items.get(self.name)
            if first is not None and first.value is not None:
                text = f"{first.explanation} ({note})" if first.explanation else note
                self.items[self.name] = msgspec.structs.replace(first, explanation=text)
            elif first is not None:
                error = f"{first.error}; {note}" if first.error else note
                self.items[self.name] = msgspec.structs.replace(first, error=error)
            else:
                self.items[self.name] = ScoreItem(
                    name=self.name,
                    value=None,
                    kind=self.kind,
                    error=f"the answer breaks the Custom Evaluator API: {note}",
                    evaluator=self.evaluator,
                )
        return list(self.items.values())


async def evaluate(
    ctx: RunContext,
    name: str,
    config: Any,
    *,
    evaluator: RemoteEvaluator,
    http: httpx.AsyncClient,
) -> list[ScoreItem]:
    """Score one run with the remote evaluator ``name``. Never raises."""
    kind = _stored_kind(evaluator.kind)

    def failed(message: str) -> list[ScoreItem]:
        return [
            ScoreItem(name=name, value=None, kind=kind, error=message, evaluator=f"remote:{name}")
        ]

    if evaluator.key_error:
        return failed(evaluator.key_error)
    try:
        body = build_request(ctx, name, config)
        async with asyncio.timeout(evaluator.timeout):
            status, raw = await once_more_if_dropped(lambda: _post(http, evaluator, body))
        if status != 200:
            return failed(
                f"the evaluator at {evaluator.endpoint} answered {status}: {_snippet(raw)}"
            )
        return _read_scores(name, evaluator.kind, raw)
    except (TimeoutError, httpx.TimeoutException):
        return failed(
            f"the evaluator at {evaluator.endpoint} did not answer within {evaluator.timeout:g} s "
            "(its timeout, set with --timeout when it was created)"
        )
    except httpx.TransportError as exc:
        return failed(
            f"cannot reach the evaluator at {evaluator.endpoint} ({type(exc).__name__}: {exc})"
        )
    except _Refused as exc:
        return failed(exc.message)
    except EvalkitError as exc:  # the egress policy refused the endpoint
        return failed(exc.message)
    except Exception as exc:  # never fatal: a bug here must not lose the run's other scores
        return failed(f"the evaluator client failed: {type(exc).__name__}: {exc}")
