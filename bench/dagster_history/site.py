"""An instance on disk (its DAGSTER_HOME, on SQLite or a new PostgreSQL database) and a
dagster-webserver serving it, asked through GraphQL."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import requests
import yaml

# the sensor's origin id is what the daemon keys its ticks by: no public API names it
from dagster._core.remote_representation.handle import CompoundID

from tidelake.platform.local.process_group import stop_group
from tidelake.streaming.polling import poll_until

from .profiles import REPO, SENSOR, Profile

sys.path.insert(0, str(REPO / "tests"))  # the tests' PostgreSQL server: one home for it
from local_postgres import LocalPostgres, local_postgres, postgres_bin

__all__ = ["local_postgres", "postgres_bin"]  # the server the command starts


@dataclass
class Site:
    """An instance on disk (its DAGSTER_HOME) and the storage it names."""

    home: Path
    storage: str

    def instance(self) -> dg.DagsterInstance:
        return dg.DagsterInstance.from_config(str(self.home))


def make_site(
    root: Path, name: str, storage: str, postgres: LocalPostgres | None, profile: Profile
) -> Site:
    home = root / name
    home.mkdir(parents=True)
    settings = yaml.safe_load((REPO / "platform/dev/dagster.yaml").read_text())
    settings.pop("retention", None)
    settings.update(profile.instance_settings)
    settings["sensors"] = {"use_threads": False}
    if storage == "postgres":
        assert postgres is not None
        settings["storage"] = {"postgres": {"postgres_url": postgres.new_database()}}
    (home / "dagster.yaml").write_text(yaml.safe_dump(settings))
    (home / "workspace.yaml").write_text((REPO / "workspace.yaml").read_text())
    return Site(home, storage)


@contextlib.contextmanager
def webserver(site: Site, env: dict[str, str]) -> Iterator[str]:
    from tidelake.platform.local.ports import free_port

    port = free_port()
    log = open(site.home / "webserver.log", "w")  # noqa: SIM115
    process = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("dagster-webserver")),
            "-w", str(site.home / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(port),
        ],
        cwd=REPO,
        env={**os.environ, **env, "DAGSTER_HOME": str(site.home)},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"

    def loaded() -> bool | None:
        if process.poll() is not None:
            raise RuntimeError(
                f"webserver exited: {(site.home / 'webserver.log').read_text()[-3000:]}"
            )
        return True if graphql(url, "query { assetNodes { id } }")["assetNodes"] else None

    try:
        poll_until(
            loaded,
            timeout_s=240,
            interval_s=1,
            timeout_error=lambda last: TimeoutError(
                f"webserver did not load the code location: {last}"
            ),
            not_yet=(requests.RequestException, KeyError, TypeError),
        )
        yield url
    finally:
        stop_group(process, 60)
        log.close()


def graphql(url: str, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    response = requests.post(
        f"{url}/graphql", json={"query": query, "variables": variables or {}}, timeout=600
    )
    body = response.json()
    if body.get("errors"):
        raise RuntimeError(f"GraphQL errors: {body['errors']}"[:3000])
    return body["data"]


def sensor_ids(url: str) -> tuple[str, str]:
    """The supervisor's origin id and selector id as the code location computes them."""
    data = graphql(
        url,
        """query($sel: SensorSelector!) { sensorOrError(sensorSelector: $sel) {
             ... on Sensor { sensorState { id selectorId } } } }""",
        {
            "sel": {
                "repositoryName": "__repository__",
                "repositoryLocationName": "tidelake",
                "sensorName": SENSOR,
            }
        },
    )["sensorOrError"]["sensorState"]
    return CompoundID.from_string(data["id"]).remote_origin_id, data["selectorId"]
