"""GET JSON from a peer's API, and say what the peer answered when it is not a 200."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import httpx

from evalkit import __version__
from evalkit.importers._model import ImportFailed, Notice, PeerRefused, no_notice

TIMEOUT_SECONDS = 60.0
ANSWER_CHARS = 300
"""How much of an error body a message quotes."""
WAITED_ON = (429, 503)
"""Answers that say "later": the request is sent again after the peer's Retry-After."""
MAX_WAITS = 6
MAX_WAIT_SECONDS = 60.0

CREDENTIAL_HINTS = {
    401: "{title} did not accept the credentials",
    403: "{title} does not let these credentials read this",
}


class PeerApi:
    """One peer's HTTP API (``title`` is how messages name it: Phoenix, Langfuse)."""

    def __init__(
        self,
        title: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        auth: tuple[str, str] | None = None,
        credential_hint: str = "",
        notice: Notice = no_notice,
    ) -> None:
        self.title = title
        self.url = url.rstrip("/")
        self.credential_hint = credential_hint
        self.notice = notice
        self._client = httpx.Client(
            base_url=self.url,
            headers={"Accept": "application/json", "User-Agent": f"evalkit/{__version__}"}
            | dict(headers or {}),
            auth=auth,
            timeout=TIMEOUT_SECONDS,
        )

    def __enter__(self) -> PeerApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self._client.close()

    def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        """The JSON body of ``GET path``; PeerRefused on an error status, ImportFailed when
        the peer cannot be reached or does not answer JSON."""
        shown = _shown(path, params)
        for attempt in range(MAX_WAITS + 1):
            response = self._send(path, params, shown)
            if response.status_code not in WAITED_ON or attempt == MAX_WAITS:
                break
            wait = _retry_after(response, attempt)
            self.notice(
                f"{self.title} answered {response.status_code} {response.reason_phrase} to "
                f"GET {shown} ({answer_text(response)[0]}): trying again in {wait:g} s"
            )
            time.sleep(wait)
        if response.status_code != 200:
            raise self.refusal(response, shown)
        try:
            return response.json()
        except ValueError:
            kind = response.headers.get("content-type", "no content type")
            raise ImportFailed(
                f"{self.title} at {self.url} answered GET {shown} with {kind}, not JSON: "
                f"is --url the base URL of the {self.title} server (its address, no path)?"
            ) from None

    def _send(self, path: str, params: Mapping[str, Any] | None, shown: str) -> httpx.Response:
        try:
            return self._client.get(path, params=_query(params))
        except httpx.TimeoutException:
            raise ImportFailed(
                f"{self.title} at {self.url} did not answer GET {shown} within "
                f"{TIMEOUT_SECONDS:.0f} s: check that the server is up, then try again"
            ) from None
        except httpx.HTTPError as exc:
            raise ImportFailed(
                f"cannot reach {self.title} at {self.url} ({type(exc).__name__}: {exc}): "
                "check --url and that the server is running"
            ) from None

    def refusal(self, response: httpx.Response, shown: str, hint: str = "") -> PeerRefused:
        """The error for a non-200 answer: the status, the peer's words and a hint."""
        answer, json_body = answer_text(response)
        hint = hint or (
            CREDENTIAL_HINTS[response.status_code].format(title=self.title)
            + f": {self.credential_hint}"
            if response.status_code in CREDENTIAL_HINTS and self.credential_hint
            else ""
        )
        message = (
            f"{self.title} at {self.url} answered {response.status_code} "
            f"{response.reason_phrase} to GET {shown}: {answer or '(no body)'}"
        )
        return PeerRefused(
            f"{message.rstrip('.')}; {hint}" if hint else message,
            status=response.status_code,
            answer=answer,
            json_body=json_body,
        )


def answer_text(response: httpx.Response) -> tuple[str, bool]:
    """What the peer said, on one line: a JSON body's ``message``/``detail``/``error`` when
    it has one, else the start of the body; and whether the body was JSON."""
    text = response.text
    try:
        body = json.loads(text)
        json_body = True
    except ValueError:
        body, json_body = None, False
    if isinstance(body, dict):
        for key in ("message", "detail", "error"):
            if isinstance(body.get(key), str) and body[key].strip():
                text = body[key]
                break
    text = " ".join(text.split())
    return (text if len(text) <= ANSWER_CHARS else text[: ANSWER_CHARS - 3] + "..."), json_body


def _retry_after(response: httpx.Response, attempt: int) -> float:
    """The peer's Retry-After (in seconds), else 1, 2, 4, ... s; at most a minute."""
    try:
        wait = float(response.headers.get("retry-after", ""))
    except ValueError:
        wait = float(2**attempt)
    return min(max(wait, 0.1), MAX_WAIT_SECONDS)


def _query(params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if params is None:
        return None
    return {key: value for key, value in params.items() if value is not None}


def _shown(path: str, params: Mapping[str, Any] | None) -> str:
    query = _query(params)
    if not query:
        return path
    return str(httpx.URL(path, params=query))
