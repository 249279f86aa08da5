"""A soak's drift again, over a window of its own, from its soak.csv or, for a run that did not
finish, the samples.jsonl it wrote as it went (`python -m soak`, bench/soak/).

A soak judges its series from `--settle` minutes on; a run whose state fills for its first half
hour (keys that live 30 minutes) is judged again from when it is full, without running it again:
`python soak_report.py ../bench-results/soak/soak.csv --from-minute 35`. A series of a process
counts only once that process is `--settle` minutes old (a fault restarts it), as in the soak.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import click
from common import drift
from soak.figures import SETTLE_OPTION, plot, print_drift
from soak.series import SERIES_AGE


def read_rows(path: Path) -> list[dict[str, float]]:
    """soak.csv's rows (empty cells as absent) or samples.jsonl's."""
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    with path.open(newline="") as f:
        return [
            {k: (v == "True") if k == "recovering" else float(v) for k, v in row.items() if v}
            for row in csv.DictReader(f)
        ]


@click.command()
@click.argument("samples", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--from-minute", type=click.FloatRange(min=0), default=10.0, show_default=True)
@SETTLE_OPTION
@click.option("--only", multiple=True, help="Series whose names start with this (repeatable).")
@click.option(
    "--plot",
    "plot_to",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Draw the run's plot again here (the faults from soak.json beside SAMPLES, if any).",
)
def main(
    samples: Path, from_minute: float, settle: float, only: tuple[str, ...], plot_to: Path | None
) -> None:
    rows = read_rows(samples)
    window = [r for r in rows if r["t_s"] >= from_minute * 60]
    run_s = rows[-1]["t_s"] if rows else 0.0
    figures = drift(window, settle * 60, run_s, SERIES_AGE)
    print(f"{samples}: {len(window)} samples from minute {from_minute:g}")
    print_drift(figures, only)
    if plot_to is not None:
        summary = samples.with_name("soak.json")
        faults = json.loads(summary.read_text()).get("faults", []) if summary.exists() else []
        plot(rows, [f["at_s"] for f in faults], plot_to)
        print(f"plot: {plot_to}")


if __name__ == "__main__":
    main()
