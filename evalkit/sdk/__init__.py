"""evalkit's Python SDK: run experiments from your own code.

::

    from evalkit.sdk import run_experiment, evaluator, tracing

    tracing.register(agent="myagent")          # optional: trajectories from your traces

    @evaluator(name="cites_sources")
    def cites_sources(case, run) -> float:
        return 1.0 if "http" in (run.answer or "") else 0.0

    result = run_experiment(dataset="finance", agent="myagent", task=my_task,
                            evaluators=[cites_sources], concurrency=4)
    print(result.url)

See docs/sdk.md.
"""

from evalkit.sdk import tracing
from evalkit.sdk._evaluate import aevaluate_experiment, evaluate_experiment
from evalkit.sdk._evaluators import PythonEvaluator, evaluator
from evalkit.sdk._experiment import arun_experiment, run_experiment
from evalkit.sdk._model import (
    DryRunCase,
    EvalCase,
    EvalRun,
    ExperimentResult,
    Fixture,
    Judge,
    RunResult,
    ScoreItem,
    SdkError,
)

__all__ = [
    "DryRunCase",
    "EvalCase",
    "EvalRun",
    "ExperimentResult",
    "Fixture",
    "Judge",
    "PythonEvaluator",
    "RunResult",
    "ScoreItem",
    "SdkError",
    "aevaluate_experiment",
    "arun_experiment",
    "evaluate_experiment",
    "evaluator",
    "run_experiment",
    "tracing",
]
