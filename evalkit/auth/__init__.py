"""Passwords, tokens, secrets at rest, and the access rules."""
