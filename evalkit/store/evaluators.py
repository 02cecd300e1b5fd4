"""Remote evaluators: the Custom Evaluator API endpoints of a workspace.

The key is SecretBox text bound to the evaluator's id (:func:`key_context`); no function
here returns it in clear. :func:`scoring_targets` hands the ciphertext to
:func:`evalkit.scoring.remote.load_evaluators`, which decrypts it for the calls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from evalkit.auth.access import Actor
from evalkit.auth.secrets import SecretBox
from evalkit.cases.model import BUILTIN_EVALUATORS, CUSTOM_NAME_RE
from evalkit.db import Conn
from evalkit.errors import BadRequest, Conflict, NotFound
from evalkit.model import evaluators as wire
from evalkit.store.agents import check_api_key, check_env_name
from evalkit.store.judges import check_base_url
from evalkit.store.workspaces import WorkspaceRow

NAME_RULE = (
    "1 to 100 characters: letters, digits, '_', '.', '-', starting with a letter or digit "
    "(the name cases use under evaluators.custom)"
)

RESERVED_NAMES = frozenset({*BUILTIN_EVALUATORS, "judge", "custom"})
"""Names a remote evaluator may not take: its scores would clash with a built-in's."""


def key_context(evaluator_id: int) -> str:
    """The associated data of an evaluator's key: its id."""
    return f"evaluator-api-key:{evaluator_id}"


@dataclass(frozen=True, slots=True)
class EvaluatorTarget:
    """A remote evaluator as the scoring job needs it; ``api_key`` is SecretBox text."""

    id: int
    name: str
    workspace: str
    endpoint: str
    kind: str
    timeout: float
    api_key: str | None = field(repr=False)


def _evaluator(row: dict[str, Any]) -> wire.Evaluator:
    return wire.Evaluator(
        workspace=row["workspace"],
        name=row["name"],
        endpoint=row["endpoint"],
        kind=row["kind"],
        has_api_key=row["has_api_key"],
        api_key_env=row["api_key_env"],
        timeout=row["timeout_seconds"],
        created_at=row["created_at"],
        created_by=row["created_by"],
    )


def check_timeout(timeout: float) -> None:
    if not math.isfinite(timeout) or not 0 < timeout <= wire.MAX_TIMEOUT:
        raise BadRequest(
            f"timeout must be more than 0 and at most {wire.MAX_TIMEOUT:g} seconds, not {timeout}",
            code="bad-timeout",
        )


async def list_evaluators(conn: Conn, ws: WorkspaceRow | None) -> list[wire.Evaluator]:
    rows = await conn.all("evaluator_list", workspace_id=ws.id if ws else None, name=None)
    return [_evaluator(r) for r in rows]


def check_evaluator(body: wire.EvaluatorCreate) -> None:
    """The rules on a new remote evaluator that need no database."""
    if not CUSTOM_NAME_RE.match(body.name):
        raise BadRequest(
            f"evaluator {body.name!r} is not a valid name: use {NAME_RULE}", code="bad-name"
        )
    if body.name in RESERVED_NAMES:
        raise BadRequest(
            f"evaluator {body.name!r} has the name of a built-in evaluator, and its scores "
            "would clash with that one's: pick another name",
            code="bad-name",
        )
    check_base_url(body.endpoint, "endpoint", "https://evals.example.com/required")
    check_timeout(body.timeout)
    if body.api_key is not None:
        check_api_key(body.api_key)
    if body.api_key_env is not None:
        check_env_name(body.api_key_env)


async def create_evaluator(
    conn: Conn,
    actor: Actor,
    ws: WorkspaceRow,
    body: wire.EvaluatorCreate,
    box: SecretBox | None,
) -> wire.Evaluator:
    """Create a remote evaluator; ``box`` encrypts ``body.api_key`` (needed only when one is
    given). The caller checks the endpoint against the egress policy."""
    ref = f"{body.name}@{ws.facts.name}"
    check_evaluator(body)
    row = await conn.one(
        "evaluator_insert",
        workspace_id=ws.id,
        name=body.name,
        endpoint=body.endpoint,
        kind=body.kind,
        api_key_env=body.api_key_env,
        timeout=body.timeout,
        actor_id=actor.user_id,
    )
    if row is None:
        raise Conflict(
            f"evaluator {ref} already exists; see `evalkit evaluators list --workspace "
            f"{ws.facts.name}`, or delete it first (`evalkit evaluators delete {ref}`)",
            code="evaluator-exists",
        )
    evaluator_id = int(row["id"])
    if body.api_key is not None:
        assert box is not None, "a SecretBox is needed to store an API key"
        sealed = box.encrypt(body.api_key, key_context(evaluator_id))
        await conn.execute("evaluator_set_api_key", id=evaluator_id, api_key=sealed)
    rows = await conn.all("evaluator_list", workspace_id=ws.id, name=body.name)
    return _evaluator(rows[0])


async def delete_evaluator(conn: Conn, ws: WorkspaceRow, name: str) -> wire.EvaluatorDeleted:
    row = await conn.one("evaluator_delete", workspace_id=ws.id, name=name)
    if row is None:
        raise NotFound(
            f"no evaluator {name}@{ws.facts.name}; see `evalkit evaluators list --workspace "
            f"{ws.facts.name}`",
            code="no-such-evaluator",
        )
    return wire.EvaluatorDeleted(workspace=ws.facts.name, name=name)


async def evaluator_names(conn: Conn, workspace_id: int, names: list[str]) -> set[str]:
    """The names among ``names`` that the workspace has a remote evaluator for."""
    if not names:
        return set()
    rows = await conn.all("evaluator_list_names", workspace_id=workspace_id, names=names)
    return {r["name"] for r in rows}


async def evaluator_ids(conn: Conn, workspace_id: int, names: list[str]) -> dict[str, int]:
    """The ids of the workspace's remote evaluators among ``names``, by name."""
    if not names:
        return {}
    rows = await conn.all("evaluator_list_names", workspace_id=workspace_id, names=names)
    return {r["name"]: int(r["id"]) for r in rows}


async def scoring_targets(conn: Conn, workspace_id: int) -> list[EvaluatorTarget]:
    """Every remote evaluator of a workspace with its key (SecretBox text)."""
    rows = await conn.all("evaluator_list_for_scoring", workspace_id=workspace_id)
    return [
        EvaluatorTarget(
            id=int(r["id"]),
            name=r["name"],
            workspace=r["workspace"],
            endpoint=r["endpoint"],
            kind=r["kind"],
            timeout=float(r["timeout_seconds"]),
            api_key=r["api_key"],
        )
        for r in rows
    ]
