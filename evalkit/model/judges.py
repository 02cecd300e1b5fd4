"""Wire objects for LLM providers and the default judge (admins manage both).

A provider's API key goes in (``api_key``) and never comes out: answers say
``has_api_key`` and the name of the variable it came from (``api_key_env``).
"""

from __future__ import annotations

from datetime import datetime

from evalkit.model.api import Input, Output


class LlmProviderCreate(Input):
    name: str
    base_url: str
    """The OpenAI-compatible API's base URL; evalkit POSTs to ``{base_url}/chat/completions``."""
    api_key: str | None = None
    """Sent as ``Authorization: Bearer``; stored encrypted, never returned."""
    api_key_env: str | None = None
    """The environment variable the key came from, kept for display."""


class LlmProvider(Output):
    name: str
    base_url: str
    has_api_key: bool
    api_key_env: str | None
    is_default_judge: bool
    """The default judge uses this provider."""
    created_at: datetime
    created_by: str | None


class LlmProviderDeleted(Output):
    name: str
    default_judge_cleared: bool = False
    """The provider was the default judge's, so the default judge is unset now."""


class JudgeDefaultSet(Input):
    provider: str
    model: str


class JudgeDefault(Output):
    """The judge a case's ``judge:`` rubric is graded by, unless the case names a model
    (then that model on the same provider). Everything is null when none is set."""

    provider: str | None = None
    base_url: str | None = None
    model: str | None = None
    updated_at: datetime | None = None
    updated_by: str | None = None


class JudgeDefaultCleared(Output):
    cleared: bool
    """False when no default judge was set."""
