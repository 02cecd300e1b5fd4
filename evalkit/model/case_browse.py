"""Wire objects for browsing a dataset: a filtered page of its cases, one case version as
text, the line diff between two versions, and the promotions into or out of a dataset."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from evalkit.model.api import Output
from evalkit.model.datasets import CaseVersion, ReviewState

CaseFilterState = Literal["live", "pending", "approved", "rejected", "removed", "all"]
"""``live``: every case a sync has not removed (the default); ``removed``: only those;
``all``: both; a review state: live cases in that state."""


class CaseRow(Output):
    id: str
    version: int
    """The current version."""
    review_state: ReviewState
    removed: bool
    overlay_target: str | None
    source: str | None
    tags: list[str]
    split: str | None
    updated_at: datetime


class CasePage(Output):
    workspace: str
    dataset: str
    total: int
    """Cases matching the filters, over every page."""
    offset: int
    limit: int
    cases: list[CaseRow]
    tags: list[str]
    """Every tag the dataset's live cases use, to filter by."""
    splits: list[str]
    """Every split the dataset's live cases use."""


class CaseVersionText(Output):
    case: str
    workspace: str
    dataset: str
    version: CaseVersion
    text: str
    """The version as YAML (content, then the fixtures it pins): what the diff compares."""


DiffOp = Literal["same", "add", "del"]


class DiffLine(Output):
    op: DiffOp
    """``add``: only in the newer version; ``del``: only in the older one."""
    text: str


class CaseDiff(Output):
    case: str
    workspace: str
    from_version: int
    to_version: int
    changed: bool
    """Whether the two texts differ at all."""
    lines: list[DiffLine]
    """Every line of both texts, in order, each marked."""


class PromotedVersion(Output):
    case: str
    target_workspace: str
    target_dataset: str
    target_version: int
    """The approved copy in the promotion target."""
    source_workspace: str
    source_dataset: str
    source_version: int
    """The approved version it was copied from."""
    review_state: ReviewState
    at: datetime
    actor: str | None
    """Who approved it in the source."""


class PromotionPage(Output):
    workspace: str
    dataset: str
    promotes_to: str | None
    promoted_from: str | None
    total: int
    offset: int
    limit: int
    promotions: list[PromotedVersion]
    """Newest first: copies this dataset received (a target) or sent (a source)."""
