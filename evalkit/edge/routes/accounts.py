"""Login, logout, whoami and user administration."""

from __future__ import annotations

from evalkit.auth import access
from evalkit.edge.endpoint import Call, Endpoint
from evalkit.errors import BadRequest
from evalkit.model import api
from evalkit.store import accounts, audit, login_limits, workspaces


async def login(call: Call) -> api.Session:
    body: api.LoginRequest = await call.payload()
    async with call.db.connection() as conn:
        return await login_limits.login(
            conn, body.username, body.password, call.settings.auth.token_ttl_hours, call.address
        )


async def logout(call: Call) -> None:
    access.require_read(call.actor)
    if call.token_id is None:
        raise BadRequest(
            "this call came with an identity provider's access token, which only the provider "
            "can revoke; it expires by itself",
            code="not-revocable",
        )
    async with call.db.connection() as conn:
        await accounts.revoke_login_token(conn, call.token_id)


async def whoami(call: Call) -> api.WhoAmI:
    access.require_read(call.actor)
    assert call.actor.username is not None and call.actor.user_id is not None
    async with call.db.connection() as conn:
        user = await accounts.get_user(conn, call.actor.username)
        memberships = await workspaces.memberships_of(conn, call.actor.user_id)
    return api.WhoAmI(
        user=accounts.user_from_row(user),
        personal_workspace=call.actor.username,
        memberships=memberships,
        token_expires_at=call.token_expires_at,
    )


async def users_create(call: Call) -> api.UserCreated:
    access.require_admin(call.actor, "add users")
    body: api.UserCreate = await call.payload()
    async with call.db.transaction() as conn:
        await audit.record(conn, call.actor, "user.add", body.username, subject=body.subject)
        return await accounts.create_user(
            conn, body.username, body.password, is_admin=body.is_admin, subject=body.subject
        )


async def users_list(call: Call) -> list[api.User]:
    access.require_read(call.actor)
    async with call.db.connection() as conn:
        return await accounts.list_users(conn)


async def users_disable(call: Call) -> api.User:
    access.require_admin(call.actor, "disable users")
    async with call.db.transaction() as conn:
        await audit.record(conn, call.actor, "user.disable", call.param("username"))
        return await accounts.disable_user(conn, call.actor, call.param("username"))


async def users_enable(call: Call) -> api.User:
    access.require_admin(call.actor, "enable users")
    async with call.db.transaction() as conn:
        await audit.record(conn, call.actor, "user.enable", call.param("username"))
        return await accounts.enable_user(conn, call.param("username"))


ENDPOINTS = [
    Endpoint(
        "POST",
        "/api/auth/login",
        login,
        "Log in with a password; returns a bearer token",
        body=api.LoginRequest,
        returns=api.Session,
        public=True,
        tags=["auth"],
        refusals=(401, 429),  # wrong username or password; the login limits
    ),
    Endpoint(
        "POST",
        "/api/auth/logout",
        logout,
        "Revoke the token of this call",
        status=204,
        tags=["auth"],
    ),
    Endpoint(
        "GET",
        "/api/auth/whoami",
        whoami,
        "The caller, their workspaces and token expiry",
        returns=api.WhoAmI,
        tags=["auth"],
    ),
    Endpoint(
        "POST",
        "/api/users",
        users_create,
        "Add a user (admin)",
        body=api.UserCreate,
        returns=api.UserCreated,
        status=201,
        tags=["users"],
    ),
    Endpoint("GET", "/api/users", users_list, "List users", returns=list[api.User], tags=["users"]),
    Endpoint(
        "POST",
        "/api/users/{username}/disable",
        users_disable,
        "Disable a user and revoke their tokens (admin)",
        returns=api.User,
        tags=["users"],
    ),
    Endpoint(
        "POST",
        "/api/users/{username}/enable",
        users_enable,
        "Let a disabled user log in again; their old tokens stay revoked (admin)",
        returns=api.User,
        tags=["users"],
    ),
]
