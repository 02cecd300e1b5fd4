"""The LLM judge of an SDK experiment, called from the SDK's process: the server's default
judge (its base URL and model) or the one given to run_experiment, with the key from
``credentials.llm_providers`` in evalkit.yaml, keyed by the judge's base URL."""

from __future__ import annotations

from typing import Any

import httpx
import msgspec

from evalkit.model.harness import Provides
from evalkit.model.judges import JudgeDefault
from evalkit.model.sdk import PythonScore
from evalkit.sdk._link import SdkLink
from evalkit.sdk._model import Judge, SdkError


class SdkJudge:
    """A judge set up once per experiment; :meth:`grade` gives the run's ``judge`` score."""

    def __init__(self, setup: Any, http: httpx.AsyncClient) -> None:
        self.setup = setup
        self.http = http

    @property
    def describe(self) -> str:
        keyed = "with a key from evalkit.yaml" if self.setup.api_key else "with no key"
        return f"{self.setup.model} at {self.setup.base_url} ({keyed})"

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
        ctx = RunContext(
            run_id=run_id,
            experiment_id=experiment_id,
            workspace_id=0,
            case_id=case_id,
            repetition=repetition,
            case=content,
            answer=answer,
            output=output,
            trajectory=trajectory,
            trajectory_valid=trajectory is not None,
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
    """The judge of this experiment, or None when none is given and the server has no
    default judge (the server then records why the rubrics were not graded)."""
    from evalkit.cases import ProjectError, ProjectNotFound, load_project
    from evalkit.scoring.judge import JudgeSetup

    if judge is not None:
        base_url, model, timeout = judge.base_url, judge.model, judge.timeout
    else:
        default = await link.get("/api/judge-default", JudgeDefault)
        if default.base_url is None or default.model is None:
            return None
        base_url, model, timeout = default.base_url, default.model, 120.0
    try:
        project = load_project()
    except ProjectNotFound:
        project = None
    except ProjectError as exc:
        raise SdkError(f"evalkit.yaml has errors: {exc}") from None
    key = project.api_key_for(base_url) if project is not None else None
    setup = JudgeSetup(provider="sdk", base_url=base_url, model=model, api_key=key, timeout=timeout)
    return SdkJudge(setup, http)
