"""Every variable tidelake reads is documented, and every documented one is read: the settings
classes, the CLI's environment options and the names in the code are checked against the
manual's tables, so neither can drift from the other."""

from __future__ import annotations

import re
from pathlib import Path

from tidelake.platform.cli import main
from tidelake.streaming.schemas.registry_client import ENV_PREFIX as REGISTRY_PREFIX
from tidelake.streaming.settings import EngineSettings, HostSettings

REPO = Path(__file__).resolve().parents[2]
MANUAL = [REPO / "docs" / "running.md", REPO / "docs" / "ingest-service.md"]
CODE = [REPO / name for name in ("platform", "streaming", "assets")]
VARIABLE = re.compile(r"\bTIDELAKE_[A-Z0-9_]+[A-Z0-9]\b")


def read_by_tidelake() -> set[str]:
    names = {f"TIDELAKE_{field.upper()}" for field in EngineSettings.model_fields}
    names |= {f"TIDELAKE_{field.upper()}" for field in HostSettings.model_fields}
    for command in main.commands.values():
        for param in command.params:
            envvars = param.envvar if isinstance(param.envvar, list) else [param.envvar]
            names |= {e for e in envvars if isinstance(e, str) and e.startswith("TIDELAKE_")}
    for folder in CODE:
        for source in folder.rglob("*.py"):
            names |= set(re.findall(r'"(TIDELAKE_[A-Z0-9_]+[A-Z0-9])"', source.read_text()))
    return names


def documented() -> set[str]:
    return {name for page in MANUAL for name in VARIABLE.findall(page.read_text())}


def test_every_variable_tidelake_reads_is_in_the_manual() -> None:
    assert read_by_tidelake() - documented() == set()


def test_every_variable_in_the_manual_is_read() -> None:
    # every TIDELAKE_SCHEMA_REGISTRY_<SETTING> is handed to the registry client, as KAFKA_* are
    passed_through = {name for name in documented() if name.startswith(REGISTRY_PREFIX)}
    assert documented() - read_by_tidelake() - passed_through == set()
