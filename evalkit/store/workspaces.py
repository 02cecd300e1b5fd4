"""Workspaces, memberships and promotion links."""

from __future__ import annotations

from typing import Any

from evalkit.auth.access import Actor, WorkspaceFacts, can_write
from evalkit.db import Conn, IntegrityError
from evalkit.errors import BadRequest, Conflict, NotFound
from evalkit.model import api
from evalkit.model.names import check_name
from evalkit.store.accounts import get_user


class WorkspaceRow:
    """A workspace as loaded for one actor: its id and the facts the access rules need."""

    __slots__ = ("created_at", "facts", "id", "owner", "promoted_from", "promotes_to")

    def __init__(self, row: dict[str, Any]) -> None:
        self.id: int = row["id"]
        self.owner: str | None = row["owner"]
        self.created_at = row["created_at"]
        self.promotes_to: str | None = row["promotes_to"]
        self.promoted_from: str | None = row["promoted_from"]
        self.facts = WorkspaceFacts(
            name=row["name"],
            kind=row["kind"],
            owner_id=row["owner_id"],
            actor_role=row["actor_role"],
            is_promotion_target=row["promoted_from"] is not None,
        )

    def to_api(self, actor: Actor) -> api.Workspace:
        return api.Workspace(
            name=self.facts.name,
            kind=self.facts.kind,
            owner=self.owner,
            created_at=self.created_at,
            your_role=self.facts.actor_role,
            writable=can_write(actor, self.facts),
            promotes_to=self.promotes_to,
            promoted_from=self.promoted_from,
        )


async def get_workspace(conn: Conn, actor: Actor, name: str) -> WorkspaceRow:
    row = await conn.one("workspace_get_facts", name=name, actor_id=actor.user_id)
    if row is None:
        raise NotFound(
            f"no workspace named {name!r}; see `evalkit workspaces list`", code="no-such-workspace"
        )
    return WorkspaceRow(row)


async def list_workspaces(conn: Conn, actor: Actor) -> list[api.Workspace]:
    rows = await conn.all("workspace_list", actor_id=actor.user_id)
    return [WorkspaceRow(row).to_api(actor) for row in rows]


async def create_shared_workspace(conn: Conn, actor: Actor, name: str) -> api.Workspace:
    check_name("workspace", name)
    try:
        await conn.one("workspace_insert", name=name, kind="shared", owner_id=None)
    except IntegrityError as exc:
        if exc.constraint == "workspaces_name_key":
            raise Conflict(f"workspace {name!r} already exists", code="workspace-exists") from None
        raise
    return (await get_workspace(conn, actor, name)).to_api(actor)


def _require_shared(ws: WorkspaceRow, what: str) -> None:
    if ws.facts.kind != "shared":
        raise BadRequest(
            f"@{ws.facts.name} is a personal workspace: {what} only shared workspaces",
            code="personal-workspace",
        )


async def add_member(
    conn: Conn, actor: Actor, workspace: str, username: str, role: str
) -> api.MemberAdded:
    ws = await get_workspace(conn, actor, workspace)
    _require_shared(ws, "members belong to")
    user = await get_user(conn, username)
    row = await conn.one("membership_upsert", workspace_id=ws.id, user_id=user["id"], role=role)
    assert row is not None
    member = api.Member(username=username, role=role, disabled=user["disabled_at"] is not None)  # type: ignore[arg-type]
    return api.MemberAdded(member=member, previous_role=row["previous_role"])


async def list_members(conn: Conn, actor: Actor, workspace: str) -> list[api.Member]:
    ws = await get_workspace(conn, actor, workspace)
    rows = await conn.all("membership_list", workspace_id=ws.id)
    return [
        api.Member(username=r["username"], role=r["role"], disabled=r["disabled_at"] is not None)
        for r in rows
    ]


async def remove_member(conn: Conn, actor: Actor, workspace: str, username: str) -> None:
    ws = await get_workspace(conn, actor, workspace)
    user = await get_user(conn, username)
    if not await conn.execute("membership_delete", workspace_id=ws.id, user_id=user["id"]):
        raise NotFound(f"{username} is not a member of @{workspace}", code="not-a-member")


async def memberships_of(conn: Conn, user_id: int) -> list[api.Membership]:
    rows = await conn.all("membership_list_for_user", user_id=user_id)
    return [api.Membership(workspace=r["workspace"], role=r["role"]) for r in rows]


async def set_promotion(conn: Conn, actor: Actor, source: str, target: str) -> api.Promotion:
    src = await get_workspace(conn, actor, source)
    tgt = await get_workspace(conn, actor, target)
    _require_shared(src, "promotion links")
    _require_shared(tgt, "promotion links")
    if src.id == tgt.id:
        raise BadRequest("a workspace cannot promote to itself", code="promotion-self")
    if src.promotes_to == target:
        return api.Promotion(source=source, target=target)
    if src.promotes_to is not None:
        raise Conflict(
            f"@{source} already promotes to @{src.promotes_to}; a source has one target",
            code="promotion-source-taken",
        )
    if tgt.promoted_from is not None:
        raise Conflict(
            f"@{target} is already fed by @{tgt.promoted_from}; a target has one source",
            code="promotion-target-taken",
        )
    if src.promoted_from is not None or tgt.promotes_to is not None:
        raise Conflict(
            "promotion links do not chain here: a workspace is either a source or a target "
            f"(@{source} -> @{target} would join two links)",
            code="promotion-chain",
        )
    await conn.execute("promotion_insert", source_id=src.id, target_id=tgt.id)
    return api.Promotion(source=source, target=target)


async def remove_promotion(conn: Conn, actor: Actor, source: str) -> api.Promotion:
    """Remove SOURCE's promotion link; returns the link that was removed. The target then
    takes sync and review again; the versions already promoted into it stay."""
    src = await get_workspace(conn, actor, source)
    if src.promoted_from is not None:
        raise NotFound(
            f"@{source} is the target of a promotion link, not its source; remove the link "
            f"with `evalkit workspaces promote-to {src.promoted_from} --remove`",
            code="no-promotion-link",
        )
    # The row count, not promotes_to alone: a remove that ran at the same time wins once.
    if src.promotes_to is None or not await conn.execute("promotion_delete", source_id=src.id):
        raise NotFound(
            f"@{source} has no promotion link to remove; `evalkit workspaces list` shows the "
            "links (-> @target on a source)",
            code="no-promotion-link",
        )
    return api.Promotion(source=source, target=src.promotes_to)
