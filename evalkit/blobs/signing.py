"""Signed fixture URLs: a harness that accepts ``file_urls`` downloads a run's input files
from ``GET /api/fixtures/{sha256}`` without an evalkit login, with a signature instead.

The signature is HMAC-SHA256 over the sha256 and the expiry time, keyed with a key
derived from the server's ``encryption_key`` (never the key itself). It grants reading
those bytes only, until the expiry; anyone holding the URL may read them, so keep the
time to live short.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from urllib.parse import urlencode

from evalkit.errors import EvalkitError
from evalkit.model.names import whole_number

DEFAULT_TTL_SECONDS = 3600
_PURPOSE = b"evalkit fixture urls v1"


class SignatureRefused(EvalkitError):
    """The URL's signature is missing, malformed, wrong or expired; ``message`` says which."""


def derive_key(encryption_key: str) -> bytes:
    """The signing key for fixture URLs, derived from ``encryption_key`` so the secret
    that protects stored API keys never signs anything itself."""
    try:
        raw = base64.b64decode(encryption_key, validate=True)
    except binascii.Error:
        raw = encryption_key.encode()
    return hmac.new(raw, _PURPOSE, hashlib.sha256).digest()


def _signature(key: str, sha256: str, expires: int) -> str:
    mac = hmac.new(derive_key(key), f"{sha256}\n{expires}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def fixture_path(sha256: str) -> str:
    return f"/api/fixtures/{sha256}"


def sign_fixture_url(
    public_url: str,
    sha256: str,
    key: str,
    ttl_seconds: int = DEFAULT_TTL_SECONDS,
    *,
    now: float | None = None,
) -> str:
    """A URL under ``public_url`` (the server's base URL) that serves the fixture with
    ``sha256`` to anyone for ``ttl_seconds``. ``key`` is the server's encryption_key."""
    expires = int(time.time() if now is None else now) + ttl_seconds
    query = urlencode({"expires": expires, "signature": _signature(key, sha256, expires)})
    return f"{public_url.rstrip('/')}{fixture_path(sha256)}?{query}"


def verify(
    sha256: str,
    expires: str | None,
    signature: str | None,
    key: str,
    *,
    now: float | None = None,
) -> None:
    """Accept the signature or raise :class:`SignatureRefused` naming the reason."""
    if not expires or not signature:
        raise SignatureRefused(
            "a signed fixture URL needs both `expires` and `signature`; ask evalkit for a "
            "new URL, or log in instead"
        )
    if whole_number(expires) is None:
        raise SignatureRefused(f"`expires` must be a Unix time in seconds, got {expires!r}")
    expected = _signature(key, sha256, int(expires))
    if not hmac.compare_digest(expected.encode(), signature.encode()):
        raise SignatureRefused(
            "the signature does not match this fixture and expiry (a changed URL, or one "
            "signed by another server or with an older encryption_key)"
        )
    moment = time.time() if now is None else now
    if int(expires) < moment:
        raise SignatureRefused(
            f"the URL expired {int(moment) - int(expires)} s ago; ask evalkit for a new one"
        )
