"""Turn a peer's examples into case files of a suite, and update them on the next import.

One example is one case file. What an example becomes (docs/coming-from-phoenix-langfuse.md
has the table):

- ``input``: the example's input when it is a mapping; text becomes ``input.question``,
  another value ``input.value``, none ``input: {}``. A ``files`` key of the input (evalkit
  reads ``input.files`` as fixture keys) is kept unmapped instead.
- ``expected``: the output (Phoenix) or expected output (Langfuse) when it is a mapping;
  another value becomes ``expected.answer``; none (or ``{}``) leaves ``expected`` out.
- ``tags``: the metadata's ``tags`` when it is a list of strings (or one string).
- ``split``: the peer's own split (Phoenix); when an example is in several, the first, and
  all of them are kept unmapped as ``splits``. Without one, the metadata's ``split`` text.
- ``metadata``: the rest of the example's metadata, plus ``imported_from``: the peer, the
  dataset and the example's id (how the next import finds the file again), and
  ``unmapped``, every other field of the example.

A second import finds each example's file by ``metadata.imported_from`` (peer, dataset and
id), so it
updates that file (same name, same case id) instead of adding another. It rewrites only the
keys it owns (``OWNED``); ``evaluators``, ``description`` and ``id`` written by hand stay,
and a file whose content would not change is not touched. Files of the same peer and dataset
whose example is gone are listed (``missing``) and deleted only with ``prune``.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from evalkit.cases.model import CASE_ID_RE
from evalkit.importers._model import (
    ImportFailed,
    PeerDataset,
    PeerExample,
    Progress,
    no_progress,
)
from evalkit.model.names import NAME_RE, NAME_RULE

ORIGIN_KEY = "imported_from"
"""The key under ``metadata`` that says where a case came from."""
UNMAPPED_KEY = "unmapped"
"""The key under ``metadata.imported_from`` that keeps the example's other fields."""
OWNED = ("input", "expected", "tags", "split", "metadata")
"""The case keys an import writes; a re-import replaces these and keeps the others."""
KEY_ORDER = ("id", "description", *OWNED, "evaluators", "overlay")
MINED_KEY = "mined_from"
"""The key under ``metadata`` of a case written from a stored trace session
(``evalkit cases from-session``): its agent, session id and time."""
RECORD_FILE = ".evalkit-import.yaml"
"""The suite's record of its last import (hidden: lint and sync skip it)."""
CASE_SUFFIXES = (".yaml", ".yml")
MAX_ID = 128

Action = Literal["add", "update", "unchanged"]


@dataclass
class CaseWrite:
    """One case file of the import: what happens to it and what it holds."""

    path: Path
    case_id: str
    source_id: str
    action: Action
    text: str


@dataclass
class ImportPlan:
    """Everything an import would do to a suite; ``apply`` does it."""

    suite: Path
    dataset: PeerDataset
    writes: list[CaseWrite] = field(default_factory=list)
    missing: list[Path] = field(default_factory=list)
    """Files from this peer's dataset whose example the peer no longer has."""
    unmapped: Counter[str] = field(default_factory=Counter)
    """Field kept under ``metadata.imported_from.unmapped`` -> how many examples had it."""
    notes: Counter[str] = field(default_factory=Counter)
    """How an example's data was fitted into a case -> how many examples."""
    record_text: str = ""

    def count(self, action: Action) -> int:
        return sum(1 for w in self.writes if w.action == action)

    def ids(self, action: Action) -> list[str]:
        return sorted(w.case_id for w in self.writes if w.action == action)


# --------------------------------------------------------------------------- plan


def plan_import(
    dataset: PeerDataset,
    suite: Path,
    *,
    id_prefix: str | None = None,
    short_id: Callable[[str], str] | None = None,
) -> ImportPlan:
    """What importing ``dataset`` into ``suite`` writes (nothing is written yet).

    ``id_prefix`` starts every new case id (default: the suite's name and ``-``, as case ids
    are unique in a whole workspace); ``short_id(example_id)`` turns a peer's id into the
    rest of the file name (default: the id itself).
    """
    check_suite_dir(suite)
    prefix = f"{suite.name}-" if id_prefix is None else id_prefix
    existing = scan_suite(suite)
    plan = ImportPlan(suite=suite, dataset=dataset)
    seen: set[str] = set()
    for example in dataset.examples:
        if example.id in seen:
            plan.notes["example ids served twice: imported once"] += 1
            continue
        seen.add(example.id)
        content = case_content(example, dataset, plan)
        plan.writes.append(_write_for(example, content, existing, prefix, short_id or str))
    plan.missing = sorted(
        found.path
        for (peer, name, example_id), found in existing.by_origin.items()
        if (peer, name) == (dataset.peer, dataset.name) and example_id not in seen
    )
    plan.record_text = _record_text(dataset)
    return plan


def check_suite_dir(suite: Path) -> None:
    if suite.exists() and not suite.is_dir():
        raise ImportFailed(f"--into {suite} is a file: give the suite's directory")
    if not NAME_RE.match(suite.name):
        raise ImportFailed(
            f"--into {suite}: the directory's name {suite.name!r} becomes the dataset's name "
            f"and must be {NAME_RULE}; pick another directory name"
        )


def case_content(example: PeerExample, dataset: PeerDataset, plan: ImportPlan) -> dict[str, Any]:
    """The keys an import owns, for one example (see the module doc)."""
    unmapped = dict(example.unmapped)
    content: dict[str, Any] = {"input": _input(example.input, unmapped, plan.notes)}
    expected = _expected(example.expected, plan.notes)
    if expected is not None:
        content["expected"] = expected
    metadata = _metadata(example.metadata, unmapped)
    tags = _tags(metadata, plan.notes)
    if tags:
        content["tags"] = tags
    split = _split(example.splits, metadata, unmapped, plan.notes)
    if split is not None:
        content["split"] = split
    origin: dict[str, Any] = {"peer": dataset.peer, "dataset": dataset.name, "id": example.id}
    if unmapped:
        origin[UNMAPPED_KEY] = unmapped
        plan.unmapped.update(unmapped.keys())
    metadata[ORIGIN_KEY] = origin
    content["metadata"] = metadata
    return content


def _input(value: Any, unmapped: dict[str, Any], notes: Counter[str]) -> dict[str, Any]:
    if value is None:
        notes["no input: written as `input: {}`"] += 1
        return {}
    if isinstance(value, str):
        notes["text input: written as `input.question`"] += 1
        return {"question": value}
    if not isinstance(value, dict):
        notes["input that is not a mapping: written as `input.value`"] += 1
        return {"value": value}
    result = dict(value)
    if "files" in result:
        # evalkit reads input.files as fixture keys of evalkit.yaml; the peer's are not.
        unmapped["input.files"] = result.pop("files")
    return result


def _expected(value: Any, notes: Counter[str]) -> dict[str, Any] | None:
    if value is None or value == {}:
        return None
    if isinstance(value, dict):
        return dict(value)
    notes["expected output that is not a mapping: written as `expected.answer`"] += 1
    return {"answer": value}


def _metadata(value: Any, unmapped: dict[str, Any]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        unmapped["metadata"] = value
        return {}
    metadata = dict(value)
    if ORIGIN_KEY in metadata:  # a dataset that went through evalkit before
        unmapped[f"metadata.{ORIGIN_KEY}"] = metadata.pop(ORIGIN_KEY)
    return metadata


def _tags(metadata: dict[str, Any], notes: Counter[str]) -> list[str]:
    tags = metadata.get("tags")
    if isinstance(tags, str):
        tags = [tags]
    if not isinstance(tags, list) or not tags:
        if "tags" in metadata:
            notes["metadata `tags` that is not a list of text: left in `metadata`"] += 1
        return []
    if not all(isinstance(tag, str) and tag.strip() for tag in tags):
        notes["metadata `tags` that is not a list of text: left in `metadata`"] += 1
        return []
    del metadata["tags"]
    return list(dict.fromkeys(tags))


def _split(
    splits: list[str], metadata: dict[str, Any], unmapped: dict[str, Any], notes: Counter[str]
) -> str | None:
    named = [s for s in dict.fromkeys(splits) if s.strip()]
    if len(named) > 1:
        notes["in more than one split: `split` is the first, all kept as `unmapped.splits`"] += 1
        unmapped["splits"] = named
    if named:
        return named[0]
    value = metadata.get("split")
    if isinstance(value, str) and value.strip():
        del metadata["split"]
        return value
    return None


# --------------------------------------------------------------------------- the suite


@dataclass
class _Found:
    path: Path
    data: dict[str, Any]


@dataclass
class _Existing:
    suite: Path
    by_origin: dict[tuple[str, str | None, str], _Found] = field(default_factory=dict)
    """(peer, dataset, example id) -> the file that holds that example."""
    by_session: dict[tuple[str, str], _Found] = field(default_factory=dict)
    """(agent as NAME@WORKSPACE, session id) -> the file mined from that session."""
    ids: set[str] = field(default_factory=set)
    """Case ids of the suite's files, lower-cased (file names must not clash on a
    case-insensitive file system either)."""


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """SafeLoader without timestamps, as lint reads case files (dates stay text)."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def scan_suite(suite: Path) -> _Existing:
    existing = _Existing(suite)
    if not suite.is_dir():
        return existing
    for path in sorted(suite.iterdir()):
        if path.name.startswith(".") or path.suffix not in CASE_SUFFIXES or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if not text.strip():
            continue  # left empty by an interrupted import: free for this one to fill
        existing.ids.add(path.stem.lower())
        try:
            data = yaml.load(text, Loader=_Loader)
        except yaml.YAMLError:
            continue  # lint names it; the import leaves it alone
        if not isinstance(data, dict):
            continue
        if isinstance(data.get("id"), str):
            existing.ids.add(data["id"].lower())
        metadata = data.get("metadata")
        origin = metadata.get(ORIGIN_KEY) if isinstance(metadata, dict) else None
        if isinstance(origin, dict) and isinstance(origin.get("peer"), str) and "id" in origin:
            dataset = origin.get("dataset")
            dataset = dataset if isinstance(dataset, str) else None
            key = (origin["peer"], dataset, str(origin["id"]))
            existing.by_origin.setdefault(key, _Found(path, data))
        mined = metadata.get(MINED_KEY) if isinstance(metadata, dict) else None
        if isinstance(mined, dict) and isinstance(mined.get("agent"), str) and "session" in mined:
            session_key = (mined["agent"], str(mined["session"]))
            existing.by_session.setdefault(session_key, _Found(path, data))
    return existing


def _write_for(
    example: PeerExample,
    content: dict[str, Any],
    existing: _Existing,
    prefix: str,
    short_id: Callable[[str], str],
) -> CaseWrite:
    origin = content["metadata"][ORIGIN_KEY]
    found = existing.by_origin.get((origin["peer"], origin["dataset"], example.id))
    if found is not None:
        kept = {key: value for key, value in found.data.items() if key not in OWNED}
        data = ordered_keys({**kept, **content})
        action: Action = "unchanged" if data == found.data else "update"
        case_id = found.data["id"] if isinstance(found.data.get("id"), str) else found.path.stem
        return CaseWrite(found.path, case_id, example.id, action, dump_case(data))
    case_id = new_case_id(prefix, str(short_id(example.id)), example.id, existing.ids)
    existing.ids.add(case_id.lower())
    path = existing.suite / f"{case_id}.yaml"
    return CaseWrite(path, case_id, example.id, "add", dump_case(ordered_keys(content)))


def ordered_keys(data: dict[str, Any]) -> dict[str, Any]:
    rank = {key: i for i, key in enumerate(KEY_ORDER)}
    return dict(sorted(data.items(), key=lambda kv: rank.get(kv[0], len(rank))))


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def new_case_id(prefix: str, short: str, full_id: str, taken: set[str]) -> str:
    """A free case id from the peer's id: accents go, other characters a case id may not
    hold become '-', a long id is cut and ends with a hash of the whole, and a taken one
    gets -2, -3, ..."""
    ascii_only = unicodedata.normalize("NFKD", short).encode("ascii", "ignore").decode()
    tail = _UNSAFE.sub("-", ascii_only).strip("-.")
    base = f"{prefix}{tail}" if tail else f"{prefix}{_digest(full_id)}"
    base = base.lstrip("-._") or _digest(full_id)
    if len(base) > MAX_ID:
        base = f"{base[: MAX_ID - 9]}-{_digest(full_id)}"
    candidate, n = base, 1
    while candidate.lower() in taken or not CASE_ID_RE.match(candidate):
        n += 1
        suffix = f"-{n}"
        candidate = f"{base[: MAX_ID - len(suffix)]}{suffix}"
        if n > 10_000:  # cannot happen with a valid base; stops a loop on a bad one
            candidate = _digest(full_id + str(n))
            break
    return candidate


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


# --------------------------------------------------------------------------- YAML


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """Block style; text with line breaks as a literal block (``|``)."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def dump_case(data: dict[str, Any]) -> str:
    return yaml.dump(
        data,
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=100,
    )


def _record_text(dataset: PeerDataset) -> str:
    record = {
        "peer": dataset.peer,
        "url": dataset.url,
        "dataset": dataset.name,
        "dataset_id": dataset.id,
        "version": dataset.version,
        "examples": len(dataset.examples),
        "peer_dataset": dataset.record,
    }
    header = (
        "# Written by `evalkit import`: where this suite's cases came from, and the peer's\n"
        "# own record of the dataset. Not a case file: lint and sync skip hidden files.\n"
    )
    return header + dump_case(record)


# --------------------------------------------------------------------------- apply


def apply(plan: ImportPlan, *, prune: bool = False, progress: Progress = no_progress) -> None:
    """Write the plan's added and updated files, the suite's import record, and with
    ``prune`` delete the missing files."""
    plan.suite.mkdir(parents=True, exist_ok=True)
    changing = [w for w in plan.writes if w.action != "unchanged"]
    for done, write in enumerate(changing, 1):
        write_file(write.path, write.text, new=write.action == "add")
        if done % 100 == 0 or done == len(changing):
            progress("write", done, len(changing))
    record = plan.suite / RECORD_FILE
    if not record.exists() or record.read_text(encoding="utf-8") != plan.record_text:
        write_file(record, plan.record_text, new=False)
    if prune:
        for path in plan.missing:
            path.unlink(missing_ok=True)


def write_file(path: Path, text: str, *, new: bool) -> None:
    """One write of the whole text. Not through a temporary file and a rename: on this
    kind of ext4 a rename costs 2 ms, 10 s for a 5,000-case suite, and an interrupted import
    is made whole by running it again (an empty file it left is filled). A new file must
    not exist yet, unless empty: another process's file of that name is never overwritten."""
    if new and path.exists() and path.stat().st_size == 0:
        new = False
    with open(path, "x" if new else "w", encoding="utf-8") as f:
        f.write(text)
