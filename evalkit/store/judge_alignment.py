"""Judge alignment: proposals, their trial rounds, and the examples a workspace accepted."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from evalkit.cases.model import canonical_json
from evalkit.cases.suite import apply_overlay
from evalkit.db import Conn
from evalkit.errors import NotFound
from evalkit.model.judge_alignment import Example
from evalkit.model.stats import Agreement
from evalkit.scoring.alignment import Candidate

_json = msgspec.json.Encoder(order="sorted")


def _examples(value: Any) -> tuple[Example, ...]:
    return tuple(msgspec.convert(value or [], list[Example]))


async def candidates(conn: Conn, experiment_id: int, score: str) -> list[Candidate]:
    """The experiment's labelled runs with a value of ``score`` in its current round."""
    rows = await conn.all("alignment_candidates_list", experiment_id=experiment_id, name=score)
    return [_candidate(row) for row in rows]


def _candidate(row: dict[str, Any]) -> Candidate:
    content = row["content"]
    if row["target_content"] is not None:
        content = apply_overlay(row["target_content"], content)
    answer = row["answer"]
    if answer is None:
        answer = "" if row["output"] is None else canonical_json(row["output"]).decode()
    return Candidate(
        run_id=row["run_id"],
        case_id=row["case_id"],
        task=(content or {}).get("input"),
        answer=answer,
        scored=row["scored"],
        labelled=list(row["labelled"]),
        comments=list(row["comments"]),
    )


async def accepted_examples(conn: Conn, experiment_id: int, score: str) -> tuple[Example, ...]:
    """The examples the experiment's workspace accepted for ``score`` (none: empty)."""
    row = await conn.one("judge_examples_get", experiment_id=experiment_id, name=score)
    return () if row is None else _examples(row["examples"])


async def trial_examples(
    conn: Conn, experiment_id: int, round: int, score: str
) -> tuple[Example, ...]:
    """The examples trial round ``round`` grades ``score`` with (its proposal's)."""
    row = await conn.one(
        "judge_proposal_examples_for_round", experiment_id=experiment_id, round=round, name=score
    )
    return () if row is None else _examples(row["examples"])


async def insert_proposal(
    conn: Conn,
    *,
    experiment_id: int,
    score: str,
    examples: Sequence[Example],
    prompt_hash: str,
    base_hash: str,
    runs: int,
    before: Agreement,
    created_by: int | None,
) -> tuple[int, int]:
    """Store a proposal; returns its id and its trial round."""
    row = await conn.one(
        "judge_proposal_insert",
        experiment_id=experiment_id,
        name=score,
        examples=_json.encode(list(examples)).decode(),
        prompt_hash=prompt_hash,
        base_hash=base_hash,
        runs=runs,
        before=_json.encode(before).decode(),
        created_by=created_by,
    )
    assert row is not None
    return row["id"], row["trial_round"]


async def proposal_row(conn: Conn, proposal_id: int) -> dict[str, Any]:
    row = await conn.one("judge_proposal_get", id=proposal_id)
    if row is None:
        raise NotFound(
            f"no judge proposal {proposal_id}; `evalkit judge align` makes one",
            code="no-such-proposal",
        )
    row["examples"] = list(_examples(row["examples"]))
    row["before"] = msgspec.convert(row["before"], Agreement)
    return row


async def accept(conn: Conn, row: dict[str, Any], user_id: int | None) -> str | None:
    """Make the proposal's examples the workspace's (call inside a transaction, and roll it
    back on a refusal). None when done; else why not: ``accepted`` (someone accepted it
    first) or ``stale`` (another proposal was accepted since it was made)."""
    marked = await conn.one("judge_proposal_accept", id=row["id"], accepted_by=user_id)
    if marked is None:
        return "accepted"
    stored = await conn.one(
        "judge_examples_upsert",
        workspace_id=row["workspace_id"],
        name=row["name"],
        examples=_json.encode(row["examples"]).decode(),
        prompt_hash=row["prompt_hash"],
        base_hash=row["base_hash"],
        proposal_id=row["id"],
        accepted_by=user_id,
    )
    return None if stored is not None else "stale"
