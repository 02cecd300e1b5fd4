"""A Pydantic AI agent with one tool, on the Chat Completions API of an OpenAI-compatible
model (OpenAIChatModel), traced by Pydantic AI's own OpenTelemetry instrumentation (the
Instrumentation capability, GenAI conventions) and exported over OTLP/HTTP (protobuf) to
evalkit, run by tests/frameworks/test_pydantic_ai.py in its own venv
(tests/frameworks/venvs.py).

Env: EVALKIT_OTLP_ENDPOINT (the full traces URL), EVALKIT_AGENT_TOKEN, EVALKIT_SESSION_ID
(sent as the run's conversation_id: Pydantic AI puts it on every span as
gen_ai.conversation.id), FAKE_MODEL_URL (an OpenAI-compatible base URL ending in /v1),
FAKE_MODEL_STREAM ("1": agent.run_stream, else agent.run), PYDANTIC_AI_VERSION (the
instrumentation's message format version, 2 to 6; unset: Pydantic AI's default). Prints
{"answer": ...} as JSON on stdout.
"""

from __future__ import annotations

import asyncio
import json
import os
import warnings

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from pydantic_ai import Agent
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

QUESTION = "What is the weather in Paris?"


def get_weather(city: str) -> str:
    """The current weather in a city."""
    return f"18°C, cloudy in {city}"


def tracer_provider() -> TracerProvider:
    provider = TracerProvider(
        resource=Resource.create(
            {"service.name": "pydantic-ai-weather-agent", "service.version": "1.0.0"}
        )
    )
    provider.add_span_processor(
        BatchSpanProcessor(
            OTLPSpanExporter(
                endpoint=os.environ["EVALKIT_OTLP_ENDPOINT"],
                headers={"Authorization": f"Bearer {os.environ['EVALKIT_AGENT_TOKEN']}"},
                timeout=10,
            )
        )
    )
    return provider


def instrumentation(provider: TracerProvider) -> Instrumentation:
    """Pydantic AI 2.x takes its instrumentation as a capability (Agent has no instrument=)."""
    settings: dict = {"tracer_provider": provider, "include_content": True}
    if version := os.environ.get("PYDANTIC_AI_VERSION"):
        settings["version"] = int(version)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # versions 2 to 4 are deprecated, and say so
        return Instrumentation(settings=InstrumentationSettings(**settings))


def weather_agent(provider: TracerProvider) -> Agent:
    model = OpenAIChatModel(
        "gpt-4o-mini",
        provider=OpenAIProvider(base_url=os.environ["FAKE_MODEL_URL"], api_key="test"),
    )
    return Agent(
        model,
        name="weather-agent",
        instructions="You answer questions about the weather.",
        tools=[get_weather],
        capabilities=[instrumentation(provider)],
    )


async def ask(agent: Agent, session_id: str, stream: bool) -> str:
    if not stream:
        result = await agent.run(QUESTION, conversation_id=session_id)
        return result.output
    async with agent.run_stream(QUESTION, conversation_id=session_id) as response:
        return await response.get_output()


def main() -> None:
    stream = os.environ.get("FAKE_MODEL_STREAM") == "1"
    provider = tracer_provider()
    try:
        answer = asyncio.run(ask(weather_agent(provider), os.environ["EVALKIT_SESSION_ID"], stream))
    finally:
        provider.shutdown()  # flushes the batch processor
    print(json.dumps({"answer": answer}))


if __name__ == "__main__":
    main()
