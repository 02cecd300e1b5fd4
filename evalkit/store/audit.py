"""The audit log: what admins did, written in the same transaction as the action itself."""

from __future__ import annotations

from typing import Any

import msgspec

from evalkit.auth.access import Actor
from evalkit.db import Conn
from evalkit.errors import BadRequest
from evalkit.model.sso import AuditEntry

MAX_LIMIT = 1000
_json = msgspec.json.Encoder()

ACTIONS = (
    "user.add",
    "user.disable",
    "user.enable",
    "user.reset_password",
    "user.bind_subject",
    "workspace.create",
    "member.add",
    "member.remove",
    "promotion.set",
    "promotion.remove",
    "provider.create",
    "provider.delete",
    "judge.set_default",
    "judge.clear_default",
)


async def record(conn: Conn, actor: Actor, action: str, target: str, **detail: Any) -> None:
    """One row for one admin action. Call it inside the action's transaction: if the action
    fails, the row goes with it."""
    assert action in ACTIONS, f"unknown audit action {action}"
    await conn.execute(
        "audit_insert",
        actor_id=actor.user_id,
        actor=actor.username or "?",
        action=action,
        target=target,
        detail=_json.encode(detail).decode(),
    )


async def list_entries(
    conn: Conn, *, limit: int = 100, action: str | None = None
) -> list[AuditEntry]:
    if not 1 <= limit <= MAX_LIMIT:
        raise BadRequest(f"limit must be between 1 and {MAX_LIMIT}, not {limit}", code="bad-query")
    if action is not None and action not in ACTIONS:
        raise BadRequest(
            f"no audit action {action!r}; the actions are {', '.join(ACTIONS)}", code="bad-query"
        )
    rows = await conn.all("audit_list", limit=limit, action=action)
    return [
        AuditEntry(
            id=row["id"],
            at=row["at"],
            actor=row["actor"],
            action=row["action"],
            target=row["target"],
            detail=row["detail"],
        )
        for row in rows
    ]
