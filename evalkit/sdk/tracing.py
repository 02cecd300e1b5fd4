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
CHECK_PATH = "/api/otel/check"
"""Answers as an export with the same credentials would, and names the agent."""
RUN_SPAN = "evalkit.run"
DEFAULT_SESSION_NAMES = ("session.id", "gen_ai.conversation.id")
"""Stamped when nothing is registered (``eval_run`` in a process that does not export)."""
_INSTALL = "pip install opentelemetry-sdk opentelemetry-exporter-otlp-proto-http"


@dataclass
class _Registration:
    provider: Any
    processor: Any
    agent: str
    """``name@workspace``, as the server named it when register checked the token."""
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
    ``NAME@WORKSPACE``, or a bare name in your personal workspace (with an agent token: the
    token's agent).

    The server is asked first, with the exporter's own credentials, which agent it would
    store the spans for: a token it refuses (expired, revoked, of another agent, without
    write access to the agent's workspace) or an agent it does not have raises
    :class:`SdkError` with the reason here, not an exporter that drops every span later.
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
    secret, source = _token(base, token)
    ref, names = _check(base, secret, source, agent)
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
    headers = {"Authorization": f"Bearer {secret}", "X-Evalkit-Agent": ref}
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


def require_agent(agent: str) -> None:
    """Refuse to run ``agent`` (``name@workspace``) while the exporter sends spans for
    another: the runs would wait for sessions that never arrive in their agent."""
    registration = _registered
    if registration is not None and registration.agent != agent:
        raise SdkError(
            f"tracing is registered for agent {registration.agent}, but this runs agent "
            f"{agent}: its spans would land in {registration.agent}'s sessions and every "
            f"run would end with no spans; call tracing.register(agent={agent!r}) (with a "
            "token of that agent), or run the agent tracing is registered for"
        )


def session_names() -> tuple[str, ...]:
    return _registered.session_names if _registered else DEFAULT_SESSION_NAMES


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


def _token(base: str, explicit: str | None) -> tuple[str, str]:
    """The token, and where it came from (for the error when the server refuses it)."""
    if explicit:
        return explicit, "the token passed as token="
    token = os.environ.get(OTEL_TOKEN_ENV)
    if token:
        return token, f"the token in {OTEL_TOKEN_ENV}"
    from evalkit.sdk._link import login

    try:
        _, token = login(base)
    except SdkError:
        raise SdkError(
            f"tracing.register needs a token for {base}: set {OTEL_TOKEN_ENV} to an agent "
            "token (`evalkit tokens create --agent NAME@WS`; it never expires), or run it "
            "where a developer is logged in (`evalkit login`)"
        ) from None
    return token, "your login"


def _check(base: str, token: str, source: str, agent: str) -> tuple[str, tuple[str, ...]]:
    """Ask the collector, with the exporter's own credentials, which agent it would store
    the spans for: the agent as ``name@workspace`` and the session attribute names of its
    active mapping. Raises with the server's reason when an export would be refused."""
    import httpx

    from evalkit.auth.tokens import AGENT_PREFIX
    from evalkit.model.names import parse_ref

    try:
        parse_ref(agent, "agent")
    except Exception as exc:
        raise SdkError(f"tracing.register(agent={agent!r}): {exc}") from None
    headers = {
        "Authorization": f"Bearer {token}",
        "X-Evalkit-Agent": agent,
        "User-Agent": "evalkit-sdk",
    }
    try:
        answer = httpx.post(base + CHECK_PATH, headers=headers, timeout=30.0)
    except httpx.HTTPError as exc:
        raise SdkError(f"cannot reach the evalkit server at {base}: {exc}") from None
    if answer.status_code == 200:
        found = answer.json()
        names = tuple(dict.fromkeys(("session.id", *(found.get("session_names") or []))))
        return str(found["agent"]), names
    raise SdkError(_refusal(base, agent, source, answer, token.startswith(AGENT_PREFIX)))


def _refusal(base: str, agent: str, source: str, answer: Any, agent_token: bool) -> str:
    """Why the collector would refuse this exporter, and what to do about it."""
    try:
        error = answer.json()["error"]
        code, message = str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        code, message = str(answer.status_code), answer.text[:200]
    head = f"tracing.register(agent={agent!r}): the server at {base} refuses spans"
    if answer.status_code == 401:
        fix = (
            f"mint a new agent token (`evalkit tokens create --agent {agent}`) and set "
            f"{OTEL_TOKEN_ENV}"
            if agent_token
            else f"log in again (`evalkit login {base}`), or set {OTEL_TOKEN_ENV} to an agent "
            "token, which never expires"
        )
        return f"{head} sent with {source}: {message} [{code}]; {fix}"
    if code == "agent-token-scope":
        why = message.split(";", 1)[0]  # whose token it is; the fix is the SDK's own
        return (
            f"{head} for {agent} sent with {source}: {why} [{code}]; name the token's "
            f"agent in tracing.register, or set {OTEL_TOKEN_ENV} to a token of {agent} "
            f"(`evalkit tokens create --agent {agent}`)"
        )
    if code == "no-such-agent":
        return (
            f"{head}: {message} [{code}]; create it once with `evalkit agents create NAME "
            "--trajectory-source otel --mapping mapping.json`"
        )
    return f"{head} sent with {source}: {message} [{code}]"
