"""The table asset's page as the UI opens it: the UI's own GraphQL documents, read from the
installed dagster-webserver's bundle, timed against a webserver."""

from __future__ import annotations

import re
import statistics
import time
from pathlib import Path

from .profiles import TABLE
from .site import graphql

PAGE_QUERIES = {
    # what the table asset's page asks for as it opens, its Events tab, its Checks tab and one
    # check's history, its Partitions tab, and the health badge
    "AssetGraphLiveQuery": {"assetKeys": [{"path": TABLE}]},
    "AssetOverviewMetadataEventsQuery": {"assetKey": {"path": TABLE}},
    "RecentAssetEventsQuery": {
        "assetKey": {"path": TABLE},
        "eventTypeSelectors": ["MATERIALIZATION", "OBSERVATION", "FAILED_TO_MATERIALIZE"],
        "limit": 100,
    },
    "AssetChecksQuery": {"assetKey": {"path": TABLE}},
    "AssetCheckDetailsQuery": {
        "assetKey": {"path": TABLE},
        "checkName": "stream_alive",
        "limit": 25,
    },
    "PartitionHealthQuery": {"assetKey": {"path": TABLE}},
    "AssetHealthQuery": {"assetKeys": [{"path": TABLE}]},
}


def ui_queries() -> dict[str, str]:
    """The UI's GraphQL documents of the asset page, with their fragments, from the installed
    dagster-webserver's bundle."""
    import dagster_webserver

    docs: dict[str, str] = {}
    bundle = Path(dagster_webserver.__file__).parent / "webapp/build/_next/static/chunks"
    pattern = re.compile(r'"(\\n\s*(?:query|fragment) [^"]*)"')
    for chunk in bundle.glob("*.js"):
        for m in pattern.finditer(chunk.read_text(errors="replace")):
            body = m.group(1).encode().decode("unicode_escape")
            name = re.match(r"\s*(?:query|fragment) (\w+)", body)
            if name:
                docs.setdefault(name.group(1), body)

    def resolve(name: str, seen: set[str]) -> list[str]:
        seen.add(name)
        out = [docs[name]]
        for spread in re.findall(r"\.\.\.\s*(\w+)", docs[name]):
            if spread in docs and spread not in seen and spread[0].isupper():
                out += resolve(spread, seen)
        return out

    found = {}
    for name in PAGE_QUERIES:
        text_ = "\n".join(resolve(name, set()))
        # fragments defined inline in the query's own template are not duplicated
        found[name] = dedupe_fragments(text_)
    return found


def dedupe_fragments(document: str) -> str:
    parts = re.split(r"(?=\n\s*(?:query|fragment) \w+)", document)
    seen, out = set(), []
    for part in parts:
        m = re.match(r"\s*(query|fragment) (\w+)", part)
        key = (m.group(1), m.group(2)) if m else None
        if key in seen:
            continue
        if key:
            seen.add(key)
        out.append(part)
    return "".join(out)


def time_page(url: str, queries: dict[str, str], repeats: int) -> dict[str, float]:
    out = {}
    for name, document in queries.items():
        graphql(url, document, PAGE_QUERIES[name])  # warm: the code location's snapshot
        runs = []
        for _ in range(repeats):
            started = time.perf_counter()
            graphql(url, document, PAGE_QUERIES[name])
            runs.append(time.perf_counter() - started)
        out[name] = min(runs) * 1000  # the machine is shared: the best of the runs
        out[f"{name}_median"] = statistics.median(runs) * 1000
    out["page_total_ms"] = sum(v for k, v in out.items() if not k.endswith("_median"))
    out["page_total_median_ms"] = sum(v for k, v in out.items() if k.endswith("_median"))
    return out
