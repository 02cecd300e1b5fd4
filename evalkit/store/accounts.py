"""Users and login tokens."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from evalkit.auth import passwords, tokens
from evalkit.auth.access import Actor
from evalkit.db import Conn, IntegrityError
from evalkit.errors import BadRequest, Conflict, NotFound, Unauthorized
from evalkit.model import api
from evalkit.model.names import check_name


def user_from_row(row: dict[str, Any]) -> api.User:
    return api.User(
        username=row["username"],
        is_admin=row["is_admin"],
        disabled=row["disabled_at"] is not None,
        created_at=row["created_at"],
    )


async def create_user(
    conn: Conn,
    username: str,
    password: str | None,
    *,
    is_admin: bool = False,
    subject: str | None = None,
) -> api.UserCreated:
    """Create a user and their personal workspace, in the caller's transaction. A user bound
    to an identity-provider ``subject`` gets no password unless one is given."""
    check_name("username", username)
    generated = None
    if password is None and subject is None:
        password = generated = passwords.generate_password()
    password_hash = passwords.hash_password(password) if password is not None else None
    try:
        row = await conn.one(
            "user_insert",
            username=username,
            password_hash=password_hash,
            is_admin=is_admin,
            oidc_subject=subject,
        )
        assert row is not None
        await conn.one("workspace_insert", name=username, kind="personal", owner_id=row["id"])
    except IntegrityError as exc:
        if exc.constraint == "users_username_key":
            raise Conflict(f"user {username!r} already exists", code="user-exists") from None
        if exc.constraint == "users_oidc_subject_key":
            raise Conflict(
                f"the subject {subject!r} is already bound to another user; see "
                "`evalkit users list`",
                code="subject-taken",
            ) from None
        if exc.constraint == "workspaces_name_key":
            raise Conflict(
                f"a workspace named {username!r} already exists, and each user gets a personal "
                "workspace named after them; choose another username",
                code="workspace-exists",
            ) from None
        raise
    return api.UserCreated(
        user=user_from_row(row), personal_workspace=username, generated_password=generated
    )


async def get_user(conn: Conn, username: str) -> dict[str, Any]:
    row = await conn.one("user_get_by_name", username=username)
    if row is None:
        raise NotFound(f"no user named {username!r}; see `evalkit users list`", code="no-such-user")
    return row


async def list_users(conn: Conn) -> list[api.User]:
    return [user_from_row(row) for row in await conn.all("user_list")]


async def admin_exists(conn: Conn) -> bool:
    row = await conn.one("user_admin_exists")
    return bool(row and row["exists"])


async def disable_user(conn: Conn, actor: Actor, username: str) -> api.User:
    target = await get_user(conn, username)
    # Only admins disable users and nobody disables themselves, so an enabled admin always
    # remains: no separate last-admin check is needed.
    if target["id"] == actor.user_id:
        raise BadRequest("you cannot disable yourself; ask another admin", code="disable-self")
    row = await conn.one("user_disable", username=username)
    assert row is not None
    await conn.execute("login_token_revoke_all", user_id=target["id"])
    return user_from_row(row)


async def enable_user(conn: Conn, username: str) -> api.User:
    """Let a disabled user log in again (an enabled one is left as is). The tokens revoked
    when they were disabled stay revoked: they log in again for a new one."""
    await get_user(conn, username)
    row = await conn.one("user_enable", username=username)
    assert row is not None
    return user_from_row(row)


async def login(conn: Conn, username: str, password: str, ttl_hours: int) -> api.Session:
    row = await conn.one("user_get_by_name", username=username)
    ok = passwords.verify_password(row["password_hash"] if row else None, password)
    if row is None or not ok:
        raise Unauthorized("wrong username or password", code="bad-credentials")
    if row["disabled_at"] is not None:
        raise Unauthorized(f"user {username!r} is disabled; ask an admin", code="user-disabled")
    return await issue_login_token(conn, row, ttl_hours)


async def issue_login_token(conn: Conn, user_row: dict[str, Any], ttl_hours: int) -> api.Session:
    token = tokens.new_token(tokens.LOGIN_PREFIX)
    stored = await conn.one(
        "login_token_insert",
        user_id=user_row["id"],
        token_hash=tokens.token_digest(token),
        ttl_hours=ttl_hours,
    )
    assert stored is not None
    return api.Session(token=token, expires_at=stored["expires_at"], user=user_from_row(user_row))


@dataclass(frozen=True, slots=True)
class ResolvedToken:
    actor: Actor
    token_id: int
    expires_at: datetime


async def resolve_login_token(conn: Conn, token: str) -> ResolvedToken:
    """The actor behind a bearer token, or Unauthorized saying why it is not accepted."""
    row = await conn.one("login_token_resolve", token_hash=tokens.token_digest(token))
    if row is None:
        raise Unauthorized("the token is not valid; run `evalkit login`", code="bad-token")
    if row["revoked_at"] is not None:
        raise Unauthorized("the token was revoked; run `evalkit login`", code="token-revoked")
    if row["expired"]:
        raise Unauthorized("the token has expired; run `evalkit login`", code="token-expired")
    if row["disabled_at"] is not None:
        raise Unauthorized("this user is disabled; ask an admin", code="user-disabled")
    await conn.execute("login_token_touch", token_id=row["token_id"])
    actor = Actor(user_id=row["user_id"], username=row["username"], is_admin=row["is_admin"])
    return ResolvedToken(actor, row["token_id"], row["expires_at"])


async def revoke_login_token(conn: Conn, token_id: int) -> None:
    await conn.execute("login_token_revoke", token_id=token_id)
