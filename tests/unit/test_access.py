"""The access rules of DESIGN section 6, one test per rule and per refusal, over the
callers admin, owner, writer, reviewer, other user, anonymous and agent token."""

from __future__ import annotations

import pytest

from evalkit.auth import access
from evalkit.auth.access import RULES, Actor, WorkspaceFacts
from evalkit.errors import Forbidden, Unauthorized

ADMIN = Actor(user_id=1, username="admin", is_admin=True)
OWNER = Actor(user_id=2, username="alice")
WRITER = Actor(user_id=3, username="wendy")
REVIEWER = Actor(user_id=4, username="rita")
OTHER = Actor(user_id=5, username="oscar")
ANON = access.ANONYMOUS
AGENT = Actor(agent_id=9)


def shared(role_of: Actor | None = None, *, target: bool = False) -> WorkspaceFacts:
    role = {WRITER: "writer", REVIEWER: "reviewer"}.get(role_of) if role_of else None
    return WorkspaceFacts(
        name="dev", kind="shared", owner_id=None, actor_role=role, is_promotion_target=target
    )


PERSONAL = WorkspaceFacts(name="alice", kind="personal", owner_id=OWNER.user_id)

exercised: set[str] = set()


def outcome(fn, *args, **kwargs) -> str:
    """'ok', 'login' for 401, or the refusing rule's name."""
    try:
        fn(*args, **kwargs)
    except Unauthorized as exc:
        assert "evalkit login" in exc.message
        exercised.add("login-required")
        return "login"
    except Forbidden as exc:
        assert exc.rule in RULES, exc.rule
        assert RULES[exc.rule] in exc.message, "a refusal quotes its rule's sentence"
        exercised.add(exc.rule)
        return exc.rule
    return "ok"


CALLERS = {
    "admin": ADMIN,
    "owner": OWNER,
    "writer": WRITER,
    "reviewer": REVIEWER,
    "other": OTHER,
    "anonymous": ANON,
    "agent": AGENT,
}


@pytest.mark.parametrize(
    ("who", "expected"),
    [
        ("admin", "ok"),
        ("owner", "ok"),
        ("writer", "ok"),
        ("reviewer", "ok"),
        ("other", "ok"),
        ("anonymous", "login"),
        ("agent", "agent-token-scope"),
    ],
)
def test_read_everything_when_logged_in(who, expected):
    exercised.add("read-all")
    assert outcome(access.require_read, CALLERS[who]) == expected


@pytest.mark.parametrize(
    ("who", "expected"),
    [
        ("admin", "ok"),
        ("owner", "admin-only"),
        ("writer", "admin-only"),
        ("reviewer", "admin-only"),
        ("other", "admin-only"),
        ("anonymous", "login"),
        ("agent", "agent-token-scope"),
    ],
)
def test_admin_only(who, expected):
    assert outcome(access.require_admin, CALLERS[who], "create shared workspaces") == expected


@pytest.mark.parametrize(
    ("who", "expected"),
    [
        ("admin", "personal-owner-writes"),
        ("owner", "ok"),
        ("writer", "personal-owner-writes"),
        ("reviewer", "personal-owner-writes"),
        ("other", "personal-owner-writes"),
        ("anonymous", "login"),
        ("agent", "agent-token-scope"),
    ],
)
def test_write_personal_workspace(who, expected):
    assert outcome(access.require_write, CALLERS[who], PERSONAL) == expected


@pytest.mark.parametrize(
    ("who", "expected"),
    [
        ("admin", "ok"),
        ("owner", "shared-writers-write"),
        ("writer", "ok"),
        ("reviewer", "shared-writers-write"),
        ("other", "shared-writers-write"),
        ("anonymous", "login"),
        ("agent", "agent-token-scope"),
    ],
)
def test_write_shared_workspace(who, expected):
    actor = CALLERS[who]
    assert outcome(access.require_write, actor, shared(actor)) == expected


def test_write_refusal_says_how_to_get_access():
    with pytest.raises(Forbidden) as refused:
        access.require_write(OTHER, shared(OTHER), "sync cases into it")
    assert "oscar is not a writer of @dev and cannot sync cases into it" in refused.value.message
    assert "evalkit workspaces members add dev oscar --role writer" in refused.value.message


@pytest.mark.parametrize(
    ("who", "expected"),
    [
        ("admin", "ok"),
        ("writer", "ok"),
        ("reviewer", "shared-writers-write"),
        ("other", "shared-writers-write"),
        ("anonymous", "login"),
    ],
)
def test_sync_shared(who, expected):
    actor = CALLERS[who]
    assert outcome(access.require_sync, actor, shared(actor)) == expected


@pytest.mark.parametrize(
    ("who", "expected"),
    [
        ("admin", "promotion-target-no-sync"),
        ("writer", "promotion-target-no-sync"),
        ("other", "shared-writers-write"),
    ],
)
def test_sync_refused_on_promotion_target(who, expected):
    actor = CALLERS[who]
    assert outcome(access.require_sync, actor, shared(actor, target=True)) == expected


def test_sync_personal_only_owner():
    assert outcome(access.require_sync, OWNER, PERSONAL) == "ok"
    assert outcome(access.require_sync, ADMIN, PERSONAL) == "personal-owner-writes"


@pytest.mark.parametrize(
    ("who", "expected"),
    [
        ("admin", "ok"),
        ("owner", "reviewers-review"),
        ("writer", "reviewers-review"),
        ("reviewer", "ok"),
        ("other", "reviewers-review"),
        ("anonymous", "login"),
        ("agent", "agent-token-scope"),
    ],
)
def test_review_shared(who, expected):
    actor = CALLERS[who]
    assert outcome(access.require_review, actor, shared(actor)) == expected


@pytest.mark.parametrize("who", ["admin", "owner", "reviewer", "other"])
def test_no_review_in_personal(who):
    assert outcome(access.require_review, CALLERS[who], PERSONAL) == "no-review-in-personal"


@pytest.mark.parametrize("who", ["admin", "reviewer"])
def test_no_review_decisions_on_promotion_target(who):
    actor = CALLERS[who]
    result = outcome(access.require_review, actor, shared(actor, target=True))
    assert result == "promotion-target-no-review"


@pytest.mark.parametrize(
    ("who", "expected"),
    [
        ("admin", "ok"),
        ("owner", "ok"),
        ("writer", "ok"),
        ("reviewer", "ok"),
        ("other", "ok"),
        ("anonymous", "login"),
        ("agent", "agent-token-scope"),
    ],
)
def test_anyone_comments_even_on_promotion_target(who, expected):
    actor = CALLERS[who]
    assert outcome(access.require_comment, actor, shared(actor, target=True)) == expected
    assert outcome(access.require_comment, actor, PERSONAL) == expected


@pytest.mark.parametrize(
    ("who", "server", "expected"),
    [
        ("owner", False, "ok"),
        ("owner", True, "server-cannot-drive-personal-agent"),
        ("admin", False, "personal-agent-owner-only"),
        ("other", False, "personal-agent-owner-only"),
        ("other", True, "personal-agent-owner-only"),
        ("anonymous", False, "login"),
    ],
)
def test_personal_agent_runs(who, server, expected):
    result = outcome(access.require_run_agent, CALLERS[who], PERSONAL, driven_by_server=server)
    assert result == expected


@pytest.mark.parametrize("who", ["admin", "writer", "other"])
def test_shared_agent_runs_by_anyone_logged_in(who):
    actor = CALLERS[who]
    assert outcome(access.require_run_agent, actor, shared(actor), driven_by_server=True) == "ok"


@pytest.mark.parametrize(
    ("who", "driver", "expected"),
    [
        # the server drives a shared agent: anyone logged in starts it in the shared home
        ("admin", "server", "ok"),
        ("owner", "server", "ok"),
        ("writer", "server", "ok"),
        ("reviewer", "server", "ok"),
        ("other", "server", "ok"),
        ("anonymous", "server", "login"),
        ("agent", "server", "agent-token-scope"),
        # runs the caller's own code reports (the SDK) are writes: writers only
        ("admin", "sdk", "ok"),
        ("writer", "sdk", "ok"),
        ("reviewer", "sdk", "shared-writers-write"),
        ("other", "sdk", "shared-writers-write"),
    ],
)
def test_start_experiment_in_a_shared_workspace(who, driver, expected):
    exercised.add("anyone-runs-shared")
    actor = CALLERS[who]
    home = shared(actor)
    assert outcome(access.require_start_experiment, actor, home, driver=driver) == expected
    # a promotion target is no different: its experiments read it, they write no cases
    target = shared(actor, target=True)
    assert outcome(access.require_start_experiment, actor, target, driver=driver) == expected


@pytest.mark.parametrize("who", ["admin", "writer", "reviewer", "other"])
def test_start_experiment_keeps_other_rights(who):
    """Starting is open; writing cases, reviewing and scheduling keep their own rules."""
    actor = CALLERS[who]
    dev = shared(actor)
    writes = "ok" if who in ("admin", "writer") else "shared-writers-write"
    reviews = "ok" if who in ("admin", "reviewer") else "reviewers-review"
    assert outcome(access.require_sync, actor, dev) == writes
    assert outcome(access.require_schedule, actor, dev, "create schedules in it") == writes
    assert outcome(access.require_review, actor, dev) == reviews


def test_sdk_refusal_says_what_is_open():
    with pytest.raises(Forbidden) as refused:
        access.require_start_experiment(REVIEWER, shared(REVIEWER), driver="sdk")
    message = refused.value.message
    assert "rita is not a writer of @dev and cannot run experiments in it" in message
    assert "runs your own code reports" in message and "open to everyone" in message


@pytest.mark.parametrize(
    ("who", "expected"),
    [("owner", "ok"), ("admin", "personal-owner-writes"), ("other", "personal-owner-writes")],
)
def test_resume_in_a_personal_workspace_is_its_owners(who, expected):
    actor = CALLERS[who]
    action = "resume experiments in it"
    result = outcome(
        access.require_start_experiment, actor, PERSONAL, driver="server", action=action
    )
    assert result == expected


def test_server_cannot_drive_refusal_names_the_agent_and_the_fix():
    with pytest.raises(Forbidden) as refused:
        access.require_run_agent(OWNER, PERSONAL, driven_by_server=True, agent="myagent@alice")
    assert refused.value.rule == "server-cannot-drive-personal-agent"
    assert "agent myagent@alice is personal, so the server" in refused.value.message
    assert "`evalkit run DATASET --agent myagent`" in refused.value.message


@pytest.mark.parametrize(
    ("user_id", "disabled", "expected"),
    [
        (2, False, "ok"),
        (2, True, "schedule-fires-as-creator"),
        (None, False, "schedule-fires-as-creator"),
    ],
)
def test_schedule_fires_as_its_enabled_creator(user_id, disabled, expected):
    result = outcome(
        access.schedule_actor,
        user_id,
        "alice",
        is_admin=False,
        disabled=disabled,
        schedule="nightly@prod",
    )
    assert result == expected
    if expected == "ok":
        actor = access.schedule_actor(2, "alice", is_admin=True, disabled=False, schedule="s")
        assert actor == Actor(user_id=2, username="alice", is_admin=True)


def test_experiment_location():
    dev, prod = shared(), shared()
    assert access.experiment_workspace(dev, prod, "alice") == "dev"
    assert access.experiment_workspace(dev, PERSONAL, "alice") == "alice"
    assert access.experiment_workspace(PERSONAL, dev, "bob") == "bob"
    assert access.experiment_workspace(PERSONAL, PERSONAL, "alice") == "alice"


def test_can_write_is_what_require_write_enforces():
    for actor in CALLERS.values():
        for ws in (PERSONAL, shared(actor)):
            allowed = access.can_write(actor, ws)
            assert allowed == (outcome(access.require_write, actor, ws) == "ok")


@pytest.mark.parametrize(
    ("who", "ws", "expected"),
    [
        ("admin", "shared", "ok"),
        ("writer", "shared", "ok"),
        ("owner", "shared", "writers-label"),
        ("reviewer", "shared", "writers-label"),
        ("other", "shared", "writers-label"),
        ("owner", "personal", "ok"),
        ("admin", "personal", "writers-label"),
        ("writer", "personal", "writers-label"),
        ("anonymous", "shared", "login"),
        ("agent", "shared", "agent-token-scope"),
    ],
)
def test_label_runs(who, ws, expected):
    actor = CALLERS[who]
    facts = shared(actor) if ws == "shared" else PERSONAL
    assert outcome(access.require_label, actor, facts) == expected


@pytest.mark.parametrize(
    ("who", "ws", "expected"),
    [
        ("admin", "shared", "ok"),
        ("writer", "shared", "ok"),
        ("reviewer", "shared", "writers-align-judge"),
        ("other", "shared", "writers-align-judge"),
        ("owner", "personal", "ok"),
        ("admin", "personal", "writers-align-judge"),
        ("anonymous", "shared", "login"),
        ("agent", "shared", "agent-token-scope"),
    ],
)
def test_align_judges(who, ws, expected):
    actor = CALLERS[who]
    facts = shared(actor) if ws == "shared" else PERSONAL
    assert outcome(access.require_align_judge, actor, facts, "accept examples") == expected


@pytest.mark.parametrize(
    ("who", "expected"),
    [
        ("admin", "ok"),
        ("writer", "ok"),
        ("reviewer", "monitor-writers-manage"),
        ("other", "monitor-writers-manage"),
        ("anonymous", "login"),
        ("agent", "agent-token-scope"),
    ],
)
def test_manage_monitor_in_shared(who, expected):
    actor = CALLERS[who]
    assert outcome(access.require_manage_monitor, actor, shared(actor), "create a monitor") == (
        expected
    )


def test_manage_monitor_in_personal():
    assert outcome(access.require_manage_monitor, OWNER, PERSONAL, "create a monitor") == "ok"
    assert (
        outcome(access.require_manage_monitor, ADMIN, PERSONAL, "create a monitor")
        == "monitor-writers-manage"
    )


def test_zz_every_rule_has_a_test():
    """Runs last in this module: every rule in RULES was exercised by a test above."""
    if not exercised:
        pytest.skip("run the whole module to check rule coverage")
    assert exercised >= set(RULES), f"rules without a test: {set(RULES) - exercised}"
