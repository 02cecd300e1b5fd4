"""Wire objects for datasets, cases, case versions, review, fixtures and sync."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

from evalkit.model.api import Input, Output

Sha256 = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
ReviewState = Literal["pending", "approved", "rejected"]
EventKind = Literal[
    "add", "change", "remove", "restore", "approve", "reject", "comment", "promotion"
]


class DatasetCreate(Input):
    name: str


class ReviewCounts(Output):
    pending: int = 0
    approved: int = 0
    rejected: int = 0
    removed: int = 0
    """Soft-removed cases (their versions stay; they are not in the counts above)."""


class LastSync(Output):
    at: datetime
    branch: str | None
    sha: str | None
    actor: str | None
    dirty: bool = False
    """The git tree had uncommitted changes in the synced files: the sync is not ``sha``."""


class Dataset(Output):
    name: str
    workspace: str
    created_at: datetime
    cases: int
    """Cases that are not removed."""
    review: ReviewCounts
    last_sync: LastSync | None = None


class FixturePin(Input):
    """A fixture a case version attaches: the bytes (by sha256) and the text sent with them."""

    sha256: Sha256
    size: Annotated[int, msgspec.Meta(ge=0)]
    context: str | None = None


class SyncCase(Input):
    id: str
    content: dict[str, Any]
    """The case file's mapping without ``id``, as JSON."""
    source: str | None = None
    """The case file, relative to the suite directory."""
    fixtures: dict[str, FixturePin] = msgspec.field(default_factory=dict)
    """Fixture key -> pin, for every key under ``input.files``."""


class KnownCase(Input):
    """A case named by its version hash alone: the client synced exactly this version
    before, and its file and fixtures have not changed since."""

    id: str
    version_hash: Sha256
    """The hash of the content and the fixture pins (``evalkit.cases.version_hash``)."""


class SyncRequest(Input, omit_defaults=True):
    """Fields left at their default are not sent, so a server older than a field still
    takes the requests that do not use it."""

    cases: list[SyncCase]
    known: list[KnownCase] = msgspec.field(default_factory=list)
    """More cases of the suite, by hash: each must be the dataset's current, live version
    with that hash (they count as unchanged), else the sync is refused with
    ``known-case-stale`` and the client sends those cases in full."""
    branch: str | None = None
    sha: str | None = None
    dirty: bool = False
    """The synced files had uncommitted changes in their git tree (``evalkit sync`` asks git):
    the cases are not exactly ``sha``'s."""
    actor: str | None = None
    """Record this user in the changelog instead of the caller (admins only)."""


class SyncResult(Output):
    dataset: str
    workspace: str
    created: bool
    """Whether this sync created the dataset."""
    added: list[str]
    changed: list[str]
    restored: list[str]
    removed: list[str]
    unchanged: int
    branch: str | None
    sha: str | None
    actor: str
    dirty: bool = False
    """As sent: the synced files had uncommitted changes."""
    unknown_custom_evaluators: list[str] = msgspec.field(default_factory=list)
    """Custom evaluator names the workspace has no remote evaluator for."""
    known: int | None = None
    """How many of ``unchanged`` the request named by hash alone (``known``). Servers that
    take no ``known`` cases leave it out, which tells a client not to send them any."""


class FixtureQuery(Input):
    sha256: list[Sha256]


class FixtureMissing(Output):
    missing: list[str]
    """The asked-for sha256 values whose bytes the server does not hold: upload these."""
    max_bytes: int
    """The largest fixture the server accepts (its ``max_fixture_bytes``)."""


class Fixture(Output):
    sha256: str
    size: int
    stored: bool
    """False when the server already held these bytes (nothing was written)."""


class LintQuery(Input):
    dataset: str | None = None
    """The dataset the suite syncs into; its own cases do not clash with themselves."""
    case_ids: list[str] = msgspec.field(default_factory=list)
    overlay_targets: list[str] = msgspec.field(default_factory=list)
    custom_evaluators: list[str] = msgspec.field(default_factory=list)


class LintAnswer(Output):
    taken: dict[str, str]
    """Case id -> the other dataset of the workspace that already has it."""
    missing_targets: list[str]
    """Overlay targets that are no (live) case of another dataset of the workspace."""
    unknown_custom_evaluators: list[str]


class CaseSummary(Output):
    id: str
    dataset: str
    version: int
    review_state: ReviewState
    removed: bool
    overlay_target: str | None
    source: str | None
    updated_at: datetime


class CaseVersion(Output):
    version: int
    content_hash: str
    fixtures: dict[str, Any]
    review_state: ReviewState
    removed: bool
    overlay_target: str | None
    source: str | None
    created_at: datetime
    created_by: str | None
    promoted_from: str | None
    """``case@workspace v<N>`` this version was promoted from."""


class CaseEvent(Output):
    kind: EventKind
    version: int | None
    actor: str | None
    comment: str | None
    branch: str | None
    sha: str | None
    at: datetime
    dirty: bool = False
    """A sync's entry: its files had uncommitted changes (``sha`` is where they started)."""


class CaseDetail(Output):
    id: str
    dataset: str
    workspace: str
    content: dict[str, Any]
    """The current version's content."""
    versions: list[CaseVersion]
    """Newest first."""
    events: list[CaseEvent]
    """Oldest first."""


class ReviewRequest(Input):
    comment: str | None = None
    version: Annotated[int, msgspec.Meta(ge=1)] | None = None
    """Which version to decide on; default: the current one."""


class CommentRequest(Input):
    text: Annotated[str, msgspec.Meta(min_length=1, max_length=10000)]


class Promoted(Output):
    case: str
    dataset: str
    workspace: str
    version: int


class ReviewResult(Output):
    case: str
    workspace: str
    version: int
    review_state: ReviewState
    promoted: list[Promoted] = msgspec.field(default_factory=list)
    """Versions added to the promotion target (the case and its overlays)."""


class Commented(Output):
    case: str
    workspace: str
