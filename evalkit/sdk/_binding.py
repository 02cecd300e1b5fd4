"""Calling the user's task: parameters bound by name, sync or async, any return turned into
one shape."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evalkit.sdk._model import RunResult, SdkError

BINDABLE = ("input", "files", "model", "metadata")
"""The parameter names a task may take, in any order."""


@dataclass(frozen=True)
class Binding:
    """How to call one task: which of :data:`BINDABLE` it takes (by keyword, or the input
    positionally), and whether it is a coroutine function."""

    task: Callable[..., Any]
    keywords: tuple[str, ...]
    positional: tuple[str, ...]
    """Positional-only parameters, in order: each is one of BINDABLE."""
    input_only: bool
    """One parameter with another name: it receives the input."""
    is_async: bool
    takes_model: bool
    takes_metadata: bool

    def arguments(self, values: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        if self.input_only:
            return [values["input"]], {}
        return [values[n] for n in self.positional], {n: values[n] for n in self.keywords}

    async def call(self, values: dict[str, Any]) -> Any:
        """Call the task; a sync task runs in a worker thread (with this context, so spans
        it opens are children of the run's span)."""
        args, kwargs = self.arguments(values)
        if self.is_async:
            return await self.task(*args, **kwargs)
        result = await asyncio.to_thread(self.task, *args, **kwargs)
        if inspect.isawaitable(result):  # a sync callable that returned a coroutine
            return await result
        return result


def bind(task: Callable[..., Any]) -> Binding:
    """Check ``task``'s signature before the first call; an unbindable one is an SdkError."""
    if not callable(task):
        raise SdkError(f"task must be a function (sync or async), got {type(task).__name__}")
    try:
        signature = inspect.signature(task)
    except (TypeError, ValueError) as exc:
        raise SdkError(f"cannot read the task's parameters: {exc}") from None
    name = getattr(task, "__qualname__", None) or type(task).__name__
    name = name.rsplit("<locals>.", 1)[-1]  # a function defined in a function: its own name
    params = [
        p
        for p in signature.parameters.values()
        if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]
    is_async = inspect.iscoroutinefunction(task) or inspect.iscoroutinefunction(
        type(task).__call__ if not inspect.isroutine(task) else None
    )
    if len(params) == 1 and params[0].name not in BINDABLE:
        return Binding(task, (), (), True, is_async, False, False)
    unknown = [
        p.name for p in params if p.name not in BINDABLE and p.default is inspect.Parameter.empty
    ]
    if unknown:
        raise SdkError(
            f"the task function {name}() has the required "
            f"parameter{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(map(repr, unknown))}, which run_experiment cannot fill: a task takes "
            f"any of {', '.join(BINDABLE)} by name (a task with a single parameter of another "
            "name gets the input); rename it, or give it a default"
        )
    taken = [p for p in params if p.name in BINDABLE]
    positional = tuple(p.name for p in taken if p.kind == inspect.Parameter.POSITIONAL_ONLY)
    keywords = tuple(p.name for p in taken if p.kind != inspect.Parameter.POSITIONAL_ONLY)
    if positional and [p.name for p in params[: len(positional)]] != list(positional):
        raise SdkError(
            f"the task function {name}() has positional-only parameters run_experiment cannot "
            "fill in order; drop the '/' from its signature"
        )
    names = {p.name for p in taken}
    return Binding(
        task, keywords, positional, False, is_async, "model" in names, "metadata" in names
    )


def normalize(value: Any) -> RunResult:
    """A task's return as a RunResult: str -> answer, dict -> output, RunResult as is,
    None -> no answer; anything else is refused (the run fails with the reason)."""
    if isinstance(value, RunResult):
        return value
    if isinstance(value, str):
        return RunResult(answer=value)
    if isinstance(value, dict):
        return RunResult(output=value)
    if value is None:
        return RunResult()
    raise TypeError(
        f"the task returned {type(value).__name__}; return a str (the answer), a dict (the "
        "structured output) or a RunResult"
    )
