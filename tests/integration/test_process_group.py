"""The one stop of a process group (platform/local/process_group.py): its grace lasts until the
whole group has exited, not until its leader has."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tidelake.platform.local.process_group import stop_group
from tidelake.streaming.polling import poll_until

# a leader that SIGTERM ends at once, and its child, which shuts down in a second on SIGTERM
_CHILD = """
import signal, sys, time
from pathlib import Path
folder = Path(sys.argv[1])
def shut_down(*_):
    time.sleep(1.0)
    (folder / "shut-down").write_text("clean")
    sys.exit(0)
signal.signal(signal.SIGTERM, shut_down)
(folder / "ready").write_text("")
while True:
    time.sleep(1)
"""
_LEADER = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
while True:
    time.sleep(1)
"""


def test_a_child_finishing_its_shutdown_after_its_leader_exited_is_not_killed(
    tmp_path: Path,
) -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", _LEADER, _CHILD, str(tmp_path)], start_new_session=True
    )
    try:
        poll_until(
            lambda: True if (tmp_path / "ready").exists() else None,
            timeout_s=60,
            interval_s=0.05,
            timeout_error=lambda _: AssertionError("the child did not start in 60 s"),
        )
    finally:
        stop_group(process, grace_s=60)
    assert (tmp_path / "shut-down").read_text() == "clean"
