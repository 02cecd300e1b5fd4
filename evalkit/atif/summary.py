"""A short numeric digest of a trajectory, for gauges and `runs show`."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from evalkit.atif.model import AudioPart, ImagePart, Message, Trajectory

__all__ = ["TrajectorySummary", "summarize"]


class TrajectorySummary(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Counts and totals of one trajectory (embedded subagents are counted, not summed).

    Token and cost totals come from ``final_metrics`` when the producer reported them,
    otherwise from the sum of the step metrics; ``None`` means nobody reported them.
    """

    steps: int
    agent_steps: int
    tool_calls: int
    tool_names: list[str] = msgspec.field(default_factory=list)
    model_names: list[str] = msgspec.field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    duration_seconds: float | None = None
    has_reasoning: bool = False
    has_multimodal: bool = False
    subagents: int = 0


def summarize(traj: Trajectory) -> TrajectorySummary:
    """Summarise ``traj`` (a validated Trajectory)."""
    tool_names: list[str] = []
    models: list[str] = []
    sums: dict[str, int | float | None] = dict.fromkeys(
        ("prompt_tokens", "completion_tokens", "cached_tokens", "cost_usd")
    )
    times: list[datetime] = []
    has_reasoning = has_multimodal = False
    for step in traj.steps:
        for call in step.tool_calls or ():
            tool_names.append(call.function_name)
        if step.source == "agent":
            model = step.model_name or traj.agent.model_name
            if model and model not in models:
                models.append(model)
        if step.reasoning_content:
            has_reasoning = True
        contents = [step.message]
        if step.observation is not None:
            contents += [r.content for r in step.observation.results if r.content is not None]
        has_multimodal = has_multimodal or any(_is_multimodal(c) for c in contents)
        if step.metrics is not None:
            for name in sums:
                value = getattr(step.metrics, name)
                if value is not None:
                    sums[name] = (sums[name] or 0) + value
        if step.timestamp is not None:
            moment = _parse_time(step.timestamp)
            if moment is not None:
                times.append(moment)
    final = traj.final_metrics
    if final is not None:
        for name in sums:
            value = getattr(final, f"total_{name}")
            if value is not None:
                sums[name] = value
    return TrajectorySummary(
        steps=len(traj.steps),
        agent_steps=sum(1 for s in traj.steps if s.source == "agent"),
        tool_calls=len(tool_names),
        tool_names=tool_names,
        model_names=models,
        prompt_tokens=_int(sums["prompt_tokens"]),
        completion_tokens=_int(sums["completion_tokens"]),
        cached_tokens=_int(sums["cached_tokens"]),
        cost_usd=None if sums["cost_usd"] is None else float(sums["cost_usd"]),
        duration_seconds=(times[-1] - times[0]).total_seconds() if len(times) > 1 else None,
        has_reasoning=has_reasoning,
        has_multimodal=has_multimodal,
        subagents=len(traj.subagent_trajectories or ()),
    )


def _int(value: int | float | None) -> int | None:
    return None if value is None else int(value)


def _is_multimodal(content: Message) -> bool:
    return isinstance(content, list) and any(isinstance(p, ImagePart | AudioPart) for p in content)


def _parse_time(value: str) -> datetime | None:
    """Timestamps without an offset are taken as UTC so they compare with the others."""
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
