"""A loopback HTTP server answering the routes of Langfuse's public API that
``evalkit import langfuse`` reads, as Langfuse publishes them: its API spec
(``fern/apis/server/definition``: ``datasets.yml``, ``dataset-items.yml``, ``commons.yml``
for ``Dataset``, ``DatasetItem`` and the error statuses, ``utils/pagination.yml`` for
``meta``) and the route code behind it (``web/src/pages/api/public/``), for:

- ``GET /api/public/v2/datasets/{datasetName}``: the dataset, or 404
  ``{"message": "Dataset not found", "error": "LangfuseNotFoundError"}``;
- ``GET /api/public/datasets/{name}``: the older route, with the items inline;
- ``GET /api/public/dataset-items?datasetName=&page=&limit=&version=``: the active items,
  ``created_at`` descending then id, ``page`` from 1 (default 1), ``limit`` 1 to 100
  (default 50), ``meta: {page, limit, totalItems, totalPages}``; ``version`` (a time) gives
  the items as they were then and needs ``datasetName``; a bad parameter answers 400
  ``{"message": "Invalid request data", "error": [zod issues]}``;
- basic auth (public key : secret key) on every route: 401 ``{"message": "No authorization
  header"}`` without one, 401 ``{"message": "Invalid credentials. Confirm that you've
  configured the correct host."}`` with a wrong pair.

Why not a real Langfuse: a self-hosted Langfuse (v3) is a web container and a worker
container over PostgreSQL, ClickHouse, Redis (or Valkey) and S3-compatible storage,
distributed as Docker images; this machine has no Docker and cannot pull images, and
ClickHouse is not packaged on the registries it reaches.

``older=True`` plays a Langfuse from before the v2 dataset route: that route answers
Next.js's HTML 404 page.
"""

from __future__ import annotations

import base64
import json
import math
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

PROJECT = "proj-evalkit-test"
PUBLIC_KEY = "pk-lf-test-public"
SECRET_KEY = "sk-lf-test-secret"
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def js_date(moment: datetime) -> str:
    """How Langfuse's JSON writes a time (JavaScript's Date.toJSON)."""
    return (
        moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    )


@dataclass
class ItemVersion:
    valid_from: datetime
    fields: dict[str, Any] | None
    """input, expectedOutput, metadata, status, sourceTraceId, ...; None: deleted then."""


@dataclass
class Item:
    id: str
    created_at: datetime
    versions: list[ItemVersion] = field(default_factory=list)

    def at(self, moment: datetime | None) -> dict[str, Any] | None:
        state = None
        for version in self.versions:
            if moment is None or version.valid_from <= moment:
                state = version
        return None if state is None or state.fields is None else {**state.fields, "_at": state}


@dataclass
class Dataset:
    id: str
    name: str
    description: str | None = None
    metadata: Any = None
    input_schema: Any = None
    expected_output_schema: Any = None
    created_at: datetime = EPOCH
    items: dict[str, Item] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "projectId": PROJECT,
            "name": self.name,
            "description": self.description,
            "metadata": self.metadata,
            "inputSchema": self.input_schema,
            "expectedOutputSchema": self.expected_output_schema,
            "createdAt": js_date(self.created_at),
            "updatedAt": js_date(self.created_at),
        }


class LangfuseApi:
    """The server; ``add_dataset``/``put_item`` set its data, ``requests`` logs what came."""

    def __init__(self, *, older: bool = False, limit_after: int | None = None) -> None:
        self.older = older
        self.limit_after = limit_after
        """Answer 429 to the items request after each ``limit_after`` served ones (once)."""
        self._served = 0
        self.datasets: dict[str, Dataset] = {}
        self.requests: list[tuple[str, dict[str, list[str]]]] = []
        self.auth_headers: list[str] = []
        self._lock = threading.Lock()
        self._clock = EPOCH
        handler = type("Handler", (_Handler,), {"api": self})
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._http.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> LangfuseApi:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(timeout=10)

    def tick(self) -> datetime:
        """The next moment of the server's clock (a second later each time)."""
        self._clock += timedelta(seconds=1)
        return self._clock

    def add_dataset(self, name: str, **kw: Any) -> Dataset:
        dataset = Dataset(
            id=f"ds-{len(self.datasets) + 1}", name=name, created_at=self.tick(), **kw
        )
        self.datasets[name] = dataset
        return dataset

    def put_item(
        self,
        dataset: str,
        item_id: str,
        *,
        input: Any = None,
        expected: Any = None,
        metadata: Any = None,
        status: str = "ACTIVE",
        **extra: Any,
    ) -> datetime:
        """Create or update an item (upsert on its id, as Langfuse's POST does); returns
        the moment the new state is valid from."""
        ds = self.datasets[dataset]
        moment = self.tick()
        item = ds.items.setdefault(item_id, Item(id=item_id, created_at=moment))
        fields = {
            "status": status,
            "input": input,
            "expectedOutput": expected,
            "metadata": metadata,
            "sourceTraceId": None,
            "sourceObservationId": None,
            "mediaReferences": [],
            **extra,
        }
        item.versions.append(ItemVersion(moment, fields))
        return moment

    def delete_item(self, dataset: str, item_id: str) -> datetime:
        moment = self.tick()
        self.datasets[dataset].items[item_id].versions.append(ItemVersion(moment, None))
        return moment

    # ------------------------------------------------------------------ answers

    def item_json(self, ds: Dataset, item: Item, state: dict[str, Any]) -> dict[str, Any]:
        fields = {k: v for k, v in state.items() if k != "_at"}
        return {
            "id": item.id,
            "datasetId": ds.id,
            "datasetName": ds.name,
            "createdAt": js_date(item.created_at),
            "updatedAt": js_date(state["_at"].valid_from),
            **fields,
        }

    def items_page(self, query: dict[str, list[str]]) -> tuple[int, Any]:
        issues: list[dict[str, Any]] = []
        page = _whole(query, "page", 1, issues, low=1)
        limit = _whole(query, "limit", 50, issues, low=1, high=100)
        name = _one(query, "datasetName")
        version = _one(query, "version")
        moment = None
        if version:
            try:
                moment = datetime.fromisoformat(version)
                if moment.tzinfo is None:
                    moment = moment.replace(tzinfo=UTC)
            except ValueError:
                issues.append(_issue("invalid_date", ["version"], "Invalid date"))
            if not name:
                issues.append(
                    _issue(
                        "custom",
                        ["datasetName"],
                        "datasetName is required when version parameter is provided",
                    )
                )
        if issues:
            return 400, {"message": "Invalid request data", "error": issues}
        chosen = [self.datasets[name]] if name in self.datasets else []
        if name and not chosen:
            return 404, {"message": "Dataset not found", "error": "LangfuseNotFoundError"}
        if not name:
            chosen = list(self.datasets.values())
        rows = []
        for ds in chosen:
            for item in ds.items.values():
                state = item.at(moment)
                if state is not None and state["status"] == "ACTIVE":
                    rows.append((ds, item, state))
        rows.sort(key=lambda r: (-r[1].created_at.timestamp(), r[1].id))
        window = rows[(page - 1) * limit : page * limit]
        return 200, {
            "data": [self.item_json(ds, item, state) for ds, item, state in window],
            "meta": {
                "page": page,
                "limit": limit,
                "totalItems": len(rows),
                "totalPages": math.ceil(len(rows) / limit),
            },
        }


def _one(query: dict[str, list[str]], key: str) -> str | None:
    values = query.get(key)
    return values[0] if values else None


def _issue(code: str, path: list[str], message: str) -> dict[str, Any]:
    return {"code": code, "path": path, "message": message}


def _whole(
    query: dict[str, list[str]],
    key: str,
    default: int,
    issues: list[dict[str, Any]],
    *,
    low: int,
    high: int | None = None,
) -> int:
    text = _one(query, key)
    if text in (None, ""):
        return default
    try:
        value = int(text)
    except ValueError:
        issues.append(_issue("invalid_type", [key], "Expected number, received nan"))
        return default
    if value < low:
        issues.append(_issue("too_small", [key], f"Number must be greater than or equal to {low}"))
    if high is not None and value > high:
        issues.append(_issue("too_big", [key], f"Number must be less than or equal to {high}"))
    return value


NEXT_404 = (
    "<!DOCTYPE html><html><head><title>404: This page could not be found</title></head>"
    "<body><h1>404</h1><h2>This page could not be found.</h2></body></html>"
)


class _Handler(BaseHTTPRequestHandler):
    api: LangfuseApi
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        with self.api._lock:
            self.api.requests.append((parts.path, query))
            self.api.auth_headers.append(self.headers.get("Authorization", ""))
        refused = self._auth()
        if refused is not None:
            self._json(401, {"message": refused})
            return
        path = parts.path
        if path == "/api/public/dataset-items":
            if self._rate_limited():
                return
            self._json(*self.api.items_page(query))
        elif path.startswith("/api/public/v2/datasets/"):
            if self.api.older:
                self._send(404, NEXT_404.encode(), "text/html; charset=utf-8")
                return
            self._dataset(unquote(path.removeprefix("/api/public/v2/datasets/")), inline=False)
        elif path.startswith("/api/public/datasets/") and "/runs" not in path:
            self._dataset(unquote(path.removeprefix("/api/public/datasets/")), inline=True)
        else:
            self._send(404, NEXT_404.encode(), "text/html; charset=utf-8")

    def _rate_limited(self) -> bool:
        """Langfuse's 429 (RateLimitService.ts): Retry-After and X-RateLimit-* headers, the
        public API error body with ``code: rate_limited``."""
        api = self.api
        with api._lock:
            if api.limit_after is None or api._served < api.limit_after:
                api._served += 1
                return False
            api._served = 0
        body = {
            "message": "Rate limit exceeded",
            "code": "rate_limited",
            "details": {"retryAfterSeconds": 1, "limit": api.limit_after, "remaining": 0},
        }
        self._send(
            429,
            json.dumps(body).encode(),
            "application/json; charset=utf-8",
            {"Retry-After": "1", "X-RateLimit-Limit": str(api.limit_after)},
        )
        return True

    def _auth(self) -> str | None:
        header = self.headers.get("Authorization")
        if not header:
            return "No authorization header"
        if header.startswith("Basic "):
            try:
                user, _, password = base64.b64decode(header[6:]).decode().partition(":")
            except ValueError:
                user, password = "", ""
            if (user, password) == (PUBLIC_KEY, SECRET_KEY):
                return None
        return "Invalid credentials. Confirm that you've configured the correct host."

    def _dataset(self, name: str, *, inline: bool) -> None:
        ds = self.api.datasets.get(name)
        if ds is None:
            self._json(404, {"message": "Dataset not found", "error": "LangfuseNotFoundError"})
            return
        body = ds.record()
        if inline:
            body.pop("inputSchema")
            body.pop("expectedOutputSchema")
            body["items"] = [
                self.api.item_json(ds, item, state)
                for item in ds.items.values()
                if (state := item.at(None)) is not None and state["status"] == "ACTIVE"
            ]
            body["runs"] = []
        self._json(200, body)

    def _json(self, status: int, body: Any) -> None:
        self._send(status, json.dumps(body).encode(), "application/json; charset=utf-8")

    def _send(
        self, status: int, body: bytes, kind: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
