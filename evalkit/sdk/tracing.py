"""Tracing for SDK runs: evalkit's OTLP/HTTP exporter on your tracer provider, one
``evalkit.run`` span per run, and the run's session stamped on the spans made under it.

::

    from evalkit.sdk import tracing

    setup_tracing()                      # your own provider and instrumentors, if any
    tracing.register(agent="myagent")    # adds evalkit as one more export destination

Each run of ``run_experiment`` opens an ``evalkit.run`` span that carries the run's session
id (``session.id`` and whatever attribute names the agent's span mapping reads it from)
and ``evalkit.*`` attributes (experiment, case, repetition). Spans started under it in
this process get the same session id unless they carry their own. Spans of another
process join the run when they continue its trace (W3C ``traceparent``: every span of a
trace belongs to the session of its root) or when that process wraps its work in
:func:`eval_run` with the run's metadata.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from evalkit.sdk._model import RunResult, SdkError

__all__ = ["eval_run", "is_registered", "register", "unregister"]

OTEL_TOKEN_ENV = "EVALKIT_OTEL_TOKEN"
SERVER_URL_ENV = "EVALKIT_SERVER_URL"
TRACES_PATH = "/api/otel/v1/traces"
RUN_SPAN = "evalkit.run"
DEFAULT_SESSION_NAMES = ("session.id", "gen_ai.conversation.id")
"""Stamped when the agent's mapping cannot be read (an agent token reads no mapping)."""
_INSTALL = "pip install opentelemetry-sdk opentelemetry-exporter-otlp-proto-http"


@dataclass
class _Registration:
    provider: Any
    processor: Any
    agent: str
    """``name@workspace``, or the bare name an agent token was given."""
    session_names: tuple[str, ...]
    tracer: Any
    lock: threading.Lock = field(default_factory=threading.Lock)


_registered: _Registration | None = None
_SESSION_KEY: Any = None


def _otel() -> Any:
    try:
        from opentelemetry import context, trace
    except ImportError:  # pragma: no cover - the dev environment has it
        raise SdkError(f"tracing needs the OpenTelemetry SDK: {_INSTALL}") from None
    return context, trace


def _session_key() -> Any:
    global _SESSION_KEY
    if _SESSION_KEY is None:
        context, _ = _otel()
        _SESSION_KEY = context.create_key("evalkit-session")
    return _SESSION_KEY


def is_registered() -> bool:
    """True once :func:`register` has added evalkit's exporter in this process."""
    return _registered is not None


def register(
    agent: str,
    *,
    server_url: str | None = None,
    token: str | None = None,
    provider: Any = None,
) -> Any:
    """Add evalkit's OTLP/HTTP exporter to the tracer provider (the global one, or
    ``provider``; a new one is created and set globally when there is none) and return the
    provider.

    The server is ``server_url``, else ``EVALKIT_SERVER_URL``, else evalkit.yaml's
    ``server_url``, else the server of your last ``evalkit login``. The token is
    ``token``, else ``EVALKIT_OTEL_TOKEN`` (an agent token: ``evalkit tokens create --agent
    NAME@WS``), else your CLI login. ``agent`` is
    ``NAME@WORKSPACE``, or a bare name in your personal workspace.
    """
    global _registered
    _, trace = _otel()
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:  # pragma: no cover - the dev environment has them
        raise SdkError(f"tracing.register needs the OTLP/HTTP exporter: {_INSTALL}") from None

    base = _server(server_url)
    secret, is_login = _token(base, token)
    ref, names = _agent_facts(base, secret, agent, is_login)
    if _registered is not None:
        if _registered.agent == ref:
            return _registered.provider
        raise SdkError(
            f"tracing is already registered for agent {_registered.agent} in this process; "
            "one process exports for one agent (call tracing.unregister() first)"
        )
    if provider is None:
        provider = trace.get_tracer_provider()
        if not isinstance(provider, TracerProvider):
            service = ref.split("@")[0]
            provider = TracerProvider(resource=Resource.create({"service.name": service}))
            trace.set_tracer_provider(provider)
            if trace.get_tracer_provider() is not provider:  # pragma: no cover
                raise SdkError(
                    "a tracer provider that is not the OpenTelemetry SDK's is set globally; "
                    "pass provider= (an opentelemetry.sdk.trace.TracerProvider)"
                )
    elif not isinstance(provider, TracerProvider):
        raise SdkError("provider must be an opentelemetry.sdk.trace.TracerProvider")
    headers = {"Authorization": f"Bearer {secret}"}
    if "@" in ref:
        headers["X-Evalkit-Agent"] = ref
    exporter = OTLPSpanExporter(endpoint=base + TRACES_PATH, headers=headers, timeout=30)
    processor = BatchSpanProcessor(exporter, schedule_delay_millis=500)
    provider.add_span_processor(_SessionStamp())
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("evalkit.sdk")
    _registered = _Registration(provider, processor, ref, names, tracer)
    return provider


def unregister() -> None:
    """Flush and stop evalkit's exporter (its processor stays on the provider, idle)."""
    global _registered
    if _registered is None:
        return
    registration, _registered = _registered, None
    registration.processor.force_flush(10_000)
    registration.processor.shutdown()


def flush(timeout: float = 10.0) -> bool:
    """Send the spans ended so far (blocking); True when the exporter took them all."""
    registration = _registered
    if registration is None:
        return True
    return bool(registration.processor.force_flush(int(timeout * 1000)))


def session_names() -> tuple[str, ...]:
    return _registered.session_names if _registered else DEFAULT_SESSION_NAMES


def set_session_names(names: tuple[str, ...]) -> None:
    """The attribute names the agent's active mapping reads the session id from (the SDK
    learns them with its login when the exporter could not)."""
    if _registered is not None:
        _registered.session_names = tuple(dict.fromkeys(("session.id", *names)))


# --------------------------------------------------------------------------- run spans


def run_attributes(metadata: Mapping[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "evalkit.case_id": str(metadata.get("case_id")),
        "evalkit.repetition": int(metadata.get("repetition") or 1),
    }
    if metadata.get("experiment_id") is not None:
        attributes["evalkit.experiment_id"] = int(metadata["experiment_id"])
    if metadata.get("run_id") is not None:
        attributes["evalkit.run_id"] = int(metadata["run_id"])
    if metadata.get("tags"):
        attributes["evalkit.tags"] = [str(t) for t in metadata["tags"]]
    if dry_run:
        attributes["evalkit.dry_run"] = True
    return attributes


class RunSpan:
    """The ``evalkit.run`` span of one run (a no-op when tracing is not registered)."""

    def __init__(self, span: Any, session_id: str) -> None:
        self.span = span
        self.session_id = session_id

    def finish(self, result: RunResult | None, error: BaseException | None = None) -> None:
        """Record the run's outcome on the span before it ends; a result naming another
        session moves the span (so the whole trace) into that session."""
        span = self.span
        if span is None:
            return
        if result is not None:
            text = result.answer
            if text is None and result.output is not None:
                text = _json(result.output)
            if text is not None:
                span.set_attribute("output.value", text)
            if result.session_id and result.session_id != self.session_id:
                for name in session_names():
                    span.set_attribute(name, result.session_id)
                span.set_attribute("evalkit.sdk_session_id", self.session_id)
        if error is not None:
            from opentelemetry.trace import Status, StatusCode

            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))


@contextmanager
def run_span(
    session_id: str, metadata: Mapping[str, Any], case_input: Any, *, dry_run: bool = False
) -> Iterator[RunSpan]:
    """Open the run's ``evalkit.run`` span (when registered) and make the run's session the
    one stamped on spans started under it."""
    registration = _registered
    if registration is None:
        yield RunSpan(None, session_id)
        return
    context, _ = _otel()
    attributes = {name: session_id for name in registration.session_names}
    attributes |= run_attributes(metadata, dry_run=dry_run)
    attributes["input.value"] = _json(case_input)
    stamp = {name: session_id for name in registration.session_names}
    token = context.attach(context.set_value(_session_key(), stamp))
    try:
        with registration.tracer.start_as_current_span(
            RUN_SPAN, attributes=attributes, record_exception=False, set_status_on_exception=False
        ) as span:
            yield RunSpan(span, session_id)
    finally:
        context.detach(token)


@contextmanager
def eval_run(metadata: Mapping[str, Any]) -> Iterator[Any]:
    """Wrap work done for a run somewhere else (a worker behind a queue): spans made inside
    join the run's session. ``metadata`` is the task's ``metadata`` dict, passed along with
    the job; this process needs :func:`register` too, to export its spans."""
    session_id = metadata.get("session_id")
    if not session_id:
        raise SdkError("eval_run needs the task's metadata dict (it carries session_id)")
    context, trace = _otel()
    names = session_names()
    stamp = {name: str(session_id) for name in names}
    tracer = _registered.tracer if _registered else trace.get_tracer("evalkit.sdk")
    token = context.attach(context.set_value(_session_key(), stamp))
    try:
        with tracer.start_as_current_span(
            RUN_SPAN, attributes={**stamp, **run_attributes(metadata)}
        ) as span:
            yield span
    finally:
        context.detach(token)


def _json(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return str(value)


class _SessionStamp:
    """A span processor: a span started under a run gets the run's session attributes,
    unless it has its own."""

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        context, _ = _otel()
        stamp = context.get_value(_session_key(), parent_context)
        if not stamp:
            return
        own = span.attributes or {}
        for name, value in stamp.items():
            if name not in own:
                span.set_attribute(name, value)

    def _on_ending(self, span: Any) -> None:
        pass

    def on_end(self, span: Any) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


# --------------------------------------------------------------------------- setup


def _server(explicit: str | None) -> str:
    from evalkit.sdk._link import project_server_url

    url = explicit or os.environ.get(SERVER_URL_ENV) or project_server_url()
    if not url:
        from evalkit.cli import credentials

        url = credentials.load().default_server
    if not url:
        raise SdkError(
            f"tracing.register needs the evalkit server's URL: set {SERVER_URL_ENV} "
            "(e.g. https://evals.example.com), or log in once with `evalkit login URL`"
        )
    return url.rstrip("/")


def _token(base: str, explicit: str | None) -> tuple[str, bool]:
    """The token and whether it is a user's login (not an agent token)."""
    from evalkit.auth.tokens import AGENT_PREFIX

    token = explicit or os.environ.get(OTEL_TOKEN_ENV)
    if token:
        return token, not token.startswith(AGENT_PREFIX)
    from evalkit.sdk._link import login

    try:
        _, token = login(base)
    except SdkError:
        raise SdkError(
            f"tracing.register needs a token for {base}: set {OTEL_TOKEN_ENV} to an agent "
            "token (`evalkit tokens create --agent NAME@WS`; it never expires), or run it "
            "where a developer is logged in (`evalkit login`)"
        ) from None
    return token, True


def _agent_facts(base: str, token: str, agent: str, is_login: bool) -> tuple[str, tuple[str, ...]]:
    """The agent as ``name@workspace`` and the session attribute names its active mapping
    reads (a login can ask the server; an agent token cannot)."""
    import httpx

    from evalkit.model.names import parse_ref

    try:
        ref = parse_ref(agent, "agent")
    except Exception as exc:
        raise SdkError(str(exc)) from None
    if not is_login:
        return str(ref) if ref.workspace else ref.name, DEFAULT_SESSION_NAMES
    headers = {"Authorization": f"Bearer {token}", "User-Agent": "evalkit-sdk"}
    with httpx.Client(base_url=base, headers=headers, timeout=30.0) as http:
        try:
            workspace = ref.workspace
            if not workspace:
                me = http.get("/api/auth/whoami")
                if me.status_code == 401:
                    raise SdkError(
                        f"the login for {base} was refused ({me.json()['error']['message']}); "
                        f"log in again with `evalkit login {base}` or set {OTEL_TOKEN_ENV}"
                    )
                me.raise_for_status()
                workspace = me.json()["personal_workspace"]
            mapping = http.get(f"/api/workspaces/{workspace}/agents/{ref.name}/mappings/active")
        except httpx.HTTPError as exc:
            raise SdkError(f"cannot reach the evalkit server at {base}: {exc}") from None
    names: tuple[str, ...] = DEFAULT_SESSION_NAMES
    if mapping.status_code == 200:
        found = mapping.json()["mapping"].get("session_id") or []
        found = [found] if isinstance(found, str) else list(found)
        names = tuple(dict.fromkeys(("session.id", *found)))
    elif mapping.status_code == 404 and mapping.json()["error"]["code"] == "no-such-agent":
        raise SdkError(
            f"there is no agent {ref.name}@{workspace}: create it once with `evalkit agents "
            f"create {ref.name} --trajectory-source otel --mapping mapping.json`"
        )
    return f"{ref.name}@{workspace}", names
