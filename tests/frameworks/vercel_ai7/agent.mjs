// The same agent as ../vercel_ai/agent.mjs on AI SDK 7, to record what it sends; no test runs
// it (AI SDK 7 and OTel JS 3 require Node 22; on Node 20 it runs with npm's engine warnings).
//
// AI SDK 7 moved its OpenTelemetry spans out of `ai` into @ai-sdk/otel, registered once with
// registerTelemetry(): `OpenTelemetry` (the default, GenAI semantic conventions: invoke_agent /
// step N / chat / execute_tool spans, gen_ai.* attributes) or `LegacyOpenTelemetry` (the ai.*
// spans of AI SDK 6). Telemetry `metadata` is gone: the session id travels in runtimeContext,
// marked for telemetry with telemetry.includeRuntimeContext, and arrives as
// ai.settings.context.sessionId (the modern integration sends it only with its supplemental
// `runtimeContext: true` option).
//
// Env: as ../vercel_ai/agent.mjs, plus
//   AI_TELEMETRY  "otel" (default: OpenTelemetry) or "legacy" (LegacyOpenTelemetry)
//   AI_RUNTIME_CONTEXT  "0" to register OpenTelemetry without `runtimeContext: true` (then no
//                       span carries the session id)

import { createOpenAI } from '@ai-sdk/openai';
import { LegacyOpenTelemetry, OpenTelemetry } from '@ai-sdk/otel';
import { context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { OTLPTraceExporter as OTLPJsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as OTLPProtoExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { generateText, isStepCount, registerTelemetry, streamText, tool } from 'ai';
import { z } from 'zod';

const QUESTION = 'What is the weather in Paris?';
const TOOL_RESULT = '18°C, cloudy in Paris';

function need(name) {
  const value = process.env[name];
  if (!value) {
    console.error(`agent.mjs: ${name} is not set`);
    process.exit(2);
  }
  return value;
}

const endpoint = need('EVALKIT_OTLP_ENDPOINT');
const token = need('EVALKIT_AGENT_TOKEN');
const sessionId = need('EVALKIT_SESSION_ID');
const modelUrl = need('FAKE_MODEL_URL');
const stream = ['1', 'true', 'yes'].includes((process.env.FAKE_MODEL_STREAM ?? '').toLowerCase());
const protocol = (process.env.OTLP_PROTOCOL || 'protobuf').toLowerCase();
const legacy = (process.env.AI_TELEMETRY || 'otel').toLowerCase() === 'legacy';

const Exporter = protocol === 'json' ? OTLPJsonExporter : OTLPProtoExporter;
const exporter = new Exporter({
  url: endpoint,
  headers: { Authorization: `Bearer ${token}` },
  timeoutMillis: 10000,
});
const provider = new TracerProvider({
  resource: resourceFromAttributes({
    'service.name': 'weather-agent',
    'service.version': '1.0.0',
  }),
  spanProcessors: [new SimpleSpanProcessor({ exporter })],
});
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
trace.setGlobalTracerProvider(provider);
registerTelemetry(
  legacy
    ? new LegacyOpenTelemetry()
    : new OpenTelemetry(process.env.AI_RUNTIME_CONTEXT === '0' ? {} : { runtimeContext: true }),
);

const openai = createOpenAI({ baseURL: modelUrl, apiKey: 'fake-key' });

const getWeather = tool({
  description: 'The current weather in a city.',
  inputSchema: z.object({ city: z.string().describe('The city') }),
  execute: async ({ city }) => (city === 'Paris' ? TOOL_RESULT : `no weather for ${city}`),
});

const options = {
  model: openai.chat('gpt-4o-mini'),
  prompt: QUESTION,
  tools: { get_weather: getWeather },
  stopWhen: isStepCount(5),
  maxRetries: 0,
  runtimeContext: { sessionId },
  telemetry: { functionId: 'weather-agent', includeRuntimeContext: { sessionId: true } },
};

let text;
let steps;
try {
  if (stream) {
    const result = streamText({
      ...options,
      onError: ({ error }) => {
        throw error;
      },
    });
    for await (const part of result.stream) {
      if (part.type === 'error') throw part.error;
    }
    text = await result.text;
    steps = (await result.steps).length;
  } else {
    const result = await generateText(options);
    text = result.text;
    steps = result.steps.length;
  }
} finally {
  await provider.shutdown();
}

process.stdout.write(JSON.stringify({ answer: text, steps }) + '\n');
