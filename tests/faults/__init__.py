"""Fault tests: real processes killed at random moments, then restarted."""
