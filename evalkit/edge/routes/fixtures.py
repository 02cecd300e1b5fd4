"""Fixture bytes by sha256: for logged-in users (the CLI driving a personal agent) and,
with a signed URL, for harnesses that download their input files themselves."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from starlette.responses import StreamingResponse

from evalkit.auth import access
from evalkit.blobs import BlobStore, fixture_key, signing
from evalkit.config import public_url
from evalkit.edge.endpoint import Call, Endpoint, authenticate
from evalkit.edge.routes.datasets import blob_store
from evalkit.errors import BadRequest, Forbidden, NotFound
from evalkit.model.fixtures import SignedFixtureUrl

CHUNK = 1 << 20
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _sha256(call: Call) -> str:
    sha256 = call.param("sha256")
    if not _SHA256.match(sha256):
        raise BadRequest(
            f"{sha256!r} is not a sha256 (64 lower-case hex digits)", code="bad-sha256"
        )
    return sha256


def signing_key(call: Call) -> str:
    key: str | None = call.settings.encryption_key
    if not key:
        raise Forbidden(
            "fixture-url-unsigned",
            "this server has no encryption_key, so it neither signs nor accepts fixture URLs; "
            "log in instead, or set encryption_key",
        )
    return key


async def _require_present(store: BlobStore, sha256: str) -> str:
    key = fixture_key(sha256)
    if not await asyncio.to_thread(store.exists, key):
        raise NotFound(
            f"no fixture with sha256 {sha256} on this server; `evalkit sync` uploads the "
            "fixtures a suite names",
            code="fixture-not-found",
        )
    return key


async def fixtures_get(call: Call) -> StreamingResponse:
    """Public route that checks for itself: a valid signature in the query, or a login."""
    sha256 = _sha256(call)
    query = call.request.query_params
    if "signature" in query or "expires" in query:
        try:
            signing.verify(sha256, query.get("expires"), query.get("signature"), signing_key(call))
        except signing.SignatureRefused as exc:
            raise Forbidden("fixture-url-refused", f"fixture {sha256}: {exc.message}") from None
    else:
        await authenticate(call)
        access.require_read(call.actor)
    store = blob_store(call)
    key = await _require_present(store, sha256)
    reader = await asyncio.to_thread(store.open, key)

    async def chunks() -> AsyncIterator[bytes]:
        try:
            while chunk := await asyncio.to_thread(reader.read, CHUNK):
                yield chunk
        finally:
            reader.close()

    return StreamingResponse(
        chunks(),
        media_type="application/octet-stream",
        headers={"ETag": f'"{sha256}"', "Cache-Control": "private, max-age=3600, immutable"},
    )


async def fixtures_sign(call: Call) -> SignedFixtureUrl:
    """A signed URL for a fixture, for a harness the caller drives from their machine."""
    access.require_read(call.actor)
    sha256 = _sha256(call)
    await _require_present(blob_store(call), sha256)

    now = datetime.now(UTC)
    url = signing.sign_fixture_url(
        public_url(call.settings), sha256, signing_key(call), now=now.timestamp()
    )
    expires = datetime.fromtimestamp(int(now.timestamp()) + signing.DEFAULT_TTL_SECONDS, UTC)
    return SignedFixtureUrl(url=url, expires_at=expires)


ENDPOINTS = [
    Endpoint(
        "GET",
        "/api/fixtures/{sha256}",
        fixtures_get,
        "A fixture's bytes: with a login, or with the `expires` and `signature` of a signed "
        "URL (no login)",
        public=True,
        refusals=(401, 403),  # neither a login nor a valid signed URL
        tags=["fixtures"],
    ),
    Endpoint(
        "POST",
        "/api/fixtures/{sha256}/url",
        fixtures_sign,
        "A signed URL that serves a fixture without a login for an hour (for harnesses "
        "that accept file URLs)",
        returns=SignedFixtureUrl,
        tags=["fixtures"],
    ),
]
