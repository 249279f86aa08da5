"""tidelake installed as a team would install it: from its wheel, outside the clone, into the
virtualenv of the team's own Dagster project (tests/fixtures/team_project), whose flow streams.

The wheel is built from a copy of the clone's files (a stale build/ folder cannot leak into it)
and installed without its dependencies: the suite's virtualenv lends them through a .pth line,
so the same pinned versions are used and no 1.5 GB of wheels is unpacked again. tidelake itself
comes only from the wheel (the suite's editable install is not visible there: a .pth file in a
folder named by another .pth is not read), which the first test checks.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from deltalake.exceptions import TableNotFoundError
from lake_readers import read_delta

from tidelake.platform.dev.dagster_web import wait_for
from tidelake.streaming.kafka.admin import delete_topic

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TEAM_PROJECT = REPO / "tests" / "fixtures" / "team_project"
NOT_SHIPPED = shutil.ignore_patterns(
    ".git", ".venv", "build", "*.egg-info", "__pycache__", "target", ".tidelake", "test-results",
    "bench-results", ".ruff_cache", ".pytest_cache", ".mypy_cache",
)  # fmt: skip


@dataclass(frozen=True)
class TeamProject:
    root: Path
    python: Path
    env: dict[str, str]

    def run(self, *args: str | Path, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(a) for a in args],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    def start(self, *args: str | Path, log: Path) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            return subprocess.Popen(
                [str(a) for a in args], cwd=self.root, env=self.env, stdout=out, stderr=out
            )

    def bin(self, name: str) -> Path:
        return self.python.parent / name


def _generated_message(path: Path, name: str) -> Any:
    """A message class of the team's generated code, loaded by path under a private module name
    (importing `team_flows` would leave the team's package in this process's sys.modules)."""
    spec = importlib.util.spec_from_file_location(f"_test_team_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def _checked(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"{result.args} exited {result.returncode}:\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory, kafka_conf: dict[str, Any]) -> TeamProject:
    """The team's project in an empty folder, its .venv holding tidelake's wheel, its flow's
    Python generated from its .proto as the team would (grpc_tools.protoc)."""
    work = tmp_path_factory.mktemp("package")
    source = work / "tidelake-src"
    shutil.copytree(REPO, source, ignore=NOT_SHIPPED)
    wheels = work / "wheels"
    _checked(
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", wheels, source],
            capture_output=True,
            text=True,
            check=False,
        )
    )
    (wheel,) = wheels.glob("tidelake-*.whl")
    root = work / "team_project"
    shutil.copytree(TEAM_PROJECT, root)
    _checked(subprocess.run([sys.executable, "-m", "venv", root / ".venv"], capture_output=True))
    python = root / ".venv" / "bin" / "python"
    purelib = _checked(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
        )
    ).strip()
    Path(purelib, "suite_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("TIDELAKE_", "PYTHON", "VIRTUAL"))
    }
    env |= {
        "PATH": f"{python.parent}{os.pathsep}{env['PATH']}",
        "VIRTUAL_ENV": str(python.parent.parent),
        "TIDELAKE_FLOW_MODULES": "team_flows.flows",
        "TIDELAKE_USE_CASE_MODULES": "team_flows.use_cases",
        "KAFKA_BOOTSTRAP_SERVERS": kafka_conf["bootstrap.servers"],
    }
    project = TeamProject(root, python, env)
    _checked(project.run(python, "-m", "pip", "install", "-q", "--no-deps", wheel))
    _checked(project.run(python, "-m", "pip", "install", "-q", "--no-deps", "-e", root))
    _checked(
        project.run(
            python, "-m", "grpc_tools.protoc", "-I.", "--python_out=.", "team_flows/shipment.proto"
        )
    )
    return project


@pytest.fixture(scope="module")
def jars_installed(team: TeamProject) -> str:
    """`tidelake install-jars` in the empty project: Maven builds the JVM code the wheel ships."""
    return _checked(team.run(team.bin("tidelake"), "install-jars", timeout_s=900))


def test_install_jars_builds_the_jvm_code_from_the_wheel(
    team: TeamProject, jars_installed: str
) -> None:
    cache = team.root / ".venv" / "share" / "tidelake" / "jars"
    assert str(cache) in jars_installed
    built = {p.name.rsplit("-", 1)[0] for p in cache.glob("*/tidelake-*.jar")}
    assert built == {"tidelake-spark-extensions", "tidelake-ingest-service"}
    assert not list(team.root.rglob("target")), "the build leaves no target/ behind"


def test_every_module_imports_from_the_wheel_alone(team: TeamProject, jars_installed: str) -> None:
    """Every module of the clone's layers is in the wheel and imports there (after install-jars:
    the definitions root builds its Spark resource from the jar cache)."""
    script = """
import importlib, json, pathlib, tidelake
(root,) = [pathlib.Path(p) for p in tidelake.__path__]
names = sorted(
    ".".join(("tidelake", *parts[: -1 if parts[-1] == "__init__" else None]))
    for parts in (p.relative_to(root).with_suffix("").parts for p in root.rglob("*.py"))
)
for name in names:
    importlib.import_module(name)
print(json.dumps({"root": str(root), "modules": names}))
"""
    installed = json.loads(_checked(team.run(team.python, "-c", script)))
    assert Path(installed["root"]).is_relative_to(team.root / ".venv")
    assert set(installed["modules"]) == clone_modules()


def clone_modules() -> set[str]:
    """tidelake.<layer>.<module> for every Python file of the clone's layers."""
    names = set()
    for layer in ("protos", "streaming", "assets", "platform"):
        for path in (REPO / layer).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            names.add(".".join(("tidelake", *parts[: -1 if parts[-1] == "__init__" else None])))
    return names


def test_dagster_loads_the_teams_flow(team: TeamProject, jars_installed: str) -> None:
    dg_cli = "import sys; from dagster_dg_cli.cli import main; sys.exit(main())"
    result = team.run(team.python, "-c", dg_cli, "check", "defs", timeout_s=300)
    assert result.returncode == 0, result.stdout + result.stderr
    listed = _checked(team.run(team.python, "-c", dg_cli, "list", "defs", "--json"))
    assert '"shipments_stream"' in listed and '"lake/shipments"' in listed
    assert '"lake/heavy_parcels"' in listed  # the team's use case, on its flow


@pytest.fixture
def shipments_topic(kafka_conf: dict[str, Any]) -> Iterator[str]:
    delete_topic(kafka_conf, "shipments")
    yield "shipments"
    delete_topic(kafka_conf, "shipments")


def test_the_teams_flow_streams_into_its_table(
    team: TeamProject, jars_installed: str, kafka_conf: dict[str, Any], shipments_topic: str
) -> None:
    """`tidelake stream shipments` from the team's folder: every event lands once; then
    `tidelake stream heavy_parcels`, the team's use case (a declaration and a function in its
    own package, no engine code), appends the heavy ones to its table."""
    Shipment = _generated_message(team.root / "team_flows" / "shipment_pb2.py", "Shipment")
    now_ms = int(time.time() * 1000)
    keys = [f"SH{n:05d}" for n in range(200)]
    create = team.run(team.bin("tidelake"), "topics", "create", "shipments")
    assert create.returncode == 0, create.stderr
    producer = Producer({**kafka_conf, "enable.idempotence": True})
    for n, key in enumerate(keys):
        weight = float(n % 20)
        event = Shipment(shipment_id=key, carrier="DHL", shipped_at_ms=now_ms - n, weight_kg=weight)
        producer.produce(shipments_topic, key=key, value=event.SerializeToString())
    assert producer.flush(30) == 0
    _checked(
        team.run(team.bin("tidelake"), "stream", "shipments", "--available-now", timeout_s=600)
    )
    table = read_delta(team.root / ".tidelake" / "lake" / "shipments")
    assert sorted(table.column("shipment_id").to_pylist()) == keys

    heavy = sorted(k for n, k in enumerate(keys) if n % 20 >= 10)
    uri = team.root / ".tidelake" / "lake" / "heavy_parcels"
    log = team.root / "heavy_parcels.log"
    proc = team.start(team.bin("tidelake"), "stream", "heavy_parcels", log=log)

    def landed() -> list[str] | None:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            found = sorted(read_delta(uri).column("shipment_id").to_pylist())
        except TableNotFoundError:
            return None
        return found if len(found) >= len(heavy) else None

    try:
        found = wait_for(landed, 300, f"{len(heavy)} rows in heavy_parcels", 1)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    assert found == heavy
