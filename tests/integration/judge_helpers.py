"""Real HTTP servers on loopback for the judge and remote evaluator tests.

:class:`JudgeServer` is an OpenAI-compatible chat completions endpoint that grades
deterministically: a rubric saying ``expect "X"`` scores 1 when the answer or the
structured output contains X, else 0. Its :class:`JudgeBehaviour` scripts misbehaviour per
request (429 with Retry-After, 500, malformed or prose replies, refusals, slowness) and
makes it a proxy that rejects or ignores ``response_format``.

:class:`EvaluatorServer` is a Custom Evaluator API server with one evaluator per path
(:data:`EVALUATOR_PATHS`). Both record what they received.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from evalkit.harness.reference import base_url, listen, serve
from evalkit.scoring.judge import PLAIN_JSON_INSTRUCTION

PUBLIC_URL = "http://203.0.113.10:8700"
"""A documentation-range address: public to the egress policy, and never dialled here."""


class LoopbackServer:
    """A Starlette app served by uvicorn on 127.0.0.1 (a free port) in a thread."""

    def __init__(self, app: Starlette) -> None:
        self.app = app
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._shutdown: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def start(self, timeout: float = 10) -> LoopbackServer:
        sock = listen("127.0.0.1", 0)
        self.url = base_url(sock)
        ready = threading.Event()

        async def main() -> None:
            self._loop, self._shutdown = asyncio.get_running_loop(), asyncio.Event()
            ready.set()
            await serve(self.app, sock, self._shutdown.wait)

        def thread_main() -> None:
            try:
                asyncio.run(main())
            except BaseException as exc:
                self._error = exc
                ready.set()

        self._thread = threading.Thread(target=thread_main, daemon=True)
        self._thread.start()
        if not ready.wait(timeout) or self._error is not None:
            raise RuntimeError(f"the test server did not start: {self._error}")
        return self

    def stop(self, timeout: float = 10) -> None:
        if self._thread is None:
            return
        if self._loop is not None and self._shutdown is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._shutdown.set)
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the test server did not stop"
        self._thread = None

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------- judge


@dataclass
class JudgeBehaviour:
    """How the judge server answers. ``script`` lists one action per request, in order;
    once it runs out every request is graded normally (``grade``).

    Actions: ``grade``, ``passfail`` (grade with "pass"/"fail"), ``fenced`` (grade inside a
    code fence), ``429`` (with ``retry_after``), ``500``, ``503``, ``401``, ``malformed``
    (cut-off JSON), ``wrong_shape`` (JSON without the verdict's keys), ``out_of_range``
    (score 7), ``prose`` (text, no JSON), ``empty`` (no content), ``refusal``, ``slow``
    (sleeps ``slow_seconds`` first), ``not_completion`` (a JSON body that is not a chat
    completion), ``cut_off`` (prose stopped by the token limit: finish_reason "length").
    """

    script: list[str] = field(default_factory=list)
    retry_after: str | None = "1"
    slow_seconds: float = 5.0
    rejects_response_format: bool = False
    """Answer 400 naming response_format whenever a request carries it."""
    ignores_response_format: bool = False
    """Drop response_format: answer in prose unless the prompt asks for plain JSON."""
    rejects_temperature: bool = False
    """Answer 400 naming temperature to a request that sets it (as reasoning models do)."""
    api_key: str | None = None
    """When set, a request without ``Authorization: Bearer <api_key>`` gets 401."""
    follows_examples: bool = False
    """Grade a run as the prompt's few-shot ``<examples>`` grade the same task and answer
    (a model that learns from examples); runs no example shows are graded as usual."""


_EXPECT = re.compile(r'expect "([^"]+)"')
_SECTION = re.compile(r"<(\w+)>\n(.*?)\n</\1>", re.DOTALL)


def sections(user_text: str) -> dict[str, str]:
    """The tagged sections of the judge's user message (rubric, task, answer, ...)."""
    return {m.group(1): m.group(2) for m in _SECTION.finditer(user_text)}


_EXAMPLE = re.compile(r"^Task: (.*)\nAnswer: (.*)\nPeople's verdict: (pass|fail)$", re.MULTILINE)


def example_verdict(found: dict[str, str]) -> str | None:
    """The people's verdict an ``<examples>`` section gives this run's task and answer."""
    if "examples" not in found or "task" not in found:
        return None
    task = json.loads(found["task"])
    answer = " ".join(found.get("answer", "").split())
    for shown_task, shown_answer, verdict in _EXAMPLE.findall(found["examples"]):
        if json.loads(shown_task) == task and shown_answer == answer:
            return str(verdict)
    return None


def _completion(
    content: str | None, *, refusal: str | None = None, finish_reason: str = "stop"
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "judge-test",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": refusal},
                "finish_reason": finish_reason,
            }
        ],
    }


class JudgeServer(LoopbackServer):
    def __init__(self, behaviour: JudgeBehaviour | None = None) -> None:
        self.behaviour = behaviour or JudgeBehaviour()
        self.requests: list[dict[str, Any]] = []
        """Every request: ``body`` (JSON), ``headers`` (lower-case names), ``at`` (monotonic)."""
        self._script = list(self.behaviour.script)
        super().__init__(
            Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])
        )

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def user_messages(self, index: int = -1) -> list[str]:
        body = self.requests[index]["body"]
        return [m["content"] for m in body["messages"] if m["role"] == "user"]

    async def _chat(self, request: Request) -> Response:
        body = json.loads(await request.body())
        self.requests.append(
            {"body": body, "headers": dict(request.headers), "at": time.monotonic()}
        )
        b = self.behaviour
        if b.api_key is not None and request.headers.get("authorization") != f"Bearer {b.api_key}":
            return JSONResponse({"error": {"message": "Incorrect API key provided"}}, 401)
        if b.rejects_response_format and "response_format" in body:
            return JSONResponse(
                {
                    "error": {
                        "message": "Unrecognized request argument supplied: response_format",
                        "type": "invalid_request_error",
                        "param": "response_format",
                    }
                },
                400,
            )
        if b.rejects_temperature and "temperature" in body:
            return JSONResponse(
                {
                    "error": {
                        "message": "Unsupported value: 'temperature' does not support 0 with "
                        "this model. Only the default (1) value is supported.",
                        "type": "invalid_request_error",
                        "param": "temperature",
                    }
                },
                400,
            )
        action = self._script.pop(0) if self._script else "grade"
        if action == "slow":
            await asyncio.sleep(b.slow_seconds)
            action = "grade"
        if action in ("429", "500", "503", "401"):
            headers = {"Retry-After": b.retry_after} if action == "429" and b.retry_after else {}
            message = {"429": "Rate limit reached", "401": "Incorrect API key provided"}.get(
                action, "The server had an error while processing your request"
            )
            return JSONResponse({"error": {"message": message}}, int(action), headers=headers)
        canned = {
            "malformed": '{"reasoning": "The answer is corr',
            "wrong_shape": '{"verdict": "good", "why": "fine"}',
            "out_of_range": '{"reasoning": "Very good.", "score": 7}',
            "prose": "The answer looks right to me. I would give it full marks.",
            "empty": "",
        }
        if action in canned:
            return JSONResponse(_completion(canned[action]))
        if action == "refusal":
            return JSONResponse(_completion(None, refusal="I can't help with grading this."))
        if action == "cut_off":
            return JSONResponse(_completion(canned["prose"], finish_reason="length"))
        if action == "not_completion":
            return JSONResponse({"result": "ok"})
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        if (
            b.ignores_response_format
            and "response_format" in body
            and PLAIN_JSON_INSTRUCTION not in user
        ):
            return JSONResponse(_completion(canned["prose"]))
        found = sections(user)
        expect = _EXPECT.search(found.get("rubric", ""))
        shown = example_verdict(found) if b.follows_examples else None
        if shown is not None:
            score = 1.0 if shown == "pass" else 0.0
            reasoning = f"People graded this same answer {shown} in the examples."
        elif expect is None:
            score: float = 0.5
            reasoning = "The rubric names nothing to look for, so half marks."
        elif expect.group(1) in found.get("answer", "") + found.get("structured_output", ""):
            score, reasoning = 1.0, f"The answer mentions {expect.group(1)}."
        else:
            score, reasoning = 0.0, f"The answer does not mention {expect.group(1)}."
        verdict: dict[str, Any] = {"reasoning": reasoning, "score": score}
        if action == "passfail":
            verdict["score"] = "pass" if score == 1.0 else "fail"
        content = json.dumps(verdict)
        if action == "fenced":
            content = f"```json\n{content}\n```"
        return JSONResponse(_completion(content))


# --------------------------------------------------------------------------- evaluators

EVALUATOR_PATHS = (
    "tools",
    "echo",
    "error",
    "slow",
    "bad",
    "garbage",
    "empty",
    "auth",
    "duplicate",
    "twice",
)
"""What each path of :class:`EvaluatorServer` does:

- ``tools``: checks that the trajectory called every tool in ``config.required``; answers
  the score ``tools`` (1 or 0) and the gauge ``call_count`` (null: no reading, with the count
  in the explanation).
- ``echo``: one score, 1, whose explanation is the answer it got.
- ``error``: 500 with an error message. ``slow``: sleeps 5 s. ``garbage``: not JSON.
- ``bad``: a good score ``ok``, one out of range ``too_big``, and one without a name.
- ``empty``: no scores. ``duplicate``: the score ``x`` twice; ``twice``: the score
  ``twice`` twice.
- ``auth``: 401 unless ``Authorization: Bearer <api_key>``, else score 1.
"""


class EvaluatorServer(LoopbackServer):
    def __init__(self, api_key: str | None = None, slow_seconds: float = 5.0) -> None:
        self.api_key = api_key
        self.slow_seconds = slow_seconds
        self.requests: list[dict[str, Any]] = []
        """Every request: ``path``, ``body`` (JSON), ``headers`` (lower-case names)."""
        super().__init__(Starlette(routes=[Route("/{name}", self._evaluate, methods=["POST"])]))

    def endpoint(self, name: str) -> str:
        return f"{self.url}/{name}"

    async def _evaluate(self, request: Request) -> Response:
        name = request.path_params["name"]
        raw = await request.body()
        body = json.loads(raw)
        self.requests.append({"path": name, "body": body, "headers": dict(request.headers)})
        run = body["run"]
        if name == "tools":
            traj = run.get("trajectory") or {"steps": []}
            called = [c["function_name"] for s in traj["steps"] for c in s.get("tool_calls") or ()]
            required = (body.get("config") or {}).get("required", [])
            missing = [t for t in required if t not in called]
            return JSONResponse(
                {
                    "scores": [
                        {
                            "name": "tools",
                            "score": 0.0 if missing else 1.0,
                            "explanation": f"missing: {missing}" if missing else "all called",
                        },
                        {
                            "name": "call_count",
                            "score": None,
                            "kind": "gauge",
                            "explanation": f"{len(called)} calls",
                        },
                    ]
                }
            )
        if name == "echo":
            return JSONResponse(
                {"scores": [{"name": "echo", "score": 1, "explanation": run["answer"]}]}
            )
        if name == "error":
            return JSONResponse({"error": {"message": "the grader's database is down"}}, 500)
        if name == "slow":
            await asyncio.sleep(self.slow_seconds)
            return JSONResponse({"scores": [{"name": "slow", "score": 1}]})
        if name == "garbage":
            return Response(b"<html>oops</html>", 200, media_type="text/html")
        if name == "bad":
            return JSONResponse(
                {
                    "scores": [
                        {"name": "ok", "score": 0.75, "unknown_extra": True},
                        {"name": "too_big", "score": 1.5},
                        {"score": 0.3},
                    ]
                }
            )
        if name == "empty":
            return JSONResponse({"scores": []})
        if name == "twice":
            return JSONResponse(
                {
                    "scores": [
                        {"name": "twice", "score": 1, "explanation": "first"},
                        {"name": "twice", "score": 0, "explanation": "second"},
                    ]
                }
            )
        if name == "duplicate":
            return JSONResponse({"scores": [{"name": "x", "score": 1}, {"name": "x", "score": 0}]})
        if name == "auth":
            if request.headers.get("authorization") != f"Bearer {self.api_key}":
                return JSONResponse({"error": "missing or wrong key"}, 401)
            return JSONResponse({"scores": [{"name": "auth", "score": 1}]})
        return JSONResponse({"error": f"no evaluator {name}"}, 404)
