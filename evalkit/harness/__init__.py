"""The Harness API: evalkit's client for it, the harness check, and a reference harness."""
