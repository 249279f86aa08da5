"""Imports point one way, as the README says: platform -> assets -> streaming -> protos, and
between the folders of a layer (a concern each) there is no cycle.

Every import counts, a function's lazy one too: it is a dependency all the same. A folder's
modules are one node (streaming/delta), a layer's root modules one node each
(streaming/settings).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("platform", "assets", "streaming", "protos")
"""Top to bottom: a layer imports only the layers below it."""

Edge = tuple[str, str]


def _node(parts: tuple[str, ...]) -> str:
    """The folder (or root module) a module path like ("streaming", "delta", "write") is in."""
    return "/".join(parts[:2])


def _imports() -> dict[Edge, str]:
    """(from node, to node) -> the first place that import is made."""
    edges: dict[Edge, str] = {}
    for layer in LAYERS[:-1]:
        for path in sorted((ROOT / layer).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            source = _node(parts)
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    if not name.startswith("tidelake."):
                        continue
                    target = _node(tuple(name.split(".")[1:]))
                    if target != source:
                        place = f"{path.relative_to(ROOT)}:{node.lineno}"
                        edges.setdefault((source, target), place)
    return edges


def _cycle(edges: dict[Edge, str]) -> list[str] | None:
    """A cycle of the graph as its nodes in order, or None."""
    graph: dict[str, list[str]] = defaultdict(list)
    for source, target in edges:
        graph[source].append(target)
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_layer_imports_a_layer_above_it() -> None:
    upward = [
        f"{source} -> {target} ({place})"
        for (source, target), place in sorted(_imports().items())
        if LAYERS.index(target.split("/")[0]) < LAYERS.index(source.split("/")[0])
    ]
    assert not upward, "imports against the layers' direction:\n" + "\n".join(upward)


def test_the_folders_import_each_other_without_cycles() -> None:
    edges = _imports()
    cycle = _cycle(edges)
    assert cycle is None, "a cycle of imports between folders:\n" + "\n".join(
        f"{a} -> {b} ({edges[(a, b)]})" for a, b in pairwise(cycle)
    )


def test_a_cycle_is_found_and_named() -> None:
    edges = {("a/x", "a/y"): "1", ("a/y", "a/z"): "2", ("a/z", "a/x"): "3", ("a/x", "b"): "4"}
    assert _cycle(edges) == ["a/x", "a/y", "a/z", "a/x"]
    assert _cycle({("a/x", "a/y"): "1", ("a/x", "b"): "2"}) is None
