"""A LangGraph ReAct agent with one tool, traced by OpenInference's LangChain instrumentation
and exported over OTLP/HTTP (protobuf) to evalkit, run by tests/frameworks/test_langgraph.py
in its own venv (tests/frameworks/venvs.py).

Env: EVALKIT_OTLP_ENDPOINT (the full traces URL), EVALKIT_AGENT_TOKEN, EVALKIT_SESSION_ID,
FAKE_MODEL_URL (an OpenAI-compatible base URL ending in /v1), FAKE_MODEL_STREAM ("1" or "0").
Prints {"answer": ..., "messages": N} as JSON on stdout.
"""

from __future__ import annotations

import json
import os
import warnings

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from openinference.instrumentation import using_session
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

QUESTION = "What is the weather in Paris?"


@tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    return f"18°C, cloudy in {city}"


def main() -> None:
    provider = TracerProvider(
        resource=Resource.create(
            {"service.name": "langgraph-weather-agent", "service.version": "1.0.0"}
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
    LangChainInstrumentor().instrument(tracer_provider=provider)
    try:
        with warnings.catch_warnings():
            # create_react_agent is deprecated in LangGraph 1.x (for langchain.agents'
            # create_agent) but still the documented LangGraph prebuilt agent.
            warnings.simplefilter("ignore")
            from langgraph.prebuilt import create_react_agent

            model = ChatOpenAI(
                model="gpt-4o-mini",
                base_url=os.environ["FAKE_MODEL_URL"],
                api_key="test",
                streaming=os.environ.get("FAKE_MODEL_STREAM") == "1",
                temperature=0,
                max_retries=0,
                timeout=30,
            )
            agent = create_react_agent(model, [get_weather])
        with using_session(os.environ["EVALKIT_SESSION_ID"]):
            state = agent.invoke({"messages": [{"role": "user", "content": QUESTION}]})
    finally:
        LangChainInstrumentor().uninstrument()
        provider.shutdown()  # flushes the batch to the collector
    messages = state["messages"]
    print(json.dumps({"answer": messages[-1].content, "messages": len(messages)}))


if __name__ == "__main__":
    main()
