"""Bearer tokens: random, shown once, stored as a SHA-256 digest.

A token carries 256 bits of randomness, so a fast digest is enough to store it: nothing can
be guessed from the digest, and lookup by digest is an index hit, not a comparison loop.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

LOGIN_PREFIX = "ekl_"
AGENT_PREFIX = "eka_"


def new_token(prefix: str = LOGIN_PREFIX) -> str:
    return prefix + secrets.token_urlsafe(32)


def token_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def digests_match(a: bytes, b: bytes) -> bool:
    return hmac.compare_digest(a, b)


def values_match(presented: str, expected: str) -> bool:
    """Compare a presented secret value (a CSRF value, an OAuth state or nonce) with the
    expected one in constant time. As UTF-8 bytes: ``hmac.compare_digest`` refuses str
    holding anything but ASCII, and a caller may send anything."""
    return hmac.compare_digest(presented.encode(), expected.encode())
