"""Every module of the layers is in docs/layout.md, by its path inside its layer, and every
path the page names exists: the map cannot drift from the tree."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LAYOUT = REPO / "docs" / "layout.md"
LAYERS = ("streaming", "assets", "platform")
GENERATED = ("_pb2.py", "_pb2_grpc.py")


def modules() -> dict[str, list[str]]:
    """Layer -> its modules' paths inside it (`storage/uri.py`), __init__ and generated aside."""
    return {
        layer: sorted(
            path.relative_to(REPO / layer).as_posix()
            for path in (REPO / layer).rglob("*.py")
            if path.name != "__init__.py" and not path.name.endswith(GENERATED)
        )
        for layer in LAYERS
    }


def test_every_module_is_on_the_map() -> None:
    page = LAYOUT.read_text()
    missing = [
        f"{layer}/{module}"
        for layer, names in modules().items()
        for module in names
        if f"`{module}`" not in page
    ]
    assert not missing, f"add these to {LAYOUT.name}: {missing}"


def test_every_module_the_map_names_exists() -> None:
    named = set(re.findall(r"`([a-z_/]+\.py)`", LAYOUT.read_text()))
    tree = [
        path.relative_to(REPO).as_posix()
        for folder in (*LAYERS, "protos", "bench", "scripts", "tests")
        for path in (REPO / folder).rglob("*.py")
    ]
    gone = sorted(n for n in named if not any(f"/{p}".endswith(f"/{n}") for p in tree))
    assert not gone, f"{LAYOUT.name} names modules that do not exist: {gone}"
