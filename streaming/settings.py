"""Engine configuration from the environment, with local defaults.

Kafka: `KAFKA_BOOTSTRAP_SERVERS` names the cluster; every other `KAFKA_<NAME>` variable is passed
to librdkafka as `<name>` with underscores turned into dots (KAFKA_SECURITY_PROTOCOL=SASL_SSL,
KAFKA_SASL_MECHANISM=PLAIN, KAFKA_SASL_USERNAME=..., KAFKA_SSL_CA_LOCATION=...). Secrets are never
logged: use `redact()` before printing a client config.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict, SettingsError

from tidelake.streaming.errors import ConfigError
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.kafka.broker_state import broker_state_file, running_broker
from tidelake.streaming.storage.uri import is_object_store, join, storage_root

_SECRET_WORDS = ("password", "secret", "key", "token", "jaas")
_UNITS = "milliseconds?|seconds?|minutes?|hours?|days?"
_DURATION = re.compile(rf"\s*(\d+\s*({_UNITS})\s*)+", re.IGNORECASE)
"""What Spark's processing-time trigger parses: one or more '<number> <unit>' parts."""
_LOG_RETENTION = re.compile(r"\s*(?P<n>\d+)\s*(?P<unit>minutes?|hours?|days?)\s*", re.IGNORECASE)
"""A Delta log retention: one '<number> <unit>' that Delta's interval syntax also reads."""
_MIN_LOG_RETENTION_S = 3600
REREAD_AFTER_S = 300.0
"""How old a stream's kept-open snapshot of its table may be when a batch appends after it
(delta/commit.py). The log upkeep deletes only entries older than the log retention, which must
be longer (checked with TIDELAKE_DELTA_LOG_RETENTION), so a version created since the snapshot
was read is still there to refuse an append at its number."""
DELTA_CHECKPOINT_INTERVAL = 100
"""delta.checkpointInterval of tidelake's tables (delta-rs's default): a stream checkpoints its
table every 100 versions (delta/commit.py; measured in docs/benchmarks.md, issue 38)."""


def _seconds(n: int, unit: str) -> int:
    return n * {"m": 60, "h": 3600, "d": 86400}[unit[0].lower()]


def kafka_client_config(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """librdkafka settings of the cluster: KAFKA_BOOTSTRAP_SERVERS plus every other KAFKA_*
    variable, else the local broker that `tidelake broker` or `tidelake dev` runs on this machine
    (kafka/broker_state.py). Raises ConfigError naming both ways when neither is there.

    The one home of Kafka settings: the engine, Dagster's KafkaResource and the command line all
    take their client config from here."""
    env = os.environ if env is None else env
    bootstrap = env.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if not bootstrap:
        state_file = broker_state_file(host_settings().home)
        running = running_broker(state_file)
        if running is None:
            raise ConfigError(
                "no Kafka broker configured: set KAFKA_BOOTSTRAP_SERVERS=host:port for a "
                "cluster, or run `tidelake broker` in another terminal from this directory (it "
                f"records its address in {state_file.resolve()})"
            )
        bootstrap = running
    conf = {"bootstrap.servers": bootstrap}
    for name, value in env.items():
        if name.startswith("KAFKA_") and name != "KAFKA_BOOTSTRAP_SERVERS":
            conf[name[len("KAFKA_") :].lower().replace("_", ".")] = value
    return conf


def kafka_client_env(conf: Mapping[str, Any]) -> dict[str, str]:
    """The KAFKA_* variables that give a child process (or another shell) this client config:
    kafka_client_config's inverse. Holds the secrets as given: hand it to a process's
    environment, never to a log."""
    return {
        f"KAFKA_{name.upper().replace('.', '_')}": str(value)
        for name, value in conf.items()
        if isinstance(value, (str, int, float))
    }


def redact(conf: Mapping[str, str]) -> dict[str, str]:
    """A copy of a client config that is safe to log."""
    return {
        k: ("***" if any(word in k.lower() for word in _SECRET_WORDS) else v)
        for k, v in conf.items()
    }


class EngineSettings(BaseSettings):
    """Where the engine keeps its tables and checkpoints, and how it runs Spark."""

    model_config = SettingsConfigDict(env_prefix="TIDELAKE_", extra="ignore")

    lake: str = Field(
        default=".tidelake/lake",
        description="root of the Delta tables: a local folder or s3://bucket/prefix",
    )
    checkpoints: str = Field(
        default=".tidelake/checkpoints",
        description="root of the streams' checkpoints: a local folder or s3://bucket/prefix",
    )
    spark_master: str = Field(default="local[2]", description="Spark master URL")
    spark_conf: dict[str, str] = Field(
        default_factory=dict, description='extra Spark settings as JSON, e.g. {"spark.a": "1"}'
    )
    max_offsets_per_trigger: int = Field(
        default=500_000, ge=1, description="records per micro-batch at most (bounds memory)"
    )
    first_batch_offsets: int = Field(
        default=1_000,
        ge=1,
        description=(
            "records in a stream's first micro-batch after it starts at most: that batch runs "
            "on a cold JVM, so the first commit comes sooner (measured from process start: "
            "14.2 s with 250k records, 10.2 s with 10k, 9.4 s with 1k); later batches take "
            "max_offsets_per_trigger"
        ),
    )
    fail_on_data_loss: bool = Field(
        default=True,
        description=(
            "stop the stream when records it has not read yet are gone from Kafka (retention, "
            "deleted records); false skips them once, with a warning naming the offsets"
        ),
    )
    trigger_interval: str = Field(
        default="0 seconds", description="processing-time trigger between micro-batches"
    )
    first_date: date | None = Field(
        default=None,
        description=(
            "first UTC date (YYYY-MM-DD) of every flow's daily partitions, where this "
            "deployment's data starts; unset: each flow's declared first_date"
        ),
    )
    flow_modules: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description=(
            "comma-separated Python modules whose FLOWS (a list of FlowSpec) are declared "
            "besides tidelake's own: a deployment's flows in its own package"
        ),
    )
    use_case_modules: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description=(
            "comma-separated Python modules whose USE_CASES (a list of UseCaseSpec) are "
            "declared besides tidelake's own: a team's use cases in its own package"
        ),
    )
    create_topics: bool = Field(
        default=False,
        description=(
            "create a flow's missing topic (with its declared partitions) when its stream "
            "starts; `tidelake dev` turns it on, so a flow added to a running platform streams"
        ),
    )
    supervisor_interval: int = Field(
        default=20,
        ge=1,
        description=(
            "seconds between ticks of each stream's supervisor sensor: how soon a stopped stream "
            "is restarted and its health recorded (each tick is a row in Dagster's storage)"
        ),
    )
    automation_interval: int = Field(
        default=30,
        ge=1,
        description=(
            "seconds between evaluations of tidelake_automation: how soon a closed day is "
            "compacted and checked"
        ),
    )
    lake_retention_days: int = Field(
        default=60,
        ge=0,
        description=(
            "days of dates each flow's table and quarantine keep: the daily vacuum job deletes "
            "the dates more than this many days before today (UTC) and a backfill refuses them; "
            "0 keeps every date"
        ),
    )
    dagster_history_days: float = Field(
        default=30,
        gt=0,
        description=(
            "days of Dagster's history kept by the daily dagster_history_retention job: ended "
            "runs that hold nothing kept, log lines, observations and check evaluations older "
            "than this are deleted (materializations and each check's and asset's newest "
            "records stay); sensor and schedule ticks follow dagster.yaml's retention"
        ),
    )

    progress_log: Path | None = Field(
        default=None,
        description=(
            "a local folder where each stream appends every micro-batch's progress (Spark's "
            "progress JSON plus tidelake's write and commit times) to <query>.jsonl, rotated at "
            "16 MB with 4 old files kept; unset: none"
        ),
    )

    delta_log_retention: str = Field(
        default="24 hours",
        description=(
            "how much of a table's history is kept (time travel, a backfill's commit against "
            "the snapshot it read): '<number> <unit>', unit minutes, hours or days; set as "
            "delta.logRetentionDuration (the log upkeep job deletes older entries) and "
            "delta.deletedFileRetentionDuration (the tombstones every checkpoint carries) on "
            "every table tidelake creates or streams into. Longer than the longest backfill"
        ),
    )

    @field_validator("lake", "checkpoints", mode="before")
    @classmethod
    def _a_storage_root(cls, value: object, info: ValidationInfo) -> object:
        if isinstance(value, str | Path):
            return storage_root(value, f"TIDELAKE_{str(info.field_name).upper()}")
        return value

    @field_validator("flow_modules", "use_case_modules", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        if isinstance(value, str):
            return [name.strip() for name in value.split(",") if name.strip()]
        return value

    @field_validator("trigger_interval")
    @classmethod
    def _a_duration(cls, value: str) -> str:
        if not _DURATION.fullmatch(value):
            raise ValueError(
                f"expected a duration such as '0 seconds', '500 milliseconds' or '1 minute', "
                f"got {value!r}"
            )
        return value

    @field_validator("delta_log_retention")
    @classmethod
    def _a_log_retention(cls, value: str) -> str:
        match = _LOG_RETENTION.fullmatch(value)
        if not match:
            raise ValueError(
                f"expected one '<number> <unit>' (minutes, hours or days) such as '24 hours', "
                f"got {value!r}"
            )
        seconds = _seconds(int(match["n"]), match["unit"])
        if seconds < _MIN_LOG_RETENTION_S:
            raise ValueError(
                f"at least 1 hour (a backfill commits against the snapshot it read), got {value!r}"
            )
        if seconds <= REREAD_AFTER_S:
            raise ValueError(
                f"longer than {REREAD_AFTER_S:.0f} s, the age at which a stream reads its table "
                f"again (the log must keep every version since), got {value!r}"
            )
        return value

    def delta_log_retention_seconds(self) -> int:
        match = _LOG_RETENTION.fullmatch(self.delta_log_retention)
        assert match is not None  # validated
        return _seconds(int(match["n"]), match["unit"])

    def delta_table_properties(self) -> dict[str, str]:
        """The Delta table properties tidelake sets on the tables it creates or streams into:
        the history it keeps, for the log and for the tombstones of removed files (a tombstone
        older than the log protects no version a reader can still load)."""
        match = _LOG_RETENTION.fullmatch(self.delta_log_retention)
        assert match is not None  # validated
        interval = f"interval {match['n']} {match['unit'].lower()}"
        return {
            "delta.logRetentionDuration": interval,
            "delta.deletedFileRetentionDuration": interval,
            "delta.checkpointInterval": str(DELTA_CHECKPOINT_INTERVAL),
        }

    def require_usable_storage(self) -> None:
        """Refuse, before Spark starts, a lake or checkpoint root that is a file or cannot be
        written, or a lake on an S3 store that does not honour conditional PUTs."""
        for variable, root in (
            ("TIDELAKE_LAKE", self.lake),
            ("TIDELAKE_CHECKPOINTS", self.checkpoints),
        ):
            if is_object_store(root):
                continue
            folder = Path(root)
            existing = next(p for p in (folder, *folder.parents) if p.exists())
            if not existing.is_dir():
                raise ConfigError(f"{variable}: {existing} is a file, not a folder")
            if not os.access(existing, os.W_OK | os.X_OK):
                raise ConfigError(f"{variable}: {existing} is not writable by this user")
        if is_object_store(self.lake):
            # imported here: boto3 and pyarrow's S3 are for a lake on S3 only
            from tidelake.streaming.storage.conditional_put import require_conditional_put

            require_conditional_put(self.lake, "TIDELAKE_LAKE")

    def deployed(self, flow: FlowSpec) -> FlowSpec:
        """The flow as this deployment runs it: its partitions start at TIDELAKE_FIRST_DATE."""
        return flow if self.first_date is None else replace(flow, first_date=self.first_date)

    def table_uri(self, table: str) -> str:
        """Where a Delta table lives: a local path or s3://... (every reader takes either)."""
        return join(self.lake, table)

    def checkpoint_uri(self, query: str) -> str:
        return join(self.checkpoints, query)


def load_engine_settings(**overrides: Any) -> EngineSettings:
    """EngineSettings from TIDELAKE_* variables plus overrides; errors name the variable."""
    try:
        return EngineSettings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        problems = "; ".join(
            f"TIDELAKE_{str(err['loc'][0]).upper()}: {err['msg'].removeprefix('Value error, ')}"
            for err in exc.errors()
        )
        raise ConfigError(f"invalid engine settings: {problems}") from None
    except SettingsError as exc:  # a JSON setting that does not parse
        field = str(exc).split('"')[1] if '"' in str(exc) else "a JSON setting"
        raise ConfigError(
            f"invalid engine settings: TIDELAKE_{field.upper()}: expected a JSON object, e.g. "
            '{"spark.sql.shuffle.partitions": "4"}'
        ) from None


class HostSettings(BaseSettings):
    """Settings of this machine and process rather than of the engine: where local state and
    caches live, log levels, the ingest service's token. Read when needed (`host_settings()`),
    never cached, so a command sees the environment it was started with."""

    model_config = SettingsConfigDict(env_prefix="TIDELAKE_", extra="ignore")

    home: Path = Field(
        default=Path(".tidelake"), description="local state: the running broker, its data"
    )
    jars_dir: Path | None = Field(
        default=None, description="the jar cache; default <virtualenv>/share/tidelake/jars"
    )
    cache: Path | None = Field(
        default=None,
        description="the Spark class archive, the use cases' planned schemas; default "
        "~/.cache/tidelake",
    )
    plan_use_case_schemas: bool = Field(
        default=True,
        description="list a use case's column types before its table exists: its function "
        "planned in a Spark subprocess when a code location loads (cached)",
    )
    log_level: str = Field(default="INFO", description="log level of tidelake's own logs")
    spark_log_level: str = Field(default="WARN", description="log level of Spark's logs")
    ingest_token: str | None = Field(
        default=None, description="bearer token every CallEventService call must carry"
    )
    dagster_postgres_url: str | None = Field(
        default=None, description="Dagster's storage on PostgreSQL (postgresql+psycopg2://...)"
    )
    jvm_malloc: Literal["auto", "jemalloc", "system"] = Field(
        default="auto",
        description=(
            "the driver JVMs' allocator: jemalloc (Debian's libjemalloc2, preloaded), system "
            "(glibc's), or auto (jemalloc where installed); see spark/session.py"
        ),
    )

    @field_validator("jars_dir", "cache", "ingest_token", "dagster_postgres_url", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @property
    def cache_dir(self) -> Path:
        return self.cache or Path.home() / ".cache" / "tidelake"


def host_settings() -> HostSettings:
    """HostSettings from TIDELAKE_* variables; errors name the variable."""
    try:
        return HostSettings()
    except ValidationError as exc:
        problems = "; ".join(
            f"TIDELAKE_{str(err['loc'][0]).upper()}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(f"invalid settings: {problems}") from exc
