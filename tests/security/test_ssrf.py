"""Server-side request forgery: the URLs users give the server to call (a shared agent's
harness, a remote evaluator, an LLM provider for the judge) pass the egress policy when
they are created or changed, and again on every call.

Refused: loopback, link-local (cloud metadata), private, CGNAT, unspecified and IPv6
loopback addresses, in any spelling, and names that resolve to them; URLs with
credentials in them. At call time: a DNS answer that changed since the URL was accepted,
and a redirect to a private address (never followed). Each refusal names its rule.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from evalkit.cases.model import JudgeConfig
from evalkit.config import EgressSettings
from evalkit.harness.client import HarnessClient, HarnessError
from evalkit.harness.reference import ReferenceHarness
from evalkit.http1 import Http1Client
from evalkit.model.harness import Provides
from evalkit.outbound import EgressRefused, make_client
from evalkit.scoring import judge as judge_mod
from evalkit.scoring.judge import JudgeSetup
from evalkit.scoring.model import RunContext
from evalkit.scoring.remote import RemoteEvaluator, evaluate
from tests.conftest import ADMIN_PASSWORD
from tests.integration.judge_helpers import (
    PUBLIC_URL,
    EvaluatorServer,
    JudgeServer,
    LoopbackServer,
)
from tests.security.conftest import Api, login, module_server

STRICT = EgressSettings()

# (URL, the rule its refusal names). Hosts spelled every way a resolver accepts them.
PRIVATE_URLS = [
    ("http://127.0.0.1:8700/", "a loopback address"),
    ("http://127.1/", "a loopback address"),
    ("http://2130706433/", "a loopback address"),  # 127.0.0.1 as one number
    ("http://0x7f000001/", "a loopback address"),
    ("http://[::1]:8700/", "a loopback address"),
    ("http://[::ffff:127.0.0.1]/", "a loopback address"),
    ("http://localhost:8700/", "a loopback address"),  # a name resolving to loopback
    ("http://169.254.169.254/latest/meta-data/", "a link-local address (cloud metadata"),
    ("http://[::ffff:169.254.169.254]/", "a link-local address (cloud metadata"),
    ("http://[fe80::1]/", "a link-local address"),
    ("http://10.0.0.5/", "a private address"),
    ("http://172.16.5.4/", "a private address"),
    ("http://192.168.1.10/", "a private address"),
    ("http://[fd00::1]/", "a private address"),
    ("http://100.64.0.1/", "a private address"),  # carrier-grade NAT
    ("http://100.100.100.200/", "a private address"),  # Alibaba Cloud's metadata service
    ("http://0.0.0.0:8700/", "an unspecified address"),
]
CREDENTIAL_URLS = [
    f"http://user:secret-password@{PUBLIC_URL.removeprefix('http://')}/",
    f"http://token@{PUBLIC_URL.removeprefix('http://')}/",
]


def _rule(message: str, rule: str) -> bool:
    # "a loopback address" in "... is a loopback address, and the egress policy ..."; an
    # unspecified address reads "a unspecified address" in the message.
    return rule.replace("an unspecified", "a unspecified") in message


# --------------------------------------------------------------------------- fake DNS


class Resolver:
    """Answers for test names (``*.rebind.test``) that a test may change between calls;
    every other name goes to the system's resolver."""

    def __init__(self) -> None:
        self.answers: dict[str, str] = {}
        self._real = socket.getaddrinfo

    def __call__(self, host, port, *args, **kwargs):
        address = self.answers.get(host.decode() if isinstance(host, bytes) else host)
        if address is None:
            return self._real(host, port, *args, **kwargs)
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        return [(family, socket.SOCK_STREAM, 6, "", (address, port or 0))]


@pytest.fixture
def dns(monkeypatch: pytest.MonkeyPatch) -> Resolver:
    resolver = Resolver()
    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    return resolver


# --------------------------------------------------------------------------- a server


@pytest.fixture(scope="module")
def harness() -> Iterator[ReferenceHarness]:
    with ReferenceHarness() as running:
        yield running


@pytest.fixture(scope="module")
def server(pg_admin_url, template_url, tmp_path_factory):
    """The default egress policy: nothing private."""
    with module_server(pg_admin_url, tmp_path_factory.mktemp("ssrf")) as running:
        yield running


@pytest.fixture(scope="module")
def admin(server) -> Api:
    api = Api(server, login(server, "admin", ADMIN_PASSWORD))
    api.ok("POST", "/api/workspaces", json={"name": "dev"})
    case = {"id": "c1", "content": {"input": {"q": "x"}}}
    api.ok("POST", "/api/workspaces/dev/datasets/finance/sync", json={"cases": [case]})
    api.ok("POST", "/api/workspaces/dev/agents", json={"name": "bot", "harness_url": PUBLIC_URL})
    return api


@pytest.fixture(scope="module")
def pat(server, admin) -> Api:
    """A user with no role beyond logging in: the owner of personal agents."""
    admin.ok("POST", "/api/users", json={"username": "pat", "password": "pat-password-1"})
    return Api(server, login(server, "pat", "pat-password-1"))


def _creations(url: str, n: int) -> list[tuple[str, str, dict]]:
    """Every way a user hands the server a URL to call later."""
    return [
        ("POST", "/api/workspaces/dev/agents", {"name": f"a{n}", "harness_url": url}),
        ("PATCH", "/api/workspaces/dev/agents/bot", {"harness_url": url}),
        ("POST", "/api/workspaces/dev/evaluators", {"name": f"e{n}", "endpoint": url}),
        ("POST", "/api/llm-providers", {"name": f"p{n}", "base_url": url}),
    ]


@pytest.mark.parametrize(("url", "rule"), PRIVATE_URLS)
def test_private_addresses_are_refused_when_a_url_is_given(admin, url, rule):
    for method, path, body in _creations(url, PRIVATE_URLS.index((url, rule))):
        r = admin(method, path, json=body)
        assert r.status_code == 400, (path, r.text)
        error = r.json()["error"]
        assert error["code"] == "egress-refused", (path, error)
        assert _rule(error["message"], rule), (path, error["message"])
        assert "egress.allow_private" in error["message"]
    agent = admin.ok("GET", "/api/workspaces/dev/agents/bot")
    assert agent["harness_url"] == PUBLIC_URL  # no edit went through


@pytest.mark.parametrize("url", CREDENTIAL_URLS)
def test_urls_with_credentials_are_refused(admin, url):
    expected = {"agents": "bad-harness-url", "evaluators": "bad-url", "llm-providers": "bad-url"}
    for method, path, body in _creations(url, CREDENTIAL_URLS.index(url) + 100):
        r = admin(method, path, json=body)
        assert r.status_code == 400, (path, r.text)
        error = r.json()["error"]
        kind = next(k for k in expected if f"/{k}" in path)
        assert error["code"] == expected[kind], (path, error)
        assert "has credentials in it (user:password@)" in error["message"], error


def test_a_personal_agent_url_with_credentials_is_refused_too(pat):
    """Everyone logged in reads every workspace: a personal agent's URL is public too.
    (Its host is not checked: the owner's own machine calls it, not the server.)"""
    r = pat(
        "POST",
        "/api/workspaces/pat/agents",
        json={"name": "mine", "harness_url": "http://me:hunter22@localhost:8700"},
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad-harness-url", r.text
    assert "credentials" in r.json()["error"]["message"]
    assert "hunter22" not in pat.ok("GET", "/api/agents").__repr__()
    r = pat(
        "PATCH",
        "/api/workspaces/pat/agents/mine",
        json={"harness_url": "http://me:hunter22@localhost:8700"},
    )
    assert r.status_code == 404  # nothing was created to edit
    pat.ok(
        "POST",
        "/api/workspaces/pat/agents",
        json={"name": "mine", "harness_url": "http://localhost:8700"},
    )
    r = pat(
        "PATCH",
        "/api/workspaces/pat/agents/mine",
        json={"harness_url": "http://me:hunter22@localhost:8700"},
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad-harness-url", r.text


def test_the_server_never_calls_a_personal_agent(pat):
    """A personal agent may point at its owner's loopback; the server neither checks nor
    drives it, so that is no way to reach the server's own network."""
    pat.ok(
        "POST",
        "/api/workspaces/pat/agents",
        json={"name": "meta", "harness_url": "http://169.254.169.254/"},
    )
    r = pat("POST", "/api/workspaces/pat/agents/meta/check", json={})
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "server-cannot-drive-personal-agent"
    case = {"id": "p1", "content": {"input": {"q": "x"}}}
    pat.ok("POST", "/api/workspaces/pat/datasets/d/sync", json={"cases": [case]})
    r = pat("POST", "/api/schedules", json={"dataset": "d", "agent": "meta", "cron": "0 1 * * *"})
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "server-cannot-drive-personal-agent"


def test_public_urls_are_accepted(admin):
    for method, path, body in _creations(PUBLIC_URL + "/v1", 200):
        r = admin(method, path, json=body)
        assert r.status_code in (200, 201), (path, r.text)
    admin.ok("PATCH", "/api/workspaces/dev/agents/bot", json={"harness_url": PUBLIC_URL})


# --------------------------------------------------------------------------- call time


def test_a_harness_name_that_starts_resolving_to_loopback_is_refused_at_call_time(
    admin, harness, dns
):
    """Accepted while its name resolved to a public address; when the answer changes to
    the server's loopback (DNS rebinding), starting an experiment and checking the agent
    are refused, and the harness listening there gets nothing."""
    port = harness.url.rsplit(":", 1)[1]
    url = f"http://harness.rebind.test:{port}"
    dns.answers["harness.rebind.test"] = "203.0.113.10"
    admin.ok("POST", "/api/workspaces/dev/agents", json={"name": "rebound", "harness_url": url})
    dns.answers["harness.rebind.test"] = "127.0.0.1"
    before = sum(harness.counters.calls.values())

    r = admin("POST", "/api/experiments", json={"dataset": "finance@dev", "agent": "rebound@dev"})
    assert r.status_code == 502, r.text
    message = r.json()["error"]["message"]
    assert "harness.rebind.test resolves to 127.0.0.1, which is a loopback address" in message
    r = admin("POST", "/api/workspaces/dev/agents/rebound/check", json={})
    assert r.status_code == 400 and r.json()["error"]["code"] == "egress-refused", r.text
    assert "a loopback address" in r.json()["error"]["message"]
    assert sum(harness.counters.calls.values()) == before
    # An edit that keeps the URL is checked again as well.
    r = admin("PATCH", "/api/workspaces/dev/agents/rebound", json={"harness_url": url})
    assert r.status_code == 400 and r.json()["error"]["code"] == "egress-refused", r.text


def _context() -> RunContext:
    return RunContext(
        run_id=1,
        experiment_id=1,
        workspace_id=1,
        case_id="c1",
        repetition=1,
        case={"input": {"q": "x"}, "evaluators": {"judge": {"rubric": 'expect "4"'}}},
        answer="4",
        output=None,
        trajectory=None,
        trajectory_valid=False,
        provides=Provides(),
        state="scoring",
    )


@pytest.fixture
def judge_server() -> Iterator[JudgeServer]:
    running = JudgeServer().start()
    yield running
    running.stop()


@pytest.fixture
def evaluator_server() -> Iterator[EvaluatorServer]:
    running = EvaluatorServer().start()
    yield running
    running.stop()


async def test_judge_and_evaluator_names_that_turn_private_are_refused_at_call_time(
    dns, judge_server, evaluator_server
):
    """The scoring jobs call judges and remote evaluators through the same policy client:
    a name that resolves to loopback by the time of the call is refused and recorded on
    the score, and nothing reaches the address."""
    judge_mod._PLAIN_ONLY.clear()
    judge_port = judge_server.url.rsplit(":", 1)[1]
    evaluator_port = evaluator_server.url.rsplit(":", 1)[1]
    dns.answers["judge.rebind.test"] = "127.0.0.1"
    dns.answers["evals.rebind.test"] = "127.0.0.1"
    judge = JudgeSetup(
        provider="p",
        base_url=f"http://judge.rebind.test:{judge_port}/v1",
        model="m",
        api_key="sk-judge",
        attempts=1,
    )
    evaluator = RemoteEvaluator(
        name="tools",
        workspace="dev",
        endpoint=f"http://evals.rebind.test:{evaluator_port}/tools",
        api_key="ek-eval",
    )
    async with make_client(STRICT) as http:
        [graded] = await judge_mod.grade(
            _context(), JudgeConfig(rubric='expect "4"'), judge=judge, http=http
        )
        [scored] = await evaluate(_context(), "tools", {}, evaluator=evaluator, http=http)
    for item in (graded, scored):
        assert item.value is None
        assert "resolves to 127.0.0.1, which is a loopback address" in item.error, item.error
    assert judge_server.requests == [] and evaluator_server.requests == []


class Recorder(LoopbackServer):
    """Records every request; answers 200 (a sink) or a redirect to ``location``."""

    def __init__(self, location: str | None = None) -> None:
        self.seen: list[str] = []
        self.location = location

        async def any_path(request: Request) -> Response:
            self.seen.append(f"{request.method} {request.url.path}")
            if self.location:
                return RedirectResponse(self.location, 302)
            return JSONResponse({"provides": {}, "accepts": {}})

        route = Route("/{path:path}", any_path, methods=["GET", "POST"])
        super().__init__(Starlette(routes=[route]))


@pytest.fixture
def sink() -> Iterator[Recorder]:
    running = Recorder().start()
    yield running
    running.stop()


@pytest.mark.parametrize("target", ["sink", "http://169.254.169.254/latest/meta-data/"])
async def test_redirects_to_private_addresses_are_never_followed(sink, target):
    """A URL the policy allows (listed in egress.allowed_prefixes) answers with a redirect
    to a private address: the harness client, the judge and the remote evaluator each
    record a failure, and the private address gets no request."""
    location = sink.url + "/stolen" if target == "sink" else target
    redirector = Recorder(location).start()
    try:
        policy = EgressSettings(allowed_prefixes=[redirector.url])
        judge_mod._PLAIN_ONLY.clear()
        async with Http1Client(policy) as harness_http:
            with pytest.raises(HarnessError) as caught:
                await HarnessClient(redirector.url, "hk-harness", harness_http).capabilities()
            # The same client refuses the redirect target when asked for it directly.
            if target == "sink":
                with pytest.raises(EgressRefused, match="starts with none of"):
                    await harness_http.request("GET", location, max_body=2**20)
        async with make_client(policy) as http:
            [graded] = await judge_mod.grade(
                _context(),
                JudgeConfig(rubric='expect "4"'),
                judge=JudgeSetup(
                    provider="p", base_url=redirector.url + "/v1", model="m", attempts=1
                ),
                http=http,
            )
            evaluator = RemoteEvaluator(name="e", workspace="dev", endpoint=redirector.url + "/e")
            [scored] = await evaluate(_context(), "e", {}, evaluator=evaluator, http=http)
            # The same client refuses the redirect target when asked for it directly.
            if target == "sink":
                with pytest.raises(Exception, match="starts with none of"):
                    await http.get(location)
    finally:
        redirector.stop()
    assert "GET /capabilities" in redirector.seen
    # The harness client reads the 302 itself as the answer (not JSON): not followed.
    assert "GET /capabilities: the answer is not JSON" in str(caught.value), caught.value
    assert graded.value is None and "302" in graded.error, graded.error
    assert scored.value is None and "302" in scored.error, scored.error
    assert sink.seen == []
