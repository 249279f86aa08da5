"""The figures printed: per aged instance its storage, growth per day, tick and page times
against a new instance's; each purge's rows, time and longest statement and transaction."""

from __future__ import annotations

from typing import Any

import click


def report(figures: dict[str, Any]) -> None:
    """Per 30-day instance: storage, its growth per day, and tick and page times next to the
    new instance's (ratio)."""
    runs = figures["runs"]
    grown_days = figures["days"] - 1 / 24
    header = ("instance", "MB", "MB/day", "rows/day", "ticks", "tick ms", "x", "page ms", "x")
    widths = (24, 8, 8, 10, 8, 9, 6, 9, 6)
    line = "".join(
        f"{h:>{w}}" if i else f"{h:<{w}}"
        for i, (h, w) in enumerate(zip(header, widths, strict=True))
    )
    if any(label.endswith("/new") for label in runs):  # not with --purge-only
        click.echo(f"\n{line}")
    for label, aged in runs.items():
        new = runs.get(label.replace("/aged", "/new"))
        if not label.endswith("/aged") or new is None:
            continue
        rows = sum(aged["rows"].values()) - sum(new["rows"].values())
        # a purged instance holds the retention's days, not the days seeded
        kept_days = (
            min(grown_days, aged["purge"]["retention_days"]) if aged.get("purge") else grown_days
        )
        cells = (
            label.removesuffix("/aged"),
            f"{aged['bytes'] / 1e6:.1f}",
            f"{(aged['bytes'] - new['bytes']) / kept_days / 1e6:.2f}",
            f"{rows / kept_days:,.0f}",
            f"{aged['rows']['job_ticks']:,}",
            f"{new['tick']['tick_min_ms']:.0f}->{aged['tick']['tick_min_ms']:.0f}",
            f"{aged['tick']['tick_min_ms'] / new['tick']['tick_min_ms']:.2f}",
            f"{new['page_ms']['page_total_ms']:.0f}->{aged['page_ms']['page_total_ms']:.0f}",
            f"{aged['page_ms']['page_total_ms'] / new['page_ms']['page_total_ms']:.2f}",
        )
        click.echo(
            "".join(
                f"{c:>{w}}" if i else f"{c:<{w}}"
                for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            )
        )
    for label, r in runs.items():
        if purge := r.get("purge"):
            before = purge["before_purge"]
            click.echo(
                f"\n{label}: {before['bytes'] / 1e6:,.1f} MB and "
                f"{sum(before['rows'].values()):,} rows before the purge to "
                f"{purge['retention_days']:g} days, {r['bytes'] / 1e6:,.1f} MB and "
                f"{sum(r['rows'].values()):,} rows after; the purge took {purge['purge_s']:.1f} s "
                f"({purge['runs_deleted']:,} runs, {purge['events_deleted']:,} events, "
                f"{purge['check_executions_deleted']:,} check executions), the vacuum "
                f"{purge['vacuum_s']:.1f} s; its longest statement "
                f"{purge['longest_statement_s'] * 1000:,.0f} ms, longest transaction "
                f"{purge['longest_transaction_s'] * 1000:,.0f} ms ({purge['statements']:,} "
                f"statements): {purge['longest_statement'][:100]}"
            )
    paged = {label: r for label, r in runs.items() if r["page_ms"]}
    if paged:
        click.echo("\nasset page queries, best of the runs (ms):")
    for label, r in paged.items():
        parts = [
            f"{k.removesuffix('Query')} {v:.0f}"
            for k, v in r["page_ms"].items()
            if "median" not in k
        ]
        click.echo(f"  {label:<24}" + ", ".join(parts))
