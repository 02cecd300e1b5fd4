"""Remote evaluators: the real Custom Evaluator API client against a real evaluator server
on loopback (several scores, errors, timeouts, answers that break the contract), their CRUD
through the real CLI and API (workspace writers, keys never returned, egress), lint, and
scoring end to end: a harness run graded by the judge and a remote evaluator."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import msgspec
import psycopg
import pytest

from evalkit.atif.model import Trajectory
from evalkit.auth.secrets import SecretBox, generate_key
from evalkit.cases.model import canonical_json
from evalkit.config import EgressSettings
from evalkit.db import Database
from evalkit.harness import _agent
from evalkit.model.evaluator_api import EvaluateRequest, Score
from evalkit.model.harness import Provides
from evalkit.outbound import make_client
from evalkit.scoring.judge import PROMPT_HASH
from evalkit.scoring.model import RunContext
from evalkit.scoring.remote import RemoteEvaluator, build_request, evaluate, load_evaluators
from evalkit.store.evaluators import key_context
from tests.conftest import ADMIN_PASSWORD
from tests.integration.datasets_helpers import Repo, add_user, admin_api, login
from tests.integration.judge_helpers import PUBLIC_URL, EvaluatorServer, JudgeServer, sections
from tests.integration.runs_helpers import api, create_agent, engine_server, harness, login_token

KEY = "ev-key-77aa99bb-very-secret"


def trajectory() -> dict:
    work = _agent.solve({"question": "What is 6 * 7?"}, [])
    return _agent.trajectory(
        work, session_id="s1", model="m-1", started=1e9, finished=1e9 + 2, outcome="succeeded"
    )


def context(answer: str | None = "42", output: object = None, traj: dict | None = None):
    return RunContext(
        run_id=11,
        experiment_id=5,
        workspace_id=1,
        case_id="mul",
        repetition=2,
        case={
            "input": {"question": "What is 6 * 7?"},
            "expected": {"answer": "42"},
            "tags": ["math"],
            "metadata": {"owner": "team-a"},
        },
        answer=answer,
        output=output,
        trajectory=None if traj is None else msgspec.convert(traj, Trajectory),
        trajectory_valid=traj is not None,
        provides=Provides(trajectory=True, tool_calls=True),
        model="gpt-test",
        state="scoring",
    )


@pytest.fixture(scope="module")
def evaluators_server():
    server = EvaluatorServer(api_key=KEY, slow_seconds=1.5).start()
    yield server
    server.stop()


@pytest.fixture
async def http():
    client = make_client(None)
    yield client
    await client.aclose()


def remote(server: EvaluatorServer, name: str, **kw) -> RemoteEvaluator:
    return RemoteEvaluator(name=name, workspace="dev", endpoint=server.endpoint(name), **kw)


# --------------------------------------------------------------------------- the call


async def test_several_named_scores_from_one_call(evaluators_server, http):
    config = {"required": ["calculator"], "note": ["kept", {"as": "written"}]}
    items = await evaluate(
        context(traj=trajectory()),
        "tools",
        config,
        evaluator=remote(evaluators_server, "tools"),
        http=http,
    )
    assert [(i.name, i.value, i.kind, i.explanation) for i in items] == [
        ("tools", 1.0, "evaluator", "all called"),
        ("tools.call_count", None, "gauge", "1 calls"),
    ]
    assert all(i.evaluator == "remote:tools" and i.error is None for i in items)

    sent = evaluators_server.requests[-1]
    assert "authorization" not in sent["headers"]  # no key, no header
    body = sent["body"]
    # the request is the contract's, with the config verbatim and explicit nulls
    request = msgspec.convert(body, EvaluateRequest)
    assert request.evaluator == "tools" and request.config == config
    assert body["api_version"] == "1"
    assert body["case"] == {
        "id": "mul",
        "input": {"question": "What is 6 * 7?"},
        "expected": {"answer": "42"},
        "tags": ["math"],
        "metadata": {"owner": "team-a"},
    }
    run = body["run"]
    assert run["id"] == "11" and run["experiment_id"] == 5 and run["repetition"] == 2
    assert run["answer"] == "42" and run["output"] is None and run["model"] == "gpt-test"
    assert run["trajectory"] == trajectory()

    missing = await evaluate(
        context(traj=None),
        "tools",
        {"required": ["calculator"]},
        evaluator=remote(evaluators_server, "tools"),
        http=http,
    )
    assert missing[0].value == 0.0 and missing[0].explanation == "missing: ['calculator']"
    assert evaluators_server.requests[-1]["body"]["run"]["trajectory"] is None


async def test_output_only_runs_send_the_output_as_canonical_json(evaluators_server, http):
    output = {"b": [1, 2], "a": "x"}
    [item] = await evaluate(
        context(answer=None, output=output),
        "echo",
        None,
        evaluator=remote(evaluators_server, "echo"),
        http=http,
    )
    assert item.value == 1.0 and item.name == "echo"
    assert item.explanation == '{"a":"x","b":[1,2]}' == canonical_json(output).decode()
    run = evaluators_server.requests[-1]["body"]["run"]
    assert run["output"] == output and evaluators_server.requests[-1]["body"]["config"] is None


async def test_the_key_is_sent_as_a_bearer_token(evaluators_server, http):
    [ok] = await evaluate(
        context(), "auth", {}, evaluator=remote(evaluators_server, "auth", api_key=KEY), http=http
    )
    assert ok.value == 1.0
    assert evaluators_server.requests[-1]["headers"]["authorization"] == f"Bearer {KEY}"
    [refused] = await evaluate(
        context(), "auth", {}, evaluator=remote(evaluators_server, "auth"), http=http
    )
    assert refused.value is None
    assert refused.error == (
        f"the evaluator at {evaluators_server.endpoint('auth')} answered 401: missing or wrong key"
    )
    [unreadable] = await evaluate(
        context(),
        "auth",
        {},
        evaluator=remote(evaluators_server, "auth", key_error="the key cannot be read"),
        http=http,
    )
    assert unreadable.error == "the key cannot be read"


@pytest.mark.parametrize(
    ("name", "kind", "error"),
    [
        ("error", "score", "answered 500: the grader's database is down"),
        ("garbage", "gauge", "the answer breaks the Custom Evaluator API (an object with a list"),
        ("empty", "score", "the answer has no scores"),
        ("nowhere", "score", "answered 404: no evaluator nowhere"),
    ],
)
async def test_errors_are_recorded_on_the_score(evaluators_server, http, name, kind, error):
    [item] = await evaluate(
        context(), name, {}, evaluator=remote(evaluators_server, name, kind=kind), http=http
    )
    assert item.name == name and item.value is None and item.evaluator == f"remote:{name}"
    assert item.kind == ("gauge" if kind == "gauge" else "evaluator")
    assert error in item.error, item.error


async def test_a_slow_evaluator_times_out(evaluators_server, http):
    started = time.monotonic()
    [item] = await evaluate(
        context(), "slow", {}, evaluator=remote(evaluators_server, "slow", timeout=0.3), http=http
    )
    # Cut at its own 0.3 s, not at the answer, which comes after the server's 1.5 s.
    assert time.monotonic() - started < evaluators_server.slow_seconds
    assert item.value is None
    assert item.error == (
        f"the evaluator at {evaluators_server.endpoint('slow')} did not answer within 0.3 s "
        "(its timeout, set with --timeout when it was created)"
    )
    [fine] = await evaluate(
        context(), "slow", {}, evaluator=remote(evaluators_server, "slow", timeout=5), http=http
    )
    assert fine.value == 1.0


async def test_each_score_is_checked_against_the_contract(evaluators_server, http):
    items = await evaluate(
        context(), "bad", {}, evaluator=remote(evaluators_server, "bad", kind="gauge"), http=http
    )
    by_name = {i.name: i for i in items}
    assert set(by_name) == {"bad.ok", "bad.too_big", "bad"}
    assert by_name["bad.ok"].value == 0.75 and by_name["bad.ok"].kind == "gauge"
    assert by_name["bad.ok"].error is None  # extra fields are read leniently
    too_big = by_name["bad.too_big"]
    assert too_big.value is None and "Expected `float` <= 1.0" in too_big.error
    nameless = by_name["bad"]
    assert nameless.value is None and "score #3" in nameless.error

    dup = await evaluate(
        context(), "duplicate", {}, evaluator=remote(evaluators_server, "duplicate"), http=http
    )
    assert [(i.name, i.value) for i in dup] == [("duplicate.x", 1.0), ("duplicate", None)]
    assert "appears twice; the first one was kept" in dup[1].error
    # a note about a score named after the evaluator keeps its reading
    [twice] = await evaluate(
        context(), "twice", {}, evaluator=remote(evaluators_server, "twice"), http=http
    )
    assert twice.value == 1.0 and twice.error is None
    assert twice.explanation == "first (score 'twice' appears twice; the first one was kept)"


async def test_unreachable_and_refused_endpoints_are_recorded():
    closed = EvaluatorServer().start()
    closed.stop()
    async with make_client(None) as client:
        [down] = await evaluate(context(), "x", {}, evaluator=remote(closed, "x"), http=client)
    assert down.value is None and down.error.startswith("cannot reach the evaluator at")
    async with make_client(EgressSettings()) as guarded:
        [refused] = await evaluate(context(), "x", {}, evaluator=remote(closed, "x"), http=guarded)
    assert refused.error.startswith(f"refused the outbound call to {closed.endpoint('x')}")


# --------------------------------------------------------------------------- CRUD


@pytest.fixture
def as_admin(cli, server):
    login(cli, server)
    cli.monkeypatch.setenv("EVALS_KEY", KEY)
    assert cli("workspaces", "create", "dev").code == 0
    return cli


def evaluator_row(server, name: str) -> dict:
    with psycopg.connect(server.db_url) as conn:
        row = conn.execute(
            "SELECT id, api_key, api_key_env, workspace_id FROM evaluators WHERE name = %s",
            (name,),
        ).fetchone()
    assert row is not None
    return {"id": row[0], "api_key": row[1], "api_key_env": row[2], "workspace_id": row[3]}


async def test_create_list_delete_and_keys_at_rest(as_admin, server):
    cli = as_admin
    made = cli(
        "evaluators", "create", "required_tool_calls", "--workspace", "dev",
        "--endpoint", PUBLIC_URL + "/required", "--kind", "score",
        "--api-key-env", "EVALS_KEY", "--timeout", "12.5",
    )  # fmt: skip
    assert made.code == 0, made.err
    assert made.out.splitlines() == [
        f"created evaluator required_tool_calls@dev (score) at {PUBLIC_URL}/required, "
        "timeout 12.5 s",
        "API key from EVALS_KEY stored encrypted",
    ]
    gauge = cli(
        "evaluators", "create", "latency_probe@dev", "--endpoint", PUBLIC_URL + "/lat",
        "--kind", "gauge", "--json",
    )  # fmt: skip
    assert gauge.code == 0 and gauge.json["kind"] == "gauge" and gauge.json["timeout"] == 30.0
    assert cli("evaluators", "create", "mine", "--endpoint", PUBLIC_URL + "/m").code == 0

    listed = cli("evaluators", "list", "--workspace", "dev", "--json").json
    for e in listed:
        assert e.pop("created_at")
    assert listed == [
        {
            "workspace": "dev",
            "name": "latency_probe",
            "endpoint": PUBLIC_URL + "/lat",
            "kind": "gauge",
            "has_api_key": False,
            "api_key_env": None,
            "timeout": 30.0,
            "created_by": "admin",
        },
        {
            "workspace": "dev",
            "name": "required_tool_calls",
            "endpoint": PUBLIC_URL + "/required",
            "kind": "score",
            "has_api_key": True,
            "api_key_env": "EVALS_KEY",
            "timeout": 12.5,
            "created_by": "admin",
        },
    ]
    every = cli("evaluators", "list", "--json").json
    assert [(e["name"], e["workspace"]) for e in every] == [
        ("mine", "admin"),
        ("latency_probe", "dev"),
        ("required_tool_calls", "dev"),
    ]
    text = cli("evaluators", "list").out
    assert "required_tool_calls@dev" in text and "stored (from EVALS_KEY)" in text
    assert KEY not in text

    row = evaluator_row(server, "required_tool_calls")
    assert row["api_key"].startswith("v1:") and KEY not in row["api_key"]
    box = SecretBox(server.settings.encryption_key)
    assert box.decrypt(row["api_key"], key_context(row["id"])) == KEY
    db = Database(server.db_url)
    await db.open()
    try:
        async with db.connection() as conn:
            loaded = await load_evaluators(conn, box, row["workspace_id"])
            broken = await load_evaluators(conn, SecretBox(generate_key()), row["workspace_id"])
    finally:
        await db.close()
    assert set(loaded) == {"required_tool_calls", "latency_probe"}
    required = loaded["required_tool_calls"]
    assert required.api_key == KEY and required.timeout == 12.5 and required.kind == "score"
    assert required.endpoint == PUBLIC_URL + "/required" and KEY not in repr(required)
    assert loaded["latency_probe"].api_key is None and loaded["latency_probe"].kind == "gauge"
    assert broken["required_tool_calls"].api_key is None
    assert "cannot be read" in broken["required_tool_calls"].key_error

    gone = cli("evaluators", "delete", "required_tool_calls@dev")
    assert gone.code == 0 and gone.out.strip() == "deleted evaluator required_tool_calls@dev"
    again = cli("evaluators", "delete", "required_tool_calls", "--workspace", "dev")
    assert again.code == 1 and "[no-such-evaluator]" in again.err
    assert [e["name"] for e in cli("evaluators", "list", "--workspace", "dev", "--json").json] == [
        "latency_probe"
    ]


def test_raw_api_answers_never_carry_the_key(as_admin, server, admin_token):
    auth = {"Authorization": f"Bearer {admin_token}"}
    path = f"{server.url}/api/workspaces/dev/evaluators"
    body = {"name": "raw", "endpoint": PUBLIC_URL, "api_key": KEY, "api_key_env": "EVALS_KEY"}
    made = httpx.post(path, json=body, headers=auth)
    assert made.status_code == 201, made.text
    stored = evaluator_row(server, "raw")["api_key"]
    for answer in (
        made,
        httpx.get(path, headers=auth),
        httpx.get(f"{server.url}/api/evaluators", headers=auth),
        httpx.delete(f"{path}/raw", headers=auth),
    ):
        assert answer.status_code < 300, answer.text
        assert KEY not in answer.text and stored not in answer.text
        assert stored[3:20] not in answer.text and '"api_key"' not in answer.text
    leaked = httpx.post(path, json={**body, "secret": "x"}, headers=auth)
    assert leaked.status_code == 400 and "unknown field `secret`" in leaked.text


def test_who_may_manage_remote_evaluators(as_admin, server, admin_token):
    cli = as_admin
    writer = add_user(server, admin_token, "wendy", member_of="dev")
    reviewer = add_user(server, admin_token, "rob", member_of="dev", role="reviewer")
    other = add_user(server, admin_token, "olga")
    create = ("evaluators", "create", "checker@dev", "--endpoint", PUBLIC_URL + "/c")
    refused = cli(*create, token=reviewer)
    assert refused.code == 1 and "[shared-writers-write]" in refused.err
    assert "rob is not a writer of @dev and cannot manage remote evaluators in it" in refused.err
    assert cli(*create, token=writer).code == 0
    for token in (reviewer, other):
        listed = cli("evaluators", "list", "--workspace", "dev", "--json", token=token)
        assert [e["name"] for e in listed.json] == ["checker"]
        no = cli("evaluators", "delete", "checker@dev", token=token)
        assert no.code == 1 and "[shared-writers-write]" in no.err
    # a personal workspace: its owner only, admins included in "others"
    assert cli("evaluators", "create", "mine", "--endpoint", PUBLIC_URL, token=writer).code == 0
    for token in (other, admin_token):
        no = cli("evaluators", "create", "x@wendy", "--endpoint", PUBLIC_URL, token=token)
        assert no.code == 1 and "[personal-owner-writes]" in no.err
        no = cli("evaluators", "delete", "mine@wendy", token=token)
        assert no.code == 1 and "[personal-owner-writes]" in no.err
    assert cli("evaluators", "delete", "mine", token=writer).code == 0
    assert cli("evaluators", "delete", "checker@dev", token=writer).code == 0


def test_endpoints_pass_the_egress_policy(as_admin):
    cli = as_admin
    for url, rule in (
        ("http://127.0.0.1:9000/required", "loopback"),
        ("http://10.0.0.8/required", "private"),
        ("http://169.254.169.254/latest", "link-local"),
    ):
        # personal workspaces too: the server calls every remote evaluator
        for ref in ("e@dev", "e"):
            refused = cli("evaluators", "create", ref, "--endpoint", url)
            assert refused.code == 1 and "[egress-refused]" in refused.err, refused.err
            assert rule in refused.err
    assert cli("evaluators", "list", "--json").json == []


def test_bad_input(as_admin):
    cli = as_admin
    cases = [
        (("bad name@dev", "--endpoint", PUBLIC_URL), "[bad-name]"),
        (("exact_match@dev", "--endpoint", PUBLIC_URL), "has the name of a built-in evaluator"),
        (("judge@dev", "--endpoint", PUBLIC_URL), "has the name of a built-in evaluator"),
        (("e@dev", "--endpoint", "ftp://example.com/x"), "[bad-url]"),
        (("e@dev", "--endpoint", "https://u:p@evals.example.com/x"), "has credentials"),
        (("e@dev", "--endpoint", PUBLIC_URL, "--timeout", "0"), "[bad-timeout]"),
        (("e@dev", "--endpoint", PUBLIC_URL, "--timeout", "601"), "at most 600 seconds"),
        (("e@dev", "--endpoint", PUBLIC_URL, "--kind", "vibes"), "usage error"),
        (("e@dev", "--endpoint", PUBLIC_URL, "--api-key-env", "NOT_SET_X"), "is not set"),
        (("e@dev", "--workspace", "prod", "--endpoint", PUBLIC_URL), "give the workspace once"),
        (("e@nowhere", "--endpoint", PUBLIC_URL), "[no-such-workspace]"),
    ]
    for args, message in cases:
        result = cli("evaluators", "create", *args)
        assert result.code in (1, 2) and message in result.err, (args, result.err)
    assert cli("evaluators", "create", "e@dev", "--endpoint", PUBLIC_URL + "/?code=abc").code == 0
    dup = cli("evaluators", "create", "e@dev", "--endpoint", PUBLIC_URL)
    assert dup.code == 1 and "[evaluator-exists]" in dup.err
    assert cli("evaluators", "list", "--json").json[0]["endpoint"] == PUBLIC_URL + "/?code=abc"


def test_lint_warns_only_for_evaluators_the_workspace_lacks(as_admin, server, admin_token):
    cli = as_admin
    assert cli("evaluators", "create", "tone@dev", "--endpoint", PUBLIC_URL).code == 0
    body = {"custom_evaluators": ["tone", "citations"]}
    answer = admin_api(server, admin_token, "POST", "/api/workspaces/dev/lint", json=body).json()
    assert answer["unknown_custom_evaluators"] == ["citations"]
    # another workspace does not know @dev's evaluators
    other = admin_api(server, admin_token, "POST", "/api/workspaces/admin/lint", json=body).json()
    assert other["unknown_custom_evaluators"] == ["citations", "tone"]


# --------------------------------------------------------------------------- end to end

GRADED_CASE = """\
input:
  question: {question!r}
expected:
  answer: {answer!r}
evaluators:
  judge:
    rubric: 'The answer gives the product. expect "{answer}"'
  custom:
    tools: {{required: [calculator]}}
    echo: [any, config]
"""


def dev_with_default_judge(engine, cli, judge: JudgeServer) -> str:
    """The CLI logged in as admin, @dev created and ``judge`` set as the default judge;
    returns the admin's token."""
    token = login_token(engine, "admin", ADMIN_PASSWORD)
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", engine.url)
    cli.monkeypatch.setenv("EVALKIT_TOKEN", token)
    cli.monkeypatch.setenv("JUDGE_KEY", "judge-key")
    assert cli("workspaces", "create", "dev").code == 0
    made = cli(
        "llm-providers", "create", "local", "--base-url", judge.base_url,
        "--api-key-env", "JUDGE_KEY",
    )  # fmt: skip
    assert made.code == 0, made.err
    assert cli("judge-default", "set", "--provider", "local", "--model", "judge-1").code == 0
    return token


def test_a_harness_run_is_graded_by_the_judge_and_remote_evaluators(database_url, tmp_path, cli):
    judge = JudgeServer().start()
    evals = EvaluatorServer(api_key=KEY).start()
    engine = engine_server(database_url, tmp_path)
    try:
        token = dev_with_default_judge(engine, cli, judge)
        cli.monkeypatch.setenv("EVALS_KEY", KEY)
        for name in ("tools", "echo"):
            made = cli(
                "evaluators", "create", f"{name}@dev", "--endpoint", evals.endpoint(name),
                "--api-key-env", "EVALS_KEY",
            )  # fmt: skip
            assert made.code == 0, made.err
        repo = Repo(tmp_path / "repo")
        repo.case("graded", "mul", GRADED_CASE.format(question="What is 6 * 7?", answer="42"))
        repo.case("graded", "add", GRADED_CASE.format(question="What is 2 + 3?", answer="6"))
        synced = cli("sync", str(repo.suite("graded")), "--workspace", "dev")
        assert synced.code == 0, synced.err
        assert "W-CUSTOM-UNKNOWN" not in synced.out + synced.err
        with harness() as ref:
            create_agent(engine, token, "dev", "ref", ref.url)
            run = cli("run", "graded@dev", "--agent", "ref@dev", "--json")
            assert run.code == 0, run.err
        runs = {r["case_id"]: r["id"] for r in run.json["run_list"]}
        scores = {}
        for case_id, run_id in runs.items():
            found = api(engine, token, "GET", f"/api/runs/{run_id}/scores").json()
            scores[case_id] = {s["name"]: s for s in found}
    finally:
        engine.stop()
        evals.stop()
        judge.stop()

    mul, add = scores["mul"], scores["add"]
    assert mul["judge"]["value"] == 1.0 and mul["judge"]["explanation"] == "The answer mentions 42."
    assert mul["judge"]["judge_model"] == "judge-1" and mul["judge"]["prompt_hash"] == PROMPT_HASH
    assert add["judge"]["value"] == 0.0 and add["judge"]["explanation"] == (
        "The answer does not mention 6."
    )
    for found in (mul, add):
        assert found["tools"]["value"] == 1.0 and found["tools"]["evaluator"] == "remote:tools"
        assert found["tools.call_count"]["kind"] == "gauge"
        assert found["tools.call_count"]["value"] is None
        assert found["echo"]["value"] == 1.0
    assert {r["headers"]["authorization"] for r in judge.requests} == {"Bearer judge-key"}
    assert {r["headers"]["authorization"] for r in evals.requests} == {f"Bearer {KEY}"}
    # the harness provides its trajectory, so the judge saw the steps
    assert all("<steps>" in judge.user_messages(i)[0] for i in range(len(judge.requests)))
    echo = [r["body"] for r in evals.requests if r["path"] == "echo"]
    assert {b["case"]["id"] for b in echo} == {"mul", "add"}
    assert all(b["config"] == ["any", "config"] for b in echo)
    assert all(b["run"]["trajectory"]["steps"] for b in echo)


def test_the_docs_show_the_request_and_answer_evalkit_uses():
    text = (Path(__file__).parents[2] / "docs" / "evaluators.md").read_text()
    blocks = [b.split("```")[0] for b in text.split("```json\n")[1:]]
    request, answer = (msgspec.json.decode(b) for b in blocks[:2])
    sent = build_request(context(traj=trajectory()), "required_tool_calls", {})
    assert list(request) == list(sent)
    assert list(request["case"]) == list(sent["case"])
    assert list(request["run"]) == list(sent["run"])
    for score in answer["scores"]:
        msgspec.convert(score, Score)


LIBRARY_CASE = """\
input:
  question: What is 6 * 7?
expected:
  answer: '42'
evaluators:
  judges:
    tool_use: true
    answer_correctness: true
"""


@pytest.mark.parametrize("lacks", [frozenset(), frozenset({"tool_calls"})], ids=["all", "no-tools"])
def test_a_harness_run_is_graded_by_library_judges(database_url, tmp_path, cli, lacks):
    from evalkit.harness.reference import Behaviour
    from evalkit.scoring.judge_library import LIBRARY

    judge = JudgeServer().start()
    engine = engine_server(database_url, tmp_path)
    try:
        token = dev_with_default_judge(engine, cli, judge)
        repo = Repo(tmp_path / "repo")
        repo.case("lib", "mul", LIBRARY_CASE)
        synced = cli("sync", str(repo.suite("lib")), "--workspace", "dev")
        assert synced.code == 0, synced.err
        with harness(Behaviour(without=lacks)) as ref:
            create_agent(engine, token, "dev", "ref", ref.url)
            run = cli("run", "lib@dev", "--agent", "ref@dev", "--json")
            assert run.code == 0, run.err
        [run_id] = [r["id"] for r in run.json["run_list"]]
        found = api(engine, token, "GET", f"/api/runs/{run_id}/scores").json()
        scores = {s["name"]: s for s in found}
    finally:
        engine.stop()
        judge.stop()
    correct = scores["judge.answer_correctness"]
    spec = LIBRARY["answer_correctness"]
    assert correct["evaluator"] == "judge:answer_correctness" and correct["error"] is None
    assert correct["prompt_hash"] == spec.prompt_hash and correct["judge_model"] == "judge-1"
    users = [judge.user_messages(i)[0] for i in range(len(judge.requests))]
    assert any(sections(u)["rubric"] == spec.rubric for u in users)
    tool_use = scores["judge.tool_use"]
    if lacks:  # no tool calls: tool_use is skipped with the reason, and asks nothing
        assert tool_use["value"] is None and tool_use["error"] is None
        assert "provides.tool_calls is false" in tool_use["skipped"]
        assert len(judge.requests) == 1
        return
    # the reference harness provides its tool calls: tool_use was shown the steps
    assert tool_use["skipped"] is None and tool_use["error"] is None
    assert tool_use["prompt_hash"] == LIBRARY["tool_use"].prompt_hash
    assert any(
        sections(u)["rubric"] == LIBRARY["tool_use"].rubric
        and 'call calculator {"expression":"6 * 7"}' in u
        for u in users
    )
    assert len(judge.requests) == 2
