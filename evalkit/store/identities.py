"""Who a single sign-on identity is in evalkit, and password changes.

A user is bound to an identity-provider subject (``users.oidc_subject``): at their first
sign-in (created then, named by the username claim), or by an admin for a machine user
(``evalkit users add ci-bot --subject SUB``).
"""

from __future__ import annotations

from typing import Any

from evalkit.auth import passwords
from evalkit.auth.access import Actor
from evalkit.db import Conn, IntegrityError
from evalkit.errors import BadRequest, Conflict, Unauthorized
from evalkit.model import api
from evalkit.model.names import NAME_RULE, check_name
from evalkit.model.sso import PasswordReset
from evalkit.store import accounts, login_limits


async def actor_for_subject(conn: Conn, subject: str, issuer: str) -> Actor:
    """The user an access token's subject is bound to; refused, naming the fix, if none."""
    row = await conn.one("user_get_by_subject", subject=subject)
    if row is None:
        raise Unauthorized(
            f"no evalkit user is bound to the subject {subject!r} of {issuer}; an admin binds "
            f"one with `evalkit users add NAME --subject {subject}` (or `evalkit users bind "
            f"NAME --subject {subject}` for an existing user)",
            code="unbound-subject",
        )
    if row["disabled_at"] is not None:
        raise Unauthorized(
            f"user {row['username']!r} is disabled; ask an admin", code="user-disabled"
        )
    return Actor(user_id=row["id"], username=row["username"], is_admin=row["is_admin"])


async def sign_in(conn: Conn, claims: dict[str, Any], username_claim: str) -> dict[str, Any]:
    """The user row of a checked ID token: the one bound to its subject, else a new user
    named by the username claim (their first sign-in). Runs in the caller's transaction."""
    subject = claims["sub"]
    row = await conn.one("user_get_by_subject", subject=subject)
    if row is not None:
        if row["disabled_at"] is not None:
            raise Unauthorized(
                f"user {row['username']!r} is disabled; ask an admin", code="user-disabled"
            )
        return row
    raw = claims.get(username_claim)
    if not isinstance(raw, str) or not raw.strip():
        raise Unauthorized(
            f"the identity provider sent no {username_claim!r} claim, which names the evalkit "
            "user at the first sign-in; the admin sets auth.oidc.username_claim to a claim it "
            "sends (and its scope in auth.oidc.scopes)",
            code="no-username-claim",
        )
    username = raw.strip().lower()
    try:
        check_name("username", username)
    except BadRequest:
        raise Unauthorized(
            f"the {username_claim!r} claim is {raw!r}, which is not a valid evalkit username "
            f"({NAME_RULE}); the admin picks another claim in auth.oidc.username_claim, "
            "or adds you beforehand with `evalkit users add NAME --subject "
            f"{subject}`",
            code="bad-username-claim",
        ) from None
    existing = await conn.one("user_get_by_name", username=username)
    if existing is not None:
        raise Unauthorized(
            f"a user named {username!r} already exists and is not bound to this identity "
            f"(subject {subject!r}); if it is you, an admin binds it with `evalkit users bind "
            f"{username} --subject {subject}`",
            code="username-taken",
        )
    await accounts.create_user(conn, username, None, subject=subject)
    created = await conn.one("user_get_by_subject", subject=subject)
    assert created is not None
    return created


async def bind_subject(conn: Conn, username: str, subject: str) -> api.User:
    await accounts.get_user(conn, username)
    if not subject.strip():
        raise BadRequest(
            "the subject is empty; pass the identity provider's sub", code="bad-subject"
        )
    try:
        row = await conn.one("user_set_subject", username=username, subject=subject)
    except IntegrityError as exc:
        if exc.constraint == "users_oidc_subject_key":
            raise Conflict(
                f"the subject {subject!r} is already bound to another user",
                code="subject-taken",
            ) from None
        raise
    assert row is not None
    return accounts.user_from_row(row)


async def change_password(
    conn: Conn, actor: Actor, old: str, new: str, token_id: int | None
) -> int:
    """Replace the caller's password after checking the old one; the caller's other login
    tokens are revoked. Returns how many were."""
    assert actor.username is not None and actor.user_id is not None
    row = await accounts.get_user(conn, actor.username)
    if row["password_hash"] is None:
        raise BadRequest(
            f"{actor.username} has no password: this user signs in through single sign-on; "
            "an admin can give it one with `evalkit users reset`",
            code="no-password",
        )
    if not passwords.verify_password(row["password_hash"], old):
        raise Unauthorized("the old password is wrong", code="bad-credentials")
    if old == new:
        raise BadRequest("the new password is the old one; choose another", code="same-password")
    passwords.check_password_rules(new, what="new password")
    await conn.one(
        "user_set_password", username=actor.username, password_hash=passwords.hash_password(new)
    )
    return await conn.execute("login_token_revoke_others", user_id=actor.user_id, token_id=token_id)


async def reset_password(conn: Conn, username: str) -> PasswordReset:
    """A new generated password for a user; every login token of theirs is revoked."""
    target = await accounts.get_user(conn, username)
    password = passwords.generate_password()
    await conn.one(
        "user_set_password", username=username, password_hash=passwords.hash_password(password)
    )
    revoked = await conn.execute("login_token_revoke_others", user_id=target["id"], token_id=None)
    await conn.execute("login_failure_clear", key=login_limits.user_key(username))
    return PasswordReset(username=username, generated_password=password, tokens_revoked=revoked)
