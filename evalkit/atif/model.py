"""msgspec Structs for ATIF (Agent Trajectory Interchange Format), up to ATIF-v1.8.

Every object forbids unknown keys, as the reference implementation does: anything
custom belongs in an ``extra`` object. Optional fields default to ``None`` and are
left out when encoding (``omit_defaults``), so decode -> encode gives back the same
document minus explicit nulls.

These types describe the shape only. Cross-field rules (step numbering, tool call
linkage, agent-only fields, ...) are checked by :func:`evalkit.atif.validate_trajectory`,
which also reports every problem at once; decode untrusted input with
:func:`evalkit.atif.parse_trajectory` rather than with these types directly.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, get_args

import msgspec
from msgspec import Meta

__all__ = [
    "AUDIO_MEDIA_TYPES",
    "AUDIO_MEDIA_TYPE_ALIASES",
    "IMAGE_MEDIA_TYPES",
    "LATEST_SCHEMA_VERSION",
    "SCHEMA_VERSIONS",
    "Agent",
    "AudioPart",
    "AudioSource",
    "ContentPart",
    "FinalMetrics",
    "ImagePart",
    "ImageSource",
    "Message",
    "Metrics",
    "Observation",
    "ObservationResult",
    "SchemaVersion",
    "Step",
    "StepSource",
    "SubagentTrajectoryRef",
    "TextPart",
    "ToolCall",
    "Trajectory",
]

SchemaVersion = Literal[
    "ATIF-v1.0",
    "ATIF-v1.1",
    "ATIF-v1.2",
    "ATIF-v1.3",
    "ATIF-v1.4",
    "ATIF-v1.5",
    "ATIF-v1.6",
    "ATIF-v1.7",
    "ATIF-v1.8",
]
SCHEMA_VERSIONS: Final[tuple[str, ...]] = get_args(SchemaVersion)
LATEST_SCHEMA_VERSION: Final = "ATIF-v1.8"

StepSource = Literal["system", "user", "agent"]

IMAGE_MEDIA_TYPES: Final = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
AUDIO_MEDIA_TYPES: Final = frozenset(
    {
        "audio/wav",
        "audio/mpeg",
        "audio/mp4",
        "audio/aac",
        "audio/ogg",
        "audio/flac",
        "audio/webm",
        "audio/aiff",
    }
)
# Spellings accepted on input (compared lower-cased) and rewritten to the canonical type.
AUDIO_MEDIA_TYPE_ALIASES: Final = {
    "audio/mp3": "audio/mpeg",
    "audio/mpga": "audio/mpeg",
    "audio/x-mpeg": "audio/mpeg",
    "audio/x-wav": "audio/wav",
    "audio/wave": "audio/wav",
    "audio/vnd.wave": "audio/wav",
    "audio/x-m4a": "audio/mp4",
    "audio/m4a": "audio/mp4",
    "audio/x-aac": "audio/aac",
    "audio/x-flac": "audio/flac",
    "audio/x-aiff": "audio/aiff",
}

NonNegInt = Annotated[int, Meta(ge=0)]
NonNegFloat = Annotated[float, Meta(ge=0)]
Extra = dict[str, Any]


class _Base(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """Shared config: keyword construction, nulls left out on encode, no unknown keys."""


# --- multimodal content (v1.6 images, v1.8 audio) ---------------------------------


class ImageSource(_Base):
    """Where an image lives: a path relative to the trajectory file, an absolute path or a URL."""

    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    path: str


class AudioSource(_Base):
    """Where an audio clip lives (v1.8). Alias media types are normalised on decode."""

    media_type: str
    path: str
    duration_sec: NonNegFloat | None = None

    def __post_init__(self) -> None:
        media_type = self.media_type.lower()
        media_type = AUDIO_MEDIA_TYPE_ALIASES.get(media_type, media_type)
        if media_type not in AUDIO_MEDIA_TYPES:
            raise ValueError(f"unsupported audio media type {self.media_type!r}")
        self.media_type = media_type


class TextPart(_Base, tag_field="type", tag="text"):
    """A piece of text inside a multimodal message."""

    text: str


class ImagePart(_Base, tag_field="type", tag="image"):
    """An image inside a multimodal message (v1.6)."""

    source: ImageSource


class AudioPart(_Base, tag_field="type", tag="audio"):
    """An audio clip inside a multimodal message (v1.8)."""

    source: AudioSource


ContentPart = TextPart | ImagePart | AudioPart
Message = str | list[ContentPart]


# --- agent ----------------------------------------------------------------------------


class Agent(_Base):
    """The agent system that produced the trajectory."""

    name: str
    version: str
    model_name: str | None = None
    tool_definitions: list[Extra] | None = None
    extra: Extra | None = None


# --- tool calls and observations ------------------------------------------------------


class ToolCall(_Base):
    """One structured action requested by the model."""

    tool_call_id: str
    function_name: str
    arguments: Extra
    extra: Extra | None = None


class SubagentTrajectoryRef(_Base):
    """Points at a delegated subagent run, embedded (trajectory_id) or external (path)."""

    trajectory_id: str | None = None
    trajectory_path: str | None = None
    session_id: str | None = None
    extra: Extra | None = None


class ObservationResult(_Base):
    """Output of one action; source_call_id names the tool call of the same step it answers."""

    source_call_id: str | None = None
    content: Message | None = None
    subagent_trajectory_ref: list[SubagentTrajectoryRef] | None = None
    extra: Extra | None = None


class Observation(_Base):
    """What the environment returned after a step's actions."""

    results: list[ObservationResult]


# --- metrics ----------------------------------------------------------------------------


class Metrics(_Base):
    """Token, cost and logprob data for one agent step."""

    prompt_tokens: NonNegInt | None = None
    completion_tokens: NonNegInt | None = None
    cached_tokens: NonNegInt | None = None
    cost_usd: NonNegFloat | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    extra: Extra | None = None


class FinalMetrics(_Base):
    """Aggregates over the whole trajectory."""

    total_prompt_tokens: NonNegInt | None = None
    total_completion_tokens: NonNegInt | None = None
    total_cached_tokens: NonNegInt | None = None
    total_cost_usd: NonNegFloat | None = None
    total_steps: NonNegInt | None = None
    extra: Extra | None = None


# --- steps and the trajectory --------------------------------------------------------------


class Step(_Base):
    """A system prompt, a user message, or one complete agent turn."""

    step_id: Annotated[int, Meta(ge=1)]
    source: StepSource
    message: Message
    timestamp: str | None = None
    model_name: str | None = None
    reasoning_effort: str | int | float | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    observation: Observation | None = None
    metrics: Metrics | None = None
    llm_call_count: NonNegInt | None = None
    is_copied_context: bool | None = None
    extra: Extra | None = None


class Trajectory(_Base):
    """One ATIF document: the run of one agent, possibly with embedded subagent runs."""

    schema_version: SchemaVersion
    agent: Agent
    steps: list[Step]
    session_id: str | None = None
    trajectory_id: str | None = None
    notes: str | None = None
    final_metrics: FinalMetrics | None = None
    continued_trajectory_ref: str | None = None
    extra: Extra | None = None
    subagent_trajectories: list[Trajectory] | None = None
