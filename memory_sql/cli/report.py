"""``memory-sql report``: the reporting views at a glance, or as JSON for scripts."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from ..ops.reports import build_report
from ._common import ConfigOption, UrlOption, app, command, lit, out, plural
from ._data import EveryTenantOption, JsonOption, print_json, sql_storage

BAR_WIDTH = 40
_EIGHTHS = " ▏▎▍▌▋▊▉"
ADDED = "█"  # the activity chart: facts added per day…
REMOVED = "░"  # …and removed


@command(app, "report")
def report(
    tenant: EveryTenantOption = None,
    days: Annotated[int, typer.Option("--days", min=1, help="Activity over this many days.")] = 14,
    top: Annotated[
        int, typer.Option("--top", min=1, help="How many of the largest memories.")
    ] = 10,
    as_json: JsonOption = False,
    url: UrlOption = None,
    config: ConfigOption = None,
) -> None:
    """Show facts per category, confidence, activity, largest memories, the queue and LLM usage.

    Everything comes from the reporting views (docs/tables.md shows how to query them directly).

    Example:
        memory-sql report --tenant default --days 30 --url sqlite:///memory.db
    """
    with sql_storage(url, config) as storage:
        data = build_report(storage, tenant_id=tenant, days=days, largest=top)
    if as_json:
        print_json(data)
        return
    _print_report(data)


def bar(value: float, maximum: float, width: int = BAR_WIDTH) -> str:
    """``value`` as a horizontal bar of block characters, ``width`` long at ``maximum``."""
    if maximum <= 0 or value <= 0:
        return ""
    eighths = max(1, round(value / maximum * width * 8))
    return "█" * (eighths // 8) + (_EIGHTHS[eighths % 8] if eighths % 8 else "")


def removed_bar(value: float, maximum: float, width: int = BAR_WIDTH) -> str:
    """``value`` as a bar of :data:`REMOVED` cells (whole cells, at least one when not 0)."""
    if maximum <= 0 or value <= 0:
        return ""
    return REMOVED * max(1, round(value / maximum * width))


def _print_report(data: dict[str, Any]) -> None:
    totals = data["totals"]
    where = f"tenant {data['tenant_id']}" if data["tenant_id"] else "all tenants"
    out.print(
        f"[bold]memory report[/bold] — {lit(where)}: {plural(totals['facts'], 'fact')} in "
        f"{plural(totals['memories'], 'memory')}; updates {totals['pending_updates']} pending, "
        f"{totals['failed_updates']} failed",
        highlight=False,
        soft_wrap=True,
    )

    categories = Table(title="Facts per category", title_justify="left")
    categories.add_column("category")
    categories.add_column("facts", justify="right")
    categories.add_column("avg", justify="right")
    categories.add_column("min–max", justify="right")
    for row in data["categories"]:
        categories.add_row(
            lit(row["category"]),
            str(row["facts"]),
            f"{row['avg_confidence']:.2f}",
            f"{row['min_confidence']:.2f}–{row['max_confidence']:.2f}",
        )
    out.print(categories)

    peak = max((row["facts"] for row in data["confidence"]), default=0)
    confidence = Table(title="Confidence", title_justify="left")
    confidence.add_column("bucket")
    confidence.add_column("facts", justify="right")
    confidence.add_column("", no_wrap=True)
    for row in data["confidence"]:
        confidence.add_row(
            row["bucket"], str(row["facts"]), Text(bar(row["facts"], peak), style="cyan")
        )
    out.print(confidence)

    activity = Table(
        title=f"Fact changes, last {plural(len(data['activity']), 'day')}", title_justify="left"
    )
    activity.add_column("day (UTC)")
    for name in ("added", "updated", "removed"):
        activity.add_column(name, justify="right")
    # Told apart by the glyph too, not only by colour (a terminal or a log may have none).
    legend = Text.assemble((ADDED, "green"), " added  ", (REMOVED, "red"), " removed")
    activity.add_column(legend, no_wrap=True)
    peak = max((row["added"] + row["removed"] for row in data["activity"]), default=0)
    for row in data["activity"]:
        drawn = Text(bar(row["added"], peak, BAR_WIDTH // 2), style="green")
        drawn.append(removed_bar(row["removed"], peak, BAR_WIDTH // 2), style="red")
        activity.add_row(
            row["day"], str(row["added"]), str(row["updated"]), str(row["removed"]), drawn
        )
    out.print(activity)

    largest = Table(title="Largest memories", title_justify="left")
    for name in ("memory", "facts", "sections", "version", "updated"):
        largest.add_column(name, justify="left" if name in ("memory", "updated") else "right")
    for row in data["largest"]:
        largest.add_row(
            lit(f"{row['tenant_id']}/{row['user_id']}/{row['agent_name'] or '-'}"),
            str(row["facts"]),
            str(row["sections"]),
            str(row["version"]),
            row["updated_at"][:19].replace("T", " "),
        )
    out.print(largest)

    queue = Table(title="Update queue", title_justify="left")
    for name in ("status", "updates", "oldest due", "max attempts", "running"):
        queue.add_column(name, justify="left" if name in ("status", "oldest due") else "right")
    for status in ("pending", "failed"):
        row = data["queue"].get(status)
        if row is None:
            queue.add_row(status, "0", "", "", "")
            continue
        queue.add_row(
            Text(status, style="red" if status == "failed" else ""),
            str(row["updates"]),
            (row["oldest_due"] or "")[:19].replace("T", " "),
            str(row["max_attempts"]),
            str(row["leased"]),
        )
    out.print(queue)

    usage = Table(
        title=f"Memory LLM usage, last {plural(len(data['activity']), 'day')}",
        title_justify="left",
    )
    # Short headings: seven columns fit 80 characters with a day and a model name whole.
    usage.add_column("day (UTC)", no_wrap=True)
    usage.add_column("model", overflow="fold")
    held = any(row.get("held_over_budget") for row in data["llm_usage"])
    names = ("calls", "prompt tok", "compl. tok", "failed", "p50 ms") + (("held",) if held else ())
    for name in names:
        usage.add_column(name, justify="right", no_wrap=True)
    for row in data["llm_usage"]:
        p50 = row["p50_latency_ms"]
        cells = [
            row["day"],
            lit(row["model"]),
            str(row["calls"]),
            f"{row['prompt_tokens']:,}",
            f"{row['completion_tokens']:,}",
            Text(str(row["failures"]), style="red" if row["failures"] else ""),
            "" if p50 is None else f"{p50:,.0f}",
        ]
        if held:  # updates held back by a tenant's daily LLM budget (they wait)
            count = row["held_over_budget"]
            cells.append(Text(str(count), style="yellow" if count else ""))
        usage.add_row(*cells)
    if not data["llm_usage"]:
        usage.add_row("", "(no calls)", "0", "0", "0", "0", "")
    out.print(usage)
    if data.get("llm_rejections"):
        refused = Table(title="Reply parts refused (not stored), by reason", title_justify="left")
        refused.add_column("reason")
        refused.add_column("calls", justify="right")
        refused.add_column("parts", justify="right")
        for row in data["llm_rejections"]:
            refused.add_row(row["reason"], str(row["calls"]), str(row["items"]))
        out.print(refused)
