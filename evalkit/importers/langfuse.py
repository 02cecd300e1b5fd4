"""Read a dataset from Langfuse's public API (``/api/public``).

The routes used, all GET, with HTTP basic auth (public key as the user name, secret key as
the password):

- ``/api/public/v2/datasets/{name}``: the dataset (id, description, metadata, input and
  expected-output schemas). A Langfuse from before that route answers 404 with a page, not
  a JSON error; then ``/api/public/datasets/{name}`` is asked instead.
- ``/api/public/dataset-items?datasetName=NAME&page=P&limit=100[&version=T]``: the active
  items, a page at a time (pages start at 1, at most 100 items a page), with
  ``meta.totalItems`` and ``meta.totalPages``. ``version`` is a UTC timestamp: the items as
  they were then.

Langfuse serves only active items there: archived items are not imported.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from evalkit.importers._http import PeerApi
from evalkit.importers._model import (
    ImportFailed,
    Notice,
    PeerDataset,
    PeerExample,
    PeerRefused,
    Progress,
    no_notice,
    no_progress,
)

PEER = "langfuse"
TITLE = "Langfuse"
PAGE_SIZE = 100
"""Langfuse's largest page."""
PARALLEL_PAGES = 4
"""Pages in flight at once after the first (which says how many there are)."""
MAPPED = frozenset({"id", "input", "expectedOutput", "metadata"})
DROPPED = frozenset({"datasetId", "datasetName", "status"})
"""The same for every item of the import (the dataset, and ``ACTIVE``): not kept per case."""
MEDIA_URL_KEYS = frozenset({"url", "urlExpiry"})
"""Signed download URLs of a media reference: they expire, so a case would change on every
import. The reference itself (media id, type, size, where it sits) is kept."""


def read_dataset(
    url: str,
    *,
    dataset: str,
    public_key: str,
    secret_key: str,
    version: str | None = None,
    progress: Progress = no_progress,
    notice: Notice = no_notice,
) -> PeerDataset:
    """Every active item of ``dataset`` (at ``version``, a timestamp, when given)."""
    at = parse_version(version) if version is not None else None
    hint = (
        "check --public-key-env and --secret-key-env (a key pair of the project that holds "
        "the dataset) and --url (the region or host of that project)"
    )
    with PeerApi(
        TITLE, url, auth=(public_key, secret_key), credential_hint=hint, notice=notice
    ) as api:
        record = _find_dataset(api, dataset)
        items = _items(api, dataset, at, progress)
    notes = []
    if at is not None and not items:
        notes.append(
            f"{TITLE} has no items of {dataset!r} at {at}: the dataset may be younger than "
            "that time"
        )
    return PeerDataset(
        peer=PEER,
        url=api.url,
        name=dataset,
        id=str(record.get("id", "")),
        version=at,
        record=record,
        examples=[_example(item) for item in items],
        notes=notes,
    )


def parse_version(text: str) -> str:
    """``--version`` as Langfuse takes it: an ISO 8601 time in UTC ("2026-01-21T14:35:42Z");
    a time without an offset is read as UTC."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ImportFailed(
            f"--version {text!r} is not a time: Langfuse versions are ISO 8601 timestamps, "
            "such as 2026-01-21T14:35:42Z (the dataset as it was then)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _find_dataset(api: PeerApi, name: str) -> dict[str, Any]:
    quoted = quote(name, safe="")
    try:
        found = api.get(f"/api/public/v2/datasets/{quoted}")
    except PeerRefused as exc:
        if exc.status != 404:
            raise
        if _is_langfuse_not_found(exc):
            raise _no_such_dataset(api, name, exc) from None
        try:
            found = api.get(f"/api/public/datasets/{quoted}")
        except PeerRefused as older:
            if older.status == 404:
                raise _no_such_dataset(api, name, older) from None
            raise
    if not isinstance(found, dict) or "name" not in found:
        raise ImportFailed(
            f"{TITLE} at {api.url} did not answer with a dataset for {name!r}: is --url the "
            "Langfuse host (without /api)?"
        )
    found.pop("items", None)  # the old route lists items inline; they are read page by page
    return found


def _is_langfuse_not_found(exc: PeerRefused) -> bool:
    """Langfuse's own 404 (JSON: ``{"message": "Dataset not found", ...}``), not the page of
    a Langfuse that lacks the route."""
    return exc.json_body


def _no_such_dataset(api: PeerApi, name: str, exc: PeerRefused) -> ImportFailed:
    return ImportFailed(
        f"{TITLE} at {api.url} has no dataset named {name!r} in the project of these keys "
        f"({TITLE} answered {exc.status}: {exc.answer}): check --dataset (the full name, "
        "folders included, as the Langfuse UI shows it) and that the keys are that project's"
    )


def _items(
    api: PeerApi, dataset: str, version: str | None, progress: Progress
) -> list[dict[str, Any]]:
    def page(number: int) -> dict[str, Any]:
        answer = api.get(
            "/api/public/dataset-items",
            {"datasetName": dataset, "page": number, "limit": PAGE_SIZE, "version": version},
        )
        if not isinstance(answer, dict) or not isinstance(answer.get("data"), list):
            raise ImportFailed(
                f"{TITLE} at {api.url} answered GET /api/public/dataset-items without a "
                "`data` list: is --url the Langfuse host?"
            )
        return answer

    first = page(1)
    meta = first.get("meta") or {}
    total_pages = int(meta.get("totalPages") or 1)
    total = int(meta.get("totalItems") or len(first["data"]))
    items: list[dict[str, Any]] = list(first["data"])
    progress("read", len(items), total)
    if total_pages > 1:
        with ThreadPoolExecutor(PARALLEL_PAGES) as pool:
            for answer in pool.map(page, range(2, total_pages + 1)):
                items.extend(answer["data"])
                progress("read", len(items), total)
    return _unique(items)


def _unique(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Items in page order, each once: an item added while the pages were read can push
    another onto the next page, where it is served again."""
    seen: set[str] = set()
    unique = []
    for item in items:
        key = str(item.get("id"))
        if key not in seen:
            seen.add(key)
            unique.append(item)
    return unique


def _example(item: dict[str, Any]) -> PeerExample:
    unmapped = {
        key: value
        for key, value in item.items()
        if key not in MAPPED and key not in DROPPED and value not in (None, [])
    }
    if "mediaReferences" in unmapped:
        unmapped["mediaReferences"] = [_media(ref) for ref in unmapped["mediaReferences"]]
    return PeerExample(
        id=str(item["id"]),
        input=item.get("input"),
        expected=item.get("expectedOutput"),
        metadata=item.get("metadata"),
        unmapped=unmapped,
    )


def _media(reference: Any) -> Any:
    if not isinstance(reference, dict) or not isinstance(reference.get("media"), dict):
        return reference
    media = {k: v for k, v in reference["media"].items() if k not in MEDIA_URL_KEYS}
    return {**reference, "media": media}
