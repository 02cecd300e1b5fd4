"""Scoring jobs: one ``score_run_job`` per run and round, queued by ``evalkit evaluate``
(:func:`evalkit.jobs.queue.defer_scoring`).

A job scores its run in the round it names; a replay (a worker died) asks no evaluator
twice and stores nothing twice (see :mod:`evalkit.scoring.run`).
"""

from __future__ import annotations

import logging

from procrastinate import JobContext, RetryStrategy

from evalkit.errors import NotFound
from evalkit.jobs import queue, runtime
from evalkit.jobs.app import app
from evalkit.scoring.run import score_run

log = logging.getLogger("evalkit.scoring")

SCORE_RETRY = RetryStrategy(max_attempts=5, exponential_wait=1)
"""Retries of a job that raised (a database hiccup); evaluator failures are scores."""


@app.task(name=queue.SCORE_RUN, retry=SCORE_RETRY, pass_context=True)
async def score_run_job(
    context: JobContext, run_id: int, round: int, only: list[str] | None = None
) -> int:
    """Score one run in ``round`` (only the evaluators in ``only``, when given)."""
    try:
        items = await score_run(
            runtime.database(),
            run_id,
            round=round,
            only=only,
            settings=runtime.settings(),
            http=runtime.http_client(),
        )
    except NotFound:
        log.warning("run %s is gone (its experiment was deleted?); nothing to score", run_id)
        return 0
    return len(items)
