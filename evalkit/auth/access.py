"""The access rules, all in one place. Every route asks this module before it acts.

Each rule has a stable name (sent to clients as the error code of a 403) and a sentence
(the ``RULES`` table, also rendered in ``docs/access.md``). A refusal raises
:class:`~evalkit.errors.Forbidden` naming the rule; no login raises
:class:`~evalkit.errors.Unauthorized`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from evalkit.errors import Forbidden, Unauthorized

Role = Literal["writer", "reviewer"]
WorkspaceKind = Literal["personal", "shared"]

RULES: dict[str, str] = {
    "login-required": "Anonymous callers read nothing; every API call needs a login.",
    "read-all": "Every logged-in user reads every workspace, personal ones included.",
    "admin-only": (
        "Users, shared workspaces, memberships, promotions, LLM providers and the default "
        "judge are managed by admins."
    ),
    "personal-owner-writes": "Only its owner writes to a personal workspace.",
    "shared-writers-write": "Admins and the workspace's writers write to a shared workspace.",
    "no-review-in-personal": "Cases in a personal workspace are not reviewed.",
    "reviewers-review": "Admins and the workspace's reviewers approve or reject its cases.",
    "promotion-target-no-sync": (
        "A promotion target is fed only by approvals in its source: sync is refused."
    ),
    "promotion-target-no-review": (
        "A promotion target takes no review decisions; approve in its source instead."
    ),
    "anyone-runs-shared": (
        "Every logged-in user starts, and resumes, experiments the server drives of a shared "
        "dataset with a shared agent; they are stored in the dataset's workspace."
    ),
    "personal-agent-owner-only": "Only its owner runs a personal agent.",
    "server-cannot-drive-personal-agent": (
        "The server does not drive a personal agent; its owner's CLI or SDK does."
    ),
    "agent-token-scope": "An agent token only sends traces for its own agent.",
    "writers-label": (
        "Human labels on a run are given by those who write to its experiment's workspace; "
        "everyone logged in reads them."
    ),
    "writers-align-judge": (
        "A judge's few-shot examples are proposed from an experiment's labels, and accepted "
        "for its workspace, by those who write to that workspace; everyone logged in reads "
        "proposals."
    ),
    "schedule-fires-as-creator": (
        "A schedule starts each experiment as the user who created it, with that user's "
        "rights when it fires; a disabled or deleted creator's schedules start nothing."
    ),
    "monitor-writers-manage": (
        "Admins and the writers of an agent's workspace create, change and delete its "
        "monitors; every logged-in user reads them."
    ),
}


@dataclass(frozen=True, slots=True)
class Actor:
    """Who is calling. ``agent_id`` is set for agent tokens, which act for one agent only."""

    user_id: int | None = None
    username: str | None = None
    is_admin: bool = False
    agent_id: int | None = None

    @property
    def is_anonymous(self) -> bool:
        return self.user_id is None and self.agent_id is None


ANONYMOUS = Actor()


@dataclass(frozen=True, slots=True)
class WorkspaceFacts:
    """What the rules need to know about one workspace, as seen by one actor."""

    name: str
    kind: WorkspaceKind
    owner_id: int | None
    actor_role: Role | None = None
    is_promotion_target: bool = False


def _refuse(rule: str, detail: str) -> Forbidden:
    return Forbidden(rule, f"{detail} ({RULES[rule]})")


def require_authenticated(actor: Actor) -> None:
    """Any credential at all: every route but the public ones needs one."""
    if actor.is_anonymous:
        raise Unauthorized(
            "not logged in: run `evalkit login` or send an Authorization: Bearer token",
            code="login-required",
        )


def require_user(actor: Actor) -> None:
    """A logged-in person; agent tokens are refused outside the collector."""
    require_authenticated(actor)
    if actor.user_id is None:
        raise _refuse("agent-token-scope", "this route needs a user login, not an agent token")


def require_read(actor: Actor) -> None:
    require_user(actor)


def require_admin(actor: Actor, action: str) -> None:
    require_user(actor)
    if not actor.is_admin:
        raise _refuse("admin-only", f"{actor.username} is not an admin and cannot {action}")


def can_write(actor: Actor, ws: WorkspaceFacts) -> bool:
    if actor.user_id is None:
        return False
    if ws.kind == "personal":
        return ws.owner_id == actor.user_id
    return actor.is_admin or ws.actor_role == "writer"


def require_write(actor: Actor, ws: WorkspaceFacts, action: str = "write to it") -> None:
    require_user(actor)
    if can_write(actor, ws):
        return
    if ws.kind == "personal":
        raise _refuse(
            "personal-owner-writes",
            f"@{ws.name} is someone else's personal workspace; you cannot {action}",
        )
    raise _refuse(
        "shared-writers-write",
        f"{actor.username} is not a writer of @{ws.name} and cannot {action}; ask an admin for "
        f"`evalkit workspaces members add {ws.name} {actor.username} --role writer`",
    )


def require_sync(actor: Actor, ws: WorkspaceFacts) -> None:
    require_write(actor, ws, "sync cases into it")
    if ws.is_promotion_target:
        raise _refuse(
            "promotion-target-no-sync",
            f"@{ws.name} is a promotion target; sync into its source workspace instead",
        )


def require_review(actor: Actor, ws: WorkspaceFacts) -> None:
    """Approve or reject a case."""
    require_user(actor)
    if ws.kind == "personal":
        raise _refuse("no-review-in-personal", f"@{ws.name} is a personal workspace")
    if ws.is_promotion_target:
        raise _refuse("promotion-target-no-review", f"@{ws.name} is a promotion target")
    if not (actor.is_admin or ws.actor_role == "reviewer"):
        raise _refuse(
            "reviewers-review",
            f"{actor.username} is not a reviewer of @{ws.name}; ask an admin for "
            f"`evalkit workspaces members add {ws.name} {actor.username} --role reviewer`",
        )


def require_comment(actor: Actor, ws: WorkspaceFacts) -> None:
    """Anyone logged in may comment on any case, promotion targets included."""
    require_user(actor)


def require_label(actor: Actor, ws: WorkspaceFacts) -> None:
    """Labelling a run: a person's reading is a result of the experiment, so it takes write
    access to the experiment's workspace (admins, its writers, a personal one's owner)."""
    require_user(actor)
    if can_write(actor, ws):
        return
    raise _refuse(
        "writers-label",
        f"{actor.username} cannot write to @{ws.name}, so cannot label its runs; ask an admin "
        f"for `evalkit workspaces members add {ws.name} {actor.username} --role writer`",
    )


def require_align_judge(actor: Actor, ws: WorkspaceFacts, action: str) -> None:
    """Proposing or accepting few-shot examples for a workspace's judge: write access to
    the workspace (admins, its writers, a personal one's owner)."""
    require_user(actor)
    if can_write(actor, ws):
        return
    raise _refuse(
        "writers-align-judge",
        f"{actor.username} cannot write to @{ws.name}, so cannot {action}; ask an admin for "
        f"`evalkit workspaces members add {ws.name} {actor.username} --role writer`",
    )


def require_run_agent(
    actor: Actor, agent_ws: WorkspaceFacts, *, driven_by_server: bool, agent: str = ""
) -> None:
    """Running an agent: a personal agent only by its owner, and never by the server."""
    require_user(actor)
    if agent_ws.kind != "personal":
        return
    named = f"agent {agent}" if agent else "the agent"
    if agent_ws.owner_id != actor.user_id:
        raise _refuse("personal-agent-owner-only", f"{named} belongs to @{agent_ws.name}'s owner")
    if driven_by_server:
        bare = agent.partition("@")[0] or "NAME"
        raise _refuse(
            "server-cannot-drive-personal-agent",
            f"{named} is personal, so the server (the web UI, a schedule, a harness check) "
            f"cannot call it: run it from your machine with `evalkit run DATASET --agent "
            f"{bare}` or run_experiment, or pick a shared agent",
        )


def require_start_experiment(
    actor: Actor, home_ws: WorkspaceFacts, *, driver: str, action: str = "run experiments in it"
) -> None:
    """Starting (or resuming) an experiment stored in ``home_ws``, the workspace
    :func:`experiment_workspace` chose. One the server drives there, on a shared agent and
    dataset, anyone logged in may start: it reads the cases and calls the agent the workspace
    registered, so its results are the server's own (``anyone-runs-shared``). Runs that the
    caller's code reports (the SDK's, of a shared code-driven agent) are results written into
    the workspace, so they need write access there; a personal home is the runner's own."""
    require_user(actor)
    if home_ws.kind == "shared":
        if driver == "server":
            return
        action = (
            f"{action} with runs your own code reports (a shared code-driven agent); runs "
            "the server drives, of a shared agent with a harness, are open to everyone"
        )
    require_write(actor, home_ws, action)


def require_schedule(actor: Actor, home_ws: WorkspaceFacts, action: str) -> None:
    """A schedule lives in its experiments' workspace and starts them again and again, as
    its creator: creating one, deleting one and each of its fires need write access there
    (starting one experiment by hand does not, see :func:`require_start_experiment`)."""
    require_write(actor, home_ws, action)


def require_driver(
    actor: Actor, creator_id: int | None, creator: str | None, experiment: int
) -> None:
    """Runs of an experiment driven from a user's machine are posted by that user only."""
    require_user(actor)
    if creator_id != actor.user_id:
        raise _refuse(
            "personal-agent-owner-only",
            f"experiment {experiment} is driven from {creator or 'another user'}'s own machine",
        )


def schedule_actor(
    user_id: int | None, username: str | None, *, is_admin: bool, disabled: bool, schedule: str
) -> Actor:
    """Who a schedule's experiment is started as: its creator, while that user is enabled.
    The start then asks the usual rules (write access to the experiment's workspace, the
    agent's) for that user, as they stand when the schedule fires."""
    if user_id is None:
        raise _refuse(
            "schedule-fires-as-creator",
            f"schedule {schedule} has no creator any more; create it again as a current user",
        )
    if disabled:
        raise _refuse(
            "schedule-fires-as-creator",
            f"schedule {schedule} was created by {username}, who is disabled; an admin may "
            f"enable them (`evalkit users enable {username}`), or create it again as an active "
            "user and delete this one",
        )
    return Actor(user_id=user_id, username=username, is_admin=is_admin)


def experiment_workspace(dataset_ws: WorkspaceFacts, agent_ws: WorkspaceFacts, runner: str) -> str:
    """Where an experiment is stored: the dataset's workspace if both are shared, else the
    runner's personal workspace."""
    if dataset_ws.kind == "shared" and agent_ws.kind == "shared":
        return dataset_ws.name
    return runner


def require_manage_monitor(actor: Actor, agent_ws: WorkspaceFacts, action: str) -> None:
    """Create, update or delete a monitor of an agent in ``agent_ws``: its writers and admins
    (``monitor-writers-manage``); reading monitors is ``read-all``."""
    require_user(actor)
    if can_write(actor, agent_ws):
        return
    raise _refuse(
        "monitor-writers-manage",
        f"{actor.username} is not a writer of @{agent_ws.name} and cannot {action}; ask an "
        f"admin for `evalkit workspaces members add {agent_ws.name} {actor.username} "
        "--role writer`",
    )
