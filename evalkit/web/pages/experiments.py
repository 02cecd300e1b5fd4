"""Experiments: the list (filters, start form, score trend of a dataset), one experiment
(scores with intervals and pass@k, charts, its runs), two side by side, and schedules.

Every number comes from an API handler called as the page's user (``use``), the same
handler the CLI's ``experiments scores`` and ``compare`` read, so a page shows the CLI's
numbers. The statistics (the summary, and the comparison with its paired bootstrap) are
kept in the server's memory under a key that changes whenever a score is added. A page of
experiments of up to ``INLINE_RUNS`` runs waits for them, so it is complete on its first
view (two 10,000-run experiments take well under a second); a page of more runs waits a
few seconds, then renders without them (the runs and cases are there), says what it is
computing, and reloads itself until they are in."""

from __future__ import annotations

import asyncio
import math
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Any
from urllib.parse import urlencode

from starlette.responses import RedirectResponse, Response

from evalkit.edge.routes import agents, datasets, experiments, labels, run_list, schedules, stats
from evalkit.edge.routes import workspaces as workspace_routes
from evalkit.errors import BadRequest
from evalkit.model import run_list as wire
from evalkit.model.runs import RUN_STATES, ExperimentCreate
from evalkit.model.schedules import ScheduleCreate
from evalkit.scoring.stats import BOOTSTRAP_RESAMPLES
from evalkit.web import charts
from evalkit.web.page import Page, WebCall, form_struct, use

PAGE_SIZE = 50
TREND_SIZE = 30
INLINE_RUNS = 40_000
"""Runs (of both experiments, for a comparison) up to which a page waits for its
statistics however long they take: for two experiments of 10,000 runs they take a few
hundred milliseconds (benchmarks/compare_page.py)."""
COMPARE_WAIT = 3.0
"""Seconds a compare page of more runs waits for the statistics before it renders without
them (they go on being computed, and the page reloads itself until they are in)."""
SUMMARY_WAIT = 1.0
"""The same for the score summary of an experiment of more runs."""
REFRESH_SECONDS = "2"
"""How often a page still computing its statistics reloads itself (the Refresh header)."""
REGRESSIONS_SHOWN = 100
"""Regressions listed on a compare page (the cases table pages through every one)."""


class Memo:
    """Answers of slow reads by key: one computation per key however many pages ask,
    the newest ``size`` answers kept. A key must change whenever the answer would."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._tasks: OrderedDict[Hashable, asyncio.Future[Any]] = OrderedDict()
        self._latest: OrderedDict[Hashable, Any] = OrderedDict()

    async def get(
        self,
        key: Hashable,
        make: Callable[[], Awaitable[Any]],
        wait: float | None = None,
        family: Hashable = None,
    ) -> Any:
        """The answer for ``key``, computed by ``make`` once; None when ``wait`` seconds
        pass first (the computation goes on for the next caller). ``family`` names what
        the key is a version of: ``latest(family)`` is then its newest finished answer."""
        task = self._tasks.get(key)
        if task is None or (task.done() and (task.cancelled() or task.exception())):
            task = asyncio.ensure_future(make())
            task.add_done_callback(self._forget_failure(key))
            if family is not None:
                task.add_done_callback(self._remember(family))
            self._tasks[key] = task
            while len(self._tasks) > self.size:
                self._tasks.popitem(last=False)
        self._tasks.move_to_end(key)
        return await waited(task, wait)

    def start(self, make: Callable[[], Awaitable[Any]], family: Hashable) -> asyncio.Future[Any]:
        """``make`` started before its key is known (``keep`` files it under one); its
        answer becomes ``latest(family)`` when it is done."""
        task = asyncio.ensure_future(make())
        task.add_done_callback(self._remember(family))
        return task

    def keep(self, key: Hashable, task: asyncio.Future[Any]) -> None:
        """File a ``start``ed task under ``key``, unless a task for it is kept already."""
        kept = self._tasks.get(key)
        if kept is None or (kept.done() and (kept.cancelled() or kept.exception())):
            task.add_done_callback(self._forget_failure(key))
            self._tasks[key] = task
            while len(self._tasks) > self.size:
                self._tasks.popitem(last=False)

    def latest(self, family: Hashable) -> Any:
        """The newest answer finished for ``family`` (another version's), or None."""
        return self._latest.get(family)

    def _remember(self, family: Hashable) -> Callable[[asyncio.Future[Any]], None]:
        def done(task: asyncio.Future[Any]) -> None:
            # Reading the exception marks it seen: a page may have stopped waiting.
            if not task.cancelled() and task.exception() is None:
                self._latest[family] = task.result()
                self._latest.move_to_end(family)
                while len(self._latest) > self.size:
                    self._latest.popitem(last=False)

        return done

    def _forget_failure(self, key: Hashable) -> Callable[[asyncio.Future[Any]], None]:
        def done(task: asyncio.Future[Any]) -> None:
            failed = task.cancelled() or task.exception() is not None
            if failed and self._tasks.get(key) is task:
                del self._tasks[key]

        return done


async def waited(task: asyncio.Future[Any], wait: float | None) -> Any:
    """The task's answer; None when ``wait`` seconds pass first (it goes on, shielded)."""
    if wait is None:
        return await asyncio.shield(task)
    try:
        return await asyncio.wait_for(asyncio.shield(task), wait)
    except TimeoutError:
        return None


def memo(call: WebCall) -> Memo:
    """The app's Memo (one per server: ids and keys mean nothing across databases)."""
    state = call.request.app.state
    if getattr(state, "web_memo", None) is None:
        state.web_memo = Memo()
    return state.web_memo  # type: ignore[no-any-return]


class Fmt:
    """Number formats the templates share (``fmt.pct(x)``); None shows as a dash."""

    @staticmethod
    def pct(value: float | None) -> str:
        return "—" if value is None else f"{value * 100:.1f}%"

    @staticmethod
    def num(value: float | None) -> str:
        return "—" if value is None else charts.number(value)

    @staticmethod
    def score(value: float | None) -> str:
        return "—" if value is None else f"{value:.3f}"

    @staticmethod
    def secs(value: float | None) -> str:
        if value is None:
            return "—"
        return f"{value:.2f} s" if abs(value) < 100 else f"{value:.0f} s"

    @staticmethod
    def money(value: float | None) -> str:
        return "—" if value is None else money(value)

    @staticmethod
    def measure(name: str, value: float | None) -> str:
        """A gauge's measurement in its unit: cost in USD, latency in seconds."""
        if value is None:
            return "—"
        if name == "cost":
            return money(value)
        if name == "latency":
            return Fmt.secs(value)
        return charts.number(value)

    @staticmethod
    def p(value: float | None) -> str:
        if value is None:
            return "—"
        return "< 0.001" if value < 0.001 else f"{value:.3f}"


FMT = Fmt()


def _query(call: WebCall, *names: str) -> dict[str, str]:
    q = call.request.query_params
    return {name: q[name] for name in names if q.get(name)}


def pager(
    total: int,
    offset: int,
    limit: int,
    base: dict[str, str],
    anchor: str = "",
    param: str = "offset",
) -> dict[str, Any]:
    """Links to the previous and next pages, keeping the other query parameters."""

    def link(at: int) -> str:
        return "?" + urlencode({**base, param: str(at)} if at else base) + anchor

    shown_to = min(offset + limit, total)
    return {
        "total": total,
        "first": offset + 1 if total else 0,
        "last": shown_to,
        "prev": link(max(offset - limit, 0)) if offset > 0 else None,
        "next": link(offset + limit) if offset + limit < total else None,
    }


# --------------------------------------------------------------------------- the list


async def experiments_page(call: WebCall) -> Response:
    filters = _query(call, "workspace", "dataset", "agent", "status")
    if "@" not in filters.get("dataset", "@") and "workspace" in filters:
        filters["dataset"] = f"{filters['dataset']}@{filters['workspace']}"
    offset = call.request.query_params.get("offset") or "0"
    found: wire.ExperimentPage = await use(
        call,
        run_list.experiments_page,
        query={**filters, "offset": offset, "limit": PAGE_SIZE},
    )
    trend, trend_count = None, 0
    if "dataset" in filters:
        latest = found
        if found.offset:
            latest = await use(
                call, run_list.experiments_page, query={**filters, "limit": TREND_SIZE}
            )
        shown = latest.experiments[:TREND_SIZE]
        trend, trend_count = trend_charts(shown), len(shown)
    choices = await _choices(call)
    return call.render(
        "experiments.html",
        fmt=FMT,
        page=found,
        filters=filters,
        trend=trend,
        trend_count=trend_count,
        pager=pager(found.total, found.offset, found.limit, filters),
        **choices,
    )


def trend_charts(newest_first: list[wire.ExperimentBrief]) -> list[dict[str, Any]]:
    """One small line chart per score name: its mean in each experiment, oldest first."""
    ordered = list(reversed(newest_first))
    names: dict[str, str] = {}
    for e in ordered:
        for s in e.scores:
            names.setdefault(s.name, s.kind)
    drawn = []
    for name, kind in sorted(names.items(), key=lambda item: (item[1] == "gauge", item[0])):
        samples = []
        for e in ordered:
            found = next((s for s in e.scores if s.name == name), None)
            value = (
                None if found is None else (found.mean if kind == "evaluator" else found.raw_mean)
            )
            samples.append(charts.Sample(f"#{e.id}", value, f"/experiments/{e.id}", note=e.agent))
        if kind == "evaluator":
            chart = charts.line(samples, what=f"mean {name}", low=0.0, high=1.0)
        else:
            fmt = {"cost": money, "latency": _short_secs}.get(name, charts.number)
            chart = charts.line(samples, what=f"mean {name} (measured)", fmt=fmt)
        drawn.append({"name": name, "kind": kind, "chart": chart})
    return drawn


async def _choices(call: WebCall) -> dict[str, Any]:
    """What the filters and the start form offer: workspaces, datasets, agents, and which
    of them can start an experiment: the server drives what the form starts, so any
    dataset with a shared Harness API agent (anyone may start those, `anyone-runs-shared`;
    the experiment lands in the dataset's workspace, or the user's own for a personal
    dataset). A schedule needs write access where it lives, so its form offers the
    datasets whose experiments land in a workspace the user writes to."""
    spaces, all_datasets, all_agents = await asyncio.gather(
        use(call, workspace_routes.workspaces_list),
        use(call, datasets.datasets_list_all),
        use(call, agents.agents_list_all),
    )
    kinds = {ws.name: ws for ws in spaces}
    shared_agents = [
        a
        for a in all_agents
        if a.kind == "harness" and kinds.get(a.workspace) and kinds[a.workspace].kind == "shared"
    ]
    schedulable = [
        d
        for d in all_datasets
        if kinds.get(d.workspace)
        and (kinds[d.workspace].writable or kinds[d.workspace].kind == "personal")
    ]
    return {
        "workspaces": spaces,
        "datasets": all_datasets,
        "agents": all_agents,
        "start_datasets": all_datasets,
        "schedule_datasets": schedulable,
        "start_agents": shared_agents,
    }


async def experiment_start(call: WebCall) -> Response:
    form = await call.form()
    fields = ("dataset", "agent", "split", "model", "repetitions")
    data = {k: str(form[k]).strip() for k in fields if str(form.get(k, "")).strip()}
    body = form_struct(ExperimentCreate, data)
    created = await use(call, experiments.experiments_create, body=body)
    return RedirectResponse(f"/experiments/{created.id}", 303)


# --------------------------------------------------------------------------- one experiment


async def experiment_page(call: WebCall) -> Response:
    experiment_id = call.param("experiment")
    params = {"experiment": experiment_id}
    filters = _query(call, "state", "tag", "score", "below", "case")
    offset = call.request.query_params.get("offset") or "0"
    page: wire.RunPage = await use(
        call,
        run_list.experiment_runs,
        params=params,
        query={**filters, "offset": offset, "limit": PAGE_SIZE},
    )
    e = page.experiment
    summary, drawn, same_dataset = await asyncio.gather(
        memo(call).get(
            ("scores", e.id, page.score_version),
            lambda: use(call, stats.experiment_scores, params=params),
            wait=None if e.runs <= INLINE_RUNS else SUMMARY_WAIT,
            family=("scores", e.id),
        ),
        memo(call).get(
            ("charts", e.id, page.score_version, tuple(sorted(e.by_state.items()))),
            lambda: use(call, run_list.experiment_charts, params=params),
        ),
        use(
            call,
            run_list.experiments_page,
            query={"dataset": e.dataset, "limit": 100, "scores": "0"},
        ),
    )
    others = [x for x in same_dataset.experiments if x.id != e.id]
    agreement = await use(call, labels.experiment_agreement, params=params)
    queue = await use(call, labels.label_queue, params=params, query={"limit": 1})
    stale = False
    if summary is None:  # not ready: an older summary of it, while scores come in
        summary = memo(call).latest(("scores", e.id))
        stale = summary is not None
    if summary is not None:
        evaluators = [s.name for s in summary.scores if s.kind == "evaluator"]
    else:
        seen = (s.name for r in page.runs for s in r.scores if s.kind == "evaluator")
        evaluators = sorted(set(seen))
    response = call.render(
        "experiment.html",
        fmt=FMT,
        e=e,
        page=page,
        summary=summary,
        stale=stale,
        evaluators=evaluators,
        filters=filters,
        pager=pager(page.total, page.offset, page.limit, filters, "#runs"),
        histograms=[
            {"name": s.name, "chart": charts.histogram(s.histogram.counts, 0, 1, what=s.name)}
            for s in drawn.scores
        ],
        latency=_measure_chart(drawn.latency, "latency"),
        cost=_measure_chart(drawn.cost, "cost"),
        measures=drawn,
        others=others,
        states=RUN_STATES,
        agreement=agreement,
        to_label=queue.total,
    )
    if summary is None or stale:
        response.headers["refresh"] = REFRESH_SECONDS
    return response


def _measure_chart(measure: wire.Measure, what: str) -> charts.Chart | None:
    if measure.histogram is None:
        return None
    h = measure.histogram
    fmt = money if measure.unit == "USD" else charts.number
    return charts.histogram(
        h.counts,
        h.low,
        h.high,
        what=what,
        unit="" if measure.unit == "USD" else measure.unit,
        fmt=fmt,
    )


def _short_secs(value: float) -> str:
    return f"{charts.number(value)} s"


def money(value: float) -> str:
    """USD with two significant digits below a dollar: $0.00012, $0.25, $3.10."""
    if value == 0:
        return "$0"
    sign, size = ("-" if value < 0 else ""), abs(value)
    if size < 1e-8:
        return f"{sign}<$0.00000001"
    if size >= 1:
        return f"{sign}${size:.2f}"
    digits = max(2, -math.floor(math.log10(size)) + 1)
    return f"{sign}${size:.{min(digits, 8)}f}"


async def compare_choose(call: WebCall) -> Response:
    """The "compare with…" form: the chosen experiment is the baseline, unless asked."""
    this = call.param("experiment")
    other = call.request.query_params.get("other", "")
    if not (other.isdigit() and this.isdigit()):
        raise BadRequest("choose an experiment to compare with from the list, then Compare")
    if call.request.query_params.get("role") == "new":
        return RedirectResponse(f"/experiments/{this}/compare/{other}", 303)
    return RedirectResponse(f"/experiments/{other}/compare/{this}", 303)


# --------------------------------------------------------------------------- compare


async def compare_page(call: WebCall) -> Response:
    """The statistics are kept under the cases' score version; the first time a pair is
    compared here they are asked for at once, beside the cases table, and kept under that
    version when it is known. The page waits for them when the two experiments are small
    enough (``INLINE_RUNS``), and ``COMPARE_WAIT`` seconds otherwise."""
    params = {"experiment": call.param("experiment"), "other": call.param("other")}
    filters = _query(call, "score", "changed")
    offset = call.request.query_params.get("offset") or "0"
    kept = memo(call)
    family = ("compare", params["experiment"], params["other"])

    def make() -> Awaitable[Any]:
        return use(call, stats.experiments_compare, params=params)

    early = kept.start(make, family) if kept.latest(family) is None else None
    try:
        cases: wire.CaseComparison = await use(
            call,
            run_list.experiments_compare_cases,
            params=params,
            query={**filters, "offset": offset, "limit": PAGE_SIZE},
        )
    except BaseException:
        if early is not None:
            early.cancel()
        raise
    key = (*family, cases.score_version)
    if early is not None:
        kept.keep(key, early)
    runs = cases.a.runs + cases.b.runs
    wait = None if runs <= INLINE_RUNS else COMPARE_WAIT
    comparison = await kept.get(key, make, wait=wait, family=family)
    stale = False
    if comparison is None:  # not ready: an older comparison of the two, if any
        comparison = kept.latest(family)
        stale = comparison is not None
    regressions: list[tuple[str, Any]] = []
    if comparison is not None:
        regressions = [(s.name, u) for s in comparison.scores for u in s.regressions]
    response = call.render(
        "compare.html",
        fmt=FMT,
        a=cases.a,
        b=cases.b,
        cases=cases,
        comparison=comparison,
        stale=stale,
        resamples=BOOTSTRAP_RESAMPLES,
        regressions=regressions[:REGRESSIONS_SHOWN],
        regression_count=len(regressions),
        filters=filters,
        pager=pager(cases.total, cases.offset, cases.limit, filters, "#cases"),
    )
    if comparison is None or stale:
        response.headers["refresh"] = REFRESH_SECONDS
    return response


# --------------------------------------------------------------------------- schedules


async def schedules_page(call: WebCall) -> Response:
    filters = _query(call, "workspace")
    found = await use(call, schedules.schedules_list, query=filters)
    choices = await _choices(call)
    writable = {ws.name for ws in choices["workspaces"] if ws.writable}
    return call.render(
        "experiment_schedules.html",
        fmt=FMT,
        schedules=found,
        writable=writable,
        filters=filters,
        **choices,
    )


async def schedule_create(call: WebCall) -> Response:
    form = await call.form()
    fields = ("dataset", "agent", "cron", "name", "split", "model", "repetitions")
    data = {k: str(form[k]).strip() for k in fields if str(form.get(k, "")).strip()}
    body = form_struct(ScheduleCreate, data)
    await use(call, schedules.schedules_create, body=body)
    return RedirectResponse("/schedules", 303)


async def schedule_delete(call: WebCall) -> Response:
    await call.form()
    await use(call, schedules.schedules_delete, params={"schedule": call.param("schedule")})
    return RedirectResponse("/schedules", 303)


PAGES = [
    Page("GET", "/experiments", experiments_page),
    Page("POST", "/experiments", experiment_start),
    Page("GET", "/experiments/{experiment}", experiment_page),
    Page("GET", "/experiments/{experiment}/compare", compare_choose),
    Page("GET", "/experiments/{experiment}/compare/{other}", compare_page),
    Page("GET", "/schedules", schedules_page),
    Page("POST", "/schedules", schedule_create),
    Page("POST", "/schedules/{schedule}/delete", schedule_delete),
]
