"""Wire objects of the HTTP API: accounts, workspaces, server info, errors."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

import msgspec


class Input(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Base of request bodies: unknown fields are an error, never silently dropped."""


class Output(msgspec.Struct, kw_only=True):
    """Base of response bodies."""


class ErrorBody(Output):
    code: str
    """The refused rule or error kind, e.g. ``admin-only``, ``bad-request``."""
    message: str


class Error(Output):
    error: ErrorBody


class LoginRequest(Input):
    username: str
    password: str


class User(Output):
    username: str
    is_admin: bool
    disabled: bool
    created_at: datetime


class Membership(Output):
    workspace: str
    role: Literal["writer", "reviewer"]


class Session(Output):
    token: str
    """Send as ``Authorization: Bearer <token>``; shown once."""
    expires_at: datetime
    user: User


class WhoAmI(Output):
    user: User
    personal_workspace: str
    memberships: list[Membership]
    token_expires_at: datetime | None


class UserCreate(Input):
    username: str
    password: str | None = None
    """Omit to have the server generate one, returned once in the answer."""
    is_admin: bool = False
    subject: str | None = None
    """An identity-provider subject (``sub``) to bind: a machine client's tokens then act as
    this user. Such a user gets no password unless one is given."""


class UserCreated(Output):
    user: User
    personal_workspace: str
    generated_password: str | None = None


class Workspace(Output):
    name: str
    kind: Literal["personal", "shared"]
    owner: str | None
    created_at: datetime
    your_role: Literal["writer", "reviewer"] | None
    writable: bool
    """Whether the caller may write to it."""
    promotes_to: str | None
    promoted_from: str | None


class WorkspaceCreate(Input):
    name: str


class MemberAdd(Input):
    username: str
    role: Literal["writer", "reviewer"]


class Member(Output):
    username: str
    role: Literal["writer", "reviewer"]
    disabled: bool


class MemberAdded(Output):
    member: Member
    previous_role: Literal["writer", "reviewer"] | None


class PromotionSet(Input):
    target: str


class Promotion(Output):
    source: str
    target: str


class CliInfo(Output):
    version: str
    install: str
    """The command that installs this server's CLI (from its own wheel at ``wheel_url``)."""
    wheel_url: str
    pypi_install: str
    """The same version from PyPI, for machines that cannot reach the server's /cli."""
    pip_install: str = ""
    """The served wheel installed with pip, for machines without uv (empty from servers
    older than this field)."""
    page_url: str = ""
    """``GET /cli``: these commands for a person, and a script that runs them (``| sh``)."""


class Health(Output):
    status: Literal["ok", "unavailable"]
    database: Annotated[str, msgspec.Meta(description="ok, or why the database is not ready")]
    schema_revision: str | None = None
    expected_revision: str | None = None
