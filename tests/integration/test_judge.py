"""The LLM judge: the real judge client against a real OpenAI-compatible server on loopback
(deterministic grades, and every misbehaviour it can script), and LLM providers and the
default judge through the real CLI and API (admins only, keys never returned, egress)."""

from __future__ import annotations

import itertools
import time

import httpx
import msgspec
import psycopg
import pytest

from evalkit.atif.model import Trajectory
from evalkit.auth.secrets import SecretBox, generate_key
from evalkit.cases.model import JudgeConfig
from evalkit.config import EgressSettings
from evalkit.db import Database
from evalkit.harness import _agent
from evalkit.model.harness import Provides
from evalkit.outbound import make_client
from evalkit.scoring import judge as judge_mod
from evalkit.scoring import judge_prompt
from evalkit.scoring.judge import (
    NO_STEPS,
    PLAIN_JSON_INSTRUCTION,
    PROMPT_HASH,
    RESPONSE_SCHEMA,
    SYSTEM_PROMPT,
    JudgeSetup,
    grade,
    load_judge,
    no_judge_item,
)
from evalkit.scoring.model import RunContext
from evalkit.store.judges import key_context
from tests.conftest import start_server
from tests.integration.datasets_helpers import add_user, login
from tests.integration.judge_helpers import PUBLIC_URL, JudgeBehaviour, JudgeServer, sections

KEY = "sk-judge-4b1d2c3e-very-secret"
RUBRIC = 'The answer must name the capital. expect "Paris"'


def context(
    answer: str | None = "The capital of France is Paris.",
    *,
    output: object = None,
    trajectory: dict | None = None,
    provides: Provides | None = None,
) -> RunContext:
    return RunContext(
        run_id=7,
        experiment_id=3,
        workspace_id=1,
        case_id="capital",
        repetition=1,
        case={
            "input": {"question": "What is the capital of France?"},
            "expected": {"answer": "Paris"},
            "evaluators": {"judge": {"rubric": RUBRIC}},
        },
        answer=answer,
        output=output,
        trajectory=None if trajectory is None else msgspec.convert(trajectory, Trajectory),
        trajectory_valid=trajectory is not None,
        provides=provides or Provides(),
        state="scoring",
    )


def setup(server: JudgeServer, **kw) -> JudgeSetup:
    fast = {"backoff": 0.01, "max_backoff": 0.05, "timeout": 5.0}
    return JudgeSetup(provider="test", base_url=server.base_url, model="judge-1", **{**fast, **kw})


@pytest.fixture
async def http():
    client = make_client(None)
    yield client
    await client.aclose()


@pytest.fixture(autouse=True)
def _forget_plain_mode():
    judge_mod._PLAIN_ONLY.clear()
    judge_mod._DEFAULT_TEMPERATURE.clear()
    yield
    judge_mod._PLAIN_ONLY.clear()
    judge_mod._DEFAULT_TEMPERATURE.clear()


def run_judge(behaviour: JudgeBehaviour | None = None) -> JudgeServer:
    return JudgeServer(behaviour).start()


async def timed_grade(http, server: JudgeServer, **setup_kw):
    """Grade once against ``server`` (stopped after): the score and the seconds it took."""
    try:
        started = time.monotonic()
        [item] = await grade(
            context(), JudgeConfig(rubric=RUBRIC), judge=setup(server, **setup_kw), http=http
        )
        return item, time.monotonic() - started
    finally:
        server.stop()


# --------------------------------------------------------------------------- grading


async def test_pass_and_fail_with_structured_answers(http):
    server = run_judge(JudgeBehaviour(api_key=KEY))
    try:
        judge = setup(server, api_key=KEY)
        [good] = await grade(context(), JudgeConfig(rubric=RUBRIC), judge=judge, http=http)
        [bad] = await grade(
            context("It is Lyon."), JudgeConfig(rubric=RUBRIC), judge=judge, http=http
        )
    finally:
        server.stop()
    assert good.value == 1.0 and good.error is None
    assert good.explanation == "The answer mentions Paris."
    assert good.name == "judge" and good.kind == "evaluator" and good.evaluator == "judge"
    assert good.judge_model == "judge-1" and good.prompt_hash == PROMPT_HASH
    assert good.evaluator_version == "1"
    assert bad.value == 0.0 and bad.explanation == "The answer does not mention Paris."

    request = server.requests[0]
    assert request["headers"]["authorization"] == f"Bearer {KEY}"
    body = request["body"]
    assert body["model"] == "judge-1" and body["temperature"] == 0
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "judgement", "strict": True, "schema": RESPONSE_SCHEMA},
    }
    system, user = body["messages"]
    assert system == {"role": "system", "content": SYSTEM_PROMPT}
    found = sections(user["content"])
    assert found["rubric"] == RUBRIC
    assert found["answer"] == "The capital of France is Paris."
    assert '"question": "What is the capital of France?"' in found["task"]
    assert '"answer": "Paris"' in found["expected"]
    assert found["structured_output"] == "(none)"
    # no trajectory provided: the prompt says so, and shows no steps
    assert NO_STEPS in user["content"] and "<steps>" not in user["content"]
    assert PLAIN_JSON_INSTRUCTION not in user["content"]


async def test_trajectory_is_shown_only_when_the_agent_provides_it(http):
    work = _agent.solve({"question": "What is 6 * 7?"}, [])
    traj = _agent.trajectory(
        work, session_id="s1", model="m-1", started=1e9, finished=1e9 + 2, outcome="succeeded"
    )
    server = run_judge()
    try:
        judge = setup(server)
        config = JudgeConfig(rubric='expect "42"')
        provided = Provides(trajectory=True, tool_calls=True)
        [with_steps] = await grade(
            context("42", trajectory=traj, provides=provided), config, judge=judge, http=http
        )
        [without] = await grade(
            context("42", trajectory=traj, provides=Provides()), config, judge=judge, http=http
        )
        [thinking] = await grade(
            context("42", trajectory=traj, provides=Provides(trajectory=True, thinking=True)),
            config,
            judge=judge,
            http=http,
        )
    finally:
        server.stop()
    assert with_steps.value == without.value == thinking.value == 1.0
    steps = sections(server.user_messages(0)[0])["steps"]
    assert steps.splitlines()[0].startswith("3 steps; 1 tool call; tokens")
    assert "[1] user: What is 6 * 7?" in steps
    assert "[2] agent (m-1): Let me use my tools." in steps
    assert 'call calculator {"expression":"6 * 7"}' in steps
    assert "result of calculator: 42" in steps
    assert "[3] agent (m-1): 42" in steps
    assert "thinking:" not in steps  # reasoning only when the agent provides thinking
    assert "<steps>" not in server.user_messages(1)[0]
    assert NO_STEPS in server.user_messages(1)[0]
    assert "thinking: The question needs a tool" in server.user_messages(2)[0]


async def test_output_only_runs_and_pass_fail_verdicts(http):
    server = run_judge(JudgeBehaviour(script=["passfail", "passfail"]))
    try:
        judge = setup(server)
        config = JudgeConfig(rubric='expect "result"')
        [only_output] = await grade(
            context(None, output={"result": 42}), config, judge=judge, http=http
        )
        [failed] = await grade(context("nothing"), config, judge=judge, http=http)
    finally:
        server.stop()
    found = sections(server.user_messages(0)[0])
    assert found["answer"] == judge_prompt.ONLY_OUTPUT_TEXT
    assert '"result": 42' in found["structured_output"]
    # the fake judge finds "result" in the structured output
    assert only_output.value == 1.0
    assert failed.value == 0.0 and failed.error is None


async def test_malformed_answers_are_retried_with_the_problem_named(http):
    server = run_judge(JudgeBehaviour(script=["malformed", "wrong_shape"]))
    try:
        [item] = await grade(context(), JudgeConfig(rubric=RUBRIC), judge=setup(server), http=http)
    finally:
        server.stop()
    assert item.value == 1.0 and item.error is None
    assert len(server.requests) == 3
    third = server.requests[2]["body"]["messages"]
    # the conversation carries each bad reply and a note saying what was wrong with it
    assert [m["role"] for m in third] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert third[2]["content"] == '{"reasoning": "The answer is corr'
    assert "not valid JSON" in third[3]["content"]
    assert "breaks the answer's schema" in third[5]["content"]
    assert "response_format" in server.requests[2]["body"]  # still structured


@pytest.mark.parametrize("bad", ["malformed", "wrong_shape", "out_of_range", "empty"])
async def test_malformed_answers_are_bounded_and_recorded(http, bad):
    server = run_judge(JudgeBehaviour(script=[bad] * 5))
    try:
        [item] = await grade(context(), JudgeConfig(rubric=RUBRIC), judge=setup(server), http=http)
    finally:
        server.stop()
    assert len(server.requests) == judge_mod.DEFAULT_MALFORMED_ATTEMPTS
    assert item.value is None and item.explanation is None
    assert item.error.startswith("the judge gave 3 replies that could not be read; the last:")
    assert item.judge_model == "judge-1" and item.prompt_hash == PROMPT_HASH


async def test_429_waits_for_retry_after(http):
    server = run_judge(JudgeBehaviour(script=["429"], retry_after="1"))
    try:
        [item] = await grade(context(), JudgeConfig(rubric=RUBRIC), judge=setup(server), http=http)
    finally:
        server.stop()
    assert item.value == 1.0
    first, second = server.requests
    waited = second["at"] - first["at"]
    assert 1.0 <= waited < 2.0, waited  # Retry-After honoured, not the 0.01 s backoff


async def test_a_retry_past_the_budget_gives_up_at_once(http):
    server = run_judge(JudgeBehaviour(script=["429"], retry_after="30"))
    item, elapsed = await timed_grade(http, server, budget=6)
    # At once: not after sleeping out the budget (6 s), let alone the Retry-After (30 s).
    assert elapsed < 3 and len(server.requests) == 1
    assert item.value is None
    assert item.error == (
        "the judge gave no usable answer within 6 s (the budget for one run); the last: it "
        "answered 429: Rate limit reached"
    )


async def test_5xx_backs_off_then_succeeds_or_gives_up(http):
    server = run_judge(JudgeBehaviour(script=["500", "503", "500"]))
    try:
        [item] = await grade(context(), JudgeConfig(rubric=RUBRIC), judge=setup(server), http=http)
        server.behaviour.script = ["500"] * 10
        server._script = ["500"] * 10
        [failed] = await grade(
            context(), JudgeConfig(rubric=RUBRIC), judge=setup(server, attempts=3), http=http
        )
    finally:
        server.stop()
    assert item.value == 1.0 and len(server.requests) == 4 + 3
    times = [r["at"] for r in server.requests[:4]]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert gaps[1] > gaps[0] * 1.2 or gaps[2] > gaps[0] * 1.2, gaps  # backoff grows
    assert failed.value is None
    assert failed.error == (
        "the judge answered 500 3 times; the last said: The server had an error while "
        "processing your request"
    )


async def test_a_slow_judge_times_out_and_is_recorded(http):
    server = run_judge(JudgeBehaviour(script=["slow"] * 3, slow_seconds=2.5))
    item, elapsed = await timed_grade(http, server, timeout=0.3, attempts=2)
    # Two attempts cut at 0.3 s each, not one wait for the slow answer (2.5 s).
    assert elapsed < 2.0, elapsed
    assert item.value is None
    assert item.error == "the judge failed 2 times; the last: no answer within 0.3 s"


async def test_a_request_is_cut_at_what_is_left_of_the_budget(http):
    # The request's own timeout (5 s) is longer than the run's budget (1 s): the budget wins.
    server = run_judge(JudgeBehaviour(script=["slow"], slow_seconds=2.5))
    item, elapsed = await timed_grade(http, server, budget=1)
    assert elapsed < 2.0, elapsed  # not the 2.5 s the slow answer takes
    assert item.value is None
    assert item.error.startswith("the judge gave no usable answer within 1 s (the budget")


async def test_a_slow_judge_within_the_timeout_is_fine(http):
    server = run_judge(JudgeBehaviour(script=["slow"], slow_seconds=0.3))
    try:
        [item] = await grade(context(), JudgeConfig(rubric=RUBRIC), judge=setup(server), http=http)
    finally:
        server.stop()
    assert item.value == 1.0 and len(server.requests) == 1


async def test_proxy_that_rejects_response_format_gets_the_plain_instruction(http):
    server = run_judge(JudgeBehaviour(rejects_response_format=True, script=["grade", "fenced"]))
    try:
        judge = setup(server)
        [first] = await grade(context(), JudgeConfig(rubric=RUBRIC), judge=judge, http=http)
        [second] = await grade(context(), JudgeConfig(rubric=RUBRIC), judge=judge, http=http)
    finally:
        server.stop()
    assert first.value == 1.0 and second.value == 1.0
    assert first.prompt_hash == second.prompt_hash == PROMPT_HASH
    bodies = [r["body"] for r in server.requests]
    # 400 naming response_format, then plain; the next run goes straight to plain
    assert len(bodies) == 3
    assert "response_format" in bodies[0]
    for body in bodies[1:]:
        assert "response_format" not in body
        assert body["messages"][1]["content"].endswith(PLAIN_JSON_INSTRUCTION)


async def test_proxy_that_ignores_response_format_gets_the_plain_instruction(http):
    server = run_judge(JudgeBehaviour(ignores_response_format=True))
    try:
        [item] = await grade(context(), JudgeConfig(rubric=RUBRIC), judge=setup(server), http=http)
    finally:
        server.stop()
    assert item.value == 1.0 and item.explanation == "The answer mentions Paris."
    first, second = (r["body"] for r in server.requests)
    assert "response_format" in first and "response_format" not in second
    assert second["messages"][1]["content"].endswith(PLAIN_JSON_INSTRUCTION)


async def test_a_reply_cut_off_by_the_token_limit_is_corrected_not_taken_for_a_proxy(http):
    # Prose that stopped at the token limit says nothing about response_format being
    # dropped: ask again with it, showing the judge its cut reply and what was wrong.
    server = run_judge(JudgeBehaviour(script=["cut_off"]))
    try:
        [item] = await grade(context(), JudgeConfig(rubric=RUBRIC), judge=setup(server), http=http)
    finally:
        server.stop()
    assert item.value == 1.0
    first, second = (r["body"] for r in server.requests)
    assert "response_format" in first and "response_format" in second
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "user"]
    assert second["messages"][2]["content"].startswith("The answer looks right to me.")
    assert "not a JSON object" in second["messages"][3]["content"]


async def test_a_model_that_takes_only_its_default_temperature(http):
    server = run_judge(JudgeBehaviour(rejects_temperature=True, rejects_response_format=True))
    try:
        judge = setup(server)
        [first] = await grade(context(), JudgeConfig(rubric=RUBRIC), judge=judge, http=http)
        [second] = await grade(context(), JudgeConfig(rubric=RUBRIC), judge=judge, http=http)
    finally:
        server.stop()
    assert first.value == second.value == 1.0
    bodies = [r["body"] for r in server.requests]
    # response_format refused, then temperature refused, then plain without temperature;
    # the next run asks that way at once
    assert len(bodies) == 4
    assert "response_format" in bodies[0] and "temperature" in bodies[0]
    assert "response_format" not in bodies[1] and bodies[1]["temperature"] == 0
    assert "response_format" not in bodies[2] and "temperature" not in bodies[2]
    assert bodies[3] == bodies[2]


@pytest.mark.parametrize(
    ("action", "error"),
    [
        ("401", "the judge answered 401: Incorrect API key provided (the provider refused"),
        ("refusal", "the judge model refused to grade: I can't help with grading this."),
    ],
)
async def test_refusals_are_recorded_without_retrying(http, action, error):
    server = run_judge(JudgeBehaviour(script=[action]))
    try:
        [item] = await grade(context(), JudgeConfig(rubric=RUBRIC), judge=setup(server), http=http)
    finally:
        server.stop()
    assert len(server.requests) == 1
    assert item.value is None and item.error.startswith(error), item.error


async def test_unreachable_judge_and_egress_refusal_are_recorded():
    closed = JudgeServer().start()
    closed.stop()  # nothing listens there any more
    async with make_client(None) as open_client:
        [down] = await grade(
            context(), JudgeConfig(rubric=RUBRIC), judge=setup(closed, attempts=2), http=open_client
        )
    assert down.value is None
    assert down.error.startswith("the judge failed 2 times; the last: cannot reach")
    async with make_client(EgressSettings()) as guarded:
        [refused] = await grade(
            context(), JudgeConfig(rubric=RUBRIC), judge=setup(closed), http=guarded
        )
    assert refused.value is None
    assert refused.error.startswith(f"refused the outbound call to {closed.base_url}")
    assert "loopback" in refused.error


async def test_a_key_that_cannot_be_read_is_recorded(http):
    judge = JudgeSetup(provider="p", base_url=PUBLIC_URL, model="m", key_error="bad key")
    [item] = await grade(context(), JudgeConfig(rubric=RUBRIC), judge=judge, http=http)
    assert item.value is None and item.error == "bad key"
    missing = no_judge_item("gpt-x")
    assert missing.value is None and "judge-default set" in missing.error
    assert missing.name == "judge" and missing.judge_model == "gpt-x"


# --------------------------------------------------------------------------- providers


@pytest.fixture
def as_admin(cli, server):
    login(cli, server)
    cli.monkeypatch.setenv("JUDGE_KEY", KEY)
    return cli


def provider_row(server, name: str) -> dict:
    with psycopg.connect(server.db_url) as conn:
        row = conn.execute(
            "SELECT id, api_key, api_key_env, base_url FROM llm_providers WHERE name = %s", (name,)
        ).fetchone()
    assert row is not None
    return {"id": row[0], "api_key": row[1], "api_key_env": row[2], "base_url": row[3]}


def test_providers_and_the_default_judge_through_the_cli(as_admin, server):
    cli = as_admin
    shown = cli("judge-default", "show")
    assert shown.code == 0 and "no default judge is set" in shown.out
    assert cli("judge-default", "show", "--json").json == {
        "provider": None,
        "base_url": None,
        "model": None,
        "updated_at": None,
        "updated_by": None,
    }
    made = cli(
        "llm-providers", "create", "openai", "--base-url", PUBLIC_URL + "/v1",
        "--api-key-env", "JUDGE_KEY",
    )  # fmt: skip
    assert made.code == 0, made.err
    assert f"created LLM provider openai at {PUBLIC_URL}/v1" in made.out
    assert "API key from JUDGE_KEY stored encrypted" in made.out
    assert cli("llm-providers", "create", "local", "--base-url", PUBLIC_URL).code == 0

    listed = cli("llm-providers", "list", "--json").json
    for p in listed:
        assert p.pop("created_at")
    assert listed == [
        {
            "name": "local",
            "base_url": PUBLIC_URL,
            "has_api_key": False,
            "api_key_env": None,
            "is_default_judge": False,
            "created_by": "admin",
        },
        {
            "name": "openai",
            "base_url": PUBLIC_URL + "/v1",
            "has_api_key": True,
            "api_key_env": "JUDGE_KEY",
            "is_default_judge": False,
            "created_by": "admin",
        },
    ]
    set_ = cli("judge-default", "set", "--provider", "openai", "--model", "gpt-5")
    assert set_.code == 0 and "default judge: gpt-5 on openai" in set_.out
    judge = cli("judge-default", "show", "--json").json
    assert judge["provider"] == "openai" and judge["model"] == "gpt-5"
    assert judge["base_url"] == PUBLIC_URL + "/v1" and judge["updated_by"] == "admin"
    text = cli("judge-default", "show").out
    assert "provider  openai (http://203.0.113.10:8700/v1)" in text and "gpt-5" in text
    table = cli("llm-providers", "list").out
    assert "stored (from JUDGE_KEY)" in table and KEY not in table

    # the default judge's provider is deleted only with --yes, which unsets the default
    refused = cli("llm-providers", "delete", "openai")
    assert refused.code == 1 and "[provider-is-default-judge]" in refused.err
    assert "judge-default set" in refused.err
    gone = cli("llm-providers", "delete", "openai", "--yes")
    assert gone.code == 0 and "the default judge used it and is unset now" in gone.out
    assert cli("judge-default", "show", "--json").json["provider"] is None
    assert cli("llm-providers", "delete", "local", "--json").json == {
        "name": "local",
        "default_judge_cleared": False,
    }
    missing = cli("llm-providers", "delete", "local")
    assert missing.code == 1 and "no LLM provider named 'local'" in missing.err
    unknown = cli("judge-default", "set", "--provider", "nope", "--model", "m")
    assert unknown.code == 1 and "[no-such-provider]" in unknown.err
    assert cli("judge-default", "clear").out.strip() == "no default judge was set"


async def test_keys_are_encrypted_and_load_judge_reads_them(as_admin, server):
    cli = as_admin
    assert cli(
        "llm-providers", "create", "openai", "--base-url", PUBLIC_URL + "/v1",
        "--api-key-env", "JUDGE_KEY",
    ).code == 0  # fmt: skip
    row = provider_row(server, "openai")
    assert row["api_key"].startswith("v1:") and KEY not in row["api_key"]
    box = SecretBox(server.settings.encryption_key)
    assert box.decrypt(row["api_key"], key_context(row["id"])) == KEY

    db = Database(server.db_url)
    await db.open()
    try:
        async with db.connection() as conn:
            assert await load_judge(conn, box, None) is None  # no default judge yet
        assert cli("judge-default", "set", "--provider", "openai", "--model", "gpt-5").code == 0
        async with db.connection() as conn:
            judge = await load_judge(conn, box, None)
            override = await load_judge(conn, box, "gpt-5-mini")
        assert judge is not None and override is not None
        assert (judge.provider, judge.base_url, judge.model) == (
            "openai",
            PUBLIC_URL + "/v1",
            "gpt-5",
        )
        assert judge.api_key == KEY and judge.key_error is None and KEY not in repr(judge)
        assert override.model == "gpt-5-mini" and override.api_key == KEY
        # a key sealed with another encryption_key is recorded, not raised
        other = SecretBox(generate_key())
        async with db.connection() as conn:
            broken = await load_judge(conn, other, None)
        assert broken is not None and broken.api_key is None
        assert "cannot be read" in broken.key_error
    finally:
        await db.close()


def test_raw_api_answers_never_carry_the_key(server, admin_token):
    auth = {"Authorization": f"Bearer {admin_token}"}
    body = {"name": "raw", "base_url": PUBLIC_URL, "api_key": KEY, "api_key_env": "JUDGE_KEY"}
    made = httpx.post(f"{server.url}/api/llm-providers", json=body, headers=auth)
    assert made.status_code == 201, made.text
    stored = provider_row(server, "raw")["api_key"]
    answers = [
        made,
        httpx.get(f"{server.url}/api/llm-providers", headers=auth),
        httpx.put(
            f"{server.url}/api/judge-default",
            json={"provider": "raw", "model": "m"},
            headers=auth,
        ),
        httpx.get(f"{server.url}/api/judge-default", headers=auth),
        httpx.delete(f"{server.url}/api/llm-providers/raw?force=true", headers=auth),
    ]
    for answer in answers:
        assert answer.status_code < 300, answer.text
        assert (
            KEY not in answer.text and stored not in answer.text and stored[3:20] not in answer.text
        )
        assert '"api_key"' not in answer.text
    leaked = httpx.post(
        f"{server.url}/api/llm-providers",
        json={**body, "name": "two", "api_key_ciphertext": "x"},
        headers=auth,
    )
    assert leaked.status_code == 400 and "unknown field `api_key_ciphertext`" in leaked.text


def test_only_admins_manage_providers_and_the_default_judge(cli, server, admin_token):
    login(cli, server)
    assert cli("llm-providers", "create", "openai", "--base-url", PUBLIC_URL).code == 0
    user = add_user(server, admin_token, "alice")
    for args in (
        ("llm-providers", "create", "mine", "--base-url", PUBLIC_URL),
        ("llm-providers", "delete", "openai"),
        ("judge-default", "set", "--provider", "openai", "--model", "m"),
        ("judge-default", "clear"),
    ):
        refused = cli(*args, token=user)
        assert refused.code == 1, args
        assert "alice is not an admin" in refused.err and "[admin-only]" in refused.err
    # everyone logged in reads them
    assert [p["name"] for p in cli("llm-providers", "list", "--json", token=user).json] == [
        "openai"
    ]
    assert cli("judge-default", "show", "--json", token=user).code == 0


def test_base_urls_pass_the_egress_policy(as_admin):
    cli = as_admin
    loopback = cli("llm-providers", "create", "local", "--base-url", "http://127.0.0.1:11434/v1")
    assert loopback.code == 1 and "[egress-refused]" in loopback.err
    assert "loopback" in loopback.err and "egress.allow_private" in loopback.err
    metadata = cli("llm-providers", "create", "meta", "--base-url", "http://169.254.169.254/v1")
    assert metadata.code == 1 and "link-local" in metadata.err
    assert cli("llm-providers", "list", "--json").json == []


def test_a_relaxed_policy_accepts_a_local_judge(cli, new_database, tmp_path):
    def relax(settings):
        settings.egress.allowed_prefixes = ["http://127.0.0.1:11434/"]

    relaxed = start_server(new_database(), tmp_path, configure=relax)
    try:
        login(cli, relaxed)
        made = cli("llm-providers", "create", "ollama", "--base-url", "http://127.0.0.1:11434/v1")
        assert made.code == 0, made.err
        other = cli("llm-providers", "create", "other", "--base-url", "http://127.0.0.1:9/v1")
        assert other.code == 1 and "egress.allowed_prefixes" in other.err
    finally:
        relaxed.stop()


def test_bad_input(as_admin, server, admin_token):
    cli = as_admin
    cases = [
        (("--base-url", "ftp://example.com"), "is not an http(s) URL", "bad-url"),
        (("--base-url", PUBLIC_URL + "/v1?x=1"), "no query", "bad-url"),
        (("--base-url", "https://me:sk-1@api.example.com/v1"), "has credentials", "bad-url"),
        (("--base-url", PUBLIC_URL, "--api-key-env", "NOT_SET_ANYWHERE"), "is not set", None),
    ]
    for extra, message, code in cases:
        result = cli("llm-providers", "create", "p", *extra)
        assert result.code in (1, 2) and message in result.err, (extra, result.err)
        if code:
            assert f"[{code}]" in result.err
    bad_name = cli("llm-providers", "create", "Open AI", "--base-url", PUBLIC_URL)
    assert bad_name.code == 1 and "[bad-name]" in bad_name.err
    assert cli("llm-providers", "create", "p", "--base-url", PUBLIC_URL).code == 0
    dup = cli("llm-providers", "create", "p", "--base-url", PUBLIC_URL)
    assert dup.code == 1 and "[provider-exists]" in dup.err
    spaced = cli("judge-default", "set", "--provider", "p", "--model", "gpt 5")
    assert spaced.code == 1 and "[bad-model]" in spaced.err
    r = httpx.delete(
        f"{server.url}/api/llm-providers/p?force=maybe",
        headers={"Authorization": f"Bearer {admin_token}"},
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad-query"


def test_the_answer_schema_is_what_the_verdict_parser_accepts():
    """The schema sent to the provider and the strict parser agree."""
    good = msgspec.json.encode({"reasoning": "fine", "score": 0.25})
    assert judge_mod.parse_verdict(good.decode(), plain=False).value == 0.25
    assert set(RESPONSE_SCHEMA["required"]) == set(judge_mod.Verdict.__struct_fields__)


# --------------------------------------------------------------------------- the library


async def test_library_judges_send_their_documented_prompt(http):
    from evalkit.scoring import judge_library

    traj = msgspec.convert(
        _agent.trajectory(
            _agent.solve({"question": "What is 6 * 7?"}, []),
            session_id="s",
            model="m",
            started=1e9,
            finished=1e9 + 2,
            outcome="succeeded",
        ),
        Trajectory,
    )
    server = run_judge()
    try:
        judge = setup(server)
        ctx = context(trajectory=traj, provides=Provides(trajectory=True, tool_calls=True))
        [item] = await judge_library.grade(
            judge_library.LIBRARY["tool_use"], ctx, model=None, judge_setup=judge, http=http
        )
        [plain] = await judge_library.grade(
            judge_library.LIBRARY["safety"], ctx, model=None, judge_setup=judge, http=http
        )
        [skipped] = await judge_library.grade(
            judge_library.LIBRARY["groundedness"],
            context(),
            model=None,
            judge_setup=judge,
            http=http,
        )
    finally:
        server.stop()
    assert len(server.requests) == 2  # the skipped judge asked nothing
    spec = judge_library.LIBRARY["tool_use"]
    assert item.name == "judge.tool_use" and item.evaluator == "judge:tool_use"
    assert item.prompt_hash == spec.prompt_hash and item.judge_model == "judge-1"
    assert item.error is None and item.value is not None
    system, user = server.requests[0]["body"]["messages"]
    assert system["content"] == SYSTEM_PROMPT
    found = sections(user["content"])
    assert found["rubric"] == spec.rubric
    assert 'call calculator {"expression":"6 * 7"}' in found["steps"]
    safety_user = server.requests[1]["body"]["messages"][1]["content"]
    assert sections(safety_user)["rubric"] == judge_library.LIBRARY["safety"].rubric
    assert "<steps>" not in safety_user and NO_STEPS in safety_user
    assert plain.prompt_hash == judge_library.LIBRARY["safety"].prompt_hash
    assert skipped.value is None and skipped.error is None
    assert "provides.trajectory is false" in (skipped.skipped or "")
