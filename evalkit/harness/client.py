"""The Harness API v1 client: one method per endpoint, strict about what it reads.

Every failure is a :class:`HarnessError` that says whether trying again may help
(connection refused, timeouts, 5xx, 429) or not (4xx, a body that is not the contract).
The run state machine retries the first kind with backoff and fails the run on the second.
"""

from __future__ import annotations

import re
from typing import TypeVar
from urllib.parse import quote, urlencode

import msgspec

from evalkit.auth.secrets import hide
from evalkit.errors import EvalkitError
from evalkit.http1 import (
    Http1BodyTooLarge,
    Http1Client,
    Http1Error,
    Http1InvalidRequest,
    Http1Timeout,
)
from evalkit.model.harness import (
    Capabilities,
    RunListing,
    RunStart,
    RunStatus,
    WorkspaceListing,
)

T = TypeVar("T")

MAX_BODY_BYTES = 64 * 2**20
"""The largest harness answer evalkit reads (a trajectory can be big, but not unbounded)."""

_JSON = {"Content-Type": "application/json"}


class HarnessError(EvalkitError):
    """A harness call failed. ``retryable`` says whether the same call may succeed later."""

    def __init__(self, message: str, *, retryable: bool, status: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status


class HarnessClient:
    """Calls one harness at ``base_url`` (the agent's harness URL) through ``http``, an
    :class:`evalkit.http1.Http1Client` built with the egress policy (None for the CLI's
    calls to the user's own agents); the caller owns ``http`` and closes it.
    """

    def __init__(self, base_url: str, api_key: str | None, http: Http1Client) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._json_headers = {**self._headers, **_JSON}
        self._api_key = api_key
        self._http = http

    async def capabilities(self) -> Capabilities:
        return await self._call("GET", "/capabilities", Capabilities)

    async def start(self, body: RunStart) -> RunStatus:
        return await self._call("POST", "/runs", RunStatus, body=msgspec.json.encode(body))

    async def status(self, run_id: str) -> RunStatus:
        return await self._call("GET", f"/runs/{_seg(run_id)}", RunStatus)

    async def stop(self, run_id: str) -> RunStatus | None:
        """Ask the harness to stop; a 2xx without a body is fine (``None``)."""
        raw = await self._raw("POST", f"/runs/{_seg(run_id)}/stop")
        return _decode(raw, RunStatus, "POST /runs/{id}/stop") if raw.strip() else None

    async def trajectory(self, run_id: str) -> bytes:
        """The trajectory's raw bytes (a NUL in its text as U+FFFD, see
        :func:`_without_nul`): the caller validates them as ATIF and keeps them even when
        they are not valid."""
        return _without_nul(await self._raw("GET", f"/runs/{_seg(run_id)}/trajectory"))

    async def list_runs(self, cursor: str | None = None) -> RunListing:
        query = urlencode({"cursor": cursor}) if cursor else ""
        return await self._call("GET", "/runs", RunListing, query=query)

    async def workspace(self, run_id: str) -> WorkspaceListing:
        return await self._call("GET", f"/runs/{_seg(run_id)}/workspace", WorkspaceListing)

    async def workspace_file(self, run_id: str, path: str) -> bytes:
        return await self._raw("GET", f"/runs/{_seg(run_id)}/workspace/{quote(path)}")

    async def _call(
        self, method: str, path: str, into: type[T], *, body: bytes | None = None, query: str = ""
    ) -> T:
        raw = await self._raw(method, path, body=body, query=query)
        return _decode(raw, into, f"{method} {path}")

    async def _raw(
        self, method: str, path: str, *, body: bytes | None = None, query: str = ""
    ) -> bytes:
        url = self.base_url + path
        where = f"{method} {url}"
        try:
            # Repeatable: a start carries its idempotency key, so every call may go twice.
            resp = await self._http.request(
                method,
                f"{url}?{query}" if query else url,
                headers=self._headers if body is None else self._json_headers,
                body=body,
                max_body=MAX_BODY_BYTES,
                repeatable=True,
            )
        except Http1BodyTooLarge:
            raise HarnessError(
                f"{where}: answer larger than {MAX_BODY_BYTES // 2**20} MiB", retryable=False
            ) from None
        except Http1Timeout:
            raise HarnessError(f"{where}: no answer in time", retryable=True) from None
        except Http1Error as exc:
            # A URL or header that cannot be sent stays so; the rest (connection failures,
            # garbled answers, often a proxy or a restart) may pass.
            retryable = not isinstance(exc, Http1InvalidRequest)
            raise HarnessError(f"{where}: {exc.detail}", retryable=retryable) from None
        answer = hide(resp.body, self._api_key)
        if resp.status >= 400:
            raise _status_error(where, resp.status, answer)
        return answer


def _status_error(where: str, status: int, body: bytes) -> HarnessError:
    excerpt = body[:300].decode("utf-8", "replace").strip()
    detail = f": {excerpt}" if excerpt else ""
    # 501 says the endpoint does not exist there: asking again will not make it.
    retryable = (status >= 500 and status != 501) or status in (408, 429)
    return HarnessError(f"{where} answered {status}{detail}", retryable=retryable, status=status)


_JSON_NUL = re.compile(rb"(?<!\\)((?:\\\\)*)\\u0000")
"""``\\u0000`` in JSON text, not preceded by an escaped backslash of its own."""


def _without_nul(raw: bytes) -> bytes:
    """JSON with each NUL character (``\\u0000``) written as U+FFFD. PostgreSQL holds no NUL
    in text or JSON: refused, the answer would lose its run, where one character stood in
    for is all a reader loses (OTLP ingest does the same for span text)."""
    return _JSON_NUL.sub(rb"\1\\ufffd", raw) if b"\\u0000" in raw else raw


def _decode(raw: bytes, into: type[T], what: str) -> T:
    try:
        return msgspec.json.decode(_without_nul(raw), type=into)
    except msgspec.ValidationError as exc:
        raise HarnessError(
            f"{what}: the answer does not follow Harness API v1 ({exc})", retryable=False
        ) from None
    except msgspec.DecodeError:
        excerpt = raw[:120].decode("utf-8", "replace")
        # A half-written or garbled body is often a proxy or a restart: worth another try.
        raise HarnessError(f"{what}: the answer is not JSON: {excerpt!r}", retryable=True) from None


def _seg(value: str) -> str:
    return quote(value, safe="")
