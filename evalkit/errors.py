"""evalkit's exceptions.

EvalkitError                  anything evalkit raises on purpose; has a one-line message
├── ConfigError               config.yaml or environment is wrong
├── DatabaseError             the database is unreachable or not at the migration head
└── ApiError                  a refusal the HTTP edge turns into a status code
    ├── BadRequest            400: the request body or parameters break a rule
    ├── Unauthorized          401: no valid login
    ├── Forbidden             403: an access rule refused (``rule`` names it)
    ├── NotFound              404: the named thing does not exist
    ├── Conflict              409: the thing exists already or clashes with another
    ├── TooLarge              413: the request body is over its size limit
    ├── TooManyRequests       429: too many attempts; ``retry_after`` says when to try again
    └── BadGateway            502: a harness evalkit called for the caller failed

What the edge answers for each (and for the database's errors) is one table,
``evalkit/edge/refusals.py``.
"""

from __future__ import annotations


class EvalkitError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigError(EvalkitError):
    pass


class DatabaseError(EvalkitError):
    pass


class ApiError(EvalkitError):
    status = 500
    code = "error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class BadRequest(ApiError):
    status = 400
    code = "bad-request"


class Unauthorized(ApiError):
    status = 401
    code = "not-logged-in"


class Forbidden(ApiError):
    status = 403

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message, code=rule)
        self.rule = rule


class NotFound(ApiError):
    status = 404
    code = "not-found"


class Conflict(ApiError):
    status = 409
    code = "conflict"


class TooLarge(ApiError):
    status = 413
    code = "too-large"


class TooManyRequests(ApiError):
    """Sent with ``Retry-After: <retry_after>`` (seconds)."""

    status = 429
    code = "too-many-attempts"

    def __init__(self, message: str, *, retry_after: int, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.retry_after = retry_after


class BadGateway(ApiError):
    """A service evalkit calls on the caller's behalf (a harness) failed."""

    status = 502
    code = "upstream-failed"
