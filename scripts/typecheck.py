"""Type-check tidelake with mypy in one run: strict on tidelake.streaming (the engine, by
pyproject.toml's per-module flags), checked function bodies in the Dagster layers.

mypy cannot follow the editable install's package-dir mapping (platform/ is tidelake.platform),
so this lays the folders out as the `tidelake` package in a temporary directory of symlinks and
checks that.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("protos", "streaming", "assets", "platform")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="tidelake-typecheck-") as tmp:
        root = Path(tmp) / "tidelake"
        root.mkdir()
        (root / "__init__.py").touch()
        for name in PACKAGES:
            (root / name).symlink_to(REPO / name)
        mypy = [sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml")]
        checked = [name for name in PACKAGES if name != "protos"]  # protoc's code: imported only
        packages = [arg for name in checked for arg in ("-p", f"tidelake.{name}")]
        return subprocess.run([*mypy, *packages], cwd=tmp, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
