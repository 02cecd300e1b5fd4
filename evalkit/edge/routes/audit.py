"""The audit log of admin actions (admins read it)."""

from __future__ import annotations

from evalkit.auth import access
from evalkit.edge.endpoint import Call, Endpoint
from evalkit.errors import BadRequest
from evalkit.model.names import whole_number
from evalkit.model.sso import AuditEntry
from evalkit.store import audit


async def audit_list(call: Call) -> list[AuditEntry]:
    access.require_admin(call.actor, "read the audit log")
    raw = call.request.query_params.get("limit", "100")
    limit = whole_number(raw)
    if limit is None:
        raise BadRequest(f"limit must be a whole number, not {raw!r}", code="bad-query")
    action = call.request.query_params.get("action") or None
    async with call.db.connection() as conn:
        return await audit.list_entries(conn, limit=limit, action=action)


ENDPOINTS = [
    Endpoint(
        "GET",
        "/api/audit",
        audit_list,
        "The latest admin actions, newest first (admin); ?limit=N, ?action=user.add",
        returns=list[AuditEntry],
        tags=["users"],
    ),
]
