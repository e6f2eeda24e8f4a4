"""The reports page's charts, drawn on the server as inline SVG (no script, no fetched asset).

Each chart has a ``<title>`` and a ``<desc>`` listing its numbers, so a screen reader (or a
test) reads what the picture shows. Colours come from the stylesheet's ``series-NAME`` class of
each series' name: one colour per meaning on every chart (``failed`` is red wherever it is).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from markupsafe import Markup, escape

WIDTH = 640
ROW = 22
LABEL = 160


def bars(title: str, rows: Sequence[tuple[str, float]], *, unit: str = "") -> Markup:
    """Horizontal bars, one per ``(label, value)``, longest for the largest value."""
    if not rows:
        return _empty(title)
    top = max(value for _, value in rows) or 1
    height = ROW * len(rows) + 8
    room = WIDTH - LABEL - 70
    parts = []
    for index, (label, value) in enumerate(rows):
        y = 4 + index * ROW
        length = max(1.0, room * value / top) if value else 0
        parts.append(
            f'<text x="{LABEL - 6}" y="{y + 15}" text-anchor="end" class="chart-label">'
            f"{escape(label)}</text>"
            f'<rect x="{LABEL}" y="{y + 3}" width="{length:.1f}" height="{ROW - 6}" '
            f'class="series-facts"><title>{escape(label)}: {_number(value)}{escape(unit)}</title>'
            f"</rect>"
            f'<text x="{LABEL + length + 6:.1f}" y="{y + 15}" class="chart-value">'
            f"{_number(value)}</text>"
        )
    described = "; ".join(f"{label}: {_number(value)}" for label, value in rows)
    return _svg(title, described, height, "".join(parts))


DAY_LABELS = 7
"""Dates labelled below a day chart at most (evenly spaced, the first among them)."""


def columns(
    title: str, days: Sequence[str], series: Sequence[tuple[str, Sequence[float]]]
) -> Markup:
    """Stacked columns, one per day, each split among ``series`` (name, value per day; the
    name picks the colour), with a legend; up to :data:`DAY_LABELS` dates labelled below. With
    nothing to show (every value 0) the axis reads 0 alone."""
    if not days:
        return _empty(title)
    totals = [sum(values[i] for _, values in series) for i in range(len(days))]
    top = max(totals)
    plot = 150
    height = plot + 54
    step = (WIDTH - 50) / len(days)
    bar = max(2.0, step * 0.7)
    parts = [
        f'<line x1="40" y1="{plot + 10}" x2="{WIDTH - 6}" y2="{plot + 10}" class="chart-axis"/>',
        f'<text x="34" y="{plot + 10}" text-anchor="end" class="chart-value tick">0</text>',
    ]
    if top:
        parts.append(
            f'<text x="34" y="18" text-anchor="end" class="chart-value tick">{_number(top)}</text>'
        )
    for i, day in enumerate(days):
        x = 44 + i * step
        y: float = plot + 10
        for name, values in series:
            value = values[i]
            if not value:
                continue
            h = plot * value / top
            y -= h
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" height="{h:.1f}" '
                f'class="series-{_slug(name)}"><title>{escape(day)} {escape(name)}: '
                f"{_number(value)}</title></rect>"
            )
    every = math.ceil(len(days) / DAY_LABELS)
    for i in range(0, len(days), every):  # centred under their column, at least 84 apart
        parts.append(
            f'<text x="{44 + i * step + bar / 2:.1f}" y="{plot + 26}" text-anchor="middle" '
            f'class="chart-label day">{escape(days[i])}</text>'
        )
    x = 44
    for name, _ in series:
        parts.append(
            f'<rect x="{x}" y="{plot + 36}" width="10" height="10" '
            f'class="series-{_slug(name)} legend"/>'
            f'<text x="{x + 14}" y="{plot + 45}" class="chart-label">{escape(name)}</text>'
        )
        x += 24 + 8 * len(name)
    described = "; ".join(
        f"{name}: {_number(sum(values))} over {len(days)} days" for name, values in series
    )
    return _svg(title, described, height, "".join(parts))


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower())


def _svg(title: str, described: str, height: int, body: str) -> Markup:
    return Markup(
        f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'preserveAspectRatio="xMinYMin meet"><title>{escape(title)}</title>'
        f"<desc>{escape(described)}</desc>{body}</svg>"
    )


def _empty(title: str) -> Markup:
    return Markup(f'<p class="empty">{escape(title)}: nothing yet.</p>')


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) and not value.is_integer() else f"{value:,.0f}"
