"""One case file from a stored trace session (``evalkit cases from-session``).

The session is read as its agent's active mapping builds it (the trajectory of
``evalkit traces check``): the first user step's text becomes ``input.question``, and with
``expected_answer`` the session's final answer becomes ``expected.answer``, under a YAML
comment asking for review (it is what the agent said, not what it should have said).
``metadata.mined_from`` names the agent, the session and its time; a second run finds the
file by it and leaves it alone unless forced. Files are written as ``evalkit import``
writes them (``evalkit.importers.writer``), so lint and sync read them like any case.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from evalkit.importers._model import ImportFailed
from evalkit.importers.writer import (
    MINED_KEY,
    check_suite_dir,
    dump_case,
    new_case_id,
    ordered_keys,
    scan_suite,
    write_file,
)
from evalkit.model import otel as wire

Action = Literal["add", "update", "unchanged", "exists"]

REVIEW_COMMENT = (
    "# REVIEW: `expected` is the agent's own answer in the session, not a checked one;\n"
    "# correct it (or delete it) before you sync.\n"
)


@dataclass
class SessionCase:
    """The case file a session becomes, and what writing it does."""

    path: Path
    case_id: str
    action: Action
    text: str
    agent: str
    session_id: str


def plan_session_case(
    check: wire.TraceCheck,
    suite: Path,
    *,
    expected_answer: bool = False,
    tags: list[str] | None = None,
    force: bool = False,
    command: str = "evalkit cases from-session",
) -> SessionCase:
    """What the case file of this session is, and whether it is new (nothing is written)."""
    check_suite_dir(suite)
    session = check.session
    agent = f"{session.agent}@{session.workspace}"
    content = _content(check, agent, expected_answer, tags or [])
    existing = scan_suite(suite)
    found = existing.by_session.get((agent, session.session_id))
    header = _header(check, agent, command)
    if found is None:
        full_id = f"{agent}/{session.session_id}"
        case_id = new_case_id(f"{suite.name}-", session.session_id, full_id, existing.ids)
        text = _text(header, ordered_keys(content), review=expected_answer)
        return SessionCase(
            suite / f"{case_id}.yaml", case_id, "add", text, agent, session.session_id
        )
    case_id = found.data["id"] if isinstance(found.data.get("id"), str) else found.path.stem
    data = ordered_keys(_merged(found.data, content))
    old_text = found.path.read_text(encoding="utf-8")
    # an answer taken from the session keeps its review mark until a person removes it
    review = expected_answer or (REVIEW_COMMENT in old_text and "expected" in found.data)
    text = _text(header, data, review=review)
    if not force:
        action: Action = "exists"
    else:
        action = "unchanged" if old_text == text else "update"
    return SessionCase(found.path, case_id, action, text, agent, session.session_id)


def session_case_text(
    check: wire.TraceCheck,
    suite: str,
    *,
    expected_answer: bool = False,
    command: str = "Save as case on the session page",
) -> tuple[str, str]:
    """The case id and file text of this session in a suite named ``suite``, as
    :func:`plan_session_case` writes it, without looking at a suite directory (the web
    page shows it to copy or download; a clash with a case id is for lint to say)."""
    session = check.session
    agent = f"{session.agent}@{session.workspace}"
    content = _content(check, agent, expected_answer, [])
    full_id = f"{agent}/{session.session_id}"
    case_id = new_case_id(f"{suite}-", session.session_id, full_id, set())
    header = _header(check, agent, command)
    return case_id, _text(header, ordered_keys(content), review=expected_answer)


def apply_session_case(case: SessionCase) -> None:
    if case.action in ("add", "update"):
        case.path.parent.mkdir(parents=True, exist_ok=True)
        write_file(case.path, case.text, new=case.action == "add")


def first_user_text(check: wire.TraceCheck) -> str:
    """The text of the trajectory's first user step; refused, saying what the mapping read,
    when there is none."""
    for step in check.trajectory.get("steps") or []:
        if step.get("source") != "user":
            continue
        text = message_text(step.get("message"))
        if text.strip():
            return text
    raise ImportFailed(_no_user_turn(check))


def _no_user_turn(check: wire.TraceCheck) -> str:
    s = check.session
    sources = ", ".join(step.source for step in check.steps) or "none"
    unread = f"; it could not read: {'; '.join(check.unread[:3])}" if check.unread else ""
    return (
        f"session {s.session_id!r} of {s.agent}@{s.workspace} has no user turn with text: "
        f"mapping v{check.mapping_version} read {check.spans_read} spans into "
        f"{len(check.steps)} steps (sources: {sources}){unread}; a case's input is the "
        "first user message, so map the span that carries it as the user input (see "
        f"`evalkit traces check {s.session_id} --agent {s.agent}@{s.workspace}`)"
    )


def message_text(message: Any) -> str:
    """A step message's text: the string, or its text parts in order."""
    if isinstance(message, str):
        return message
    if isinstance(message, list):  # content parts: the text ones, in order
        texts = [p.get("text", "") for p in message if isinstance(p, dict)]
        return "\n".join(t for t in texts if isinstance(t, str) and t)
    return ""


def _content(
    check: wire.TraceCheck, agent: str, expected_answer: bool, tags: list[str]
) -> dict[str, Any]:
    s = check.session
    content: dict[str, Any] = {"input": {"question": first_user_text(check)}}
    if expected_answer:
        if check.answer is None or not check.answer.strip():
            raise ImportFailed(
                f"session {s.session_id!r} of {agent} has no final answer (mapping "
                f"v{check.mapping_version} read none): drop --expected answer, or map the "
                "span attribute that holds the answer"
            )
        content["expected"] = {"answer": check.answer}
    if any(not tag.strip() for tag in tags):
        raise ImportFailed("--tag needs text: a case's tags are non-empty strings")
    if tags:
        content["tags"] = list(dict.fromkeys(tags))
    at = s.last_span_at or s.last_received_at
    content["metadata"] = {
        MINED_KEY: {
            "agent": agent,
            "session": s.session_id,
            "at": at.isoformat(),
            "mapping_version": check.mapping_version,
        }
    }
    return content


def _merged(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A forced rewrite: the session's keys replace the old ones; keys written by hand
    (evaluators, description, an expected written without --expected, other metadata)
    stay."""
    merged = {**old, **new}
    old_metadata = old.get("metadata")
    if isinstance(old_metadata, dict):
        merged["metadata"] = {**old_metadata, **new["metadata"]}
    return merged


def _header(check: wire.TraceCheck, agent: str, command: str) -> str:
    s = check.session
    kind = "orphan trace" if s.unassigned else "session"
    at = s.last_span_at or s.last_received_at
    return (
        f"# From {kind} {s.session_id} of agent {agent} (last span {at.isoformat()}),\n"
        f"# read through mapping v{check.mapping_version} by `{command}`.\n"
    )


def _text(header: str, data: dict[str, Any], *, review: bool) -> str:
    body = dump_case(data)
    if review and "expected" in data:
        # top-level keys start a line; nested keys and block text are indented
        body = body.replace("\nexpected:", "\n" + REVIEW_COMMENT + "expected:", 1)
    return header + body
