"""Passwords and identity bindings: change your own password, an admin's reset, and binding
a user to an identity-provider subject."""

from __future__ import annotations

from evalkit.auth import access
from evalkit.edge.endpoint import Call, Endpoint
from evalkit.errors import Unauthorized
from evalkit.model import api
from evalkit.model import sso as wire
from evalkit.store import audit, identities, login_limits


async def password_change(call: Call) -> wire.PasswordChanged:
    access.require_read(call.actor)
    body: wire.PasswordChange = await call.payload()
    assert call.actor.username is not None
    async with call.db.transaction() as conn:
        # A wrong old password counts as a failed login: a stolen token must not become
        # a way to guess the password.
        await login_limits.check(conn, call.actor.username, call.address)
        try:
            revoked = await identities.change_password(
                conn, call.actor, body.old_password, body.new_password, call.token_id
            )
        except Unauthorized:
            failed = True
        else:
            failed = False
    if failed:
        async with call.db.connection() as conn:
            await login_limits.record_failure(conn, call.actor.username, call.address)
        raise Unauthorized("the old password is wrong", code="bad-credentials")
    return wire.PasswordChanged(username=call.actor.username, other_tokens_revoked=revoked)


async def password_reset(call: Call) -> wire.PasswordReset:
    access.require_admin(call.actor, "reset passwords")
    username = call.param("username")
    async with call.db.transaction() as conn:
        await audit.record(conn, call.actor, "user.reset_password", username)
        return await identities.reset_password(conn, username)


async def subject_bind(call: Call) -> api.User:
    access.require_admin(call.actor, "bind users to identity-provider subjects")
    body: wire.SubjectBind = await call.payload()
    username = call.param("username")
    async with call.db.transaction() as conn:
        await audit.record(conn, call.actor, "user.bind_subject", username, subject=body.subject)
        return await identities.bind_subject(conn, username, body.subject)


ENDPOINTS = [
    Endpoint(
        "POST",
        "/api/auth/password",
        password_change,
        "Change your own password (the old one is checked); your other tokens are revoked",
        body=wire.PasswordChange,
        returns=wire.PasswordChanged,
        tags=["auth"],
        refusals=(429,),  # the login limits count wrong old passwords
    ),
    Endpoint(
        "POST",
        "/api/users/{username}/reset-password",
        password_reset,
        "Give a user a new generated password, shown once, and revoke their tokens (admin)",
        returns=wire.PasswordReset,
        tags=["users"],
    ),
    Endpoint(
        "PUT",
        "/api/users/{username}/subject",
        subject_bind,
        "Bind a user to an identity-provider subject, for single sign-on (admin)",
        body=wire.SubjectBind,
        returns=api.User,
        tags=["users"],
    ),
]
