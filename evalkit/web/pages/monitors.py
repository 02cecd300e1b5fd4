"""Monitors on the web: the list, and one monitor's scores over a window (a chart per
score, per day) with the worst sessions of the window linked to their pages."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from evalkit.edge.routes import monitors
from evalkit.model import monitors as wire
from evalkit.web import charts
from evalkit.web.page import Page, WebCall, use

WINDOWS = {"1d": 86400, "7d": 7 * 86400, "30d": 30 * 86400}
WORST_SHOWN = 10


async def monitors_page(call: WebCall) -> Response:
    rows = await use(call, monitors.monitors_list)
    return call.render("monitors.html", monitors=rows)


async def monitor_page(call: WebCall) -> Response:
    window = call.request.query_params.get("window", "7d")
    if window not in WINDOWS:
        window = "7d"
    ref = f"{call.param('name')}@{call.param('workspace')}"
    query = {"window_seconds": WINDOWS[window]}
    summary: wire.MonitorSummary = await use(
        call, monitors.monitors_show, params={"monitor": ref}, query=query
    )
    worst: list[wire.MonitorSession] = await use(
        call,
        monitors.monitors_sessions,
        params={"monitor": ref},
        query={**query, "limit": WORST_SHOWN},
    )
    return call.render(
        "monitor.html",
        summary=summary,
        m=summary.monitor,
        window=window,
        windows=list(WINDOWS),
        score_charts=[_chart(s) for s in summary.scores],
        worst=worst,
    )


def _chart(score: wire.MonitorScore) -> dict[str, Any]:
    gauge = score.kind == "gauge"
    samples = [
        charts.Sample(
            d.day.isoformat(),
            d.raw_mean if gauge else d.mean,
            note=f"{d.n} sessions",
        )
        for d in score.days
    ]
    if gauge:
        chart = charts.line(samples, what=f"daily mean {score.name} (measured)", over="days")
    else:
        chart = charts.line(
            samples, what=f"daily mean {score.name}", low=0.0, high=1.0, over="days"
        )
    return {"score": score, "chart": chart}


PAGES = [
    Page("GET", "/monitors", monitors_page),
    Page("GET", "/monitors/{workspace}/{name}", monitor_page),
]
