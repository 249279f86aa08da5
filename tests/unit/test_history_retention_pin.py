"""The history retention's table deletes were tested on one Dagster release: the one the project
pins, so an upgrade of the pin is a deliberate re-check of assets/history/event_log_tables.py."""

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from tidelake.assets.history.event_log_tables import TESTED_DAGSTER

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_the_tested_dagster_is_the_pinned_one() -> None:
    dependencies = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    pins = [Requirement(d) for d in dependencies if Requirement(d).name == "dagster"]
    assert [str(p.specifier) for p in pins] == [f"=={TESTED_DAGSTER}"]
