"""The job queue (procrastinate) and every job evalkit runs."""
