"""PKCE (RFC 7636): what both ends of an OIDC login need, the server's web login and the
CLI's browser login, without the server's OIDC client (the CLI imports this at start)."""

from __future__ import annotations

import base64
import hashlib
import secrets


def pkce_pair() -> tuple[str, str]:
    """A PKCE code verifier and its S256 challenge (RFC 7636)."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
