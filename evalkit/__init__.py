"""evalkit: a self-hosted evaluation server for LLM agents."""

__version__ = "0.1.0"

ISSUES_URL = "https://github.com/inferedge-ai/evalkit/issues"
"""Where bugs and feature requests go (the CLI's internal error names it)."""
DISCUSSIONS_URL = "https://github.com/inferedge-ai/evalkit/discussions"
"""Where questions go."""
