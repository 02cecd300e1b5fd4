"""ATIF (Agent Trajectory Interchange Format): typed model, validation and summaries.

Decode untrusted input with :func:`parse_trajectory` (it reports every broken rule in
one :class:`AtifValidationError`), or call :func:`validate_trajectory` on decoded JSON
to get the list of :class:`AtifError` without raising (:func:`validate_json` on JSON text,
holding one step's decoded objects at a time).
"""

from evalkit.atif.model import (
    LATEST_SCHEMA_VERSION,
    SCHEMA_VERSIONS,
    Agent,
    AudioPart,
    AudioSource,
    ContentPart,
    FinalMetrics,
    ImagePart,
    ImageSource,
    Message,
    Metrics,
    Observation,
    ObservationResult,
    Step,
    SubagentTrajectoryRef,
    TextPart,
    ToolCall,
    Trajectory,
)
from evalkit.atif.summary import TrajectorySummary, summarize
from evalkit.atif.validate import (
    AtifError,
    AtifValidationError,
    parse_trajectory,
    trajectory_json_schema,
    validate_json,
    validate_trajectory,
)

__all__ = [
    "LATEST_SCHEMA_VERSION",
    "SCHEMA_VERSIONS",
    "Agent",
    "AtifError",
    "AtifValidationError",
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
    "Step",
    "SubagentTrajectoryRef",
    "TextPart",
    "ToolCall",
    "Trajectory",
    "TrajectorySummary",
    "parse_trajectory",
    "summarize",
    "trajectory_json_schema",
    "validate_json",
    "validate_trajectory",
]
