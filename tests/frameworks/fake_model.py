"""An OpenAI-compatible fake model server, stdlib only, for the framework tests.

    with FakeModel() as model:        # binds 127.0.0.1 on a free port
        model.base_url                # "http://127.0.0.1:PORT/v1"
        model.requests                # decoded JSON bodies of the chat requests, in order

``POST /v1/chat/completions`` answers deterministically, streamed (SSE chunks of
``chat.completion.chunk`` ending with ``data: [DONE]``) or not, as the request asks:

- when the request offers ``tools`` and no message after the last ``user`` message has role
  ``tool``: ONE tool call to ``get_weather`` (if offered, else the first tool) with arguments
  :data:`TOOL_ARGS` and id :data:`CALL_ID`, finish_reason ``tool_calls``, usage
  :data:`TOOL_CALL_USAGE`;
- otherwise the text :data:`ANSWER`, finish_reason ``stop``, usage :data:`ANSWER_USAGE`.

Streamed, the tool call comes in pieces (id and name in the first delta, the arguments split
over several), the text over several deltas, and a last chunk always has ``"choices": []``
and the usage (as OpenAI sends it with ``stream_options.include_usage``). ``GET /v1/models``
lists the one model; any other path is a 404 JSON error.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ANSWER = "It is 18°C and cloudy in Paris."
TOOL_NAME = "get_weather"
TOOL_ARGS = {"city": "Paris"}
CALL_ID = "call_weather_1"
TOOL_CALL_USAGE = {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}
ANSWER_USAGE = {"prompt_tokens": 80, "completion_tokens": 12, "total_tokens": 92}
DEFAULT_MODEL = "gpt-4o-mini"
CREATED = 1_767_258_000


def _tool_name(tools: list[Any]) -> str:
    names = []
    for tool in tools:
        if isinstance(tool, dict):
            fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
            if isinstance(fn.get("name"), str):
                names.append(fn["name"])
    if TOOL_NAME in names or not names:
        return TOOL_NAME
    return names[0]


def wants_tool_call(body: dict[str, Any]) -> bool:
    """True when the reply is the tool call: tools offered and no tool result since the
    last user message."""
    if not body.get("tools"):
        return False
    messages = body.get("messages") or []
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    return not any(m.get("role") == "tool" for m in messages[last_user + 1 :])


def _split(text: str, parts: int) -> list[str]:
    size = max(1, -(-len(text) // parts))
    return [text[i : i + size] for i in range(0, len(text), size)]


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _not_found(self) -> None:
        self._send_json(
            404,
            {
                "error": {
                    "message": f"fake model: no route {self.command} {self.path}",
                    "type": "invalid_request_error",
                    "code": "not_found",
                }
            },
        )

    def do_GET(self) -> None:
        if self.path.split("?")[0].rstrip("/") == "/v1/models":
            self._send_json(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": DEFAULT_MODEL,
                            "object": "model",
                            "created": CREATED,
                            "owned_by": "evalkit-tests",
                        }
                    ],
                },
            )
        else:
            self._not_found()

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path.split("?")[0].rstrip("/") != "/v1/chat/completions":
            self._not_found()
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._send_json(400, {"error": {"message": "body is not JSON", "type": "bad"}})
            return
        with self.server.lock:
            self.server.requests.append(body)
            n = len(self.server.requests)
        model = body.get("model") or DEFAULT_MODEL
        reply_id = f"chatcmpl-fake-{n}"
        tool = _tool_name(body.get("tools") or []) if wants_tool_call(body) else None
        if body.get("stream"):
            self._stream(reply_id, model, tool)
        else:
            self._send_json(200, self._completion(reply_id, model, tool))

    def _completion(self, reply_id: str, model: str, tool: str | None) -> dict[str, Any]:
        if tool is not None:
            message: dict[str, Any] = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": CALL_ID,
                        "type": "function",
                        "function": {"name": tool, "arguments": json.dumps(TOOL_ARGS)},
                    }
                ],
            }
            finish, usage = "tool_calls", TOOL_CALL_USAGE
        else:
            message = {"role": "assistant", "content": ANSWER}
            finish, usage = "stop", ANSWER_USAGE
        return {
            "id": reply_id,
            "object": "chat.completion",
            "created": CREATED,
            "model": model,
            "system_fingerprint": "fp_fake",
            "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
            ],
            "usage": dict(usage),
        }

    def _stream(self, reply_id: str, model: str, tool: str | None) -> None:
        def chunk(choices: list[dict[str, Any]], usage: dict[str, int] | None = None) -> dict:
            return {
                "id": reply_id,
                "object": "chat.completion.chunk",
                "created": CREATED,
                "model": model,
                "system_fingerprint": "fp_fake",
                "choices": choices,
                "usage": usage,
            }

        def delta(d: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {"index": 0, "delta": d, "logprobs": None, "finish_reason": finish}

        chunks: list[dict[str, Any]] = []
        if tool is not None:
            args = json.dumps(TOOL_ARGS)
            chunks.append(
                chunk(
                    [
                        delta(
                            {
                                "role": "assistant",
                                "content": None,
                                "tool_calls": [
                                    {
                                        "index": 0,
                                        "id": CALL_ID,
                                        "type": "function",
                                        "function": {"name": tool, "arguments": ""},
                                    }
                                ],
                            }
                        )
                    ]
                )
            )
            for piece in _split(args, 3):
                chunks.append(
                    chunk([delta({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})])
                )
            chunks.append(chunk([delta({}, "tool_calls")]))
            usage = TOOL_CALL_USAGE
        else:
            chunks.append(chunk([delta({"role": "assistant", "content": ""})]))
            for piece in _split(ANSWER, 4):
                chunks.append(chunk([delta({"content": piece})]))
            chunks.append(chunk([delta({}, "stop")]))
            usage = ANSWER_USAGE
        chunks.append(chunk([], dict(usage)))

        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        for c in chunks:
            self.wfile.write(f"data: {json.dumps(c)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, requests: list[dict[str, Any]], lock: threading.Lock) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests = requests
        self.lock = lock


class FakeModel:
    """The fake model in a background thread; a context manager (``start``/``stop`` too)."""

    def __init__(self) -> None:
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def start(self) -> FakeModel:
        self._server = _Server(self._requests, self._lock)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> FakeModel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "the fake model is not running"
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The chat request bodies received so far, in order (a copy; still readable after
        the server stopped)."""
        with self._lock:
            return list(self._requests)


__all__ = [
    "ANSWER",
    "ANSWER_USAGE",
    "CALL_ID",
    "TOOL_ARGS",
    "TOOL_CALL_USAGE",
    "FakeModel",
]

if __name__ == "__main__":  # a manual check: python -m tests.frameworks.fake_model
    with FakeModel() as m:
        print(m.base_url, flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
