"""A use case's table schema before its table exists, so that the Dagster UI lists its columns
with their types from the code location's first load, as it lists a flow's.

The function is planned, never run: Spark analyses it over an empty table of its input's schema
(the flow's table, or the table of the use case it reads), through the same code its writers
use (output.function_rows, output.stored_schema). A code location holds no JVM, so the
planning runs in a subprocess, one Spark session for every use case missing, and each schema is
cached in TIDELAKE_CACHE by a fingerprint of what decides it: the declaration, the source of the
function's module, the input's schema, tidelake's shaping rules and Spark's version. A use case
whose function cannot be planned (it raises, or cannot be handed to the subprocess) keeps its
declared column docs without types, and its stream's start reports the error.

    python -m tidelake.streaming.usecase.planned_schema REQUESTS RESULTS   (the subprocess)
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import logging
import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from datetime import date
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake
from pyspark import __version__ as spark_version
from pyspark import cloudpickle

from tidelake.streaming.flow.table_schema import table_schema
from tidelake.streaming.settings import host_settings
from tidelake.streaming.usecase import output
from tidelake.streaming.usecase.daily import DaySource, day_rows
from tidelake.streaming.usecase.inputs import stream_input
from tidelake.streaming.usecase.spec import UseCaseSpec

log = logging.getLogger(__name__)

PLANNING_TIMEOUT_S = 300.0
RETRY_AFTER_S = 3600.0
"""A use case whose planning failed is planned again after this long (or once it changed)."""
PLANNED_DAY = date(2000, 1, 1)
"""The day a Daily use case is planned for (its input is empty: any day)."""


@dataclasses.dataclass(frozen=True)
class PlanRequest:
    use_case: UseCaseSpec
    source: DaySource
    fingerprint: str


def planned_schemas(
    wanted: Sequence[tuple[UseCaseSpec, DaySource]], existing: Mapping[str, pa.Schema]
) -> dict[str, pa.Schema]:
    """The planned table schema of each use case in `wanted` (use cases before those reading
    them), from the cache or planned now; `existing` holds the schemas of the tables that exist
    (what a use case reading one of them is planned over). A use case that cannot be planned is
    left out, with a warning, and not planned again for RETRY_AFTER_S."""
    host = host_settings()
    if not host.plan_use_case_schemas:
        return {}
    folder = host.cache_dir / "use-case-schemas"
    fingerprints: dict[str, str] = {}
    found: dict[str, pa.Schema] = {}
    missing: list[PlanRequest] = []
    for use_case, source in wanted:
        upstream = _input_fingerprint(source, existing, fingerprints)
        if upstream is None:
            continue
        fingerprints[use_case.name] = _fingerprint(use_case, upstream)
        cached = folder / f"{fingerprints[use_case.name]}.arrow"
        if cached.exists():
            found[use_case.name] = pa.ipc.read_schema(pa.py_buffer(cached.read_bytes()))
        elif not _failed_lately(cached.with_suffix(".failed")):
            missing.append(PlanRequest(use_case, source, fingerprints[use_case.name]))
    if not missing:
        return found
    outcomes = _plan_in_subprocess(missing, {**existing, **found}, folder)
    for request in missing:
        outcome = outcomes.get(request.use_case.name, "not planned")
        if isinstance(outcome, str):
            log.warning("use case %s: columns without types: %s", request.use_case.name, outcome)
            failed = folder / f"{request.fingerprint}.failed"
            _write_whole(failed, outcome.encode())  # not tried again by every process at once
        else:
            found[request.use_case.name] = outcome
    return found


def _failed_lately(marker: Path) -> bool:
    """Planning failed within RETRY_AFTER_S (each process loading the definitions, every run
    worker among them, would otherwise start a JVM to fail again)."""
    try:
        return time.time() - marker.stat().st_mtime < RETRY_AFTER_S
    except FileNotFoundError:
        return False


def _write_whole(path: Path, data: bytes) -> None:
    """Write path so that a concurrent reader finds it whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f"{path.suffix}.{os.getpid()}.tmp")
    partial.write_bytes(data)
    partial.replace(path)


def _input_fingerprint(
    source: DaySource, existing: Mapping[str, pa.Schema], planned: Mapping[str, str]
) -> str | None:
    if source.reads is None:
        return _digest(table_schema(source.flow).serialize().to_pybytes())
    if source.reads.name in existing:
        return _digest(existing[source.reads.name].serialize().to_pybytes())
    return planned.get(source.reads.name)


def _fingerprint(use_case: UseCaseSpec, input_fingerprint: str) -> str:
    function = use_case.function
    module = sys.modules.get(function.__module__)
    try:
        module_source = inspect.getsource(module) if module is not None else ""
    except (OSError, TypeError):  # no source: the function's own bytecode then
        module_source = function.__code__.co_code.hex()
    declared = {
        f.name: repr(getattr(use_case, f.name))
        for f in dataclasses.fields(use_case)
        if f.name != "function"
    }
    parts = [
        repr(sorted(declared.items())),
        f"{function.__module__}.{function.__qualname__}",
        module_source,
        input_fingerprint,
        inspect.getsource(output),
        spark_version,
    ]
    return _digest("\n".join(parts).encode())


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


def _plan_in_subprocess(
    requests: list[PlanRequest], known: Mapping[str, pa.Schema], folder: Path
) -> dict[str, pa.Schema | str]:
    """Plan `requests` in one subprocess, which caches each schema in `folder`: each use case's
    schema, or why it has none."""
    names = [r.use_case.name for r in requests]
    try:
        payload = cloudpickle.dumps((requests, dict(known), str(folder)))  # type: ignore[no-untyped-call]
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        return dict.fromkeys(names, f"not picklable: {exc}")
    with tempfile.TemporaryDirectory(prefix="tidelake-plan-") as work:
        given, results = Path(work) / "requests", Path(work) / "results"
        given.write_bytes(payload)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        command = [sys.executable, "-m", __name__, str(given), str(results)]
        try:
            done = subprocess.run(
                command, env=env, capture_output=True, text=True, timeout=PLANNING_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            return dict.fromkeys(names, f"planning took over {PLANNING_TIMEOUT_S:.0f} s")
        if done.returncode != 0 or not results.exists():
            tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
            return dict.fromkeys(names, f"the planning process failed: {tail[0]}")
        outcomes: dict[str, bytes | str] = pickle.loads(results.read_bytes())
    return {
        name: outcome if isinstance(outcome, str) else pa.ipc.read_schema(pa.py_buffer(outcome))
        for name, outcome in outcomes.items()
    }


def plan(
    requests: list[PlanRequest], known: dict[str, pa.Schema], folder: Path
) -> dict[str, bytes | str]:
    """In the subprocess: each request's schema (serialized) or why it could not be planned,
    each schema also written to the cache."""
    from tidelake.streaming.spark.session import build_spark_session

    spark = build_spark_session("local[1]", {"spark.driver.memory": "512m"}, "tidelake-plan")
    outcomes: dict[str, bytes | str] = {}
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tidelake-plan-inputs-") as work:
        for request in requests:
            use_case, source = request.use_case, request.source
            read = source.flow.name if source.reads is None else source.reads.name
            schema = table_schema(source.flow) if source.reads is None else known.get(read)
            if schema is None:
                outcomes[use_case.name] = f"the schema of its input {read} is unknown"
                continue
            uri = str(Path(work) / use_case.name)
            write_deltalake(uri, schema.empty_table(), partition_by=[source.day_column])
            try:
                if use_case.streaming:
                    given = stream_input(spark, uri, source.flow, use_case)
                    shaped = output.function_rows(use_case, given)
                else:
                    given = day_rows(spark, source, uri, PLANNED_DAY, 0)
                    shaped = output.function_rows(use_case, given, PLANNED_DAY)
                planned = output.stored_schema(use_case, shaped)
            except Exception as exc:  # the function's own error: reported by its stream
                first = (str(exc).strip().splitlines() or [""])[0]
                outcomes[use_case.name] = f"{type(exc).__name__}: {first}"
                continue
            known[use_case.name] = planned
            serialized = planned.serialize().to_pybytes()
            _write_whole(folder / f"{request.fingerprint}.arrow", serialized)
            outcomes[use_case.name] = serialized
    spark.stop()
    return outcomes


if __name__ == "__main__":
    requests, known, cache = pickle.loads(Path(sys.argv[1]).read_bytes())
    Path(sys.argv[2]).write_bytes(pickle.dumps(plan(requests, known, Path(cache))))
