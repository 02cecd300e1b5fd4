"""Browsing a dataset: a filtered page of cases, versions as text, diffs, promotions."""

from __future__ import annotations

import difflib
from typing import Any

import yaml

from evalkit.auth.access import Actor
from evalkit.db import Conn
from evalkit.errors import NotFound
from evalkit.model import case_browse as wire
from evalkit.store.cases import case_version
from evalkit.store.datasets import dataset_id
from evalkit.store.workspaces import WorkspaceRow, get_workspace

# The order a case file is usually written in; other keys follow, sorted.
_CASE_KEY_ORDER = ("overlay", "input", "expected", "tags", "split", "evaluators")


async def search_cases(
    conn: Conn,
    ws: WorkspaceRow,
    dataset: str,
    *,
    state: wire.CaseFilterState,
    tag: str | None,
    split: str | None,
    text: str | None,
    offset: int,
    limit: int,
) -> wire.CasePage:
    ds_id = await dataset_id(conn, ws, dataset)
    rows = await conn.all(
        "case_search_in_dataset",
        dataset_id=ds_id,
        state=state,
        tag=tag,
        split=split,
        text=text,
        offset=offset,
        limit=limit,
    )
    return wire.CasePage(
        workspace=ws.facts.name,
        dataset=dataset,
        total=int(rows[0]["total"]),
        offset=offset,
        limit=limit,
        cases=[
            wire.CaseRow(
                id=r["case_id"],
                version=r["version"],
                review_state=r["review_state"],
                removed=r["removed"],
                overlay_target=r["overlay_target"],
                source=r["source"],
                tags=[str(t) for t in r["tags"]],
                split=r["split"],
                updated_at=r["created_at"],
            )
            for r in rows
            if r["case_id"] is not None
        ],
        tags=rows[0]["all_tags"],
        splits=rows[0]["all_splits"],
    )


async def _versions(conn: Conn, ws: WorkspaceRow, case_id: str) -> tuple[str, list[dict[str, Any]]]:
    """The case's dataset and its versions, newest first."""
    case = await conn.one("case_get", workspace_id=ws.id, case_id=case_id)
    if case is None:
        raise NotFound(
            f"no case {case_id!r} in @{ws.facts.name}; see `evalkit cases list DATASET@"
            f"{ws.facts.name}`",
            code="no-such-case",
        )
    return case["dataset"], await conn.all("case_version_list", case_pk=case["case_pk"])


def _pick(rows: list[dict[str, Any]], ws: WorkspaceRow, case_id: str, n: int) -> dict[str, Any]:
    for row in rows:
        if row["version"] == n:
            return row
    raise NotFound(
        f"case {case_id}@{ws.facts.name} has no version {n} (its versions are 1 to "
        f"{rows[0]['version']})",
        code="no-such-version",
    )


async def version_text(
    conn: Conn, ws: WorkspaceRow, case_id: str, version: int | None
) -> wire.CaseVersionText:
    """One version (default: the current one) with its text."""
    dataset, rows = await _versions(conn, ws, case_id)
    row = rows[0] if version is None else _pick(rows, ws, case_id, version)
    return wire.CaseVersionText(
        case=case_id,
        workspace=ws.facts.name,
        dataset=dataset,
        version=case_version(row),
        text=case_text(row["content"], row["fixtures"]),
    )


async def diff_versions(
    conn: Conn, ws: WorkspaceRow, case_id: str, old: int | None, new: int | None
) -> wire.CaseDiff:
    """The line diff from version ``old`` to ``new``; by default the previous version to the
    current one (a case with one version is compared with itself)."""
    _, rows = await _versions(conn, ws, case_id)
    newer = rows[0] if new is None else _pick(rows, ws, case_id, new)
    if old is None:
        older = _pick(rows, ws, case_id, max(1, newer["version"] - 1))
    else:
        older = _pick(rows, ws, case_id, old)
    lines = diff_lines(
        case_text(older["content"], older["fixtures"]),
        case_text(newer["content"], newer["fixtures"]),
    )
    return wire.CaseDiff(
        case=case_id,
        workspace=ws.facts.name,
        from_version=older["version"],
        to_version=newer["version"],
        changed=any(line.op != "same" for line in lines),
        lines=lines,
    )


async def list_promotions(
    conn: Conn,
    actor: Actor,
    ws: WorkspaceRow,
    dataset: str,
    *,
    case_id: str | None,
    offset: int,
    limit: int,
) -> wire.PromotionPage:
    """Promotion copies into the same-named dataset of the target: this dataset's own cases
    for a target, its namesake in the target for a source (promotion keeps the name)."""
    ds_id = await dataset_id(conn, ws, dataset)
    rows: list[dict[str, Any]] = []
    other_name = ws.promoted_from or ws.promotes_to
    if other_name is not None:
        other = await get_workspace(conn, actor, other_name)
        found = await conn.one("dataset_get_id", workspace_id=other.id, name=dataset)
        if found is not None:
            source, target = (found["id"], ds_id) if ws.promoted_from else (ds_id, found["id"])
            rows = await conn.all(
                "case_version_list_promotions",
                target_dataset_id=target,
                source_dataset_id=source,
                case_id=case_id,
                offset=offset,
                limit=limit,
            )
    return wire.PromotionPage(
        workspace=ws.facts.name,
        dataset=dataset,
        promotes_to=ws.promotes_to,
        promoted_from=ws.promoted_from,
        total=int(rows[0]["total"]) if rows else 0,
        offset=offset,
        limit=limit,
        promotions=[
            wire.PromotedVersion(
                case=r["case_id"],
                target_workspace=r["target_workspace"],
                target_dataset=r["target_dataset"],
                target_version=r["target_version"],
                source_workspace=r["source_workspace"],
                source_dataset=r["source_dataset"],
                source_version=r["source_version"],
                review_state=r["review_state"],
                at=r["created_at"],
                actor=r["actor"],
            )
            for r in rows
        ],
    )


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def case_text(content: dict[str, Any], fixtures: dict[str, Any]) -> str:
    """A case version as YAML, keys in case-file order, then the fixture bytes it pins (a
    new fixture file is a new version even when the YAML is the same)."""
    first = [k for k in _CASE_KEY_ORDER if k in content]
    ordered = {k: _sorted(content[k]) for k in [*first, *sorted(set(content) - set(first))]}
    text = yaml.safe_dump(
        ordered, sort_keys=False, allow_unicode=True, default_flow_style=False, width=100
    )
    if fixtures:
        pins = {
            key: {k: pin[k] for k in ("sha256", "size", "context") if pin.get(k) is not None}
            for key, pin in sorted(fixtures.items())
        }
        text += "# fixtures pinned by this version\n" + yaml.safe_dump(
            {"fixtures": pins}, sort_keys=False, allow_unicode=True, width=100
        )
    return text


def diff_lines(old: str, new: str) -> list[wire.DiffLine]:
    """Every line of both texts in order: unchanged, removed from ``old``, added in ``new``."""
    a, b = old.splitlines(), new.splitlines()
    out: list[wire.DiffLine] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            out += [wire.DiffLine(op="same", text=line) for line in a[i1:i2]]
            continue
        out += [wire.DiffLine(op="del", text=line) for line in a[i1:i2]]
        out += [wire.DiffLine(op="add", text=line) for line in b[j1:j2]]
    return out
