#!/bin/sh
# The try-it stack's sample, end to end: log in as admin, make your LLM the server's
# default judge, create the code-driven agent sample-agent, copy the sample repository
# (try/sample) to a working folder and run its agent.py, an SDK run with traces.
# docker compose up (try/docker-compose.yml) runs it in the agent container; on your own
# machine run it beside a server (try/README.md, "Try locally"). Running it again reuses
# the judge and the agent.
set -eu

need() {
  eval "value=\${$1:-}"
  if [ -z "$value" ]; then
    echo "try/run.sh: set $1 ($2)" >&2
    exit 2
  fi
}
need EVALKIT_SERVER_URL "the evalkit server, e.g. http://127.0.0.1:8600"
need EVALKIT_PASSWORD "the password of the user admin"
need EVALKIT_TRY_JUDGE_BASE_URL "your LLM's OpenAI-compatible base URL, e.g. https://api.openai.com/v1"
need EVALKIT_TRY_JUDGE_MODEL "the model that judges, as your LLM's API names it"

here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
work=${EVALKIT_TRY_WORKDIR:-$(mktemp -d)}

evalkit login "$EVALKIT_SERVER_URL" --username admin

# Your LLM as the default judge. The CLI sends the key once; the server keeps it encrypted.
existing=$(evalkit llm-providers list --json | "$python" -c '
import json, sys
print(next((p["base_url"] for p in json.load(sys.stdin) if p["name"] == "try-judge"), ""))')
if [ -z "$existing" ]; then
  if [ -n "${EVALKIT_TRY_JUDGE_API_KEY:-}" ]; then
    evalkit llm-providers create try-judge --base-url "$EVALKIT_TRY_JUDGE_BASE_URL" \
      --api-key-env EVALKIT_TRY_JUDGE_API_KEY
  else
    evalkit llm-providers create try-judge --base-url "$EVALKIT_TRY_JUDGE_BASE_URL"
  fi
elif [ "$existing" != "$EVALKIT_TRY_JUDGE_BASE_URL" ]; then
  echo "try/run.sh: the provider try-judge points at $existing, not at" \
    "EVALKIT_TRY_JUDGE_BASE_URL ($EVALKIT_TRY_JUDGE_BASE_URL); delete it with" \
    "evalkit llm-providers delete try-judge (after pointing the default judge elsewhere)," \
    "or set EVALKIT_TRY_JUDGE_BASE_URL=$existing" >&2
  exit 1
fi
evalkit judge-default set --provider try-judge --model "$EVALKIT_TRY_JUDGE_MODEL"

# The agent: code-driven (no harness), its trajectories built from its OpenInference spans.
if ! evalkit agents show sample-agent >/dev/null 2>&1; then
  evalkit agents create sample-agent --trajectory-source otel --mapping openinference
fi

# A developer's checkout of the sample. The SDK grades with the judge itself, reading the
# judge's key from evalkit.yaml by the judge's base URL: name the variable that holds it.
mkdir -p "$work"
cp -R "$here/sample/." "$work/"
if [ -n "${EVALKIT_TRY_JUDGE_API_KEY:-}" ]; then
  printf 'credentials:\n  llm_providers:\n    %s: {api_key_env: EVALKIT_TRY_JUDGE_API_KEY}\n' \
    "$EVALKIT_TRY_JUDGE_BASE_URL" >>"$work/evalkit.yaml"
fi
cd "$work"
echo "the sample repository is in $work; running its agent.py"
exec "$python" agent.py
