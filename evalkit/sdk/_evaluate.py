"""evaluate_experiment: re-score an SDK experiment from the script that holds its Python
evaluators."""

from __future__ import annotations

from typing import Any


def evaluate_experiment(**options: Any) -> Any:
    raise NotImplementedError
