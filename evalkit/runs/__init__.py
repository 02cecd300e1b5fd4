"""Runs: the state machine and its drivers."""
