"""Walks every route of the app (from the router, so a new route cannot escape) and checks
what anonymous callers, plain users and admins get."""

from __future__ import annotations

import re

import httpx
import pytest
from starlette.routing import Mount

from evalkit.edge.routes import ENDPOINTS
from evalkit.otel.mapping import load_starter
from evalkit.web import PAGES
from tests.conftest import ADMIN_PASSWORD, start_server


# One server for the whole module: every check here is read-only or refused, and a server
# per parametrized route would cost half a second each.
@pytest.fixture(scope="module")
def server(pg_admin_url, template_url, tmp_path_factory):
    import psycopg

    from tests.conftest import with_database

    name = "evalkit_access_walk"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name} TEMPLATE evalkit_template")
    running = start_server(with_database(pg_admin_url, name), tmp_path_factory.mktemp("walk"))
    try:
        yield running
    finally:
        running.stop()
        with psycopg.connect(pg_admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def login(server, username: str, password: str) -> str:
    response = httpx.post(
        f"{server.url}/api/auth/login", json={"username": username, "password": password}
    )
    assert response.status_code == 200, response.text
    return response.json()["token"]


@pytest.fixture(scope="module")
def admin_token(server):
    return login(server, "admin", ADMIN_PASSWORD)


PUBLIC = {
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/api/cli"),
    ("GET", "/cli"),
    ("GET", "/cli/{filename}"),
    ("GET", "/api/openapi.json"),
    ("POST", "/api/auth/login"),
    # Single sign-on: what the provider is, and finishing a CLI sign-in (test_sso.py).
    ("GET", "/api/auth/sso"),
    ("POST", "/api/auth/sso/exchange"),
    ("POST", "/api/auth/sso/device"),
    ("POST", "/api/auth/sso/device/poll"),
    # Checks for itself: a signed URL, or a login (test_public_fixture_route_needs_...).
    ("GET", "/api/fixtures/{sha256}"),
}
ADMIN_ONLY = {
    ("POST", "/api/users"),
    ("POST", "/api/users/{username}/disable"),
    ("POST", "/api/users/{username}/enable"),
    ("POST", "/api/users/{username}/reset-password"),
    ("PUT", "/api/users/{username}/subject"),
    ("GET", "/api/audit"),
    ("POST", "/api/workspaces"),
    ("POST", "/api/workspaces/{workspace}/members"),
    ("DELETE", "/api/workspaces/{workspace}/members/{username}"),
    ("PUT", "/api/workspaces/{workspace}/promotion"),
    ("DELETE", "/api/workspaces/{workspace}/promotion"),
    # LLM providers and the default judge; their rules are tested in test_judge.py
    ("POST", "/api/llm-providers"),
    ("DELETE", "/api/llm-providers/{provider}"),
    ("PUT", "/api/judge-default"),
    ("DELETE", "/api/judge-default"),
}


PARAMS = {
    "workspace": "dev",
    "username": "alice",
    "dataset": "finance",
    "case_id": "c1",
    "sha256": "0" * 64,
    "agent": "bot",
    "experiment": "1",
    "other": "1",  # /api/experiments/1/compare/1: an experiment compared with itself
    "run": "1",
    "version": "1",
    "token": "1",
    "session": "s1",
    "provider": "openai",
    "evaluator": "checker",
    "schedule": "1",
    "monitor": "watch@dev",
    "proposal": "1",
}
# Non-admin writes of datasets and cases; their rules are tested in test_datasets_*.py.
DATASET_WRITES = {
    ("POST", "/api/workspaces/{workspace}/datasets"),
    ("POST", "/api/workspaces/{workspace}/datasets/{dataset}/sync"),
    ("POST", "/api/workspaces/{workspace}/lint"),
    ("POST", "/api/workspaces/{workspace}/fixtures/missing"),
    ("PUT", "/api/workspaces/{workspace}/fixtures/{sha256}"),
    ("POST", "/api/workspaces/{workspace}/cases/{case_id}/approve"),
    ("POST", "/api/workspaces/{workspace}/cases/{case_id}/reject"),
    ("POST", "/api/workspaces/{workspace}/cases/{case_id}/comments"),
}


# Agent writes: the workspace's writers and admins; their rules are tested in test_agents.py.
AGENT_WRITES = {
    ("POST", "/api/workspaces/{workspace}/agents"),
    ("PATCH", "/api/workspaces/{workspace}/agents/{agent}"),
    ("DELETE", "/api/workspaces/{workspace}/agents/{agent}"),
    ("POST", "/api/workspaces/{workspace}/agents/{agent}/check"),
    # span mapping versions; their rules are tested in test_mappings.py
    ("POST", "/api/workspaces/{workspace}/agents/{agent}/mappings"),
    ("POST", "/api/workspaces/{workspace}/agents/{agent}/mappings/{version}/activate"),
    # agent tokens; their rules are tested in test_otel_tokens.py
    ("POST", "/api/workspaces/{workspace}/agents/{agent}/tokens"),
    # remote evaluators; their rules are tested in test_remote_evaluators.py
    ("POST", "/api/workspaces/{workspace}/evaluators"),
    ("DELETE", "/api/workspaces/{workspace}/evaluators/{evaluator}"),
}
# Starting and driving experiments: anyone starts a server-driven one of a shared dataset
# and agent (test_anyone_starts_a_server_driven_experiment_of_shared_ones below); the rest
# of their rules are tested in test_runs_*.py.
EXPERIMENT_WRITES = {
    ("POST", "/api/experiments"),
    ("POST", "/api/experiments/{experiment}/resume"),
    ("POST", "/api/runs/{run}/transition"),
    # the SDK's scores, rounds and trajectory reads; tested in test_sdk_*.py
    ("POST", "/api/runs/{run}/scores"),
    ("POST", "/api/experiments/{experiment}/sdk-rounds"),
    ("POST", "/api/experiments/{experiment}/sdk-steps"),
    ("POST", "/api/runs/{run}/trajectory/refetch"),
}
# The OTLP collector (agent tokens, or writers naming the agent) and token revocation;
# their rules are tested in test_otel_bad_input.py and test_otel_tokens.py.
OTEL_WRITES = {
    ("POST", "/api/otel/v1/traces"),
    ("POST", "/api/otel/v1/metrics"),
    ("POST", "/api/otel/v1/logs"),
    ("POST", "/api/otel/check"),  # tracing.register's check: the collector's rules
    ("POST", "/api/tokens/{token}/revoke"),
}
# Schedules: writers of the schedule's workspace; tested in test_schedules.py.
SCHEDULE_WRITES = {("POST", "/api/schedules"), ("DELETE", "/api/schedules/{schedule}")}
# Monitors: writers of the agent's workspace manage them; walked in test_role_walk.py and
# tested in test_monitors.py.
MONITOR_WRITES = {
    ("POST", "/api/monitors"),
    ("PATCH", "/api/monitors/{monitor}"),
    ("DELETE", "/api/monitors/{monitor}"),
    ("POST", "/api/monitors/{monitor}/backfill"),
}
# Re-scoring an experiment and labelling its runs: write access to its workspace; tested in
# test_scoring.py, test_labels.py and test_rescoring_needs_write_access below.
SCORING_WRITES = {
    ("POST", "/api/experiments/{experiment}/evaluate"),
    ("POST", "/api/runs/{run}/labels"),
    # judge alignment (writers-align-judge): tested in test_judge_align.py
    ("POST", "/api/experiments/{experiment}/judge-proposals"),
    ("POST", "/api/judge-proposals/{proposal}/accept"),
}
# Reads of things this module's server has none of (a judge proposal needs a judge and
# labels); that any user reads them is tested where they are made (test_judge_align.py).
READS_OF_UNSEEDED = {("GET", "/api/judge-proposals/{proposal}")}
# POSTs that only read (any logged-in user); tested in test_fixture_urls.py.
READ_POSTS = {("POST", "/api/fixtures/{sha256}/url")}


def concrete(path: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: PARAMS[m[1]], path)


def app_routes(server) -> list[tuple[str, str]]:
    from evalkit.edge.app import create_app

    app = create_app(server.settings, None, manage_pool=False)  # type: ignore[arg-type]
    found = []
    for route in app.routes:
        if isinstance(route, Mount):  # /static: files, no handler
            continue
        for method in sorted(route.methods - {"HEAD"}):
            found.append((method, route.path))
    return found


def test_public_routes_are_exactly_the_declared_ones(server):
    routes = app_routes(server)
    assert {(e.method, e.path) for e in ENDPOINTS if e.public} == PUBLIC
    pages = {(p.method, p.path) for p in PAGES}  # walked in tests/web/test_pages_http.py
    assert set(routes) == {(e.method, e.path) for e in ENDPOINTS} | pages


@pytest.mark.parametrize(
    ("method", "path"), [(e.method, e.path) for e in ENDPOINTS if not e.public]
)
def test_anonymous_gets_401(server, method, path):
    r = httpx.request(method, server.url + concrete(path), json={})
    assert r.status_code == 401, r.text
    assert r.json()["error"]["code"] == "login-required"
    assert r.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(
    ("method", "path"), [(e.method, e.path) for e in ENDPOINTS if not e.public]
)
def test_garbage_token_gets_401(server, method, path):
    r = httpx.request(
        method,
        server.url + concrete(path),
        json={},
        headers={"Authorization": "Bearer ekl_not-a-real-token"},
    )
    assert r.status_code == 401 and r.json()["error"]["code"] == "bad-token"


@pytest.fixture(scope="module")
def user_token(server, admin_token):
    auth = {"Authorization": f"Bearer {admin_token}"}
    httpx.post(
        f"{server.url}/api/users",
        json={"username": "alice", "password": "alice-pass"},
        headers=auth,
    ).raise_for_status()
    httpx.post(
        f"{server.url}/api/workspaces", json={"name": "dev"}, headers=auth
    ).raise_for_status()
    httpx.post(
        f"{server.url}/api/workspaces/dev/datasets/finance/sync",
        headers=auth,
        json={"cases": [{"id": "c1", "content": {"input": {"q": "x"}}}]},
    ).raise_for_status()
    httpx.post(
        f"{server.url}/api/workspaces/dev/agents",
        headers=auth,
        json={"name": "bot", "harness_url": "http://203.0.113.10:8700"},
    ).raise_for_status()
    httpx.post(
        f"{server.url}/api/workspaces/dev/agents/bot/mappings",
        headers=auth,
        json={"mapping": load_starter("openinference"), "activate": True},
    ).raise_for_status()
    # Session s1 of bot@dev: one span, sent by the admin naming the agent.
    span = {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "agent", "startTimeUnixNano": "1"}
    span["attributes"] = [{"key": "session.id", "value": {"stringValue": "s1"}}]
    httpx.post(
        f"{server.url}/api/otel/v1/traces",
        headers={**auth, "X-Evalkit-Agent": "bot@dev"},
        json={"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]},
    ).raise_for_status()
    httpx.post(  # schedule 1, read by GET /api/schedules/{schedule}
        f"{server.url}/api/schedules",
        headers=auth,
        json={"dataset": "finance@dev", "agent": "bot@dev", "cron": "0 3 * * *"},
    ).raise_for_status()
    httpx.post(  # monitor watch@dev, read by GET /api/monitors/{monitor}...
        f"{server.url}/api/monitors",
        headers=auth,
        json={"name": "watch", "agent": "bot@dev", "evaluators": ["steps"]},
    ).raise_for_status()
    alice = login(server, "alice", "alice-pass")
    as_alice = {"Authorization": f"Bearer {alice}"}
    # Experiment 1 (run 1): alice's own, on her personal agent, so her CLI drives it.
    httpx.post(
        f"{server.url}/api/workspaces/alice/datasets/mine/sync",
        headers=as_alice,
        json={"cases": [{"id": "a1", "content": {"input": {"q": "x"}}}]},
    ).raise_for_status()
    httpx.post(
        f"{server.url}/api/workspaces/alice/agents",
        headers=as_alice,
        json={"name": "mine", "harness_url": "http://127.0.0.1:9"},
    ).raise_for_status()
    httpx.post(
        f"{server.url}/api/experiments",
        headers=as_alice,
        json={"dataset": "mine", "agent": "mine", "capabilities": {}},
    ).raise_for_status()
    return alice


READ_QUERIES = {"/api/monitors/{monitor}/check": "?gate=steps.raw_mean<=10"}
"""Reads that need a query to answer 200."""

BODIES = {
    "/api/users": {"username": "zed"},
    "/api/workspaces": {"name": "qa"},
    "/api/workspaces/{workspace}/members": {"username": "alice", "role": "writer"},
    "/api/workspaces/{workspace}/promotion": {"target": "alice"},
    "/api/users/{username}/subject": {"subject": "sub-1"},
}


@pytest.mark.parametrize(("method", "path"), sorted(ADMIN_ONLY))
def test_admin_routes_refuse_users_with_the_rule(server, user_token, method, path):
    r = httpx.request(
        method,
        server.url + concrete(path),
        json=BODIES.get(path, {}),
        headers={"Authorization": f"Bearer {user_token}"},
    )
    assert r.status_code == 403, r.text
    error = r.json()["error"]
    assert error["code"] == "admin-only"
    assert error["message"].startswith("alice is not an admin")


def test_every_non_public_route_is_classified(server):
    """A new route must be added to this test's classification (and so get checked)."""
    declared = {(e.method, e.path) for e in ENDPOINTS}
    reads = {("GET", p) for _, p in declared} & declared
    unclassified = declared - PUBLIC - ADMIN_ONLY - reads - DATASET_WRITES - AGENT_WRITES
    unclassified -= READ_POSTS | EXPERIMENT_WRITES | OTEL_WRITES
    unclassified -= SCORING_WRITES | SCHEDULE_WRITES | MONITOR_WRITES
    unclassified -= {("POST", "/api/auth/logout"), ("POST", "/api/auth/password")}
    assert not unclassified, f"classify these routes in test_api_access.py: {unclassified}"


def test_public_fixture_route_needs_a_signature_or_a_login(server):
    r = httpx.get(server.url + concrete("/api/fixtures/{sha256}"))
    assert r.status_code == 401 and r.json()["error"]["code"] == "login-required"
    r = httpx.get(server.url + concrete("/api/fixtures/{sha256}") + "?expires=1&signature=x")
    assert r.status_code == 403 and r.json()["error"]["code"] == "fixture-url-refused"


@pytest.mark.parametrize(("method", "path"), sorted(AGENT_WRITES))
def test_agent_writes_refuse_non_writers_with_the_rule(server, user_token, method, path):
    r = httpx.request(
        method,
        server.url + concrete(path),
        json={"name": "bot2"} if method == "POST" else {},
        headers={"Authorization": f"Bearer {user_token}"},
    )
    assert r.status_code == 403, r.text
    assert r.json()["error"]["code"] == "shared-writers-write"


@pytest.mark.parametrize(
    "path",
    sorted(
        {
            e.path
            for e in ENDPOINTS
            if e.method == "GET"
            and not e.public
            and ("GET", e.path) not in ADMIN_ONLY | READS_OF_UNSEEDED
        }
    ),
)
def test_reads_open_to_any_user(server, user_token, path):
    query = READ_QUERIES.get(path, "")
    r = httpx.get(
        server.url + concrete(path) + query, headers={"Authorization": f"Bearer {user_token}"}
    )
    assert r.status_code == 200, r.text


def test_experiment_driving_is_the_creators(server, admin_token):
    """Experiment 1 is driven by alice's CLI: nobody else resumes it or posts its steps."""
    auth = {"Authorization": f"Bearer {admin_token}"}
    step = {"run_id": 1, "from_state": "queued", "to_state": "starting"}
    for method, path, body in [
        ("POST", "/api/experiments/1/resume", {}),
        ("POST", "/api/runs/1/transition", step),
        ("GET", "/api/experiments/1/work", None),
    ]:
        r = httpx.request(method, server.url + path, json=body, headers=auth)
        assert r.status_code == 403, (path, r.text)
        assert r.json()["error"]["code"] == "personal-agent-owner-only"


def test_anyone_starts_a_server_driven_experiment_of_shared_ones(server, user_token):
    """alice is no member of dev: starting finance@dev on the shared bot@dev passes every
    access rule (anyone-runs-shared) and gets as far as asking the harness, which is not
    there (502); an SDK start kept in @dev is a write, refused."""
    auth = {"Authorization": f"Bearer {user_token}"}
    body = {"dataset": "finance@dev", "agent": "bot@dev"}
    r = httpx.post(f"{server.url}/api/experiments", json=body, headers=auth, timeout=60)
    assert r.status_code == 502, r.text
    assert r.json()["error"]["code"] == "harness-unreachable"
    # her personal agent without the capabilities her CLI reads: the server would drive it
    mine = {"dataset": "finance@dev", "agent": "mine"}
    r = httpx.post(f"{server.url}/api/experiments", json=mine, headers=auth)
    assert r.status_code == 403, r.text
    assert r.json()["error"]["code"] == "server-cannot-drive-personal-agent"


def test_rescoring_needs_write_access(server, admin_token, user_token):
    """Experiment 1 lives in alice's personal workspace: the admin may not re-score it;
    alice may, once it has finished."""
    path = f"{server.url}/api/experiments/1/evaluate"
    r = httpx.post(path, json={}, headers={"Authorization": f"Bearer {admin_token}"})
    assert r.status_code == 403, r.text
    assert r.json()["error"]["code"] == "personal-owner-writes"
    r = httpx.post(path, json={}, headers={"Authorization": f"Bearer {user_token}"})
    assert r.status_code == 409 and r.json()["error"]["code"] == "experiment-running", r.text


def test_malformed_bodies_are_400_naming_the_field(server, admin_token):
    auth = {"Authorization": f"Bearer {admin_token}"}
    cases = [
        (b"{not json", "not valid JSON"),
        (b'{"username": 5}', "Expected `str`, got `int` - at `$.username`"),
        (b'{"username": "x", "colour": "red"}', "unknown field `colour`"),
        (b"[]", "Expected `object`, got `array`"),
        (b"", "needs a JSON body"),
    ]
    for body, expected in cases:
        r = httpx.post(f"{server.url}/api/users", content=body, headers=auth)
        assert r.status_code == 400, (body, r.text)
        assert expected in r.json()["error"]["message"], (body, r.text)


def test_oversized_body_is_413(server, admin_token):
    big = b'{"username": "' + b"a" * (9 * 2**20) + b'"}'
    r = httpx.post(
        f"{server.url}/api/users", content=big, headers={"Authorization": f"Bearer {admin_token}"}
    )
    assert r.status_code == 413 and r.json()["error"]["code"] == "too-large"


def test_unknown_route_and_method(server):
    assert httpx.get(f"{server.url}/api/nope").json()["error"]["code"] == "no-such-route"
    r = httpx.delete(f"{server.url}/healthz")
    assert r.status_code == 405


def test_security_headers(server):
    r = httpx.get(f"{server.url}/healthz")
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["x-frame-options"] == "DENY"
