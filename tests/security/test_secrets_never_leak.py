"""Secrets never leave the server: agent, evaluator and LLM provider keys, passwords,
login and agent tokens, and the server's encryption_key.

One story runs through the real server and worker: users with passwords log in, agents,
remote evaluators and an LLM provider get keys (through the API and the CLI), agent
tokens are minted and used, an experiment runs against a keyed harness and is scored by
a keyed remote evaluator and a keyed judge, passwords are changed and reset. Every
response body and header, every CLI output, every web page and every log record at DEBUG
is kept, then searched for every secret in clear, base64 (standard and URL-safe, with or
without padding), hex and URL-encoded. The one answer that hands out a token or a
generated password (shown once) is kept apart and must hold it.

Then the database: every row of every table, as text, holds none of them either; keys
are ciphertext that decrypts only with the server's key, and tokens are SHA-256 digests.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import quote

import httpx
import psycopg
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from evalkit.auth.secrets import SecretBox
from evalkit.harness.reference import ReferenceHarness
from evalkit.store import agents as agents_store
from evalkit.store import evaluators as evaluators_store
from evalkit.store import judges as judges_store
from tests.conftest import ADMIN_PASSWORD, RunningServer
from tests.integration.judge_helpers import (
    EvaluatorServer,
    JudgeBehaviour,
    JudgeServer,
    LoopbackServer,
)
from tests.integration.runs_helpers import fast_engine
from tests.security.conftest import module_server

AGENT_KEY = "hk-agent-" + secrets.token_hex(12)
AGENT_KEY_2 = "hk-agent-new-" + secrets.token_hex(12)
CLI_AGENT_KEY = "hk-cli-" + secrets.token_hex(12)
EVAL_KEY = "ek-eval-" + secrets.token_hex(12)
JUDGE_KEY = "sk-judge-" + secrets.token_hex(12)
ALICE_PASSWORD = "alice-" + secrets.token_hex(8)
ALICE_PASSWORD_2 = "alice-new-" + secrets.token_hex(8)

CASE = {
    "input": {"question": "What is 2 + 2?"},
    "expected": {"answer": "4"},
    "evaluators": {
        "exact_match": True,
        "judge": {"rubric": 'expect "4"'},
        "custom": {"tools": {"required": []}},
    },
}


def forms(secret: str) -> set[str]:
    """The spellings a secret could leak in."""
    raw = secret.encode()
    found = {
        secret,
        raw.hex(),
        quote(secret, safe=""),
        base64.b64encode(raw).decode(),
        base64.urlsafe_b64encode(raw).decode(),
    }
    found |= {f.rstrip("=") for f in found}
    return {f for f in found if len(f) >= 8}


class LogLines(logging.Handler):
    """Every log record of every logger, formatted with its traceback, as it is emitted."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(self.format(record))
        except Exception as exc:  # a record that cannot be formatted is still searched
            self.lines.append(f"{record.name} {record.msg!r} {record.args!r} ({exc})")


@dataclass
class Story:
    server: RunningServer
    secrets: dict[str, str] = field(default_factory=dict)
    """name -> secret value."""
    seen: list[tuple[str, str]] = field(default_factory=list)
    """(where, text): every answer, output and page the story saw."""
    issued: dict[str, str] = field(default_factory=dict)
    """secret name -> the one answer that handed it out."""
    logs: LogLines = field(default_factory=LogLines)
    client: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=60))

    def call(
        self,
        method: str,
        path: str,
        token: str | None = None,
        *,
        issues: str | None = None,
        expect: int | None = None,
        **kw,
    ) -> httpx.Response:
        """A request whose answer is searched later; ``issues`` names the secret this answer
        hands out (kept apart: it is the one place that secret may appear)."""
        headers = dict(kw.pop("headers", None) or {})
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        r = self.client.request(method, self.server.url + path, headers=headers, **kw)
        text = answer_text(r)
        if issues is None:
            self.seen.append((f"{method} {path} -> {r.status_code}", text))
        else:
            self.issued[issues] = text
        if expect is not None:
            assert r.status_code == expect, (method, path, r.status_code, r.text)
        return r

    def ok(self, method: str, path: str, token: str | None = None, **kw) -> dict:
        r = self.call(method, path, token, **kw)
        assert r.status_code < 300, (method, path, r.status_code, r.text)
        return r.json() if r.content else {}

    def login(self, username: str, password: str, name: str) -> str:
        body = {"username": username, "password": password}
        r = self.call("POST", "/api/auth/login", issues=name, json=body, expect=200)
        self.secrets[name] = r.json()["token"]
        return self.secrets[name]


def answer_text(r: httpx.Response) -> str:
    head = "\n".join(f"{k}: {v}" for k, v in r.headers.multi_items())
    return f"{r.status_code}\n{head}\n\n{r.content.decode(errors='replace')}"


def leaks(story: Story, texts: list[tuple[str, str]]) -> list[str]:
    found = []
    for name, secret in story.secrets.items():
        for form in forms(secret):
            for where, text in texts:
                if form in text:
                    found.append(f"{name} ({form[:12]}...) in {where}")
    return found


# --------------------------------------------------------------------------- the story


@pytest.fixture(scope="module")
def upstreams() -> Iterator[tuple[ReferenceHarness, EvaluatorServer, JudgeServer]]:
    harness = ReferenceHarness(api_key=AGENT_KEY_2).start()
    evaluator = EvaluatorServer(api_key=EVAL_KEY).start()
    judge = JudgeServer(JudgeBehaviour(api_key=JUDGE_KEY)).start()
    try:
        yield harness, evaluator, judge
    finally:
        judge.stop()
        evaluator.stop()
        harness.stop()


@pytest.fixture(scope="module")
def story(pg_admin_url, template_url, tmp_path_factory, upstreams) -> Iterator[Story]:
    harness, evaluator, judge = upstreams
    logs = LogLines()
    root = logging.getLogger()
    level = root.level
    root.addHandler(logs)
    root.setLevel(logging.DEBUG)
    try:
        tmp = tmp_path_factory.mktemp("secrets")
        with module_server(pg_admin_url, tmp, worker=True, configure=fast_engine) as server:
            s = Story(server, logs=logs)
            s.secrets["encryption_key"] = server.settings.encryption_key
            s.secrets["encryption_key_bytes"] = base64.b64decode(
                server.settings.encryption_key
            ).hex()
            try:
                tell(s, harness, evaluator, judge)
                yield s
            finally:
                s.client.close()
    finally:
        root.removeHandler(logs)
        root.setLevel(level)


def tell(s: Story, harness, evaluator, judge) -> None:
    s.secrets |= {
        "agent key": AGENT_KEY,
        "agent key (edited)": AGENT_KEY_2,
        "evaluator key": EVAL_KEY,
        "judge key": JUDGE_KEY,
        "alice's password": ALICE_PASSWORD,
        "alice's new password": ALICE_PASSWORD_2,
        "admin's password": ADMIN_PASSWORD,
    }
    admin = s.login("admin", ADMIN_PASSWORD, "admin's login token")
    s.ok("POST", "/api/users", admin, json={"username": "alice", "password": ALICE_PASSWORD})
    r = s.call(
        "POST", "/api/users", admin, issues="bob's generated password", json={"username": "bob"}
    )
    s.secrets["bob's generated password"] = r.json()["generated_password"]
    s.ok("POST", "/api/workspaces", admin, json={"name": "dev"})
    s.ok("POST", "/api/workspaces/dev/members", admin, json={"username": "alice", "role": "writer"})
    alice = s.login("alice", ALICE_PASSWORD, "alice's login token")
    bob = s.login("bob", s.secrets["bob's generated password"], "bob's login token")
    s.ok(
        "POST",
        "/api/workspaces/dev/datasets/math/sync",
        alice,
        json={"cases": [{"id": "add", "content": CASE}]},
    )

    # Keys in: an agent (then a new key), a remote evaluator, an LLM provider.
    agent = {
        "name": "bot",
        "harness_url": harness.url,
        "api_key": AGENT_KEY,
        "api_key_env": "BOT_KEY",
    }
    s.ok("POST", "/api/workspaces/dev/agents", alice, json=agent)
    s.ok("PATCH", "/api/workspaces/dev/agents/bot", alice, json={"max_concurrent_runs": 2})
    s.ok("PATCH", "/api/workspaces/dev/agents/bot", alice, json={"api_key": AGENT_KEY_2})
    body = {"name": "tools", "endpoint": evaluator.endpoint("tools"), "api_key": EVAL_KEY}
    s.ok("POST", "/api/workspaces/dev/evaluators", alice, json=body)
    body = {"name": "judge", "base_url": judge.base_url, "api_key": JUDGE_KEY}
    s.ok("POST", "/api/llm-providers", admin, json=body)
    s.ok("PUT", "/api/judge-default", admin, json={"provider": "judge", "model": "judge-1"})

    # An agent token, minted and used by the collector.
    r = s.call(
        "POST",
        "/api/workspaces/dev/agents/bot/tokens",
        alice,
        issues="agent token",
        json={"note": "prod"},
    )
    s.secrets["agent token"] = token = r.json()["token"]
    span = {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "agent", "startTimeUnixNano": "1"}
    span["attributes"] = [{"key": "session.id", "value": {"stringValue": "s1"}}]
    s.ok(
        "POST",
        "/api/otel/v1/traces",
        token,
        json={"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]},
    )

    # The harness check and an experiment send the agent's key; scoring sends the others.
    report = s.ok("POST", "/api/workspaces/dev/agents/bot/check", alice, json={})
    assert harness.counters.calls["capabilities"] >= 1, report
    experiment = s.ok(
        "POST", "/api/experiments", alice, json={"dataset": "math@dev", "agent": "bot@dev"}
    )
    detail = wait_finished(s, alice, experiment["id"])
    assert [r["state"] for r in detail["run_list"]] == ["done"], detail  # the key worked
    assert evaluator.requests and judge.requests, "scoring called both"
    assert judge.requests[-1]["headers"]["authorization"] == f"Bearer {JUDGE_KEY}"
    assert evaluator.requests[-1]["headers"]["authorization"] == f"Bearer {EVAL_KEY}"

    # Every read a user has of them.
    reads = [
        "/api/agents",
        "/api/workspaces/dev/agents",
        "/api/workspaces/dev/agents/bot",
        "/api/evaluators",
        "/api/workspaces/dev/evaluators",
        "/api/llm-providers",
        "/api/judge-default",
        "/api/tokens",
        "/api/workspaces/dev/agents/bot/tokens",
        "/api/users",
        "/api/auth/whoami",
        "/api/audit",
        "/api/workspaces",
        "/api/workspaces/dev/members",
        "/api/experiments",
        f"/api/experiments/{experiment['id']}",
        f"/api/experiments/{experiment['id']}/scores",
        f"/api/experiments/{experiment['id']}/runs",
        f"/api/experiments/{experiment['id']}/rounds",
        "/api/traces",
        "/api/trace-sessions",
        "/api/workspaces/dev/agents/bot/sessions/s1",
        "/api/openapi.json",
        "/api/cli",
    ]
    for run in detail["run_list"]:
        reads += [f"/api/runs/{run['id']}?trajectory=1", f"/api/runs/{run['id']}/scores"]
    for path in reads:
        s.ok("GET", path, admin)
        if path != "/api/audit":  # admins only
            s.ok("GET", path, bob)

    # Passwords: alice changes hers, the admin resets bob's.
    body = {"old_password": ALICE_PASSWORD, "new_password": ALICE_PASSWORD_2}
    s.ok("POST", "/api/auth/password", alice, json=body)
    r = s.call(
        "POST", "/api/users/bob/reset-password", admin, issues="bob's reset password", expect=200
    )
    s.secrets["bob's reset password"] = r.json()["generated_password"]
    # Wrong guesses, stale tokens and refused keys answer without echoing them.
    s.call(
        "POST",
        "/api/auth/login",
        json={"username": "alice", "password": ALICE_PASSWORD},
        expect=401,
    )
    s.call("GET", "/api/auth/whoami", bob, expect=401)
    too_long = {**agent, "name": "b2", "api_key": AGENT_KEY + "x" * 9000}
    s.call("POST", "/api/workspaces/dev/agents", admin, json=too_long, expect=400)
    alice = s.login("alice", ALICE_PASSWORD_2, "alice's second login token")
    s.ok("POST", "/api/auth/logout", alice)


def wait_finished(s: Story, token: str, experiment_id: int, timeout: float = 90) -> dict:
    import time

    deadline = time.monotonic() + timeout
    while True:
        detail = s.ok("GET", f"/api/experiments/{experiment_id}", token)
        if detail["status"] == "finished":
            return detail
        assert time.monotonic() < deadline, f"experiment {experiment_id} did not finish: {detail}"
        time.sleep(0.2)


# --------------------------------------------------------------------------- checks


def test_answers_hold_no_secret(story):
    assert len(story.seen) > 60
    assert not leaks(story, story.seen), "\n".join(leaks(story, story.seen))


def test_each_token_and_generated_password_is_shown_once(story):
    for name, text in story.issued.items():
        assert story.secrets[name] in text, name
        others = {k: v for k, v in story.secrets.items() if k != name}
        assert not any(f in text for secret in others.values() for f in forms(secret)), name


def test_log_lines_hold_no_secret(story):
    lines = [(f"log line {i}", line) for i, line in enumerate(story.logs.lines)]
    assert any("evalkit" in line for _, line in lines), "the server's logs were captured"
    assert not leaks(story, lines), "\n".join(leaks(story, lines)[:20])


def test_database_rows_hold_ciphertext_and_digests_only(story):
    with psycopg.connect(story.server.db_url) as conn:
        tables = conn.execute(
            "SELECT schemaname, tablename FROM pg_tables "
            "WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
        ).fetchall()
        rows = []
        for schema, table in tables:
            for (text,) in conn.execute(f'SELECT t::text FROM "{schema}"."{table}" t'):
                rows.append((f"{schema}.{table}", text))
        assert len({t for t, _ in rows}) > 10
        assert not leaks(story, rows), "\n".join(leaks(story, rows))

        box = SecretBox(story.server.settings.encryption_key)
        for table, context, key in (
            ("agents", agents_store.key_context, AGENT_KEY_2),
            ("evaluators", evaluators_store.key_context, EVAL_KEY),
            ("llm_providers", judges_store.key_context, JUDGE_KEY),
        ):
            ident, stored = conn.execute(
                f"SELECT id, api_key FROM {table} WHERE api_key IS NOT NULL"
            ).fetchone()
            assert stored.startswith("v1:") and key not in stored
            assert box.decrypt(stored, context(ident)) == key
        digests = {bytes(r[0]) for r in conn.execute("SELECT token_hash FROM login_tokens")}
        for name in ("admin's login token", "alice's login token", "bob's login token"):
            assert hashlib.sha256(story.secrets[name].encode()).digest() in digests, name
        (agent_digest,) = conn.execute("SELECT token_hash FROM agent_tokens").fetchone()
        assert bytes(agent_digest) == hashlib.sha256(story.secrets["agent token"].encode()).digest()
        hashes = [r[0] for r in conn.execute("SELECT password_hash FROM users")]
        assert all(h is None or h.startswith("$argon2id$") for h in hashes), hashes


def test_the_cli_json_shows_no_secret(story, cli):
    """The CLI's --json output (and its human output) of every list and show; keys given to
    the CLI through --api-key-env go the same way."""
    token = story.secrets["admin's login token"]
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", story.server.url)
    cli.monkeypatch.setenv("EVALKIT_TOKEN", token)
    cli.monkeypatch.setenv("CLI_AGENT_KEY", CLI_AGENT_KEY)
    story.secrets["cli agent key"] = CLI_AGENT_KEY
    outputs = []
    commands = [
        (
            "agents",
            "create",
            "cli-bot@dev",
            "--harness-url",
            "http://203.0.113.10:8700",
            "--api-key-env",
            "CLI_AGENT_KEY",
        ),
        ("agents", "list"),
        ("agents", "show", "bot@dev"),
        ("agents", "show", "cli-bot@dev"),
        ("agents", "edit", "cli-bot@dev", "--max-concurrent-runs", "3"),
        ("evaluators", "list"),
        ("llm-providers", "list"),
        ("judge-default", "show"),
        ("tokens", "list"),
        ("users", "list"),
        ("whoami",),
        ("audit",),
        ("experiments", "list"),
        ("experiments", "show", "1"),
    ]
    for command in commands:
        for json_flag in (("--json",),) if "create" in command else (("--json",), ()):
            result = cli(*command, *json_flag)
            assert result.code == 0, (command, result.err)
            outputs.append((" ".join(command + json_flag), result.out + result.err))
    assert not leaks(story, outputs), "\n".join(leaks(story, outputs))
    lines = [(f"log line {i}", line) for i, line in enumerate(story.logs.lines)]
    assert not leaks(story, lines), "\n".join(leaks(story, lines)[:20])


def test_web_pages_show_no_secret(story):
    """The pages a logged-in user sees: the session cookie carries a login token (handed
    out once, by the login answer), and no page shows any secret."""
    with httpx.Client(base_url=story.server.url, follow_redirects=False) as browser:
        r = browser.post(
            "/login", data={"username": "admin", "password": ADMIN_PASSWORD, "next": "/"}
        )
        assert r.status_code == 303
        session = browser.cookies["evalkit_session"]
        story.secrets["web session token"] = session
        pages = [
            "/",
            "/w/dev",
            "/w/dev/agents/bot",
            "/admin",
            "/admin/workspaces",
            "/admin/judges",
            "/experiments",
            "/experiments/1",
            "/schedules",
            "/runs",
            "/docs",
        ]
        seen = []
        for path in pages:
            page = browser.get(path)
            assert page.status_code == 200, (path, page.status_code)
            seen.append((path, answer_text(page)))
        for href in sorted(set(re.findall(r'href="(/runs/\d+)"', seen[7][1])))[:3]:
            seen.append((href, answer_text(browser.get(href))))
    assert not leaks(story, seen), "\n".join(leaks(story, seen))


def test_the_search_finds_every_spelling():
    story = Story(server=None, secrets={"k": "sk-" + "a1" * 10})  # type: ignore[arg-type]
    secret = story.secrets["k"]
    for form in forms(secret):
        assert leaks(story, [("here", f"x{form}y")]), form
    assert not leaks(story, [("here", secret[:-1])])


# --------------------------------------------------------------------------- echoes


class Echo(LoopbackServer):
    """An upstream that refuses every call and quotes the Authorization header it got in
    its error, as some proxies do."""

    def __init__(self) -> None:
        async def refuse(request: Request) -> Response:
            got = request.headers.get("authorization", "")
            return JSONResponse({"error": {"message": f"invalid key {got!r}"}}, 401)

        super().__init__(Starlette(routes=[Route("/{p:path}", refuse, methods=["GET", "POST"])]))


async def test_an_upstream_quoting_the_key_back_does_not_leak_it():
    """Harness, remote evaluator and judge errors are stored on runs and scores, which
    everyone logged in reads: a key an upstream quotes back in its error is masked."""
    from evalkit.cases.model import JudgeConfig
    from evalkit.harness.client import HarnessClient, HarnessError
    from evalkit.http1 import Http1Client
    from evalkit.outbound import make_client
    from evalkit.scoring import judge as judge_mod
    from evalkit.scoring.judge import JudgeSetup
    from evalkit.scoring.remote import RemoteEvaluator, evaluate
    from tests.security.test_ssrf import _context

    key = "sk-echoed-" + secrets.token_hex(12)
    echo = Echo().start()
    try:
        async with Http1Client(None) as harness_http:
            with pytest.raises(HarnessError) as caught:
                await HarnessClient(echo.url, key, harness_http).capabilities()
        async with make_client(None) as http:
            judge = JudgeSetup(provider="p", base_url=echo.url + "/v1", model="m", api_key=key)
            [graded] = await judge_mod.grade(
                _context(), JudgeConfig(rubric='expect "4"'), judge=judge, http=http
            )
            evaluator = RemoteEvaluator(
                name="e", workspace="w", endpoint=echo.url + "/e", api_key=key
            )
            [scored] = await evaluate(_context(), "e", {}, evaluator=evaluator, http=http)
    finally:
        echo.stop()
    errors = {"harness": str(caught.value), "judge": graded.error, "evaluator": scored.error}
    for where, error in errors.items():
        assert error and "401" in error, (where, error)
        assert key not in error, f"the {where} error shows the key: {error}"
        assert "invalid key 'Bearer [key hidden]'" in error, (where, error)
