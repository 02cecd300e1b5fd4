"""Password rules and argon2id hashing."""

from __future__ import annotations

import secrets
from functools import cache

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from evalkit.errors import BadRequest

MIN_CHARS = 8
MAX_BYTES = 72

_hasher = PasswordHasher()  # argon2id with the library's current recommended parameters


@cache
def stand_in_hash() -> str:
    """The hash to verify against when the user does not exist, so timing does not reveal
    usernames. Made on first use, not at import (a hash costs about 0.12 s, and the worker and
    most commands never verify a password); the edge makes it at start (see
    :func:`evalkit.edge.app.create_app`), so the first unknown user costs no more than the
    next."""
    return _hasher.hash(secrets.token_urlsafe(16))


def use_hasher(hasher: PasswordHasher) -> None:
    """Hash with ``hasher`` from now on (the tests' cheap parameters); the stand-in hash for
    unknown users is made again with it, so both cost the same."""
    global _hasher
    _hasher = hasher
    stand_in_hash.cache_clear()


def check_password_rules(password: str, *, what: str = "password") -> None:
    if len(password) < MIN_CHARS:
        raise BadRequest(
            f"the {what} is {len(password)} characters long; use at least {MIN_CHARS}",
            code="password-too-short",
        )
    size = len(password.encode())
    if size > MAX_BYTES:
        raise BadRequest(
            f"the {what} is {size} bytes long; use at most {MAX_BYTES} bytes",
            code="password-too-long",
        )


def hash_password(password: str) -> str:
    check_password_rules(password)
    return _hasher.hash(password)


def verify_password(password_hash: str | None, password: str) -> bool:
    try:
        verified = _hasher.verify(password_hash or stand_in_hash(), password)
        return verified and password_hash is not None
    except (VerificationError, InvalidHashError):
        return False


def generate_password() -> str:
    return secrets.token_urlsafe(18)
