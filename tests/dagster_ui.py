"""The Dagster UI in a real browser: Debian's chromium driven by Playwright.

Playwright never downloads a browser here: it launches the system's chromium (the Debian package,
which `.ci/run` installs where it is missing). Every page a test visits is saved as a screenshot
in test-results/screenshots/ (not committed), so a failure can be seen.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path

import pytest

from tidelake.platform.dev.dagster_web import DagsterWeb

REPO = Path(__file__).resolve().parents[1]
SCREENSHOTS = REPO / "test-results" / "screenshots"
CHROMIUM = Path(os.environ.get("TIDELAKE_CHROMIUM", "/usr/bin/chromium"))
INSTALL_HINT = "install it with `sudo apt-get install chromium` (Debian) or run .ci/run"
_CREATED = re.compile(r"Created backfill\s*([a-z0-9]+)")
# the range input's placeholder once the keys have loaded ("Loading partition keys..." before):
# an example range, or "No matching partitions" where a date filter is shown and nothing is
# selected yet. The dialog's first <input> is not it while the section loads (a checkbox was)
_PARTITION_KEYS_LOADED = re.compile(r"^(ex: |No matching partitions)")


def require_chromium() -> Path:
    """The system chromium, or a skip that says how to get it."""
    if not CHROMIUM.exists():
        pytest.skip(f"browser test skipped: no Chromium at {CHROMIUM}; {INSTALL_HINT}")
    try:
        import playwright  # noqa: F401
    except ImportError:
        pytest.skip("browser test skipped: Playwright is missing; run `pip install -e .[dev]`")
    return CHROMIUM


class DagsterUI:
    """The pages and clicks a user goes through, each page saved as a numbered screenshot."""

    def __init__(self, page: object, url: str, shots: Path) -> None:
        self.page = page
        self.url = url.rstrip("/")
        self.shots = shots
        self._taken = 0

    def open(self, path: str) -> None:
        self.page.goto(f"{self.url}{path}", wait_until="networkidle")

    def shot(self, name: str) -> Path:
        self._taken += 1
        path = self.shots / f"{self._taken:02d}-{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def text(self) -> str:
        return self.page.inner_text("body")

    def launch_backfill(self, asset_path: list[str], first: str, last: str) -> str:
        """Materialize → the range [first...last] typed into the partitions input → Launch
        backfill, on the asset's page; the backfill's id, from the notice the UI shows.

        No click on Custom first: its row of mode buttons gains "Latest" on its left once the
        dialog knows the partitions are time windows, and a click aimed at Custom before that
        landed on "Failed and missing" (CI and here, 2026-12-01: nothing selected, the range
        input never showed an example). A typed range switches the dialog to Custom whatever
        mode it is in; the dialog's count of selected partitions shows that it took."""
        self.open("/assets/" + "/".join(asset_path))
        self.page.get_by_role("button", name="Materialize").first.click()
        dialog = self.page.get_by_role("dialog")
        partitions = dialog.get_by_placeholder(_PARTITION_KEYS_LOADED)
        partitions.fill(f"[{first}...{last}]")
        partitions.press("Enter")
        days = (date.fromisoformat(last) - date.fromisoformat(first)).days + 1
        dialog.get_by_text(re.compile(rf"^{days} partitions?$")).wait_for()
        launch = dialog.get_by_role("button", name="Launch backfill")
        launch.wait_for()
        self.shot("materialize-dialog")
        launch.click()
        notice = self.page.get_by_text(_CREATED)
        notice.wait_for(timeout=30_000)
        found = _CREATED.search(notice.inner_text())
        assert found is not None
        return found.group(1)

    def check_result(self, asset_path: list[str], check: str, partition: str) -> str:
        """The evaluation result ("Passed", "Failed", ...) of the newest execution of a check on
        a partition, read from the check's Execution history table once its row is shown."""
        self.open("/assets/" + "/".join(asset_path) + f"?view=checks&checkDetail={check}")
        self.page.get_by_text("Execution history", exact=True).click()
        table = self.page.locator("table", has_text="Evaluation result")
        table.locator("tbody tr", has_text=partition).first.wait_for()  # rows load after the head
        header = [c.strip() for c in table.locator("thead th").all_inner_texts()]
        result, column = header.index("Evaluation result"), header.index("Partition")
        for row in table.locator("tbody tr").all():  # newest first
            cells = [c.strip() for c in row.locator("td").all_inner_texts()]
            if len(cells) > max(result, column) and cells[column] == partition:
                return cells[result]
        raise AssertionError(f"no execution of {check} on {partition} in the UI")


@contextmanager
def browser_ui(url: str, name: str) -> Iterator[DagsterUI]:
    """A DagsterUI on a fresh chromium page; screenshots in test-results/screenshots/<name>."""
    from playwright.sync_api import sync_playwright

    chromium = require_chromium()
    shots = SCREENSHOTS / name
    shutil.rmtree(shots, ignore_errors=True)
    shots.mkdir(parents=True)
    _skip_first_visit_dialog(url)
    with sync_playwright() as playwright:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start
        browser = playwright.chromium.launch(executable_path=str(chromium), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(30_000)
            ui = DagsterUI(page, url, shots)
            try:
                yield ui
            except BaseException:
                ui.shot("failure")
                raise
        finally:
            browser.close()


def _skip_first_visit_dialog(url: str) -> None:
    """What the "Join the Dagster community" dialog's Skip sends (its SetNuxSeen mutation), done
    before any page opens. The dialog opens a second after a page has loaded: on a loaded machine
    it came after the test had looked for it and covered the next dialog the test clicked in."""
    assert DagsterWeb(url=url.rstrip("/")).query("mutation SetNuxSeen { setNuxSeen }")["setNuxSeen"]
