"""Wire objects for single sign-on, passwords and the audit log."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec

from evalkit.model.api import Input, Output, Session


class SsoInfo(Output):
    """What a CLI or browser needs to start a sign-in: answered without a login."""

    enabled: bool
    issuer: str | None = None
    client_id: str | None = None
    scopes: list[str] = msgspec.field(default_factory=list)
    authorization_endpoint: str | None = None
    """Where the CLI sends the browser (authorization code + PKCE, loopback redirect)."""
    token_endpoint: str | None = None
    """Where machine clients get access tokens (client credentials)."""
    device_flow: bool = False
    """The identity provider offers the device flow, so `evalkit login` can use it."""
    audience: str | None = None
    """The ``aud`` access tokens must carry; machine clients ask for it when set."""


class SsoCodeExchange(Input):
    """The CLI's loopback login: the code the provider sent to its redirect, and the PKCE
    verifier and nonce the CLI made. The server redeems the code with its client secret."""

    code: str
    code_verifier: str
    redirect_uri: str
    nonce: str


class DeviceStart(Output):
    device_code: str
    user_code: str
    verification_uri: str
    expires_in: int
    verification_uri_complete: str | None = None
    interval: int = 5


class DevicePoll(Input):
    device_code: str


class DeviceLogin(Output):
    """Where a device-flow sign-in stands: ``pending`` or ``slow_down`` (poll again after
    ``interval`` seconds), or ``done`` with the login."""

    status: Literal["pending", "slow_down", "done"]
    session: Session | None = None


class PasswordChange(Input):
    old_password: str
    new_password: str


class PasswordChanged(Output):
    username: str
    other_tokens_revoked: int
    """Your other logins (other machines, browsers) were logged out."""


class SubjectBind(Input):
    subject: str
    """The identity provider's ``sub`` for this user (a machine client's id, often)."""


class PasswordReset(Output):
    username: str
    generated_password: str
    """Shown once; the user's login tokens were revoked."""
    tokens_revoked: int


class AuditEntry(Output):
    id: int
    at: datetime
    actor: str
    action: str
    target: str
    detail: dict[str, Any]
