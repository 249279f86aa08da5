"""The JVM jars tidelake runs on: the jar cache, its install step, and the classpaths read from it.

jvm/pom.xml lists every JVM artifact with its version (Spark's Kafka source, Delta, the Kafka
broker and its Log4j2 backend). `tidelake install-jars` (run by `make venv`, so by `make dev` and
`make test`) builds tidelake's own JVM modules and resolves the rest with Maven into the jar
cache, offline first so that a warm ~/.m2 needs no network, and drops Spark-side jars whose
artifact pyspark already ships (a second copy of jackson, slf4j or zstd-jni on the classpath is a
conflict waiting to happen). Nothing is fetched at run time: a session or broker without the
cache fails with the command to run. The JVM build ships inside the package (`tidelake/jvm`
beside `tidelake/protos`), so an installed wheel builds the same jars as a clone.

The cache lives in the virtualenv (`<venv>/share/tidelake/jars`), so it matches the installed
pyspark and goes with `make clean`; TIDELAKE_JARS_DIR points elsewhere.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tidelake.streaming.errors import SetupError
from tidelake.streaming.settings import host_settings

SPARK_FOLDER = "spark"
BROKER_FOLDER = "kafka-broker"
INGEST_FOLDER = "ingest-service"
FOLDERS = (SPARK_FOLDER, BROKER_FOLDER, INGEST_FOLDER)
# the version starts at the first "-<digits>" followed by a dot or the end ("-0-10_2.13" in
# spark-sql-kafka-0-10_2.13-4.2.0.jar is part of the name; versions hold no underscore)
_JAR_NAME = re.compile(r"^(?P<artifact>.+?)-(?P<version>\d+(?:\.[^_]*)?)\.jar$")


class JavaMissingError(SetupError, RuntimeError):
    """No Java 17+ where tidelake looks for it."""


def java_executable() -> str:
    """$JAVA_HOME/bin/java, else java on PATH (JDK 17+): how every JVM tidelake starts is found."""
    home = os.environ.get("JAVA_HOME", "").strip()
    candidate = Path(home) / "bin" / "java" if home else None
    if candidate is not None and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which("java")
    if found is None:
        raise JavaMissingError(
            "tidelake's JVM processes (Spark, the local Kafka broker, the ingest service) need "
            "Java 17+: set JAVA_HOME or put it on PATH"
        )
    return found


class JarsMissingError(SetupError, RuntimeError):
    """The jar cache is absent or incomplete; the message says how to fill it."""


def jars_home() -> Path:
    """The jar cache: $TIDELAKE_JARS_DIR, default <virtualenv>/share/tidelake/jars."""
    configured = host_settings().jars_dir
    return configured or Path(sys.prefix) / "share" / "tidelake" / "jars"


def _jars(folder: str, required: tuple[str, ...]) -> list[Path]:
    root = jars_home() / folder
    jars = sorted(root.glob("*.jar")) if root.is_dir() else []
    present = {artifact_id(j.name) for j in jars}
    missing = [name for name in required if name not in present]
    if missing:
        raise JarsMissingError(
            f"the jar cache {root} lacks {', '.join(missing)}: run `tidelake install-jars` "
            "(`make venv` in a clone) to build and fetch the JVM artifacts"
        )
    return jars


def spark_jars() -> list[Path]:
    """Jars every tidelake SparkSession loads: the Kafka source and Delta, with dependencies."""
    return _jars(
        SPARK_FOLDER,
        (
            "spark-sql-kafka-0-10_2.13",
            "delta-spark_2.13",
            "kafka-clients",
            "tidelake-spark-extensions",
        ),
    )


def broker_classpath() -> str:
    """The Java classpath of the local Kafka broker."""
    jars = _jars(BROKER_FOLDER, ("kafka_2.13", "kafka-clients", "log4j-core"))
    return os.pathsep.join(str(j) for j in jars)


def ingest_classpath() -> str:
    """The Java classpath of the ingest service (jvm/ingest-service)."""
    jars = _jars(INGEST_FOLDER, ("tidelake-ingest-service", "grpc-netty-shaded", "kafka-clients"))
    return os.pathsep.join(str(j) for j in jars)


def artifact_id(jar_name: str) -> str:
    """The Maven artifactId of a jar file named artifact-version.jar ("scala-library-2.13.17.jar"
    -> "scala-library")."""
    match = _JAR_NAME.match(jar_name)
    return match.group("artifact") if match else jar_name.removesuffix(".jar")


def pyspark_artifacts() -> set[str]:
    """ArtifactIds of the jars the pyspark wheel ships (its own classpath)."""
    import pyspark

    return {artifact_id(j.name) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}


@dataclass(frozen=True)
class InstallReport:
    jars: int
    dropped: tuple[str, ...]
    size_bytes: int
    seconds: float
    offline: bool


def jvm_build() -> Path:
    """tidelake's JVM build (the poms, the Java sources): jvm/ of a clone, tidelake/jvm of an
    installed wheel. Both sit beside protos/, which the ingest service's build compiles."""
    return Path(__file__).resolve().parents[2] / "jvm"


def install(target: Path | None = None) -> InstallReport:
    """Build and resolve the JVM build's artifacts into the jar cache (replaced whole, atomically
    per folder).

    Maven works on a temporary copy of the build (and of the .proto files it compiles), so
    neither a clone nor an installed package gets target/ folders. Tries Maven offline first
    (a warm ~/.m2), then online. Raises RuntimeError with Maven's own error lines when neither
    resolves.
    """
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("mvn (Maven 3.8+) is not on PATH; install it (Debian package maven)")
    source = jvm_build()
    if not (source / "pom.xml").is_file():
        raise RuntimeError(f"no JVM build at {source}: the tidelake package is incomplete")
    target = target or jars_home()
    target.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=target))
    staging = work / "jars"
    try:
        pom = _copy_build(source, work)
        offline = True
        result = _copy_dependencies(mvn, pom, staging, offline=True)
        if result.returncode != 0:
            offline = False
            shutil.rmtree(staging, ignore_errors=True)
            result = _copy_dependencies(mvn, pom, staging, offline=False)
        if result.returncode != 0:
            errors = [line for line in result.stdout.splitlines() if "ERROR" in line][:5]
            raise RuntimeError(
                f"Maven could not build {source / 'pom.xml'}:\n"
                + "\n".join(errors or [result.stdout])
            )
        shipped = pyspark_artifacts()
        dropped = []
        for jar in sorted((staging / SPARK_FOLDER).glob("*.jar")):
            if artifact_id(jar.name) in shipped:
                dropped.append(jar.name)
                jar.unlink()
        for folder in FOLDERS:
            _swap_in(staging / folder, target / folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    jars = [j for f in FOLDERS for j in (target / f).glob("*.jar")]
    return InstallReport(
        jars=len(jars),
        dropped=tuple(dropped),
        size_bytes=sum(j.stat().st_size for j in jars),
        seconds=time.monotonic() - started,
        offline=offline,
    )


def _copy_build(source: Path, work: Path) -> Path:
    """Copy the JVM build and the .proto files into work (jvm/, protos/); the copy's root pom."""
    shutil.copytree(source, work / "jvm", ignore=shutil.ignore_patterns("target"))
    protos = work / "protos"
    protos.mkdir()
    for proto in (source.parent / "protos").glob("*.proto"):
        shutil.copy2(proto, protos)
    return work / "jvm" / "pom.xml"


def _copy_dependencies(
    mvn: str, pom: Path, out: Path, *, offline: bool
) -> subprocess.CompletedProcess[str]:
    command = [mvn, "-B", "-q", "-f", str(pom), f"-Dtidelake.jars={out}"]
    command += ["-o"] if offline else []
    # package builds tidelake's own modules before their jars are copied; their JUnit tests run
    # in `make jvm-test`, which exports the data they check the Java against
    command += ["-DskipTests", "package", "dependency:copy-dependencies"]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def _swap_in(new: Path, current: Path) -> None:
    if not new.is_dir():
        raise RuntimeError(f"Maven produced no {new.name} jars")
    old = current.with_name(f".old-{current.name}-{os.getpid()}")
    if current.exists():
        current.rename(old)
    new.rename(current)
    shutil.rmtree(old, ignore_errors=True)
