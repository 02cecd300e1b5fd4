"""A code-driven agent's capabilities: what the server writes onto each of its experiments
(trajectory, tool_calls, token_usage and run_listing on; thinking, artifacts and workspace
off; the agent's own ``provides`` over them), and what scoring then skips, through the real
SDK, edge and worker."""

from __future__ import annotations

from evalkit.sdk import run_experiment
from tests.integration import sdk_helpers

engine = sdk_helpers.engine
dev = sdk_helpers.dev

CASE = """\
input:
  question: What is 2 + 3?
expected:
  answer: '5'
evaluators:
  exact_match: true
  tool_calls: {required: [calculator]}
  tokens: true
"""
DEFAULTS = {
    "trajectory": True,
    "tool_calls": True,
    "token_usage": True,
    "run_listing": True,
    "thinking": False,
    "artifacts": False,
    "workspace": False,
}


def test_each_experiment_carries_the_code_driven_defaults_and_the_agents_overrides(dev):
    dev.repo.case("finance", "add", CASE)
    dev.agent("plain")
    dev.agent("thinker", provides={"thinking": True, "tool_calls": False})

    plain = run_experiment(dataset="finance", agent="plain", task=lambda q: "5", progress=False)
    thinker = run_experiment(dataset="finance", agent="thinker", task=lambda q: "5", progress=False)
    assert plain.status == thinker.status == "finished"
    for result, provides in (
        (plain, DEFAULTS),
        (thinker, {**DEFAULTS, "thinking": True, "tool_calls": False}),
    ):
        detail = dev.api("GET", f"/api/experiments/{result.id}").json()
        assert detail["driver"] == "sdk"
        written = detail["capabilities"]["provides"]  # false is the default, left out
        assert {key: written.get(key, False) for key in DEFAULTS} == provides, written
        assert set(written) <= set(DEFAULTS)

    # Scoring reads the experiment's capabilities: the agent that says it gives no tool
    # calls has its tool-call check skipped for that reason; the other is skipped only
    # because this task's trajectory (no tracing) is not valid ATIF. Neither fails.
    [plain_run] = plain.runs
    [thinker_run] = thinker.runs
    plain_scores, thinker_scores = dev.scores(plain_run["id"]), dev.scores(thinker_run["id"])
    assert thinker_scores["tool_calls"]["skipped"] == (
        "the agent does not provide its tool calls (provides.tool_calls is false)"
    )
    assert "not valid ATIF" in plain_scores["tool_calls"]["skipped"]
    for found in (plain_scores, thinker_scores):
        assert found["tool_calls"]["value"] is None and found["tool_calls"]["error"] is None
        assert "not valid ATIF" in found["tokens"]["skipped"]  # token_usage on for both
        assert found["exact_match"]["value"] == 1.0
