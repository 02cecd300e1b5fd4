"""Charts drawn on the server as inline SVG: the geometry is computed here, and the
``_chart.html`` macros turn it into markup (no JavaScript, no chart library).

Every chart has a text alternative (``label``) and a tooltip per mark (``title``), so a
screen reader or a hover gives the numbers the picture shows."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

WIDTH = 360
HEIGHT = 150
LEFT, RIGHT, TOP, BOTTOM = 40, 10, 10, 30


@dataclass(frozen=True)
class Tick:
    at: float
    """Position on the chart, in SVG units."""
    text: str


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    w: float
    h: float
    title: str


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    title: str
    href: str | None = None


@dataclass
class Chart:
    """One chart's geometry: the plot box, the axes' ticks and the marks."""

    label: str
    """What the chart shows, in words (the SVG's accessible name)."""
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right: int = WIDTH - RIGHT
    top: int = TOP
    bottom: int = HEIGHT - BOTTOM
    x_ticks: list[Tick] = field(default_factory=list)
    y_ticks: list[Tick] = field(default_factory=list)
    bars: list[Bar] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    path: str = ""
    """The line through the points (SVG path data), empty for bar charts."""
    x_label: str = ""
    empty: bool = False


def number(value: float) -> str:
    """A short, readable number: 0.123, 12.3, 1.2k, 3e-05."""
    if value == 0:
        return "0"
    size = abs(value)
    if size >= 10_000:
        return f"{value / 1000:.0f}k"
    if size >= 1000:
        return f"{value / 1000:.1f}k"
    if size >= 10:
        return f"{value:.0f}"
    if size >= 0.01:
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return f"{value:.0e}"


def nice_max(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten at or above ``value``."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * power >= value:
            return float(step * power)
    return float(10 * power)


def _count_ticks(chart: Chart, top_count: int) -> None:
    """Run counts on the y axis: 0 and the top (and the half from 10 up: whole numbers)."""
    scale = nice_max(top_count)
    span = chart.bottom - chart.top
    shares = (0, 0.5, 1) if scale >= 10 else (0, 1)
    chart.y_ticks = [Tick(chart.bottom - s * span, number(scale * s)) for s in shares]


def histogram(
    counts: Sequence[int],
    low: float,
    high: float,
    *,
    what: str,
    unit: str = "",
    fmt: Callable[[float], str] = number,
) -> Chart:
    """Bars of equal width from ``low`` to ``high``, one per count; y counts runs."""
    total = sum(counts)
    suffix = f" {unit}" if unit else ""
    chart = Chart(
        label=f"Histogram of {what}: {total} runs from {fmt(low)} to {fmt(high)}{suffix}",
        x_label=f"{what}{suffix}",
    )
    if not counts or total == 0:
        chart.empty = True
        return chart
    if high <= low:  # every value the same: give the axis a unit of width
        high = low + 1
    tallest = max(counts)
    scale = nice_max(tallest)
    span_x = chart.right - chart.left
    span_y = chart.bottom - chart.top
    step = span_x / len(counts)
    width = (high - low) / len(counts)
    for i, n in enumerate(counts):
        lo, hi = low + i * width, low + (i + 1) * width
        h = span_y * n / scale
        chart.bars.append(
            Bar(
                x=round(chart.left + i * step + 1, 2),
                y=round(chart.bottom - h, 2),
                w=round(max(step - 2, 1), 2),
                h=round(h, 2),
                title=f"{fmt(lo)} to {fmt(hi)}{suffix}: {n} run{'s' if n != 1 else ''}",
            )
        )
    for share in (0, 0.5, 1):
        chart.x_ticks.append(Tick(chart.left + share * span_x, fmt(low + share * (high - low))))
    _count_ticks(chart, tallest)
    return chart


@dataclass(frozen=True)
class Sample:
    """One point of a line: its x label (an experiment), value and link."""

    label: str
    value: float | None
    href: str | None = None
    note: str = ""


def line(
    samples: Sequence[Sample],
    *,
    what: str,
    low: float | None = None,
    high: float | None = None,
    fmt: Callable[[float], str] = number,
    over: str = "experiments",
) -> Chart:
    """Values in order, evenly spaced; a missing value breaks the line. The y range is
    ``low``..``high`` when given (a score's [0, 1]), else 0..a round number above the max.
    ``over``: what the samples are (the chart's accessible name says it)."""
    values = [s.value for s in samples if s.value is not None]
    unit = over.removesuffix("s") if len(samples) == 1 else over
    chart = Chart(label=f"{what} over {len(samples)} {unit}, oldest first")
    if not values:
        chart.empty = True
        return chart
    y_low = 0.0 if low is None else low
    y_high = high if high is not None else nice_max(max(values))
    if y_high <= y_low:
        y_high = y_low + 1
    span_x = chart.right - chart.left
    span_y = chart.bottom - chart.top
    gap = span_x / max(len(samples) - 1, 1)
    commands: list[str] = []
    pen_down = False
    for i, sample in enumerate(samples):
        x = chart.left + (i * gap if len(samples) > 1 else span_x / 2)
        if sample.value is None:
            pen_down = False
            continue
        y = chart.bottom - span_y * (sample.value - y_low) / (y_high - y_low)
        commands.append(f"{'L' if pen_down else 'M'}{x:.1f} {y:.1f}")
        pen_down = True
        note = f" ({sample.note})" if sample.note else ""
        chart.points.append(
            Point(
                round(x, 1),
                round(y, 1),
                f"{sample.label}: {fmt(sample.value)}{note}",
                sample.href,
            )
        )
    chart.path = " ".join(commands)
    for share in (0, 0.5, 1):
        chart.y_ticks.append(
            Tick(chart.bottom - share * span_y, fmt(y_low + share * (y_high - y_low)))
        )
    shown = _label_positions(len(samples))
    for i in shown:
        x = chart.left + (i * gap if len(samples) > 1 else span_x / 2)
        chart.x_ticks.append(Tick(x, samples[i].label))
    return chart


def _label_positions(n: int, most: int = 6) -> list[int]:
    """Which of n evenly spaced points get an x label: at most ``most``, ends included."""
    if n <= most:
        return list(range(n))
    step = (n - 1) / (most - 1)
    return sorted({round(i * step) for i in range(most)})


@dataclass(frozen=True)
class Span:
    """A horizontal bar on a shared time line (a trajectory step): left and width in %."""

    left: float
    width: float
    title: str


def spans(
    starts: Sequence[float | None], ends: Sequence[float | None], total: float
) -> list[Span | None]:
    """Each (start, end) in seconds from the run's start as a bar on 0..total; a step
    without a time gets None."""
    found: list[Span | None] = []
    whole = total if total > 0 else 1.0
    for start, end in zip(starts, ends, strict=True):
        if start is None:
            found.append(None)
            continue
        stop = end if end is not None and end >= start else start
        left = min(max(start / whole * 100, 0.0), 100.0)
        width = min(max((stop - start) / whole * 100, 0.6), 100.0 - left if left < 100 else 0.6)
        title = f"at {start:.2f} s" + (f", {stop - start:.2f} s" if stop > start else "")
        found.append(Span(round(left, 2), round(width, 2), title))
    return found
