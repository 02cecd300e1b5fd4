"""Secrets at rest (agent, evaluator and provider API keys): AES-256-GCM with ``encryption_key``.

Stored form: ``v1:`` + base64(nonce || ciphertext+tag). The associated data binds a secret
to the row it belongs to, so a ciphertext copied to another row does not decrypt.
"""

from __future__ import annotations

import base64
import binascii
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from evalkit.errors import ConfigError, EvalkitError

_VERSION = "v1:"
HIDDEN = b"[key hidden]"

GENERATE_KEY_COMMAND = (
    "python3 -c 'import base64, os; print(base64.b64encode(os.urandom(32)).decode())'"
)


def generate_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def hide(data: bytes, secret: str | None) -> bytes:
    """``data`` with every copy of ``secret`` replaced by ``[key hidden]``. What a harness,
    judge or evaluator sends back may quote the key it was sent (some proxies put it in
    their errors), and evalkit keeps errors and answers where everyone logged in reads
    them."""
    if not secret:
        return data
    return data.replace(secret.encode(), HIDDEN)


class SecretBox:
    def __init__(self, key_b64: str | None) -> None:
        if not key_b64:
            raise ConfigError(
                f"encryption_key is not set; generate one with `{GENERATE_KEY_COMMAND}` and set "
                "it in config.yaml or EVALKIT_ENCRYPTION_KEY"
            )
        try:
            key = base64.b64decode(key_b64, validate=True)
        except binascii.Error:
            raise ConfigError(
                "encryption_key is not valid base64; it must encode 32 bytes"
            ) from None
        if len(key) != 32:
            raise ConfigError(f"encryption_key encodes {len(key)} bytes; it must encode 32 bytes")
        self._aead = AESGCM(key)

    def encrypt(self, plaintext: str, context: str) -> str:
        nonce = os.urandom(12)
        sealed = self._aead.encrypt(nonce, plaintext.encode(), context.encode())
        return _VERSION + base64.b64encode(nonce + sealed).decode()

    def decrypt(self, stored: str, context: str) -> str:
        if not stored.startswith(_VERSION):
            raise EvalkitError("a stored secret has an unknown format; set it again")
        raw = base64.b64decode(stored[len(_VERSION) :])
        try:
            return self._aead.decrypt(raw[:12], raw[12:], context.encode()).decode()
        except InvalidTag:
            raise EvalkitError(
                "a stored secret does not decrypt with this encryption_key; was the key changed? "
                "restore the old key or set the secret again"
            ) from None
