"""Scoring: built-in checks, the LLM judge and remote evaluators, run once per run."""
