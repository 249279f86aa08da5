"""A local Confluent-compatible schema registry for local runs and the tests: Apicurio Registry.

Apicurio Registry (Apache-2.0) is a Quarkus application; Maven Central serves its application jar
but no runnable build, so jvm/schema-registry/pom.xml re-augments it with the Quarkus Maven
plugin into `quarkus-app/quarkus-run.jar`. `tidelake install-schema-registry` builds that once
into the cache (about a minute from a cold ~/.m2, nothing after); nothing is downloaded at run
time. The registry answers the Confluent Schema Registry API under /apis/ccompat/v7 (`url`),
which confluent_kafka's SchemaRegistryClient takes as its url.

Version 2.4.2.Final, not 3.x: Central lacks most of 3.x's sibling modules (pom.xml says which).
Two limits of that version, both in Apicurio's issue tracker: a Protobuf schema registered as a
base64 FileDescriptorProto (what confluent_kafka's ProtobufSerializer auto-registers) is stored
and served as is, but compatibility checks against it fail with HTTP 500 (the checker parses
.proto text only), so register .proto text where compatibility matters; and `?format=serialized`
is ignored (text comes back as text). There is no simple basic auth (its auth needs an OIDC
server), so the registry listens on 127.0.0.1 only.

One JVM per registry, on a free port of 127.0.0.1, with a bounded heap and its log in its own
folder; its storage is an in-memory H2 database, or an H2 file in a kept data folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from tidelake.platform.local.ports import LOOPBACK, free_port
from tidelake.platform.local.server_process import LocalServerProcess
from tidelake.streaming.errors import SetupError, TidelakeError
from tidelake.streaming.settings import host_settings
from tidelake.streaming.spark.jars import java_executable, jvm_build

APICURIO_VERSION = "2.4.2.Final"
CCOMPAT_PATH = "/apis/ccompat/v7"
DEFAULT_HEAP_MB = 256


class RegistryServerError(TidelakeError, RuntimeError):
    """The local schema registry could not be built, started or reached."""


class RegistryServerMissingError(SetupError, RegistryServerError):
    """The registry is not built yet; the message says how to build it."""


def schema_registry_home() -> Path:
    """Where the built registry lives: the cache, outside any clone, so one build serves every
    clone and virtualenv of this machine."""
    cache = host_settings().cache_dir
    return cache / "schema-registry" / APICURIO_VERSION


def schema_registry_jar() -> Path:
    return schema_registry_home() / "quarkus-app" / "quarkus-run.jar"


def require_schema_registry() -> Path:
    jar = schema_registry_jar()
    if not jar.is_file():
        raise RegistryServerMissingError(
            f"the local schema registry (Apicurio Registry) is not built at {jar}: run "
            "`tidelake install-schema-registry` (once per machine, ~1 minute)"
        )
    return jar


def install_schema_registry(report: Callable[[str], object] | None = print) -> Path:
    """Build the registry with Maven into the cache unless it is there; returns quarkus-run.jar.

    The module is jvm/schema-registry of tidelake's JVM build (a clone's or the installed
    package's), built in a temporary copy, so neither gets a target/ folder."""
    jar = schema_registry_jar()
    if jar.is_file():
        return jar
    pom = jvm_build() / "schema-registry" / "pom.xml"
    if not pom.is_file():
        raise RegistryServerError(f"no {pom}: the tidelake package is incomplete")
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RegistryServerError("building the local schema registry needs Maven 3.8+ on PATH")
    home = schema_registry_home()
    work = Path(tempfile.mkdtemp(prefix="tidelake-schema-registry-"))
    module = work / "module"
    shutil.copytree(pom.parent, module, ignore=shutil.ignore_patterns("target"))
    started = time.monotonic()
    if report:
        report(f"building Apicurio Registry {APICURIO_VERSION} into {home} (once; ~1 minute)")
    try:
        built = subprocess.run(
            [
                mvn,
                "-B",
                "-ntp",
                "-f",
                str(module / pom.name),
                "package",
                "-D%prod.quarkus.package.type=fast-jar",
            ],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
        if built.returncode != 0:
            raise RegistryServerError(
                f"building the local schema registry failed (mvn exit {built.returncode}): "
                f"{built.stdout[-3000:]}{built.stderr[-1000:]}"
            )
        home.mkdir(parents=True, exist_ok=True)
        part = home / "quarkus-app.part"
        shutil.rmtree(part, ignore_errors=True)
        shutil.move(module / "target" / "quarkus-app", part)
        part.rename(home / "quarkus-app")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if report:
        report(f"built {jar} in {time.monotonic() - started:.0f}s")
    return jar


class LocalSchemaRegistry(LocalServerProcess):
    """Apicurio Registry on a free port of 127.0.0.1, its Confluent API at `url`.

    Use as a context manager, or start() and stop(). Each instance has its own port, folder and
    log, so several can run side by side. A kept data_dir keeps the schemas (an H2 file) across
    restarts; without one they live in memory and go with stop().
    """

    temp_prefix = "tidelake-schema-registry-"
    log_name = "registry.log"

    def __init__(
        self,
        *,
        data_dir: Path | None = None,
        heap_mb: int = DEFAULT_HEAP_MB,
        startup_timeout_s: float = 60.0,
        stop_grace_s: float = 10.0,
    ) -> None:
        super().__init__(
            data_dir=data_dir, startup_timeout_s=startup_timeout_s, stop_grace_s=stop_grace_s
        )
        self._heap_mb = heap_mb
        self._port: int | None = None

    @property
    def base_url(self) -> str:
        """http://127.0.0.1:PORT, the registry's root (its own APIs, /health, the UI)."""
        if self._port is None:
            raise RegistryServerError("the local schema registry is not running; call start()")
        return f"http://{LOOPBACK}:{self._port}"

    @property
    def url(self) -> str:
        """The Confluent-compatible API, the url of a Schema Registry client."""
        return self.base_url + CCOMPAT_PATH

    def launch(self) -> None:
        if self._process is not None:
            raise RegistryServerError(f"the local schema registry already runs at {self.url}")
        jar = require_schema_registry()
        workdir = self._folder()
        self._port = free_port()
        storage = (
            f"jdbc:h2:file:{workdir / 'registry'}"
            if self._kept_dir is not None
            else "jdbc:h2:mem:registry_db"
        )
        # the app reads these two through its own prod-profile properties
        env = {**os.environ, "HTTP_PORT": str(self._port), "REGISTRY_DATASOURCE_URL": storage}
        self._spawn(
            [
                java_executable(),
                f"-Xmx{self._heap_mb}m",
                "-XX:+UseSerialGC",
                f"-Dquarkus.http.host={LOOPBACK}",
                f"-Djava.io.tmpdir={workdir}",
                "-jar",
                str(jar),
            ],
            env,
        )

    def wait_until_ready(self) -> None:
        """Until GET {url}/subjects answers (storage ready, REST endpoints up)."""

        def answers() -> None:
            with urllib.request.urlopen(self.url + "/subjects", timeout=2):
                pass  # an HTTP error status raises HTTPError, an OSError

        self._wait_answering(
            answers,
            what="the local schema registry",
            where=self.url,
            interval_s=0.1,
            not_yet=(OSError,),
            error=RegistryServerError,
        )

    def _cleanup(self) -> None:
        self._port = None
