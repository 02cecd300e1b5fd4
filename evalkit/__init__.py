"""evalkit: a self-hosted evaluation server for LLM agents."""

__version__ = "0.1.0"
