"""The LLM judge: a case's ``judge.rubric`` graded by an OpenAI-compatible chat model.

One call of :func:`grade` sends one chat completion request (``POST {base_url}/chat/
completions``) built from the documented prompt (:mod:`evalkit.scoring.judge_prompt`;
``docs/judge.md`` shows it verbatim) and reads back a structured verdict,
``{"reasoning": str, "score": 0..1}``, parsed strictly (:class:`Verdict`).

What it does when the answer is not usable:

- A reply that cannot be read (not JSON, wrong shape, score out of range) is retried in the
  same conversation with a note saying what was wrong, at most ``malformed_attempts``
  replies in all.
- 429, 408 and 5xx answers and transport failures (no connection, timeout) are retried with
  exponential backoff, honouring ``Retry-After``, at most ``attempts`` requests in all.
- One run's grading stops at ``budget`` seconds, retries included.
- A 400 naming ``response_format`` (a proxy without structured outputs), or a reply in
  prose where JSON was required (a proxy that drops the field), switches to plain mode: no
  ``response_format``, and the prompt ends with :data:`PLAIN_JSON_INSTRUCTION`. The switch
  is remembered per (base URL, model) for the life of the process. A 400 naming
  ``temperature`` (reasoning models take only their default) drops ``temperature: 0`` the
  same way.
- Anything else (401, 404, a refusal, a URL the egress policy refuses) is recorded at once.

:func:`grade` never raises: a failure is a :class:`ScoreItem` with ``value`` None and
``error`` saying what happened.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import httpx
import msgspec

from evalkit.auth.secrets import SecretBox, hide
from evalkit.cases.model import JudgeConfig
from evalkit.errors import EvalkitError
from evalkit.outbound import once_more_if_dropped
from evalkit.scoring.judge_prompt import (
    CORRECTION_TEMPLATE,
    NO_STEPS,
    PLAIN_JSON_INSTRUCTION,
    PROMPT_HASH,
    RESPONSE_FORMAT,
    RESPONSE_SCHEMA,
    STEPS_TEMPLATE,
    SYSTEM_PROMPT,
    USER_TEMPLATE,
    Example,
    Unreadable,
    Verdict,
    build_messages,
    examples_hash,
    parse_verdict,
    render_trajectory,
)
from evalkit.scoring.model import RunContext, ScoreItem
from evalkit.store import judges

__all__ = [
    "CORRECTION_TEMPLATE",
    "JUDGE_VERSION",
    "NO_STEPS",
    "PLAIN_JSON_INSTRUCTION",
    "PROMPT_HASH",
    "RESPONSE_SCHEMA",
    "SCORE_NAME",
    "STEPS_TEMPLATE",
    "SYSTEM_PROMPT",
    "USER_TEMPLATE",
    "JudgeSetup",
    "Verdict",
    "build_messages",
    "grade",
    "load_judge",
    "no_judge_item",
    "parse_verdict",
    "render_trajectory",
]

SCORE_NAME = "judge"
"""The name of the judge's score on a run."""
EVALUATOR = "judge"
JUDGE_VERSION = "1"

DEFAULT_TIMEOUT = 120.0
"""Seconds one chat completion request may take."""
DEFAULT_ATTEMPTS = 4
"""Requests in all when the provider answers 429/5xx or cannot be reached."""
DEFAULT_MALFORMED_ATTEMPTS = 3
"""Replies in all when a reply cannot be read."""
DEFAULT_BACKOFF = 1.0
"""Seconds before the first retry; doubled each time, up to ``MAX_BACKOFF``."""
MAX_BACKOFF = 30.0
MAX_RETRY_AFTER = 60.0
DEFAULT_BUDGET = 600.0
"""Seconds one run's grading may take in all, retries included; then it gives up."""
"""The longest ``Retry-After`` honoured; a longer one is cut to this."""
MAX_REPLY_BYTES = 4 * 2**20

# --------------------------------------------------------------------------- the setup


@dataclass(frozen=True, slots=True)
class JudgeSetup:
    """Which model judges and how the client behaves. ``api_key`` is in clear (never shown
    by repr); ``key_error`` says why a stored key could not be read."""

    provider: str
    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    key_error: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    attempts: int = DEFAULT_ATTEMPTS
    malformed_attempts: int = DEFAULT_MALFORMED_ATTEMPTS
    backoff: float = DEFAULT_BACKOFF
    max_backoff: float = MAX_BACKOFF
    max_retry_after: float = MAX_RETRY_AFTER
    budget: float = DEFAULT_BUDGET

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"


async def load_judge(conn: Any, box: SecretBox, model_override: str | None) -> JudgeSetup | None:
    """The server's default judge (``evalkit judge-default set``), with the provider's key
    decrypted; ``model_override`` (a case's ``judge.model``) replaces the model. None when
    no default judge is set."""
    target = await judges.default_judge_target(conn)
    if target is None:
        return None
    key: str | None = None
    key_error: str | None = None
    if target.api_key is not None:
        try:
            key = box.decrypt(target.api_key, judges.key_context(target.provider_id))
        except EvalkitError as exc:
            key_error = f"the key of LLM provider {target.provider} cannot be read: {exc.message}"
    return JudgeSetup(
        provider=target.provider,
        base_url=target.base_url,
        model=model_override or target.model,
        api_key=key,
        key_error=key_error,
    )


NO_JUDGE_ERROR = (
    "no default judge is set, so the case's judge rubric was not graded: an admin sets one "
    "with `evalkit llm-providers create` and `evalkit judge-default set --provider NAME "
    "--model MODEL`, then `evalkit evaluate` re-scores"
)


def no_judge_item(model: str | None = None) -> ScoreItem:
    """The score to record when :func:`load_judge` found no default judge."""
    return ScoreItem(
        name=SCORE_NAME,
        value=None,
        error=NO_JUDGE_ERROR,
        evaluator=EVALUATOR,
        evaluator_version=JUDGE_VERSION,
        judge_model=model,
        prompt_hash=PROMPT_HASH,
    )


# --------------------------------------------------------------------------- the call

_PLAIN_ONLY: set[tuple[str, str]] = set()
"""(base URL, model) pairs that refused or ignored ``response_format`` in this process."""
_DEFAULT_TEMPERATURE: set[tuple[str, str]] = set()
"""(base URL, model) pairs that refused ``temperature: 0`` (reasoning models take only
their default) in this process."""

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504, 520, 522, 524, 529})


class _Failed(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _Completion(msgspec.Struct):
    choices: list[_Choice]


class _Choice(msgspec.Struct):
    message: _Message
    finish_reason: str | None = None


class _Message(msgspec.Struct):
    content: str | list[Any] | None = None
    refusal: str | None = None


_completion_decoder = msgspec.json.Decoder(_Completion)


def _retry_after(headers: httpx.Headers) -> float | None:
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def _delay(judge: JudgeSetup, failures: int, retry_after: float | None) -> float:
    if retry_after is not None:
        return min(retry_after, judge.max_retry_after)
    base = min(judge.backoff * 2 ** (failures - 1), judge.max_backoff)
    return base + random.uniform(0, base / 4)


def _snippet(body: bytes) -> str:
    """The message of an OpenAI-style error body, or the start of the body."""
    try:
        data = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return " ".join(body[:300].decode(errors="replace").split()) or "(empty body)"
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:300]
        if isinstance(error, str):
            return error[:300]
        if data.get("message"):
            return str(data["message"])[:300]
    return " ".join(body[:300].decode(errors="replace").split())


def _refused_parameter(body: bytes) -> str | None:
    """The request parameter a 400 answer blames: ``response_format`` or ``temperature``."""
    text = body[:4000].decode(errors="replace").lower()
    if any(word in text for word in ("response_format", "json_schema", "structured output")):
        return "response_format"
    if "temperature" in text:
        return "temperature"
    return None


_HINTS = {
    401: "the provider refused the key: check the key of the LLM provider",
    403: "the provider refused the key or the model: check the LLM provider's key",
    404: "no such model or URL: check the model name and the provider's base URL (it "
    "usually ends in /v1)",
}


def _content_text(content: str | list[Any] | None) -> str | None:
    if content is None or isinstance(content, str):
        return content
    texts = [str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p]
    return "".join(texts)


def _read_completion(raw: bytes) -> tuple[str | None, str | None, bool]:
    """(content, refusal, cut short) of a chat completion's first choice."""
    try:
        completion = _completion_decoder.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise Unreadable(f"the reply is not a chat completion: {exc}") from None
    if not completion.choices:
        raise Unreadable("the chat completion has no choices")
    choice = completion.choices[0]
    content = _content_text(choice.message.content)
    return content, choice.message.refusal, choice.finish_reason == "length"


async def _post(
    http: httpx.AsyncClient, judge: JudgeSetup, body: dict[str, Any], timeout: float
) -> tuple[int, httpx.Headers, bytes]:
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if judge.api_key:
        headers["Authorization"] = f"Bearer {judge.api_key}"
    async with http.stream(
        "POST", judge.url, content=msgspec.json.encode(body), headers=headers, timeout=timeout
    ) as response:
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > MAX_REPLY_BYTES:
                raise _Failed(f"the judge's reply is over {MAX_REPLY_BYTES} bytes; not read")
            chunks.append(chunk)
        return response.status_code, response.headers, hide(b"".join(chunks), judge.api_key)


@dataclass
class _Conversation:
    """One run's exchange with the judge: what the next request asks, and what each failed
    answer changes (the parameters the provider refuses, a correction to an unreadable
    reply), within the run's budget and the judge's attempts."""

    ctx: RunContext
    config: JudgeConfig
    judge: JudgeSetup
    examples: tuple[Example, ...]
    deadline: float
    plain: bool
    temperature: bool
    messages: list[dict[str, Any]] = field(default_factory=list)
    failures: int = 0
    unreadable: int = 0

    @classmethod
    def start(
        cls, ctx: RunContext, config: JudgeConfig, judge: JudgeSetup, examples: tuple[Example, ...]
    ) -> _Conversation:
        pair = (judge.base_url, judge.model)
        talk = cls(
            ctx,
            config,
            judge,
            examples,
            deadline=time.monotonic() + judge.budget,
            plain=pair in _PLAIN_ONLY,
            temperature=pair not in _DEFAULT_TEMPERATURE,
        )
        talk.messages = build_messages(ctx, config, plain=talk.plain, examples=examples)
        return talk

    @property
    def pair(self) -> tuple[str, str]:
        return (self.judge.base_url, self.judge.model)

    def next_timeout(self) -> float:
        """The next request's timeout: the judge's, cut to what is left of the budget."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise _Failed(
                f"the judge gave no usable answer within {self.judge.budget:g} s (the budget "
                "for one run)"
            )
        return min(self.judge.timeout, left)

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.judge.model, "messages": self.messages}
        if self.temperature:
            body["temperature"] = 0
        if not self.plain:
            body["response_format"] = RESPONSE_FORMAT
        return body

    async def after_no_answer(self, exc: httpx.HTTPError, timeout: float) -> None:
        """A timeout or a transport failure: wait to ask again, or fail past the attempts."""
        self.failures += 1
        if isinstance(exc, httpx.TimeoutException):
            what = f"no answer within {timeout:g} s"
        else:
            what = f"cannot reach {self.judge.url} ({type(exc).__name__}: {exc})"
        if self.failures >= self.judge.attempts:
            raise _Failed(f"the judge failed {self.failures} times; the last: {what}") from None
        await self._wait(_delay(self.judge, self.failures, None), what)

    async def after_refusal(self, status: int, headers: httpx.Headers, raw: bytes) -> None:
        """An answer other than 200: drop the parameter a 400 blames, or wait to ask again
        after a passing failure; fail on any other."""
        refused = _refused_parameter(raw) if status == 400 else None
        if refused == "response_format" and not self.plain:
            self._go_plain()
            return
        if refused == "temperature" and self.temperature:
            self.temperature = False
            _DEFAULT_TEMPERATURE.add(self.pair)
            return
        if status not in RETRY_STATUSES:
            hint = _HINTS.get(status)
            tail = f" ({hint})" if hint else ""
            raise _Failed(f"the judge answered {status}: {_snippet(raw)}{tail}")
        self.failures += 1
        if self.failures >= self.judge.attempts:
            raise _Failed(
                f"the judge answered {status} {self.failures} times; the last said: {_snippet(raw)}"
            )
        last = f"it answered {status}: {_snippet(raw)}"
        await self._wait(_delay(self.judge, self.failures, _retry_after(headers)), last)

    def read(self, raw: bytes) -> Verdict | None:
        """The verdict of a 200 answer; None when it could not be read and the judge is to
        be asked again (plainly, or told what was wrong with its reply)."""
        content: str | None = None
        truncated = False
        try:
            content, refusal, truncated = _read_completion(raw)
            if refusal:
                raise _Failed(f"the judge model refused to grade: {refusal[:300]}")
            if not content:
                raise Unreadable("the reply has no content")
            return parse_verdict(content, plain=self.plain)
        except Unreadable as exc:
            problem = exc
        self.unreadable += 1
        if self.unreadable >= self.judge.malformed_attempts:
            raise _Failed(
                f"the judge gave {self.unreadable} replies that could not be read; the last: "
                f"{problem.problem}"
            )
        if problem.prose and not self.plain and not truncated:
            # The proxy dropped response_format: ask again with the plain instruction.
            self._go_plain()
        elif content:
            self.messages = [
                *self.messages,
                {"role": "assistant", "content": content},
                {"role": "user", "content": CORRECTION_TEMPLATE.format(problem=problem.problem)},
            ]
        return None

    def _go_plain(self) -> None:
        self.plain = True
        _PLAIN_ONLY.add(self.pair)
        self.messages = build_messages(self.ctx, self.config, plain=True, examples=self.examples)

    async def _wait(self, delay: float, last: str) -> None:
        """Sleep before asking again, unless that would run past the run's budget."""
        if time.monotonic() + delay >= self.deadline:
            raise _Failed(
                f"the judge gave no usable answer within {self.judge.budget:g} s (the budget "
                f"for one run); the last: {last}"
            )
        await asyncio.sleep(delay)


async def _ask(
    ctx: RunContext,
    config: JudgeConfig,
    judge: JudgeSetup,
    http: httpx.AsyncClient,
    examples: tuple[Example, ...],
) -> Verdict:
    talk = _Conversation.start(ctx, config, judge, examples)
    while True:
        timeout = talk.next_timeout()
        try:
            status, headers, raw = await once_more_if_dropped(
                partial(_post, http, judge, talk.body(), timeout)
            )
        except (httpx.TimeoutException, httpx.TransportError) as exc:
            await talk.after_no_answer(exc, timeout)
            continue
        except EvalkitError as exc:  # the egress policy refused the URL
            raise _Failed(exc.message) from None
        if status != 200:
            await talk.after_refusal(status, headers, raw)
            continue
        verdict = talk.read(raw)
        if verdict is not None:
            return verdict


async def grade(
    ctx: RunContext,
    config: JudgeConfig,
    *,
    judge: JudgeSetup,
    http: httpx.AsyncClient,
    examples: tuple[Example, ...] = (),
) -> list[ScoreItem]:
    """Grade one run against ``config.rubric``; one score named ``judge``. Never raises.
    ``examples`` (few-shot examples accepted by ``evalkit judge align``) are shown first,
    and pinned in the score's ``prompt_hash``."""

    def item(**kw: Any) -> ScoreItem:
        return ScoreItem(
            name=SCORE_NAME,
            evaluator=EVALUATOR,
            evaluator_version=JUDGE_VERSION,
            judge_model=judge.model,
            prompt_hash=examples_hash(PROMPT_HASH, examples),
            **kw,
        )

    if judge.key_error:
        return [item(value=None, error=judge.key_error)]
    try:
        verdict = await _ask(ctx, config, judge, http, examples)
    except _Failed as exc:
        return [item(value=None, error=exc.message)]
    except Exception as exc:  # never fatal: a bug here must not lose the run's other scores
        return [item(value=None, error=f"the judge client failed: {type(exc).__name__}: {exc}")]
    return [item(value=verdict.value, explanation=verdict.reasoning)]
