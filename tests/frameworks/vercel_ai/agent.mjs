// A Vercel AI SDK agent: one question, one tool (get_weather), several steps so that the model's
// answer after the tool result is produced; traced by the SDK's own OpenTelemetry spans
// (experimental_telemetry) and exported over OTLP/HTTP, protobuf or JSON.
//
// Env:
//   EVALKIT_OTLP_ENDPOINT  full traces URL (".../api/otel/v1/traces")
//   EVALKIT_AGENT_TOKEN    sent as "Authorization: Bearer <token>"
//   EVALKIT_SESSION_ID     sent as telemetry metadata (ai.telemetry.metadata.sessionId)
//   FAKE_MODEL_URL         an OpenAI-compatible base URL ("http://127.0.0.1:PORT/v1")
//   FAKE_MODEL_STREAM      "1" (or "true") for streamText, else generateText
//   OTLP_PROTOCOL          "protobuf" (default) or "json"
//
// Prints {"answer": <the final text>, "steps": N} as JSON on stdout.

import { createOpenAI } from '@ai-sdk/openai';
import { OTLPTraceExporter as OTLPJsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as OTLPProtoExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { NodeTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-node';
import { generateText, stepCountIs, streamText, tool } from 'ai';
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
if (protocol !== 'protobuf' && protocol !== 'json') {
  console.error(`agent.mjs: OTLP_PROTOCOL must be "protobuf" or "json", not ${protocol}`);
  process.exit(2);
}

const Exporter = protocol === 'json' ? OTLPJsonExporter : OTLPProtoExporter;
const exporter = new Exporter({
  url: endpoint,
  headers: { Authorization: `Bearer ${token}` },
  timeoutMillis: 10000,
});
const provider = new NodeTracerProvider({
  resource: resourceFromAttributes({
    'service.name': 'weather-agent',
    'service.version': '1.0.0',
  }),
  spanProcessors: [new SimpleSpanProcessor(exporter)],
});
provider.register();

const openai = createOpenAI({ baseURL: modelUrl, apiKey: 'fake-key' });

const getWeather = tool({
  description: 'The current weather in a city.',
  inputSchema: z.object({ city: z.string().describe('The city') }),
  execute: async ({ city }) => (city === 'Paris' ? TOOL_RESULT : `no weather for ${city}`),
});

const options = {
  // openai.chat: the Chat Completions API (/v1/chat/completions), not the Responses API.
  model: openai.chat('gpt-4o-mini'),
  prompt: QUESTION,
  tools: { get_weather: getWeather },
  stopWhen: stepCountIs(5),
  maxRetries: 0,
  experimental_telemetry: {
    isEnabled: true,
    functionId: 'weather-agent',
    metadata: { sessionId },
  },
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
    for await (const part of result.fullStream) {
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
  // Flushes and closes the exporter: every span is sent before the process exits.
  await provider.shutdown();
}

process.stdout.write(JSON.stringify({ answer: text, steps }) + '\n');
