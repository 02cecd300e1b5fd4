"""The fake model's contract, which every framework test leans on."""

from __future__ import annotations

import json

import httpx

from tests.frameworks.fake_model import (
    ANSWER,
    ANSWER_USAGE,
    CALL_ID,
    TOOL_ARGS,
    TOOL_CALL_USAGE,
    FakeModel,
)

TOOLS = [
    {"type": "function", "function": {"name": "lookup", "parameters": {}}},
    {"type": "function", "function": {"name": "get_weather", "parameters": {}}},
]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
ANSWERED = [
    *ASK,
    {"role": "assistant", "content": None, "tool_calls": [{"id": CALL_ID, "type": "function"}]},
    {"role": "tool", "tool_call_id": CALL_ID, "content": "18°C, cloudy in Paris"},
]


def _events(text: str) -> list[dict]:
    frames = [f for f in text.split("\n\n") if f]
    assert all(f.startswith("data: ") for f in frames), frames
    assert frames[-1] == "data: [DONE]"
    return [json.loads(f[len("data: ") :]) for f in frames[:-1]]


def test_plain_replies():
    with FakeModel() as model:
        url = model.base_url + "/chat/completions"
        call = httpx.post(url, json={"model": "m1", "messages": ASK, "tools": TOOLS}).json()
        text = httpx.post(url, json={"model": "m2", "messages": ANSWERED, "tools": TOOLS}).json()
        assert httpx.get(model.base_url + "/models").status_code == 200
        missing = httpx.post(model.base_url + "/embeddings", json={})
        assert missing.status_code == 404 and "error" in missing.json()
    assert call["model"] == "m1" and call["choices"][0]["finish_reason"] == "tool_calls"
    message = call["choices"][0]["message"]
    assert message["content"] is None
    [tool_call] = message["tool_calls"]
    assert tool_call["id"] == CALL_ID and tool_call["function"]["name"] == "get_weather"
    assert json.loads(tool_call["function"]["arguments"]) == TOOL_ARGS
    assert call["usage"] == TOOL_CALL_USAGE
    assert text["model"] == "m2" and text["choices"][0]["message"]["content"] == ANSWER
    assert text["usage"] == ANSWER_USAGE and ANSWER_USAGE["total_tokens"] == 92
    assert [r["model"] for r in model.requests] == ["m1", "m2"]


def test_streamed_replies():
    with FakeModel() as model:
        url = model.base_url + "/chat/completions"
        body = {"model": "m", "stream": True, "tools": TOOLS}
        call = _events(httpx.post(url, json={**body, "messages": ASK}).text)
        text = _events(httpx.post(url, json={**body, "messages": ANSWERED}).text)
    assert all(e["object"] == "chat.completion.chunk" for e in call + text)
    assert call[-1]["choices"] == [] and call[-1]["usage"] == TOOL_CALL_USAGE
    assert text[-1]["choices"] == [] and text[-1]["usage"] == ANSWER_USAGE
    deltas = [e["choices"][0]["delta"] for e in call[:-1]]
    pieces = [d["tool_calls"][0] for d in deltas if d.get("tool_calls")]
    assert pieces[0]["id"] == CALL_ID and pieces[0]["function"]["name"] == "get_weather"
    arguments = [p["function"]["arguments"] for p in pieces[1:]]
    assert len(arguments) >= 2 and json.loads("".join(arguments)) == TOOL_ARGS
    contents = [e["choices"][0]["delta"].get("content") or "" for e in text[:-1]]
    assert len([c for c in contents if c]) >= 2 and "".join(contents) == ANSWER


def test_no_tools_means_the_answer():
    with FakeModel() as model:
        reply = httpx.post(model.base_url + "/chat/completions", json={"messages": ASK}).json()
    assert reply["choices"][0]["message"]["content"] == ANSWER
