"""The LLM judge of an SDK experiment, called from the SDK's process: the server's default
judge (its base URL and model) or the one given to run_experiment, with the key from
``credentials.llm_providers`` in evalkit.yaml, keyed by the judge's base URL.

The experiment records the judge when it is created, so the server's scoring leaves the
rubrics to this process (traced runs included: they are graded once the server has built
their trajectory), and a resumed or re-scored experiment is graded by the same judge."""

from __future__ import annotations

from typing import Any

import httpx
import msgspec

from evalkit.model.harness import Provides
from evalkit.model.judges import JudgeDefault
from evalkit.model.runs import Experiment, ExperimentJudgeCreate
from evalkit.model.sdk import PythonScore
from evalkit.sdk._link import SdkLink
from evalkit.sdk._model import Judge, SdkError


class SdkJudge:
    """A judge set up once per experiment; :meth:`grade` gives the run's ``judge`` score."""

    def __init__(self, setup: Any, http: httpx.AsyncClient, provider: str | None = None) -> None:
        self.setup = setup
        self.http = http
        self.provider = provider
        """The server's LLM provider when this is its default judge; None for a Judge."""

    @property
    def name(self) -> str:
        """As the experiment shows it: ``provider/model``, or ``sdk:model`` for a Judge."""
        if self.provider:
            return f"{self.provider}/{self.setup.model}"
        return f"sdk:{self.setup.model}"

    @property
    def describe(self) -> str:
        keyed = "with a key from evalkit.yaml" if self.setup.api_key else "with no key"
        return f"{self.name}: {self.setup.model} at {self.setup.base_url} ({keyed})"

    def record(self) -> ExperimentJudgeCreate:
        """What the new experiment records, so the server leaves its rubrics to us."""
        from evalkit.scoring.judge import PROMPT_HASH

        return ExperimentJudgeCreate(
            provider=self.provider,
            model=self.setup.model,
            base_url=self.setup.base_url,
            prompt_hash=PROMPT_HASH,
        )

    async def grade(
        self,
        *,
        run_id: int,
        experiment_id: int,
        case_id: str,
        repetition: int,
        content: dict[str, Any],
        answer: str | None,
        output: Any,
        trajectory: dict[str, Any] | None,
        model: str | None,
    ) -> list[PythonScore]:
        from evalkit.atif.model import Trajectory
        from evalkit.cases.model import JudgeConfig
        from evalkit.scoring import judge as server_judge
        from evalkit.scoring.model import RunContext

        block = (content.get("evaluators") or {}).get("judge")
        if block is None:
            return []
        try:
            config = msgspec.convert(block, JudgeConfig)
        except msgspec.ValidationError as exc:
            return [_error(f"judge: the config is not usable: {exc}", self.setup.model)]
        setup = self.setup
        if config.model:
            setup = type(setup)(**{**_fields(setup), "model": config.model})
        try:  # validated by the SDK (valid_trajectory)
            typed = None if trajectory is None else msgspec.convert(trajectory, Trajectory)
        except (msgspec.ValidationError, ValueError):
            typed = None
        ctx = RunContext(
            run_id=run_id,
            experiment_id=experiment_id,
            workspace_id=0,
            case_id=case_id,
            repetition=repetition,
            case=content,
            answer=answer,
            output=output,
            trajectory=typed,
            trajectory_valid=typed is not None,
            provides=Provides(trajectory=True, tool_calls=True, token_usage=True),
            model=model,
            state="scoring",
        )
        items = await server_judge.grade(ctx, config, judge=setup, http=self.http)
        return [
            PythonScore(
                evaluator="judge",
                identity="judge",
                name=item.name,
                value=item.value,
                kind=item.kind,
                explanation=item.explanation,
                error=item.error,
                skipped=item.skipped,
                judge_model=item.judge_model,
                prompt_hash=item.prompt_hash,
                evaluator_version=item.evaluator_version,
                raw={"judge_base_url": setup.base_url},
            )
            for item in items
        ]


def _fields(setup: Any) -> dict[str, Any]:
    return {name: getattr(setup, name) for name in setup.__slots__}


def _error(message: str, model: str | None) -> PythonScore:
    from evalkit.scoring import judge as server_judge

    return PythonScore(
        evaluator="judge",
        identity="judge",
        name=server_judge.SCORE_NAME,
        value=None,
        error=message,
        judge_model=model,
        prompt_hash=server_judge.PROMPT_HASH,
        evaluator_version=server_judge.JUDGE_VERSION,
    )


async def load_judge(
    link: SdkLink, judge: Judge | None, http: httpx.AsyncClient
) -> SdkJudge | None:
    """The judge of a new experiment, or None when none is given and the server has no
    default judge (the server then records why the rubrics were not graded)."""
    if judge is not None:
        return SdkJudge(_setup(judge.base_url, judge.model, judge.timeout), http)
    default = await link.get("/api/judge-default", JudgeDefault)
    if default.base_url is None or default.model is None:
        return None
    return SdkJudge(_setup(default.base_url, default.model, 120.0), http, default.provider)


def recorded_judge(
    experiment: Experiment, judge: Judge | None, http: httpx.AsyncClient
) -> SdkJudge | None:
    """The judge that grades an experiment started earlier (``resume=``,
    evaluate_experiment): the one it recorded when the SDK's process grades its rubrics,
    else None (the server's judge grades them). A ``judge`` that is not the recorded one
    is refused: one experiment, one judge."""
    record = experiment.judge
    if record is None or record.by != "sdk":
        if judge is not None:
            raise SdkError(
                f"experiment {experiment.id} was started without a judge of this process, so "
                "the server's default judge grades its rubrics; drop judge= to go on with it, "
                "or start a new experiment with this judge"
            )
        return None
    assert record.base_url is not None and record.model is not None
    if judge is not None and (judge.base_url, judge.model) != (record.base_url, record.model):
        raise SdkError(
            f"experiment {experiment.id} is graded by {record.name} at {record.base_url}; drop "
            "judge= (the recorded judge goes on), or start a new experiment with this judge"
        )
    timeout = judge.timeout if judge is not None else 120.0
    provider = None if record.name.startswith("sdk:") else record.name.split("/", 1)[0]
    return SdkJudge(_setup(record.base_url, record.model, timeout), http, provider)


def _setup(base_url: str, model: str, timeout: float) -> Any:
    from evalkit.scoring.judge import JudgeSetup
    from evalkit.sdk._link import load_project_or_none

    project = load_project_or_none()
    key = project.api_key_for(base_url) if project is not None else None
    return JudgeSetup(provider="sdk", base_url=base_url, model=model, api_key=key, timeout=timeout)
