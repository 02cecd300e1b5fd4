"""The try-it stack's sample agent, on the default path: an SDK run with traces.

The agent is evalkit's demo calculator (``evalkit.demo.traced_agent``): it answers each
case's question and reports what it did only as OpenTelemetry spans in OpenInference
conventions (an AGENT span, the LLM calls, the calculator tool). ``tracing.register`` adds
the evalkit server as an export destination, and ``run_experiment`` syncs the suite in
cases/arithmetic into your personal workspace, calls the agent once per case, and the
server builds each run's trajectory from its spans. The built-in checks and your LLM, the
server's default judge, score the runs.

Run it from this folder, logged in (``evalkit login``): ``python3 agent.py``.
try/run.sh does the whole setup first.
"""

from evalkit.demo.traced_agent import answer
from evalkit.sdk import run_experiment, tracing

AGENT = "sample-agent"  # evalkit agents create sample-agent --mapping openinference


def main() -> None:
    tracing.register(agent=AGENT)  # your login's server and token, as the CLI has them
    result = run_experiment(dataset="arithmetic", agent=AGENT, task=answer, concurrency=2)
    print(result)


if __name__ == "__main__":
    main()
