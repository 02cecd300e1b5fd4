"""A real Pydantic AI agent (one tool, OpenAIChatModel against the fake model), traced by
Pydantic AI's own OpenTelemetry instrumentation (GenAI conventions), exported to the real edge
over OTLP/HTTP; the trajectory the shipped ``genai`` starter builds from its spans must be the
agent's turn as it happened, streamed (agent.run_stream) or not, in each message format
version tested:

- 5, Pydantic AI's default: a tool's result goes back to the model as a ``user`` message
  holding only a ``tool_call_response`` part, its text under ``result``;
- 6: the same part in a ``tool`` message;
- 2, the oldest (deprecated): messages as in 5, but the spans are named ``agent run`` and
  ``running tool`` and the tool span has ``tool_arguments``/``tool_response`` in place of
  ``gen_ai.tool.call.arguments``/``gen_ai.tool.call.result``. (3 and 4 send what 5 sends for
  this agent.)
"""

from __future__ import annotations

import pytest

from evalkit.otel.mapping import load_starter
from tests.frameworks.fake_model import FakeModel
from tests.frameworks.harness import assert_weather_turn, run_framework

VERSIONS = [5, 6, 2]
STREAMS = [False, True]


def _run(server, admin_token, version: int, stream: bool) -> tuple[dict, list[dict]]:
    with FakeModel() as model:
        report = run_framework(
            server,
            admin_token,
            part="pydantic_ai",
            script="agent.py",
            env={
                "FAKE_MODEL_URL": model.base_url,
                "FAKE_MODEL_STREAM": "1" if stream else "0",
                "PYDANTIC_AI_VERSION": str(version),
            },
            mapping=load_starter("genai"),
        )
    return report, model.requests


@pytest.mark.parametrize("stream", STREAMS, ids=["nostream", "stream"])
@pytest.mark.parametrize("version", VERSIONS, ids=[f"v{v}" for v in VERSIONS])
def test_pydantic_ai_turn(server, admin_token, version, stream):
    report, requests = _run(server, admin_token, version, stream)
    assert_weather_turn(report, requests)
