"""A soak's figures as a reader sees them: every series over time (soak.png) and the drift table;
soak_report.py draws both again from a finished run's samples."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click
import numpy as np

from soak.series import JVM_MEMORY_SERIES, ROLES, THREAD_GROUPS

SETTLE_OPTION = click.option(
    "--settle",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    help="Minutes a process must have run, and the run too, before its series count.",
)


def plot(rows: list[dict[str, float]], fault_at_s: Sequence[float], path: Path) -> None:
    """Every series over the run's minutes, one panel a concern, the faults as dotted lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: list[tuple[str, list[str]]] = [
        ("micro-batch (ms, median a sample)", ["batch_ms_p50", "batch_less_eviction_ms_p50"]),
        (
            "eviction, commits, planning (ms)",
            [
                "eviction_ms_p50",
                "commit_ms_p50",
                "write_ms_p50",
                "planning_ms_p50",
                "state_commit_ms_p50",
            ],
        ),
        ("a micro-batch: fixed ms, ms per 1,000 rows", ["batch_fixed_ms", "batch_ms_per_krow"]),
        ("dedup state", ["state_rows", "state_memory_mb", "state_sst_mb"]),
        ("state per row", ["state_updates_ms_per_krow", "rocksdb_get_us", "rocksdb_put_us"]),
        (
            "RocksDB compaction per 1,000 rows",
            ["compaction_written_kb_per_krow", "compaction_ms_per_krow"],
        ),
        (
            "stream JVM CPU by thread (% of a core)",
            [f"stream_jvm_cpu_pct_{g}" for g in THREAD_GROUPS],
        ),
        (
            "stream JVM memory (MB): RSS, anonymous; heap used, metaspace, code cache (jcmd)",
            ["rss_mb_stream-jvm", "rss_anon_mb_stream-jvm", *JVM_MEMORY_SERIES],
        ),
        ("lag (records)", ["lag"]),
        ("RSS (MB)", [f"rss_mb_{r}" for r in ROLES] + ["rss_mb_total"]),
        ("CPU (% of a core)", [f"cpu_pct_{r}" for r in ROLES]),
        ("threads", [f"threads_{r}" for r in ROLES]),
        ("files", ["delta_log_files", "checkpoint_files", "table_files", "quarantine_files"]),
        (
            "live files and checkpoint actions (newest checkpoint)",
            [
                "table_live_files",
                "quarantine_live_files",
                "table_checkpoint_actions",
                "quarantine_checkpoint_actions",
            ],
        ),
        ("MB on disk", ["delta_log_mb", "checkpoint_mb", "dagster_mb", "progress_log_mb"]),
    ]
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 3 * len(panels)), sharex=True)
    minutes = [r["t_s"] / 60 for r in rows]
    for ax, (title, names) in zip(axes, panels, strict=True):
        for name in names:
            values = [r.get(name, np.nan) for r in rows]
            if not np.allclose(np.nan_to_num(values), 0):
                label = name.replace("rss_mb_", "").replace("stream_jvm_cpu_pct_", "")
                label = label.replace("threads_", "")
                ax.plot(minutes, values, label=label.replace("cpu_pct_", ""))
        for at_s in fault_at_s:
            ax.axvline(at_s / 60, color="grey", linestyle=":", linewidth=1)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7, ncol=4, loc="upper left")
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("minutes (dotted: faults)")
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def print_drift(figures: dict[str, dict[str, float]], only: tuple[str, ...] = ()) -> None:
    """common.drift's figures as a table, the series named by a prefix in `only` (all if none)."""
    heads = ("first 10%", "last 10%", "slope/h", "%/h", "30 days")
    print(f"{'series':34} " + " ".join(f"{h:>11}" for h in heads))
    for name, d in sorted(figures.items()):
        if only and not name.startswith(only):
            continue
        print(
            f"{name:34} {d['first_tenth']:11.1f} {d['last_tenth']:11.1f} {d['slope_per_h']:11.2f} "
            f"{d['slope_pct_per_h']:11.1f} {d['at_30_days']:11.1f}"
        )
