"""Workspaces, members and promotion links."""

from __future__ import annotations

from evalkit.auth import access
from evalkit.edge.endpoint import Call, Endpoint
from evalkit.model import api
from evalkit.store import audit, workspaces


async def workspaces_list(call: Call) -> list[api.Workspace]:
    access.require_read(call.actor)
    async with call.db.connection() as conn:
        return await workspaces.list_workspaces(conn, call.actor)


async def workspaces_show(call: Call) -> api.Workspace:
    access.require_read(call.actor)
    async with call.db.connection() as conn:
        ws = await workspaces.get_workspace(conn, call.actor, call.param("workspace"))
    return ws.to_api(call.actor)


async def workspaces_create(call: Call) -> api.Workspace:
    access.require_admin(call.actor, "create shared workspaces")
    body: api.WorkspaceCreate = await call.payload()
    async with call.db.transaction() as conn:
        await audit.record(conn, call.actor, "workspace.create", body.name)
        return await workspaces.create_shared_workspace(conn, call.actor, body.name)


async def members_list(call: Call) -> list[api.Member]:
    access.require_read(call.actor)
    async with call.db.connection() as conn:
        return await workspaces.list_members(conn, call.actor, call.param("workspace"))


async def members_add(call: Call) -> api.MemberAdded:
    access.require_admin(call.actor, "manage workspace members")
    body: api.MemberAdd = await call.payload()
    ws = call.param("workspace")
    async with call.db.transaction() as conn:
        await audit.record(conn, call.actor, "member.add", ws, user=body.username, role=body.role)
        return await workspaces.add_member(
            conn, call.actor, call.param("workspace"), body.username, body.role
        )


async def members_remove(call: Call) -> None:
    access.require_admin(call.actor, "manage workspace members")
    ws = call.param("workspace")
    async with call.db.transaction() as conn:
        await audit.record(conn, call.actor, "member.remove", ws, user=call.param("username"))
        await workspaces.remove_member(
            conn, call.actor, call.param("workspace"), call.param("username")
        )


async def promotion_set(call: Call) -> api.Promotion:
    access.require_admin(call.actor, "link workspaces for promotion")
    body: api.PromotionSet = await call.payload()
    ws = call.param("workspace")
    async with call.db.transaction() as conn:
        await audit.record(conn, call.actor, "promotion.set", ws, promotes_to=body.target)
        return await workspaces.set_promotion(
            conn, call.actor, call.param("workspace"), body.target
        )


async def promotion_remove(call: Call) -> api.Promotion:
    access.require_admin(call.actor, "unlink workspaces for promotion")
    async with call.db.transaction() as conn:
        link = await workspaces.remove_promotion(conn, call.actor, call.param("workspace"))
        await audit.record(
            conn, call.actor, "promotion.remove", link.source, promotes_to=link.target
        )
        return link


ENDPOINTS = [
    Endpoint(
        "GET",
        "/api/workspaces",
        workspaces_list,
        "List every workspace",
        returns=list[api.Workspace],
        tags=["workspaces"],
    ),
    Endpoint(
        "POST",
        "/api/workspaces",
        workspaces_create,
        "Create a shared workspace (admin)",
        body=api.WorkspaceCreate,
        returns=api.Workspace,
        status=201,
        tags=["workspaces"],
    ),
    Endpoint(
        "GET",
        "/api/workspaces/{workspace}",
        workspaces_show,
        "One workspace",
        returns=api.Workspace,
        tags=["workspaces"],
    ),
    Endpoint(
        "GET",
        "/api/workspaces/{workspace}/members",
        members_list,
        "Members of a workspace",
        returns=list[api.Member],
        tags=["workspaces"],
    ),
    Endpoint(
        "POST",
        "/api/workspaces/{workspace}/members",
        members_add,
        "Add a member or change their role (admin)",
        body=api.MemberAdd,
        returns=api.MemberAdded,
        tags=["workspaces"],
    ),
    Endpoint(
        "DELETE",
        "/api/workspaces/{workspace}/members/{username}",
        members_remove,
        "Remove a member (admin)",
        status=204,
        tags=["workspaces"],
    ),
    Endpoint(
        "PUT",
        "/api/workspaces/{workspace}/promotion",
        promotion_set,
        "Link this workspace to its promotion target (admin)",
        body=api.PromotionSet,
        returns=api.Promotion,
        tags=["workspaces"],
    ),
    Endpoint(
        "DELETE",
        "/api/workspaces/{workspace}/promotion",
        promotion_remove,
        "Remove this workspace's promotion link; promoted versions stay in the target (admin)",
        returns=api.Promotion,
        tags=["workspaces"],
    ),
]
