"""The reports page's charts, drawn on the server as inline SVG (no script, no fetched asset).

Each chart has a ``<title>`` and a ``<desc>`` listing its numbers, so a screen reader (or a
test) reads what the picture shows; colours come from the stylesheet's ``series-N`` classes.
"""

from __future__ import annotations

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
            f'class="series-0"><title>{escape(label)}: {_number(value)}{escape(unit)}</title>'
            f"</rect>"
            f'<text x="{LABEL + length + 6:.1f}" y="{y + 15}" class="chart-value">'
            f"{_number(value)}</text>"
        )
    described = "; ".join(f"{label}: {_number(value)}" for label, value in rows)
    return _svg(title, described, height, "".join(parts))


def columns(
    title: str, days: Sequence[str], series: Sequence[tuple[str, Sequence[float]]]
) -> Markup:
    """Stacked columns, one per day, each split among ``series`` (name, value per day), with
    a legend; the first and last day are labelled below."""
    if not days:
        return _empty(title)
    totals = [sum(values[i] for _, values in series) for i in range(len(days))]
    top = max(totals) or 1
    plot = 150
    height = plot + 54
    step = (WIDTH - 50) / len(days)
    bar = max(2.0, step * 0.7)
    parts = [
        f'<line x1="40" y1="{plot + 10}" x2="{WIDTH - 6}" y2="{plot + 10}" class="chart-axis"/>',
        f'<text x="34" y="18" text-anchor="end" class="chart-value">{_number(top)}</text>',
        f'<text x="34" y="{plot + 10}" text-anchor="end" class="chart-value">0</text>',
    ]
    for i, day in enumerate(days):
        x = 44 + i * step
        y: float = plot + 10
        for index, (name, values) in enumerate(series):
            value = values[i]
            if not value:
                continue
            h = plot * value / top
            y -= h
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" height="{h:.1f}" '
                f'class="series-{index}"><title>{escape(day)} {escape(name)}: '
                f"{_number(value)}</title></rect>"
            )
    parts.append(
        f'<text x="44" y="{plot + 26}" class="chart-label">{escape(days[0])}</text>'
        f'<text x="{WIDTH - 6}" y="{plot + 26}" text-anchor="end" class="chart-label">'
        f"{escape(days[-1])}</text>"
    )
    x = 44
    for index, (name, _) in enumerate(series):
        parts.append(
            f'<rect x="{x}" y="{plot + 36}" width="10" height="10" class="series-{index}"/>'
            f'<text x="{x + 14}" y="{plot + 45}" class="chart-label">{escape(name)}</text>'
        )
        x += 24 + 8 * len(name)
    described = "; ".join(
        f"{name}: {_number(sum(values))} over {len(days)} days" for name, values in series
    )
    return _svg(title, described, height, "".join(parts))


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
