"""Security tests: every route for every role, secrets, egress, the web UI, token checks."""
