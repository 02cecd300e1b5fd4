"""Every API route, for every kind of caller, against seeded data: the outcome must be the
one the access rules (evalkit/auth/access.py) give.

Callers: anonymous, an agent token, a reader (a user with no role), a reviewer and a
writer of the shared workspaces, the owner of a personal workspace, and an admin. The
expected outcomes come from ``ROUTES`` below, written from the rules: a refusal is its
exact status and rule code; an allowed call is anything but 401 and 403 (a 400 for the
deliberately invalid body the walk sends, a 404, a 409...). The routes come from the
router (``create_app(...).routes``), and a route missing from ``ROUTES`` fails, so a new
route cannot escape the walk.

Calls that are allowed must not change the seed for the calls after them: bodies are
invalid on purpose (access is checked before the body is read), deletes name things that
do not exist where the rule is checked first, and within a route the refused callers go
before the allowed ones.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from starlette.routing import Mount

from evalkit.edge.routes import ENDPOINTS
from evalkit.harness.reference import ReferenceHarness
from evalkit.otel.mapping import load_starter
from tests.conftest import ADMIN_PASSWORD, RunningServer
from tests.security.conftest import Api, login, module_server

ROLES = ("anonymous", "agent", "reader", "reviewer", "writer", "owner", "admin")
USERS = {"reader": "reed", "reviewer": "rita", "writer": "wendy", "owner": "olive"}
PASSWORD = "walk-password-1"

OK = "allowed"
LOGIN = (401, "login-required")
AGENT_SCOPE = (403, "agent-token-scope")
Expected = str | tuple[int, str]


# --------------------------------------------------------------------------- the rules


def _callers(**users: Expected) -> dict[str, Expected]:
    """Anonymous callers read nothing; agent tokens only send traces (agent-token-scope);
    every user gets what ``users`` says, else allowed."""
    table: dict[str, Expected] = {"anonymous": LOGIN, "agent": AGENT_SCOPE}
    for role in ROLES[2:]:
        table[role] = users.get(role, OK)
    return table


def _refuse(code: str, *roles: str) -> dict[str, Expected]:
    return _callers(**dict.fromkeys(roles, (403, code)))


NON_WRITERS_SHARED = ("reader", "reviewer", "owner")
NON_OWNERS = ("reader", "reviewer", "writer", "admin")
EVERY_USER = ("reader", "reviewer", "writer", "owner", "admin")

RULE: dict[str, dict[str, Expected]] = {
    # No login needed: everyone, agent tokens and anonymous callers included.
    "public": dict.fromkeys(ROLES, OK),
    # read-all: every logged-in user reads every workspace.
    "read": _callers(),
    # Any user; what else is checked depends on the body (see the body walk below).
    "user": _callers(),
    "admin": _refuse("admin-only", "reader", "reviewer", "writer", "owner"),
    # shared-writers-write / personal-owner-writes
    "write@shared": _refuse("shared-writers-write", *NON_WRITERS_SHARED),
    "write@personal": _refuse("personal-owner-writes", *NON_OWNERS),
    # sync: a write, and never into a promotion target
    "sync@target": {
        **_refuse("shared-writers-write", *NON_WRITERS_SHARED),
        "writer": (403, "promotion-target-no-sync"),
        "admin": (403, "promotion-target-no-sync"),
    },
    # reviewers-review / promotion-target-no-review / no-review-in-personal
    "review@shared": _refuse("reviewers-review", "reader", "writer", "owner"),
    "review@target": _refuse("promotion-target-no-review", *EVERY_USER),
    "review@personal": _refuse("no-review-in-personal", *EVERY_USER),
    # Runs driven from a machine are the creator's (personal-agent-owner-only).
    "driver=writer": _refuse("personal-agent-owner-only", "reader", "reviewer", "owner", "admin"),
    "driver=owner": _refuse("personal-agent-owner-only", *NON_OWNERS),
    # The server checks only shared agents; a personal agent is its owner's to check, from
    # the owner's machine (server-cannot-drive-personal-agent), and nobody else's.
    "check@personal": {
        **_refuse("personal-agent-owner-only", *NON_OWNERS),
        "owner": (403, "server-cannot-drive-personal-agent"),
    },
    # The collector: agent tokens for their own agent; users who write to its workspace.
    "collector@shared": {**_refuse("shared-writers-write", *NON_WRITERS_SHARED), "agent": OK},
    "collector@personal": _refuse("personal-owner-writes", *NON_OWNERS),
    "collector": {**_callers(), "agent": OK},
}
# writers-label: a label takes write access to the experiment's workspace.
RULE["label@shared"] = _refuse("writers-label", *NON_WRITERS_SHARED)
RULE["label@personal"] = _refuse("writers-label", *NON_OWNERS)
# monitor-writers-manage: writers of the agent's workspace and admins manage its monitors.
RULE["monitor@shared"] = _refuse("monitor-writers-manage", *NON_WRITERS_SHARED)
RULE["monitor@personal"] = _refuse("monitor-writers-manage", *NON_OWNERS)
# writers-align-judge: proposing a judge's examples takes write access to its workspace.
RULE["align@shared"] = _refuse("writers-align-judge", *NON_WRITERS_SHARED)
RULE["align@personal"] = _refuse("writers-align-judge", *NON_OWNERS)
RULE["sync@shared"] = RULE["write@shared"]
RULE["sync@personal"] = RULE["write@personal"]
RULE["write@target"] = RULE["write@shared"]
RULE["comment"] = RULE["read"]  # anyone logged in comments, promotion targets included


# --------------------------------------------------------------------------- the table

# Scenes: which seeded things a route's path names.
SHARED, TARGET, PERSONAL = "shared", "target", "personal"
WS2 = (SHARED, PERSONAL)
WS3 = (SHARED, TARGET, PERSONAL)
SERVER_EXP, SDK_EXP, CLI_EXP = "server-experiment", "sdk-experiment", "cli-experiment"
EXP3 = (SERVER_EXP, SDK_EXP, CLI_EXP)
NONE = "none"


def each(scenes: tuple[str, ...], kind: str) -> list[tuple[str, str]]:
    """The same rule in every scene, the scene's name as its suffix (write@shared...)."""
    return [(scene, f"{kind}@{scene}") for scene in scenes]


def same(scenes: tuple[str, ...], kind: str) -> list[tuple[str, str]]:
    return [(scene, kind) for scene in scenes]


_WS = "/api/workspaces/{workspace}"
_DS = _WS + "/datasets/{dataset}"
_CASE = _WS + "/cases/{case_id}"
_AGENT = _WS + "/agents/{agent}"
_EXP = "/api/experiments/{experiment}"

ROUTES: dict[tuple[str, str], list[tuple[str, str]]] = {
    # meta and login
    ("GET", "/healthz"): [(NONE, "public")],
    ("GET", "/readyz"): [(NONE, "public")],
    ("GET", "/api/cli"): [(NONE, "public")],
    ("GET", "/cli"): [(NONE, "public")],
    ("GET", "/cli/{filename}"): [(NONE, "public")],
    ("GET", "/api/openapi.json"): [(NONE, "public")],
    ("POST", "/api/auth/login"): [(NONE, "public")],
    ("GET", "/api/auth/sso"): [(NONE, "public")],
    ("POST", "/api/auth/sso/exchange"): [(NONE, "public")],
    ("POST", "/api/auth/sso/device"): [(NONE, "public")],
    ("POST", "/api/auth/sso/device/poll"): [(NONE, "public")],
    ("POST", "/api/auth/logout"): [(NONE, "read")],  # each user with a throwaway login
    ("GET", "/api/auth/whoami"): [(NONE, "read")],
    ("POST", "/api/auth/password"): [(NONE, "read")],
    # users and the audit log
    ("POST", "/api/users"): [(NONE, "admin")],
    ("GET", "/api/users"): [(NONE, "read")],
    ("POST", "/api/users/{username}/disable"): [(NONE, "admin")],
    ("POST", "/api/users/{username}/enable"): [(NONE, "admin")],
    ("POST", "/api/users/{username}/reset-password"): [(NONE, "admin")],
    ("PUT", "/api/users/{username}/subject"): [(NONE, "admin")],
    ("GET", "/api/audit"): [(NONE, "admin")],
    # workspaces
    ("GET", "/api/workspaces"): [(NONE, "read")],
    ("POST", "/api/workspaces"): [(NONE, "admin")],
    ("GET", _WS): same(WS3, "read"),
    ("GET", _WS + "/members"): same(WS3, "read"),
    ("POST", _WS + "/members"): same(WS2, "admin"),
    ("DELETE", _WS + "/members/{username}"): same(WS2, "admin"),
    ("PUT", _WS + "/promotion"): same(WS2, "admin"),
    # Only where there is no link to remove (404 for the admin), so the seeded one stays.
    ("DELETE", _WS + "/promotion"): same((TARGET, PERSONAL), "admin"),
    # datasets and cases
    ("GET", "/api/datasets"): [(NONE, "read")],
    ("GET", _WS + "/datasets"): same(WS3, "read"),
    ("POST", _WS + "/datasets"): each(WS3, "write"),
    ("GET", _DS): same(WS3, "read"),
    ("POST", _DS + "/sync"): each(WS3, "sync"),
    ("POST", _WS + "/lint"): same(WS3, "read"),
    ("POST", _WS + "/fixtures/missing"): each(WS3, "sync"),
    ("PUT", _WS + "/fixtures/{sha256}"): each(WS3, "sync"),
    ("GET", _DS + "/cases"): same(WS3, "read"),
    ("GET", _CASE): same(WS3, "read"),
    ("POST", _CASE + "/approve"): each(WS3, "review"),
    ("POST", _CASE + "/reject"): each(WS3, "review"),
    ("POST", _CASE + "/comments"): same(WS3, "comment"),
    ("GET", _DS + "/case-search"): same(WS3, "read"),
    ("GET", _DS + "/promotions"): same(WS3, "read"),
    ("GET", _CASE + "/versions/{version}"): same(WS3, "read"),
    ("GET", _CASE + "/diff"): same(WS3, "read"),
    # fixtures: public, but it checks a login itself when the URL is not signed
    ("GET", "/api/fixtures/{sha256}"): [(NONE, "read")],
    ("POST", "/api/fixtures/{sha256}/url"): [(NONE, "read")],
    # agents, mappings, harness checks, agent tokens, remote evaluators
    ("GET", "/api/agents"): [(NONE, "read")],
    ("GET", _WS + "/agents"): same(WS2, "read"),
    ("POST", _WS + "/agents"): each(WS3, "write"),
    ("GET", _AGENT): same(WS2, "read"),
    ("PATCH", _AGENT): each(WS2, "write"),
    ("DELETE", _AGENT): each(WS2, "write"),
    ("GET", _AGENT + "/mappings"): same(WS2, "read"),
    ("POST", _AGENT + "/mappings"): each(WS2, "write"),
    ("GET", _AGENT + "/mappings/{version}"): same(WS2, "read"),
    ("POST", _AGENT + "/mappings/{version}/activate"): each(WS2, "write"),
    ("POST", _AGENT + "/check"): [(SHARED, "write@shared"), (PERSONAL, "check@personal")],
    ("POST", _AGENT + "/tokens"): each(WS2, "write"),
    ("GET", _AGENT + "/tokens"): same(WS2, "read"),
    ("GET", "/api/tokens"): [(NONE, "read")],
    ("POST", "/api/tokens/{token}/revoke"): each(WS2, "write"),
    ("GET", "/api/evaluators"): [(NONE, "read")],
    ("GET", _WS + "/evaluators"): same(WS2, "read"),
    ("POST", _WS + "/evaluators"): each(WS3, "write"),
    ("DELETE", _WS + "/evaluators/{evaluator}"): each(WS2, "write"),
    # experiments and runs
    ("POST", "/api/experiments"): [(NONE, "user")],
    ("GET", "/api/experiments"): [(NONE, "read")],
    ("GET", "/api/experiment-list"): [(NONE, "read")],
    ("GET", _EXP): same(EXP3, "read"),
    ("POST", _EXP + "/resume"): [
        (SERVER_EXP, "user"),  # anyone-runs-shared: whoever may start it may resume it
        (SDK_EXP, "driver=writer"),
        (CLI_EXP, "driver=owner"),
    ],
    # A server-driven experiment takes no steps from a CLI (409 server-driven, for all).
    ("GET", _EXP + "/work"): [
        (SERVER_EXP, "user"),
        (SDK_EXP, "driver=writer"),
        (CLI_EXP, "driver=owner"),
    ],
    ("POST", "/api/runs/{run}/transition"): [
        (SERVER_EXP, "user"),
        (SDK_EXP, "driver=writer"),
        (CLI_EXP, "driver=owner"),
    ],
    ("GET", "/api/runs/{run}"): same(EXP3, "read"),
    ("GET", "/api/runs/{run}/scores"): same(EXP3, "read"),
    ("GET", "/api/runs/{run}/labels"): same(EXP3, "read"),
    ("GET", _EXP + "/agreement"): same(EXP3, "read"),
    ("GET", _EXP + "/label-queue"): same(EXP3, "read"),
    ("POST", _EXP + "/judge-proposals"): [
        (SERVER_EXP, "align@shared"),
        (SDK_EXP, "align@shared"),
        (CLI_EXP, "align@personal"),
    ],
    # No proposal is seeded (one needs a judge and labels): the lookup answers 404 before
    # accept's writers-align-judge, which test_judge_align.py checks on a real proposal.
    ("GET", "/api/judge-proposals/{proposal}"): [(NONE, "read")],
    ("POST", "/api/judge-proposals/{proposal}/accept"): [(NONE, "user")],
    ("POST", "/api/runs/{run}/labels"): [
        (SERVER_EXP, "label@shared"),
        (SDK_EXP, "label@shared"),
        (CLI_EXP, "label@personal"),
    ],
    ("GET", _EXP + "/rounds"): same(EXP3, "read"),
    ("POST", _EXP + "/evaluate"): [
        (SERVER_EXP, "write@shared"),
        (SDK_EXP, "write@shared"),
        (CLI_EXP, "write@personal"),
    ],
    ("GET", _EXP + "/cases"): same(EXP3, "read"),
    # The SDK's routes: only for an SDK-driven experiment (409 not-sdk-driven otherwise),
    # and only from its creator.
    ("POST", "/api/runs/{run}/scores"): [
        (SERVER_EXP, "user"),
        (SDK_EXP, "driver=writer"),
        (CLI_EXP, "user"),
    ],
    ("POST", _EXP + "/sdk-steps"): [
        (SERVER_EXP, "user"),
        (SDK_EXP, "driver=writer"),
        (CLI_EXP, "user"),
    ],
    ("POST", _EXP + "/sdk-rounds"): [
        (SERVER_EXP, "user"),
        (SDK_EXP, "driver=writer"),
        (CLI_EXP, "user"),
    ],
    ("POST", "/api/runs/{run}/trajectory/refetch"): [
        (SERVER_EXP, "user"),
        (SDK_EXP, "driver=writer"),
        (CLI_EXP, "user"),
    ],
    ("GET", _EXP + "/scores"): same(EXP3, "read"),
    ("GET", _EXP + "/compare/{other}"): same(EXP3, "read"),
    ("GET", _EXP + "/brief"): same(EXP3, "read"),
    ("GET", _EXP + "/runs"): same(EXP3, "read"),
    ("GET", _EXP + "/charts"): same(EXP3, "read"),
    ("GET", _EXP + "/compare/{other}/cases"): same(EXP3, "read"),
    # schedules
    ("POST", "/api/schedules"): [(NONE, "user")],
    ("GET", "/api/schedules"): [(NONE, "read")],
    ("GET", "/api/schedules/{schedule}"): same(WS2, "read"),
    ("DELETE", "/api/schedules/{schedule}"): each(WS2, "write"),
    # monitors
    ("POST", "/api/monitors"): [(NONE, "user")],
    ("GET", "/api/monitors"): [(NONE, "read")],
    ("GET", "/api/monitors/{monitor}"): same(WS2, "read"),
    ("GET", "/api/monitors/{monitor}/check"): same(WS2, "read"),
    ("GET", "/api/monitors/{monitor}/sessions"): same(WS2, "read"),
    ("PATCH", "/api/monitors/{monitor}"): each(WS2, "monitor"),
    ("POST", "/api/monitors/{monitor}/backfill"): each(WS2, "monitor"),
    ("DELETE", "/api/monitors/{monitor}"): each(WS2, "monitor"),
    # traces and the collector
    ("POST", "/api/otel/v1/traces"): each(WS2, "collector"),
    ("POST", "/api/otel/v1/metrics"): [(NONE, "collector")],
    ("POST", "/api/otel/v1/logs"): [(NONE, "collector")],
    ("POST", "/api/otel/check"): each(WS2, "collector"),
    ("GET", "/api/traces"): [(NONE, "read")],
    ("GET", "/api/traces/{session}"): same(WS2, "read"),
    ("GET", "/api/trace-sessions"): [(NONE, "read")],
    ("GET", _AGENT + "/sessions"): same(WS2, "read"),
    ("GET", _AGENT + "/sessions/{session}"): same(WS2, "read"),
    ("GET", _AGENT + "/sessions/{session}/check"): same(WS2, "read"),
    # LLM providers and the default judge
    ("GET", "/api/llm-providers"): [(NONE, "read")],
    ("POST", "/api/llm-providers"): [(NONE, "admin")],
    ("DELETE", "/api/llm-providers/{provider}"): [(NONE, "admin")],
    ("GET", "/api/judge-default"): [(NONE, "read")],
    ("PUT", "/api/judge-default"): [(NONE, "admin")],
    ("DELETE", "/api/judge-default"): [(NONE, "admin")],
}


# --------------------------------------------------------------------------- the seed


@dataclass
class World:
    server: RunningServer
    tokens: dict[str, str | None]
    scenes: dict[str, dict[str, str]]
    passwords: dict[str, str] = field(default_factory=dict)

    def token(self, role: str, route: tuple[str, str]) -> str | None:
        """The role's token; logging out ends a login, so that route gets a fresh one."""
        if route == ("POST", "/api/auth/logout") and role in USERS:
            return login(self.server, USERS[role], PASSWORD)
        if route == ("POST", "/api/auth/logout") and role == "admin":
            return login(self.server, "admin", ADMIN_PASSWORD)
        return self.tokens[role]


@pytest.fixture(scope="module")
def harness() -> Iterator[ReferenceHarness]:
    with ReferenceHarness() as running:
        yield running


@pytest.fixture(scope="module")
def world(pg_admin_url, template_url, tmp_path_factory, harness) -> Iterator[World]:
    def configure(settings):
        # The reference harness on loopback, and nothing else private.
        settings.egress.allowed_prefixes = [harness.url]

    with module_server(pg_admin_url, tmp_path_factory.mktemp("walk"), configure=configure) as s:
        yield seed(s, harness.url)


def seed(server: RunningServer, harness_url: str) -> World:
    admin_token = login(server, "admin", ADMIN_PASSWORD)
    admin = Api(server, admin_token)
    for name in USERS.values():
        admin.ok("POST", "/api/users", json={"username": name, "password": PASSWORD})
    for ws in ("dev", "prod"):
        admin.ok("POST", "/api/workspaces", json={"name": ws})
        admin.ok(
            "POST", f"/api/workspaces/{ws}/members", json={"username": "wendy", "role": "writer"}
        )
        admin.ok(
            "POST", f"/api/workspaces/{ws}/members", json={"username": "rita", "role": "reviewer"}
        )
    admin.ok("PUT", "/api/workspaces/dev/promotion", json={"target": "prod"})
    tokens: dict[str, str | None] = {"anonymous": None, "admin": admin_token}
    for role, name in USERS.items():
        tokens[role] = login(server, name, PASSWORD)
    olive = Api(server, tokens["owner"])
    wendy = Api(server, tokens["writer"])
    mapping = load_starter("openinference")

    # @dev: a dataset with a case, a harness agent, a code-driven agent, a session.
    case = {"id": "c1", "content": {"input": {"q": "x"}, "expected": {"answer": "y"}}}
    admin.ok("POST", "/api/workspaces/dev/datasets/finance/sync", json={"cases": [case]})
    admin.ok(
        "POST",
        "/api/workspaces/dev/agents",
        json={"name": "bot", "harness_url": harness_url, "mapping": mapping},
    )
    admin.ok("POST", "/api/workspaces/dev/agents", json={"name": "coder", "mapping": mapping})
    span = {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "agent", "startTimeUnixNano": "1"}
    span["attributes"] = [{"key": "session.id", "value": {"stringValue": "s1"}}]
    admin.ok(
        "POST",
        "/api/otel/v1/traces",
        headers={"X-Evalkit-Agent": "bot@dev"},
        json={"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]},
    )
    # @olive: a dataset, a personal harness agent (her CLI drives it), a session.
    case = {"id": "o1", "content": {"input": {"q": "x"}}}
    olive.ok("POST", "/api/workspaces/olive/datasets/mine/sync", json={"cases": [case]})
    olive.ok(
        "POST",
        "/api/workspaces/olive/agents",
        json={"name": "mine", "harness_url": "http://127.0.0.1:9", "mapping": mapping},
    )
    span = {
        **span,
        "traceId": "ef" * 16,
        "attributes": [{"key": "session.id", "value": {"stringValue": "s2"}}],
    }
    olive.ok(
        "POST",
        "/api/otel/v1/traces",
        headers={"X-Evalkit-Agent": "mine@olive"},
        json={"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]},
    )
    # Three experiments, one per driver: the server, wendy's SDK, olive's CLI.
    server_exp = admin.ok(
        "POST", "/api/experiments", json={"dataset": "finance@dev", "agent": "bot@dev"}
    )
    sdk_exp = wendy.ok(
        "POST",
        "/api/experiments",
        json={"dataset": "finance@dev", "agent": "coder@dev", "sdk": True},
    )
    cli_exp = olive.ok(
        "POST", "/api/experiments", json={"dataset": "mine", "agent": "mine", "capabilities": {}}
    )
    # Schedules: one in @dev (admin's), one in @olive (her dataset, the shared agent).
    shared_schedule = admin.ok(
        "POST",
        "/api/schedules",
        json={"dataset": "finance@dev", "agent": "bot@dev", "cron": "0 3 * * *"},
    )
    personal_schedule = olive.ok(
        "POST",
        "/api/schedules",
        json={"dataset": "mine@olive", "agent": "bot@dev", "cron": "0 4 * * *"},
    )
    # Monitors: one of @dev's agent, one of olive's.
    admin.ok(
        "POST", "/api/monitors", json={"name": "watch", "agent": "bot@dev", "evaluators": ["steps"]}
    )
    olive.ok(
        "POST",
        "/api/monitors",
        json={"name": "watch", "agent": "mine@olive", "evaluators": ["latency"]},
    )
    # Agent tokens: the walk's agent caller, and one to revoke in each workspace.
    tokens["agent"] = admin.ok("POST", "/api/workspaces/dev/agents/bot/tokens", json={})["token"]
    shared_victim = admin.ok(
        "POST", "/api/workspaces/dev/agents/bot/tokens", json={"note": "revoke me"}
    )
    personal_victim = olive.ok("POST", "/api/workspaces/olive/agents/mine/tokens", json={})

    def run_of(experiment: dict) -> str:
        detail = admin.ok("GET", f"/api/experiments/{experiment['id']}")
        return str(detail["run_list"][0]["id"])

    common = {
        "username": "nobody",  # admin-only routes: the rule is checked before the lookup
        "sha256": "0" * 64,
        "filename": "evalkit.whl",
        "provider": "ghost",
        "version": "1",
        "evaluator": "ghost",  # deletes: the rule is checked before the lookup
        "proposal": "999999",
    }
    ws_scene = {
        SHARED: {"workspace": "dev", "dataset": "finance", "case_id": "c1", "agent": "bot"},
        TARGET: {"workspace": "prod", "dataset": "finance", "case_id": "c1", "agent": "bot"},
        PERSONAL: {"workspace": "olive", "dataset": "mine", "case_id": "o1", "agent": "mine"},
    }
    ws_scene[SHARED] |= {
        "session": "s1",
        "token": str(shared_victim["info"]["id"]),
        "schedule": str(shared_schedule["id"]),
        "otel_agent": "bot@dev",
        "monitor": "watch@dev",
    }
    ws_scene[PERSONAL] |= {
        "session": "s2",
        "token": str(personal_victim["info"]["id"]),
        "schedule": str(personal_schedule["id"]),
        "otel_agent": "mine@olive",
        "monitor": "watch@olive",
    }
    scenes: dict[str, dict[str, str]] = {NONE: dict(common)}
    for name, params in ws_scene.items():
        scenes[name] = {**common, **params}
    for name, experiment in ((SERVER_EXP, server_exp), (SDK_EXP, sdk_exp), (CLI_EXP, cli_exp)):
        ident = str(experiment["id"])
        scenes[name] = {**common, "experiment": ident, "other": ident, "run": run_of(experiment)}
    return World(server, tokens, scenes)


# --------------------------------------------------------------------------- the walk


def router_routes(world: World) -> set[tuple[str, str]]:
    from evalkit.edge.app import create_app

    app = create_app(world.server.settings, None, manage_pool=False)  # type: ignore[arg-type]
    found = set()
    for route in app.routes:
        if isinstance(route, Mount):  # /static: files
            continue
        for method in route.methods - {"HEAD"}:  # type: ignore[attr-defined]
            found.add((method, route.path))  # type: ignore[attr-defined]
    return found


def test_every_route_of_the_router_is_in_the_table(world):
    from evalkit.web import PAGES  # walked in test_web_security.py

    api_routes = router_routes(world) - {(p.method, p.path) for p in PAGES}
    missing = api_routes - ROUTES.keys()
    assert not missing, f"add these routes to ROUTES in {__file__}: {sorted(missing)}"
    stale = ROUTES.keys() - api_routes
    assert not stale, f"these routes are gone; drop them from ROUTES: {sorted(stale)}"


def test_the_table_names_only_known_rules_and_callers():
    for route, scenes in ROUTES.items():
        assert scenes, route
        for _, kind in scenes:
            assert kind in RULE, (route, kind)
    for kind, table in RULE.items():
        assert set(table) == set(ROLES), kind
    from evalkit.auth.access import RULES

    codes = {e[1] for table in RULE.values() for e in table.values() if isinstance(e, tuple)}
    assert codes - {"login-required"} <= set(RULES)


_BODIES = {e.method + " " + e.path for e in ENDPOINTS if e.body is not None}


def request_for(route: tuple[str, str], params: dict[str, str]) -> dict[str, Any]:
    """Path and body of the walk's request: invalid bodies, so that an allowed call stops
    at the body's validation (400) without changing anything."""
    method, path = route
    concrete = re.sub(r"\{(\w+)\}", lambda m: params[m[1]], path)
    kw: dict[str, Any] = {}
    if f"{method} {path}" in _BODIES:
        kw["content"] = b'{"__walk__": 1}'
        kw["headers"] = {"content-type": "application/json"}
    elif route == ("PUT", _WS + "/fixtures/{sha256}"):
        kw["content"] = b"not the bytes of that sha256"
    elif path.startswith("/api/otel/"):
        kw["content"] = b"{}"
        kw["headers"] = {"content-type": "application/json"}
        if path.endswith(("/traces", "/check")):
            kw["headers"]["X-Evalkit-Agent"] = params["otel_agent"]
    return {"method": method, "path": concrete, **kw}


def outcome(response) -> Expected:
    if response.status_code not in (401, 403):
        return OK
    try:
        code = response.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        code = f"<no error code: {response.text[:200]!r}>"
    return (response.status_code, code)


def _order(route: tuple[str, str]) -> tuple[int, str, str]:
    """Routes that delete or revoke what they name go last."""
    method, path = route
    destructive = method == "DELETE" or path.endswith("/revoke")
    return (1 if destructive else 0, path, method)


@pytest.mark.parametrize("route", sorted(ROUTES, key=_order), ids=lambda r: f"{r[0]} {r[1]}")
def test_route_for_every_caller(world, route):
    wrong = []
    for scene, kind in ROUTES[route]:
        expected = RULE[kind]
        # Refused callers first: an allowed call may use up what the route names.
        for role in sorted(ROLES, key=lambda r: expected[r] == OK):
            request = request_for(route, world.scenes[scene])
            token = world.token(role, route)
            response = Api(world.server, token)(
                request.pop("method"), request.pop("path"), **request
            )
            got = outcome(response)
            if got != expected[role]:
                wrong.append(
                    f"{scene}/{role}: expected {expected[role]}, got {got} "
                    f"({response.status_code} {response.text[:200]})"
                )
            if isinstance(got, tuple) and got[0] == 403:
                message = response.json()["error"]["message"]
                from evalkit.auth.access import RULES

                if got[1] in RULES:
                    assert RULES[got[1]] in message, f"{scene}/{role}: the refusal quotes its rule"
    assert not wrong, "\n".join(wrong)


# --------------------------------------------------------------------------- body rules

# Starting an experiment or a schedule, and syncing as someone else: the rule that applies
# depends on what the body names. Each body below fails after the access checks (a case
# that does not exist, no capabilities, a bad case id), so an allowed call changes nothing.
NO_CASE = {"case_ids": ["no-such-case"]}
CRON = {"cron": "0 3 * * *"}
BODY_WALK: list[tuple[str, str, dict[str, Any], dict[str, Expected]]] = [
    (
        "personal agent: only its owner runs it, from the CLI that sends its capabilities",
        "/api/experiments",
        {"dataset": "finance@dev", "agent": "mine@olive", "capabilities": {}, **NO_CASE},
        RULE["driver=owner"],
    ),
    (
        "personal agent without capabilities (the web UI, a script): the server never drives it",
        "/api/experiments",
        {"dataset": "finance@dev", "agent": "mine@olive"},
        RULE["check@personal"],
    ),
    (
        "shared dataset and shared agent: anyone starts it, and it lives in @dev",
        "/api/experiments",
        {"dataset": "finance@dev", "agent": "bot@dev", **NO_CASE},
        RULE["user"],
    ),
    (
        "a code-driven shared agent from the SDK: the experiment lives in @dev",
        "/api/experiments",
        {"dataset": "finance@dev", "agent": "coder@dev", "sdk": True, **NO_CASE},
        RULE["write@shared"],
    ),
    (
        "a personal dataset: the experiment lives in the runner's own workspace",
        "/api/experiments",
        {"dataset": "mine@olive", "agent": "bot@dev", **NO_CASE},
        RULE["user"],
    ),
    (
        "a schedule never fires a personal agent (the server would drive it)",
        "/api/schedules",
        {"dataset": "finance@dev", "agent": "mine@olive", **CRON},
        RULE["check@personal"],
    ),
    (
        "a schedule of @dev's dataset and agent lives in @dev",
        "/api/schedules",
        {"dataset": "finance@dev", "agent": "bot@dev", **CRON, **NO_CASE},
        RULE["write@shared"],
    ),
    (
        "a sync recorded as another user is an admin's",
        "/api/workspaces/dev/datasets/finance/sync",
        {"actor": "olive", "cases": [{"id": "Not A Valid Id!", "content": {}}]},
        {**RULE["write@shared"], "writer": (403, "admin-only")},
    ),
]


@pytest.mark.parametrize(
    ("what", "path", "body", "expected"), BODY_WALK, ids=[b[0] for b in BODY_WALK]
)
def test_rules_that_depend_on_the_body(world, what, path, body, expected):
    wrong = []
    for role in sorted(ROLES, key=lambda r: expected[r] == OK):
        response = Api(world.server, world.tokens[role])("POST", path, json=body)
        got = outcome(response)
        if got != expected[role]:
            wrong.append(f"{role}: expected {expected[role]}, got {got} ({response.text[:200]})")
        elif got == OK:
            assert response.status_code in (400, 404), (role, response.text)
    assert not wrong, "\n".join(wrong)
