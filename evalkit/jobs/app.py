"""The procrastinate application. Tasks register on ``app`` at import of their modules
(``import_paths``); processes bind it to a database with :func:`bound_app`."""

from __future__ import annotations

import procrastinate

TASK_MODULES = ["evalkit.jobs.maintenance"]

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(),
    import_paths=TASK_MODULES,
    worker_defaults={"delete_jobs": "successful"},
    periodic_defaults={"max_delay": 600},
)


def bound_app(url: str, *, max_size: int = 10) -> procrastinate.App:
    """The app with a connector to ``url`` (the worker needs the async connector)."""
    for module in TASK_MODULES:
        __import__(module)
    connector = procrastinate.PsycopgConnector(conninfo=url, min_size=1, max_size=max_size)
    return app.with_connector(connector)
