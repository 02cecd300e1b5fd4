"""An OpenAI Agents SDK agent with one tool, on the Chat Completions API of an
OpenAI-compatible model (OpenAIChatCompletionsModel), traced by OpenInference's OpenAI Agents
instrumentation and exported over OTLP/HTTP (protobuf) to evalkit, run by
tests/frameworks/test_openai_agents.py in its own venv (tests/frameworks/venvs.py).

Env: EVALKIT_OTLP_ENDPOINT (the full traces URL), EVALKIT_AGENT_TOKEN, EVALKIT_SESSION_ID,
FAKE_MODEL_URL (an OpenAI-compatible base URL ending in /v1), FAKE_MODEL_STREAM ("1":
Runner.run_streamed, else Runner.run). Prints {"answer": ...} as JSON on stdout.
"""

from __future__ import annotations

import asyncio
import json
import os

from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool
from openai import AsyncOpenAI
from openinference.instrumentation import using_session
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

QUESTION = "What is the weather in Paris?"


@function_tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    return f"18°C, cloudy in {city}"


def tracer_provider() -> TracerProvider:
    provider = TracerProvider(
        resource=Resource.create(
            {"service.name": "openai-agents-weather-agent", "service.version": "1.0.0"}
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


def weather_agent() -> Agent:
    client = AsyncOpenAI(base_url=os.environ["FAKE_MODEL_URL"], api_key="test")
    return Agent(
        name="weather-agent",
        instructions="You answer questions about the weather.",
        model=OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=client),
        # The SDK asks for usage in a stream (stream_options.include_usage) only from
        # OpenAI's own API; another server's streamed replies would carry no token counts.
        model_settings=ModelSettings(include_usage=True),
        tools=[get_weather],
    )


async def ask(agent: Agent, stream: bool) -> str:
    if not stream:
        result = await Runner.run(agent, QUESTION)
        return str(result.final_output)
    streamed = Runner.run_streamed(agent, QUESTION)
    async for _event in streamed.stream_events():
        pass
    return str(streamed.final_output)


def main() -> None:
    stream = os.environ.get("FAKE_MODEL_STREAM") == "1"
    provider = tracer_provider()
    # exclusive_processor (the default, said here): the instrumentor's processor replaces the
    # SDK's own, which would export the same run to OpenAI's tracing backend.
    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider, exclusive_processor=True)
    try:
        # Every span the instrumentor starts inside gets session.id (OITracer reads it from
        # the context); the streamed run's background task inherits the context.
        with using_session(os.environ["EVALKIT_SESSION_ID"]):
            answer = asyncio.run(ask(weather_agent(), stream))
    finally:
        provider.shutdown()  # flushes the batch processor
    print(json.dumps({"answer": answer}))


if __name__ == "__main__":
    main()
