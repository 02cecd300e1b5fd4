"""Read a dataset from Arize Phoenix's REST API (``/v1``).

The routes used, all GET:

- ``/v1/datasets?name=NAME``: the dataset (id, description, metadata, example count);
- ``/v1/datasets/{id}/examples?version_id=V``: every example of a version (the latest
  without ``version_id``), in one answer: ``id``, ``input``, ``output``, ``metadata``,
  ``updated_at``, ``source``;
- ``/v1/datasets/{id}/versions``: the versions, newest first (to name them when the one
  asked for does not exist);
- ``/v1/datasets/{id}/splits`` and ``.../examples?version_id=V&split=S``: an example's splits
  are not part of the example, so each split's examples are read once to learn who is in it.

An API key (``PHOENIX_API_KEY`` of a Phoenix with auth on, or its admin secret) goes in
``Authorization: Bearer``.
"""

from __future__ import annotations

import base64
import binascii
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

PEER = "phoenix"
TITLE = "Phoenix"
MAPPED = frozenset({"id", "input", "output", "metadata"})
"""Example fields that become the case's own keys; every other field is kept unmapped."""
LISTED_VERSIONS = 5
"""How many versions an unknown-version error names."""
SPLIT_PAGE = 1000


def read_dataset(
    url: str,
    *,
    dataset: str,
    version: str | None = None,
    api_key: str | None = None,
    progress: Progress = no_progress,
    notice: Notice = no_notice,
) -> PeerDataset:
    """Every example of ``dataset`` at ``version`` (default: the latest), with its splits."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    hint = (
        "check that the variable of --api-key-env holds a valid Phoenix API key"
        if api_key
        else "this Phoenix has auth on: pass --api-key-env VAR with a variable that holds "
        "a Phoenix API key"
    )
    with PeerApi(TITLE, url, headers=headers, credential_hint=hint, notice=notice) as api:
        record = _find_dataset(api, dataset)
        dataset_id = str(record["id"])
        progress("read", 0, int(record.get("example_count") or 0))
        data = _examples(api, dataset_id, dataset, version)
        version_id = str(data["version_id"])
        raw = list(data.get("examples") or [])
        progress("read", len(raw), len(raw))
        notes: list[str] = []
        membership = _split_membership(api, dataset_id, version_id, notes)
    examples = [_example(item, membership.get(str(item.get("id")), [])) for item in raw]
    return PeerDataset(
        peer=PEER,
        url=api.url,
        name=dataset,
        id=dataset_id,
        version=version_id,
        record=record,
        examples=examples,
        notes=notes,
    )


def _find_dataset(api: PeerApi, name: str) -> dict[str, Any]:
    found = api.get("/v1/datasets", {"name": name, "limit": 1})
    datasets = found.get("data") if isinstance(found, dict) else None
    if not isinstance(datasets, list):
        raise ImportFailed(
            f"{TITLE} at {api.url} answered GET /v1/datasets without a `data` list: is --url "
            "a Phoenix server?"
        )
    if datasets:
        return dict(datasets[0])
    others = api.get("/v1/datasets", {"limit": 20}).get("data") or []
    names = ", ".join(str(d.get("name")) for d in others) or "none"
    raise ImportFailed(
        f"{TITLE} at {api.url} has no dataset named {name!r} (its datasets: {names}): "
        "check --dataset (names are case-sensitive)"
    )


def _examples(api: PeerApi, dataset_id: str, name: str, version: str | None) -> dict[str, Any]:
    path = f"/v1/datasets/{quote(dataset_id, safe='')}/examples"
    try:
        answer = api.get(path, {"version_id": version})
    except PeerRefused as exc:
        if version is None or exc.status not in (404, 422):
            raise
        raise ImportFailed(
            f"{TITLE} dataset {name!r} has no version {version!r} ({TITLE} answered "
            f"{exc.status}: {exc.answer}); its versions, newest first: "
            f"{_versions(api, dataset_id)}: pass one of them to --version, or leave "
            "--version out for the latest"
        ) from None
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, dict) or not isinstance(data.get("examples"), list):
        raise ImportFailed(
            f"{TITLE} at {api.url} answered GET {path} without `data.examples`: is --url a "
            "Phoenix server?"
        )
    return data


def _versions(api: PeerApi, dataset_id: str) -> str:
    answer = api.get(
        f"/v1/datasets/{quote(dataset_id, safe='')}/versions", {"limit": LISTED_VERSIONS}
    )
    versions = answer.get("data") or []
    shown = [f"{v.get('version_id')} ({v.get('created_at')})" for v in versions]
    more = ", ..." if answer.get("next_cursor") else ""
    return (", ".join(shown) + more) if shown else "none"


def _split_membership(
    api: PeerApi, dataset_id: str, version_id: str, notes: list[str]
) -> dict[str, list[str]]:
    """Example id -> the names of its splits, in the order Phoenix lists the splits."""
    base = f"/v1/datasets/{quote(dataset_id, safe='')}"
    splits: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        try:
            page = api.get(f"{base}/splits", {"limit": SPLIT_PAGE, "cursor": cursor})
        except PeerRefused as exc:
            if exc.status != 404 or splits:
                raise
            # A Phoenix from before splits: the route is missing (FastAPI's 404), while
            # the dataset was found a moment ago.
            notes.append(f"{TITLE} at {api.url} has no splits API: no case gets a split")
            return {}
        splits.extend(page.get("data") or [])
        cursor = page.get("next_cursor")
        if not cursor:
            break
    membership: dict[str, list[str]] = {}
    for split in splits:
        answer = api.get(f"{base}/examples", {"version_id": version_id, "split": split["id"]})
        for example in answer["data"]["examples"]:
            membership.setdefault(str(example["id"]), []).append(str(split["name"]))
    return membership


def _example(item: dict[str, Any], splits: list[str]) -> PeerExample:
    unmapped = {
        key: value for key, value in item.items() if key not in MAPPED and value is not None
    }
    if unmapped.get("node_id") == item.get("id"):
        del unmapped["node_id"]  # the same id twice, as Phoenix serves examples without one
    return PeerExample(
        id=str(item["id"]),
        input=item.get("input"),
        expected=item.get("output"),
        metadata=item.get("metadata"),
        splits=splits,
        unmapped=unmapped,
    )


def short_id(example_id: str) -> str:
    """The part of a Phoenix example id worth a file name: ``7`` for the global id
    ``RGF0YXNldEV4YW1wbGU6Nw==`` (base64 of ``DatasetExample:7``), else the id itself."""
    try:
        decoded = base64.b64decode(example_id, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return example_id
    kind, _, number = decoded.partition(":")
    return number if kind == "DatasetExample" and number.isdigit() else example_id
