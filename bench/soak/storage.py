"""Files and sizes of what a stream leaves: `_delta_log`, the table, the quarantine, the
checkpoint and its state, Dagster's storage, the progress log."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from soak.platform import Soak


def folder_figures(name: str, root: Path, skip: str | None = None) -> dict[str, float]:
    """Files and MB under a folder (without the subfolder `skip`)."""
    files = size = 0
    for folder, dirs, names in os.walk(root):
        if skip is not None and skip in dirs:
            dirs.remove(skip)
        for n in names:
            try:
                size += os.stat(os.path.join(folder, n)).st_size
                files += 1
            except FileNotFoundError:
                continue
    return {f"{name}_files": float(files), f"{name}_mb": size / 2**20}


def checkpoint_figures(name: str, table: Path) -> dict[str, float]:
    """Live files and actions of the table's newest checkpoint (`_last_checkpoint`): what every
    reader's snapshot holds and every checkpoint rewrites, as of the stream's last checkpoint
    (at most delta.checkpointInterval commits ago)."""
    try:
        last = json.loads((table / "_delta_log" / "_last_checkpoint").read_text())
    except (FileNotFoundError, json.JSONDecodeError):  # none yet, or being replaced
        return {}
    return {
        f"{name}_live_files": float(last.get("numOfAddFiles", np.nan)),
        f"{name}_checkpoint_actions": float(last.get("size", np.nan)),
    }


def storage_figures(soak: Soak) -> dict[str, float]:
    out: dict[str, float] = {}
    out |= folder_figures("delta_log", soak.table / "_delta_log")
    out |= folder_figures("table", soak.table, skip="_delta_log")
    out |= folder_figures("quarantine", soak.quarantine, skip="_delta_log")
    out |= checkpoint_figures("table", soak.table)
    out |= checkpoint_figures("quarantine", soak.quarantine)
    out |= folder_figures("checkpoint", soak.checkpoint)
    out |= folder_figures("checkpoint_state", soak.checkpoint / "state")
    out |= folder_figures("dagster", soak.dagster_home)
    out |= folder_figures("progress_log", soak.progress_file.parent)
    return out
