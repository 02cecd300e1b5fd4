"""Scoring one run: pick the evaluators its case selects, run them side by side, store what
they give.

Every evaluator's outcome becomes scores, whatever happens: an exception or a timeout is an
error score, never a failed job. Each evaluator's scores are stored as soon as it ends, with
``ON CONFLICT DO NOTHING`` on (run, round, name), and an evaluator that already stored
scores for the run and round is not asked again, so a replayed job (a worker died) costs
no second judge call and changes nothing.

A run the agent failed (``model.runs.agent_failed``: its task raised, its harness reported
it failed) has no answer to judge: every evaluator it selects gets a score skipped with
that reason instead of a verdict, and only the gauges measure it. Summaries count such
runs as failed, never as wrong answers (``scoring/stats.py``).

The judge is skipped for an SDK experiment whose process grades the rubrics itself
(``run_experiment`` recorded its judge on the experiment); otherwise the experiment
records which of the server's judges graded it.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import msgspec

from evalkit.auth.secrets import SecretBox
from evalkit.cases.model import BUILTIN_EVALUATORS, JudgeConfig
from evalkit.config import Settings
from evalkit.db import Conn, Database
from evalkit.errors import EvalkitError
from evalkit.model.judge_alignment import Example
from evalkit.model.runs import agent_failed
from evalkit.scoring import judge, judge_library, remote
from evalkit.scoring.builtins import BUILTINS, EVALUATOR_VERSION, EvaluatorError
from evalkit.scoring.model import RunContext, ScoreItem, ScoreKind, not_judged_reason
from evalkit.store import evaluators as evaluator_store
from evalkit.store import judge_alignment as alignment
from evalkit.store import runs as runs_store
from evalkit.store import scores as store

__all__ = [
    "CONCURRENCY",
    "EVALUATOR_TIMEOUT_SECONDS",
    "Selected",
    "Services",
    "evaluate",
    "identities",
    "score_in_place",
    "score_run",
    "select_evaluators",
    "selector_names",
]

log = logging.getLogger("evalkit.scoring")

CONCURRENCY = 4
"""Evaluators of one run that run at the same time."""
EVALUATOR_TIMEOUT_SECONDS = 900.0
"""A safety net: the longest one evaluator may take. The judge and remote evaluators keep
their own, shorter timeouts (a judge retrying with backoff may take several minutes)."""
MAX_TEXT = 4000
"""Characters kept of an explanation or an error."""


@dataclass(frozen=True)
class Selected:
    """One evaluator a case selects: its key under ``evaluators:`` (``custom.NAME`` for a
    custom one), who it is (``ScoreItem.evaluator``) and its config, as written."""

    key: str
    identity: str
    config: Any
    kind: ScoreKind = "evaluator"

    @property
    def score_name(self) -> str:
        """The name of its score when it fails: its key, NAME for ``custom.NAME``, or
        ``judge.NAME`` for the library judge ``judges.NAME``."""
        if self.key.startswith("judges."):
            return judge_library.SCORE_PREFIX + self.key.removeprefix("judges.")
        return self.key.removeprefix("custom.")


def selector_names() -> tuple[str, ...]:
    """What ``--evaluator`` accepts besides ``custom.NAME``."""
    return (*BUILTIN_EVALUATORS, "judge", "judges", "custom")


def select_evaluators(evaluators: Any, only: list[str] | None = None) -> list[Selected]:
    """The evaluators a case's ``evaluators:`` block turns on (``null`` and ``false`` are
    off), limited to ``only`` when it is given."""
    block = evaluators if isinstance(evaluators, dict) else {}
    chosen: list[Selected] = []
    for name in BUILTIN_EVALUATORS:
        config = block.get(name)
        if config is None or config is False:
            continue
        kind: ScoreKind = "gauge" if name in _GAUGES else "evaluator"
        chosen.append(Selected(name, f"builtin:{name}", config, kind))
    if block.get("judge") is not None:
        chosen.append(Selected("judge", "judge", block["judge"]))
    library = block.get("judges")
    if isinstance(library, dict):
        for name, config in library.items():
            if config is not None and config is not False:
                chosen.append(Selected(f"judges.{name}", f"judge:{name}", config))
    custom = block.get("custom")
    if isinstance(custom, dict):
        for name, config in custom.items():
            chosen.append(Selected(f"custom.{name}", f"remote:{name}", config))
    for name in block:
        if name not in (*BUILTIN_EVALUATORS, "judge", "judges", "custom"):
            chosen.append(Selected(name, "unknown", block[name]))
    if only is None:
        return chosen
    wanted = set(only)
    return [
        s
        for s in chosen
        if s.key in wanted
        or ("custom" in wanted and s.key.startswith("custom."))
        or ("judges" in wanted and s.key.startswith("judges."))
    ]


def identities(only: list[str]) -> tuple[list[str], bool]:
    """The evaluator identities (``ScoreItem.evaluator``) that ``only`` re-runs, and whether
    it re-runs every custom evaluator (``custom``)."""
    found: list[str] = []
    for key in only:
        if key in BUILTIN_EVALUATORS:
            found.append(f"builtin:{key}")
        elif key == "judge":
            found.append("judge")
        elif key.startswith("custom."):
            found.append(f"remote:{key.removeprefix('custom.')}")
        elif key.startswith("judges."):
            found.append(f"judge:{key.removeprefix('judges.')}")
        elif key == "judges":
            found.extend(j.identity for j in judge_library.LIBRARY.values())
    return found, "custom" in only


_GAUGES = frozenset({"latency", "tokens", "cost", "steps", "tool_call_count"})


async def score_run(
    db: Database,
    run_id: int,
    *,
    round: int | None = None,
    only: list[str] | None = None,
    settings: Settings,
    http: httpx.AsyncClient,
    timeout: float = EVALUATOR_TIMEOUT_SECONDS,
    concurrency: int = CONCURRENCY,
) -> list[ScoreItem]:
    """Score run ``run_id`` in ``round`` (None: the experiment's current round) with the
    evaluators its case selects (only those named in ``only``, when given). Returns every
    score of the run in that round, those a previous attempt stored included."""
    async with db.connection() as conn:
        loaded = await store.run_context(conn, run_id, round)
    ctx, round_ = loaded.ctx, loaded.round
    not_judged, todo = _plan(loaded, only)
    computed: list[ScoreItem] = []
    if not_judged:
        async with db.connection() as conn:
            await store.insert_scores(conn, run_id, round_, not_judged)
        computed.extend(not_judged)

    async def save(items: list[ScoreItem]) -> None:
        async with db.connection() as conn:
            await store.insert_scores(conn, run_id, round_, items)

    services = Services(db, settings, http, round=round_)
    computed.extend(
        await evaluate(
            ctx, todo, services=services, save=save, timeout=timeout, concurrency=concurrency
        )
    )
    if not loaded.stored and len({i.name for i in computed}) == len(computed):
        return computed  # nothing was there before: what was computed is what is stored
    async with db.connection() as conn:
        return [store.as_item(s) for s in await store.run_scores(conn, run_id, round_)]


async def evaluate(
    ctx: RunContext,
    selected: list[Selected],
    *,
    services: Services,
    save: Callable[[list[ScoreItem]], Awaitable[None]],
    timeout: float = EVALUATOR_TIMEOUT_SECONDS,
    concurrency: int = CONCURRENCY,
) -> list[ScoreItem]:
    """Run the selected evaluators on ``ctx`` and hand each one's scores to ``save`` as
    soon as it ends (a run's scores or a monitored session's). Returns every score given."""
    limit = asyncio.Semaphore(max(concurrency, 1))
    computed: list[ScoreItem] = []

    async def local(chosen: list[Selected]) -> None:
        # Built-ins take microseconds: run them one after the other, store them at once.
        items = await _builtin_scores(chosen, ctx, services, timeout)
        await save(items)
        computed.extend(items)

    async def one(chosen: Selected) -> None:
        # The judge and remote evaluators: side by side, each stored as soon as it ends,
        # so a replay after a crash does not ask again one that had answered.
        async with limit:
            items = await _guarded(chosen, ctx, services, timeout)
        await save(items)
        computed.extend(items)

    builtins = [s for s in selected if s.key in BUILTINS]
    others = [s for s in selected if s.key not in BUILTINS]
    await asyncio.gather(*([local(builtins)] if builtins else []), *(one(s) for s in others))
    return computed


def _plan(loaded: store.Loaded, only: list[str] | None) -> tuple[list[ScoreItem], list[Selected]]:
    """What scoring the run in its round takes: the scores it gets without running anything
    (a run the agent failed: each evaluator skipped, saying why), and the evaluators to run
    (those that stored no score in the round yet)."""
    ctx = loaded.ctx
    todo = [
        s
        for s in select_evaluators(ctx.case.get("evaluators"), only)
        if s.identity not in loaded.stored
    ]
    if loaded.driver == "sdk" and loaded.judged_by_sdk:
        # run_experiment said its process grades the rubrics (with its judge and key): it
        # posts the judge's score itself, so grading here too would give a second verdict.
        todo = [s for s in todo if s.key != "judge"]
    if agent_failed(ctx.harness_status, ctx.timed_out):
        not_judged = [_not_judged(s, ctx) for s in todo if s.kind == "evaluator"]
        return not_judged, [s for s in todo if s.kind == "gauge"]
    return [], todo


async def _builtin_scores(
    selected: list[Selected], ctx: RunContext, services: Services, timeout: float
) -> list[ScoreItem]:
    return _unique([i for s in selected for i in await _guarded(s, ctx, services, timeout)])


# --------------------------------------------------------------------------- in place


async def score_in_place(conn: Conn, run_ids: list[int]) -> dict[int, RunContext]:
    """Score, on ``conn`` and in its transaction, each run among ``run_ids`` (in scoring, in
    their experiments' current round) whose evaluators call nothing outside evalkit: the
    built-ins and gauges, a custom evaluator that the agent's workspace has no remote
    evaluator for (its score is the Python evaluator's, already stored, or a skip), a judge
    the SDK's process grades, and any evaluator a run the agent failed skips. Returns the
    context of each run scored (what its step to done or failed is built from); the others
    need the server's scoring job.

    The scores are those :func:`score_run` stores for the same run: the same plan, the same
    evaluators, the same first-stored-wins order (``tests/integration/test_sdk_in_place.py``
    compares the two)."""
    loaded = await store.run_contexts(conn, run_ids)
    plans = {found.ctx.run_id: (found, *_plan(found, None)) for found in loaded}
    remote = await _remote_names(
        conn, [(f.ctx.workspace_id, todo) for f, _, todo in plans.values()]
    )
    scored: dict[int, RunContext] = {}
    by_round: dict[int, dict[int, list[ScoreItem]]] = {}
    for run_id, (found, not_judged, todo) in plans.items():
        names = remote.get(found.ctx.workspace_id, set())
        if not all(_calls_nothing_outside(s, names) for s in todo):
            continue
        items = list(not_judged)
        items += await _builtin_scores(
            [s for s in todo if s.key in BUILTINS], found.ctx, _OFFLINE, EVALUATOR_TIMEOUT_SECONDS
        )
        for selected in todo:
            if selected.key not in BUILTINS:
                items += await _guarded(selected, found.ctx, _OFFLINE, EVALUATOR_TIMEOUT_SECONDS)
        by_round.setdefault(found.round, {})[run_id] = _first_of_each_name(items)
        scored[run_id] = found.ctx
    for round_, items_by_run in by_round.items():
        await store.insert_scores_of_runs(conn, round_, items_by_run)
    return scored


def _calls_nothing_outside(selected: Selected, remote_names: set[str]) -> bool:
    """Whether running ``selected`` stays inside evalkit: a built-in; a custom evaluator the
    workspace has no remote evaluator for (a skip); a name evalkit does not know (an error
    score). The judge and the library's judges call a model; a remote evaluator, its URL."""
    if selected.key in BUILTINS or selected.identity == "unknown":
        return True
    if selected.key.startswith("custom."):
        return selected.key.removeprefix("custom.") not in remote_names
    if selected.key.startswith("judges."):
        return selected.key.removeprefix("judges.") not in judge_library.LIBRARY
    return False


async def _remote_names(
    conn: Conn, wanted: list[tuple[int, list[Selected]]]
) -> dict[int, set[str]]:
    """Which of the custom evaluators in ``wanted`` (by workspace) are remote evaluators
    of that workspace."""
    names: dict[int, set[str]] = {}
    for workspace_id, todo in wanted:
        for s in todo:
            if s.key.startswith("custom."):
                names.setdefault(workspace_id, set()).add(s.key.removeprefix("custom."))
    return {
        workspace_id: await evaluator_store.evaluator_names(conn, workspace_id, sorted(found))
        for workspace_id, found in names.items()
    }


def _first_of_each_name(items: list[ScoreItem]) -> list[ScoreItem]:
    """The first score of each name, as inserting them one after the other keeps it."""
    first: dict[str, ScoreItem] = {}
    for item in items:
        first.setdefault(item.name, item)
    return list(first.values())


async def _guarded(
    selected: Selected, ctx: RunContext, services: Services, timeout: float
) -> list[ScoreItem]:
    """Run one evaluator; whatever happens, scores come back (an error score at worst)."""
    try:
        call = _call_for(selected, services)
        items = await asyncio.wait_for(call(ctx, selected.config), timeout)
    except TimeoutError:
        return [_error(selected, f"{selected.key} did not finish within {timeout:g} s")]
    except EvaluatorError as exc:
        return [_error(selected, f"{selected.key}: {exc}")]
    except EvalkitError as exc:
        return [_error(selected, f"{selected.key}: {exc.message}")]
    except Exception as exc:
        log.exception("run %s: evaluator %s raised", ctx.run_id, selected.key)
        return [_error(selected, f"{selected.key} failed: {type(exc).__name__}: {exc}")]
    if not isinstance(items, list) or not items:
        return [_error(selected, f"{selected.key} gave no scores")]
    return _unique([_checked(selected, item) for item in items])


Call = Callable[[RunContext, Any], Awaitable[list[ScoreItem]]]


class Services:
    """What the judge and remote evaluators need, loaded once per scored run and only when
    a case selects them: the default judge and the agent's workspace's remote evaluators.
    ``record_judges``: note on the run's experiment which judge graded it (a monitor's
    sessions belong to no experiment). ``round``: the experiment's scoring round (None for
    a monitor), which picks the judges' few-shot examples."""

    def __init__(
        self,
        db: Database,
        settings: Settings,
        http: httpx.AsyncClient,
        *,
        record_judges: bool = True,
        round: int | None = None,
    ) -> None:
        self.db, self.settings, self.http = db, settings, http
        self.record_judges, self.round = record_judges, round
        self._lock = asyncio.Lock()
        self._judges: dict[str | None, Any] = {}
        self._remotes: dict[str, Any] | None = None

    def _box(self) -> Any:
        return SecretBox(self.settings.encryption_key)

    async def judge(self, model: str | None) -> Any:
        async with self._lock:
            if model not in self._judges:
                async with self.db.connection() as conn:
                    self._judges[model] = await judge.load_judge(conn, self._box(), model)
            return self._judges[model]

    async def remotes(self, workspace_id: int) -> dict[str, Any]:
        async with self._lock:
            if self._remotes is None:
                async with self.db.connection() as conn:
                    self._remotes = await remote.load_evaluators(conn, self._box(), workspace_id)
            return self._remotes

    async def examples(self, experiment_id: int, score: str) -> tuple[Example, ...]:
        """The few-shot examples the judge behind ``score`` shows: in a trial round (below
        zero) its proposal's, else those the experiment's workspace accepted (both made by
        ``evalkit judge align``); none outside an experiment's round (a monitor)."""
        if self.round is None:
            return ()
        async with self.db.connection() as conn:
            if self.round < 0:
                return await alignment.trial_examples(conn, experiment_id, self.round, score)
            return await alignment.accepted_examples(conn, experiment_id, score)

    async def record_judge(self, experiment_id: int, setup: Any, prompt_hash: str | None) -> None:
        """The experiment shows which judge graded it (``GET /api/experiments/{id}``); a
        trial round tries a proposal and is not the experiment's grading."""
        if not self.record_judges or (self.round is not None and self.round < 0):
            return
        async with self.db.connection() as conn:
            await runs_store.record_server_judge(
                conn,
                experiment_id,
                provider=setup.provider,
                model=setup.model,
                base_url=setup.base_url,
                prompt_hash=prompt_hash,
            )


class _Offline(Services):
    """What in-place scoring gives the evaluators it runs: no remote evaluators (it runs a
    custom one only when the workspace has none of its name) and no judge (it never runs
    one)."""

    def __init__(self) -> None:
        pass

    async def judge(self, model: str | None) -> Any:
        raise AssertionError("in-place scoring never runs the judge")

    async def remotes(self, workspace_id: int) -> dict[str, Any]:
        return {}


_OFFLINE = _Offline()


def _call_for(selected: Selected, services: Services) -> Call:
    if selected.key in BUILTINS:
        return BUILTINS[selected.key]
    if selected.key == "judge":
        return _judge_call(services)
    if selected.key.startswith("custom."):
        return _remote_call(selected.key.removeprefix("custom."), services)
    if selected.key.startswith("judges."):
        spec = judge_library.LIBRARY.get(selected.key.removeprefix("judges."))
        if spec is not None:
            return _library_call(spec, services)
    raise EvaluatorError(
        f"`{selected.key}` is not an evaluator evalkit knows; fix the case's `evaluators:` "
        "block (`evalkit lint` names the problem)"
    )


def _judge_call(services: Services) -> Call:
    async def grade(ctx: RunContext, config: Any) -> list[ScoreItem]:
        try:
            cfg = msgspec.convert(config, JudgeConfig)
        except msgspec.ValidationError as exc:
            raise EvaluatorError(f"the config is not usable: {exc}") from None
        setup = await services.judge(cfg.model)
        if setup is None:
            return [judge.no_judge_item(cfg.model)]
        examples = await services.examples(ctx.experiment_id, judge.SCORE_NAME)
        items: list[ScoreItem] = await judge.grade(
            ctx, cfg, judge=setup, http=services.http, examples=examples
        )
        hashes = [i.prompt_hash for i in items if i.prompt_hash]
        await services.record_judge(
            ctx.experiment_id, setup, hashes[0] if hashes else judge.PROMPT_HASH
        )
        return items

    return grade


def _library_call(spec: judge_library.LibraryJudge, services: Services) -> Call:
    async def grade(ctx: RunContext, config: Any) -> list[ScoreItem]:
        reason = judge_library.gate(spec, ctx)
        if reason is not None:
            return [judge_library.skipped_item(spec, reason)]
        model = judge_library.model_of(config)
        setup = await services.judge(model)
        if setup is None:
            return [judge_library.no_judge_item(spec, model)]
        examples = await services.examples(ctx.experiment_id, spec.score_name)
        items = await judge_library.grade(
            spec, ctx, model=model, judge_setup=setup, http=services.http, examples=examples
        )
        hashes = [i.prompt_hash for i in items if i.prompt_hash]
        await services.record_judge(
            ctx.experiment_id, setup, hashes[0] if hashes else spec.prompt_hash
        )
        return items

    return grade


def _remote_call(name: str, services: Services) -> Call:
    async def evaluate(ctx: RunContext, config: Any) -> list[ScoreItem]:
        found = (await services.remotes(ctx.workspace_id)).get(name)
        if found is None:
            return [
                ScoreItem(
                    name=name,
                    value=None,
                    skipped=(
                        f"the agent's workspace has no remote evaluator named {name!r} (a Python "
                        "evaluator is run by the SDK; a remote one is registered with "
                        "`evalkit evaluators create`)"
                    ),
                    evaluator=f"remote:{name}",
                )
            ]
        items: list[ScoreItem] = await remote.evaluate(
            ctx, name, config, evaluator=found, http=services.http
        )
        return items

    return evaluate


def _not_judged(selected: Selected, ctx: RunContext) -> ScoreItem:
    """The score an evaluator gives a run the agent failed: skipped, saying so."""
    return ScoreItem(
        name=selected.score_name,
        value=None,
        kind=selected.kind,
        skipped=not_judged_reason(ctx.run_id),
        evaluator=selected.identity,
        evaluator_version=EVALUATOR_VERSION if selected.identity.startswith("builtin:") else None,
    )


def _error(selected: Selected, message: str) -> ScoreItem:
    return ScoreItem(
        name=selected.score_name,
        value=None,
        kind=selected.kind,
        error=_clip(message),
        evaluator=selected.identity,
        evaluator_version=EVALUATOR_VERSION if selected.identity.startswith("builtin:") else None,
    )


def _checked(selected: Selected, item: Any) -> ScoreItem:
    """A score the database will take: a value in [0, 1] or None, a known kind, a name,
    JSON for ``raw``; anything else becomes an error score saying what was wrong."""
    if not isinstance(item, ScoreItem):
        return _error(selected, f"{selected.key} gave {type(item).__name__}, not a ScoreItem")
    problem = None
    if not item.name:
        problem = "a score with no name"
    elif item.kind not in ("evaluator", "gauge"):
        problem = f"score {item.name!r} of kind {item.kind!r}"
    elif item.value is not None and not (
        isinstance(item.value, int | float) and math.isfinite(item.value) and 0 <= item.value <= 1
    ):
        problem = f"score {item.name!r} with value {item.value!r}, outside [0, 1]"
    else:
        try:
            msgspec.json.encode(item.raw)
        except (TypeError, msgspec.EncodeError):
            problem = f"score {item.name!r} with a raw value that is not JSON"
    if problem is not None:
        broken = _error(selected, f"{selected.key} gave {problem}")
        return msgspec.structs.replace(broken, name=item.name or selected.score_name)
    return msgspec.structs.replace(
        item,
        value=None if item.value is None else float(item.value),
        explanation=_clip(item.explanation),
        error=_clip(item.error),
        skipped=_clip(item.skipped),
    )


def _unique(items: list[ScoreItem]) -> list[ScoreItem]:
    seen: set[str] = set()
    kept = []
    for item in items:
        if item.name in seen:
            log.warning(
                "evaluator %s gave score %r twice; kept the first", item.evaluator, item.name
            )
            continue
        seen.add(item.name)
        kept.append(item)
    return kept


def _clip(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_TEXT:
        return text
    return text[: MAX_TEXT - 3] + "..."
