"""Wire objects of fixture downloads."""

from __future__ import annotations

from datetime import datetime

from evalkit.model.api import Output


class SignedFixtureUrl(Output):
    url: str
    """Serves the fixture's bytes to anyone who has it, without a login, until expires_at."""
    expires_at: datetime
