"""The Harness API v1 client: one method per endpoint, strict about what it reads.

Every failure is a :class:`HarnessError` that says whether trying again may help
(connection refused, timeouts, 5xx, 429) or not (4xx, a body that is not the contract).
The run state machine retries the first kind with backoff and fails the run on the second.
"""

from __future__ import annotations

import io
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import msgspec

from evalkit.auth.secrets import hide
from evalkit.errors import EvalkitError
from evalkit.model.harness import (
    Capabilities,
    RunListing,
    RunStart,
    RunStatus,
    WorkspaceListing,
)
from evalkit.outbound import once_more_if_dropped

T = TypeVar("T")

MAX_BODY_BYTES = 64 * 2**20
"""The largest harness answer evalkit reads (a trajectory can be big, but not unbounded)."""


class HarnessError(EvalkitError):
    """A harness call failed. ``retryable`` says whether the same call may succeed later."""

    def __init__(self, message: str, *, retryable: bool, status: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status


class HarnessClient:
    """Calls one harness at ``base_url`` (the agent's harness URL) with an ``httpx`` client
    made by :func:`evalkit.outbound.make_client`, so the egress policy applies."""

    def __init__(self, base_url: str, api_key: str | None, http: httpx.AsyncClient) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._api_key = api_key
        self._http = http

    async def capabilities(self) -> Capabilities:
        return await self._call("GET", "/capabilities", Capabilities)

    async def start(self, body: RunStart) -> RunStatus:
        return await self._call("POST", "/runs", RunStatus, json=msgspec.to_builtins(body))

    async def status(self, run_id: str) -> RunStatus:
        return await self._call("GET", f"/runs/{_seg(run_id)}", RunStatus)

    async def stop(self, run_id: str) -> RunStatus | None:
        """Ask the harness to stop; a 2xx without a body is fine (``None``)."""
        raw = await self._raw("POST", f"/runs/{_seg(run_id)}/stop")
        return _decode(raw, RunStatus, "POST /runs/{id}/stop") if raw.strip() else None

    async def trajectory(self, run_id: str) -> bytes:
        """The trajectory's raw bytes: the caller validates them as ATIF and keeps them even
        when they are not valid."""
        return await self._raw("GET", f"/runs/{_seg(run_id)}/trajectory")

    async def list_runs(self, cursor: str | None = None) -> RunListing:
        params = {"cursor": cursor} if cursor else None
        return await self._call("GET", "/runs", RunListing, params=params)

    async def workspace(self, run_id: str) -> WorkspaceListing:
        return await self._call("GET", f"/runs/{_seg(run_id)}/workspace", WorkspaceListing)

    async def workspace_file(self, run_id: str, path: str) -> bytes:
        return await self._raw("GET", f"/runs/{_seg(run_id)}/workspace/{quote(path)}")

    async def _call(self, method: str, path: str, into: type[T], **kwargs: Any) -> T:
        raw = await self._raw(method, path, **kwargs)
        return _decode(raw, into, f"{method} {path}")

    async def _raw(self, method: str, path: str, **kwargs: Any) -> bytes:
        url = self.base_url + path
        where = f"{method} {url}"
        try:
            # A start carries its idempotency key, so every call may be sent twice.
            resp, body = await once_more_if_dropped(
                lambda: self._send(method, url, where, **kwargs)
            )
        except httpx.TimeoutException:
            raise HarnessError(f"{where}: no answer in time", retryable=True) from None
        except httpx.TransportError as exc:
            raise HarnessError(f"{where}: {_describe(exc)}", retryable=True) from None
        if resp.status_code >= 400:
            raise _status_error(where, resp.status_code, body)
        return body

    async def _send(
        self, method: str, url: str, where: str, **kwargs: Any
    ) -> tuple[httpx.Response, bytes]:
        async with self._http.stream(method, url, headers=self._headers, **kwargs) as resp:
            return resp, hide(await _read_capped(resp, where), self._api_key)


async def _read_capped(resp: httpx.Response, where: str) -> bytes:
    # A BytesIO hands over its buffer without a copy: joining the chunks would hold a large
    # trajectory twice.
    body = io.BytesIO()
    async for chunk in resp.aiter_bytes():
        if body.tell() + len(chunk) > MAX_BODY_BYTES:
            raise HarnessError(
                f"{where}: answer larger than {MAX_BODY_BYTES // 2**20} MiB", retryable=False
            )
        body.write(chunk)
    return body.getvalue()


def _status_error(where: str, status: int, body: bytes) -> HarnessError:
    excerpt = body[:300].decode("utf-8", "replace").strip()
    detail = f": {excerpt}" if excerpt else ""
    # 501 says the endpoint does not exist there: asking again will not make it.
    retryable = (status >= 500 and status != 501) or status in (408, 429)
    return HarnessError(f"{where} answered {status}{detail}", retryable=retryable, status=status)


def _decode(raw: bytes, into: type[T], what: str) -> T:
    try:
        return msgspec.json.decode(raw, type=into)
    except msgspec.ValidationError as exc:
        raise HarnessError(
            f"{what}: the answer does not follow Harness API v1 ({exc})", retryable=False
        ) from None
    except msgspec.DecodeError:
        excerpt = raw[:120].decode("utf-8", "replace")
        # A half-written or garbled body is often a proxy or a restart: worth another try.
        raise HarnessError(f"{what}: the answer is not JSON: {excerpt!r}", retryable=True) from None


def _describe(exc: httpx.TransportError) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect ({text})"
    return text


def _seg(value: str) -> str:
    return quote(value, safe="")
