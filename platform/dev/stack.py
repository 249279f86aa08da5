"""`tidelake dev` (what `make dev` runs): the whole platform on one machine, one command.

Starts, in order: a local Apache Kafka broker (unless KAFKA_BOOTSTRAP_SERVERS names a cluster;
with --secured-kafka a secured one of its own, each process logging in as its own user),
the flows' topics, a demo producer per flow at a modest rate, and `dg dev` in its own
process group with DAGSTER_HOME in the repository. Ctrl-C (or SIGTERM) stops all of it, newest
first, at any moment (also while seeding history or starting up): active runs are terminated
through the webserver (streams stop between batches and end CANCELED), `dg dev` shuts its
services down, whatever outlives the grace period is killed with its whole process group, and
each stopped component is reported in one line.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg

from tidelake.assets.stream.restart_pause import pause_restarts, resume_restarts
from tidelake.platform.ingest_edge import flows_with_edges
from tidelake.platform.local.kafka_broker import LocalKafkaBroker
from tidelake.platform.local.kafka_security import SCRAM_MECHANISM
from tidelake.platform.local.process_group import stop_group
from tidelake.platform.local.recorded_broker import (
    broker_state_file,
    kept_data_dir,
    recorded_broker,
)
from tidelake.platform.local.s3_server import LocalS3Server
from tidelake.streaming.errors import ConfigError, TidelakeError
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.kafka.acls import role_grants
from tidelake.streaming.kafka.admin import check_reachable, ensure_flow_topics, ensure_topic
from tidelake.streaming.kafka.broker_state import running_broker
from tidelake.streaming.polling import poll_until
from tidelake.streaming.settings import host_settings, kafka_client_config, kafka_client_env
from tidelake.streaming.stream.status import first_record_date, kafka_ends
from tidelake.streaming.stream.stop_signals import graceful_stop_signals

log = logging.getLogger(__name__)

DAGSTER_STOP_GRACE_S = 60.0
RUN_STOP_GRACE_S = 60.0
"""How long Ctrl-C waits for the terminated runs to end before `dg dev` is stopped."""


class DevStackError(TidelakeError, RuntimeError):
    """A part of the local platform could not start; the message says which."""


PRODUCER_DURATION_S = 7 * 86_400
DEV_TRIGGER_INTERVAL = "5 seconds"


@dataclass(frozen=True)
class DevOptions:
    host: str = "127.0.0.1"
    port: int = 3000
    rate: float = 5.0
    """Demo events per second per flow; 0 starts no producer (and seeds no history)."""
    history_days: int = 2
    """Whole days of demo history (at `rate`) put on an empty topic first, so that the anomaly
    model has days to learn from."""
    incident_every_s: float = 900.0
    """The demo producer of a flow that declares demo_incidents injects a 5-minute incident
    this often."""
    ingest_port: int = 50051
    """Port of the first flow's ingest edge (call_events': the gRPC ingest service, which its
    demo events go through); a further flow's edge takes the next port."""
    s3: bool = False
    """Keep the lake and the checkpoints on a local S3 server (SeaweedFS, its data under
    $TIDELAKE_HOME/s3) instead of local folders."""
    secured_kafka: bool = False
    """Run Kafka as production should: a secured local broker of its own (SASL_SSL with
    SCRAM-SHA-512, TLS, ACLs; data under $TIDELAKE_HOME/kafka-secured), the ingest service and
    the producers as user `ingest`, `dg dev` as user `dagster` (streaming/kafka/acls.py)."""
    project: Path = Path("pyproject.toml")
    """The repository's pyproject.toml, whose [tool.dg] table `dg dev` reads from the cwd."""


POSTGRES_URL_VARIABLE = "TIDELAKE_DAGSTER_POSTGRES_URL"
CLIENT_ENV_FILE = "client.env"
"""Under $TIDELAKE_HOME/s3 while `tidelake dev --s3` runs: the settings of a client of its lake;
under $TIDELAKE_HOME/kafka-secured while `tidelake dev --secured-kafka` runs: its admin's."""
SECURED_KAFKA_DIR = "kafka-secured"
"""Under $TIDELAKE_HOME: the secured broker's data (not the plaintext broker's kafka/)."""
_COMPOSED = (
    "# written by tidelake dev: platform/dev/dagster.yaml and platform/dev/dagster_postgres.yaml\n"
)


def dagster_home(env: Mapping[str, str]) -> Path:
    """$DAGSTER_HOME, default .dagster_home here; holds (a link to) platform/dev/dagster.yaml, with
    platform/dev/dagster_postgres.yaml's storage added when TIDELAKE_DAGSTER_POSTGRES_URL is set.
    A dagster.yaml of the user's own is kept as it is."""
    home = Path(env.get("DAGSTER_HOME") or ".dagster_home").resolve()
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    ours = Path(__file__).with_name("dagster.yaml")
    if config.exists() and not config.is_symlink() and not _is_composed(config):
        log.info("keeping the instance settings already in %s", config)
        return home
    postgres_url = env.get(POSTGRES_URL_VARIABLE, "").strip()
    if postgres_url and not postgres_url.startswith("postgresql+psycopg2://"):
        raise ConfigError(
            f"{POSTGRES_URL_VARIABLE} must start with postgresql+psycopg2:// (the driver "
            "dagster-postgres installs; SQLAlchemy 2.1 reads a plain postgresql:// as psycopg 3)"
        )
    config.unlink(missing_ok=True)
    if postgres_url:
        storage = Path(__file__).with_name("dagster_postgres.yaml").read_text()
        config.write_text(f"{_COMPOSED}{ours.read_text()}\n{storage}")
    else:
        config.symlink_to(ours)
    return home


def _is_composed(config: Path) -> bool:
    with config.open() as text:
        return text.readline() == _COMPOSED


def run_dev(flows: list[FlowSpec], options: DevOptions) -> int:
    """Run the local platform until Ctrl-C/SIGTERM or until `dg dev` exits; its exit code."""
    if not options.project.exists():
        raise FileNotFoundError(
            f"{options.project} not found: run `tidelake dev` from the repository root"
        )
    if options.secured_kafka:
        _refuse_configured_kafka(os.environ)
    # a second Ctrl-C must not cut short the stopping of what dev started
    with (
        graceful_stop_signals(
            announce=lambda sig: _say(f"stopping ({sig.name})"), second_signal_exits=False
        ) as stop,
        contextlib.ExitStack() as stack,
    ):
        env = dict(os.environ)
        env["DAGSTER_HOME"] = str(dagster_home(env))
        # a demo trickle needs no sub-second batches; fewer, larger files and commits
        env.setdefault("TIDELAKE_TRIGGER_INTERVAL", DEV_TRIGGER_INTERVAL)
        # a flow added while the platform runs (reload the code location) gets its topic
        env.setdefault("TIDELAKE_CREATE_TOPICS", "true")
        if sys.prefix != sys.base_prefix:  # `make dev` runs .venv/bin/tidelake unactivated;
            env.setdefault("VIRTUAL_ENV", sys.prefix)  # dg warns unless it is the active one
        if options.s3:
            env.update(stack.enter_context(_s3(env)))
        if options.secured_kafka:
            users = stack.enter_context(_secured_kafka(flows))
        else:
            env["KAFKA_BOOTSTRAP_SERVERS"] = stack.enter_context(_kafka(env))
            users = _KafkaUsers(kafka_client_config(env))
            check_reachable(users.admin)
            ensure_flow_topics(users.admin, flows)
        conf = users.admin  # tidelake dev's own client: topics, seeding, first dates
        ingest_env = {**env, **users.ingest_env}
        edges = {  # the flows' ingest edges, on ingest_port and the ports after it
            flow.name: f"127.0.0.1:{options.ingest_port + n}"
            for n, flow in enumerate(flows_with_edges(flows))
        }
        for name, address in edges.items():
            command = _serve_command(name, address)
            serve = _process_group(command, ingest_env, name=f"the ingest edge of {name}")
            stack.enter_context(serve)
        if options.rate > 0:
            for flow in flows:
                if flow.demo_event is not None and options.history_days > 0:
                    _seed_history(flow, options, conf, ingest_env, stop)
                if stop.is_set():
                    return 0
            for flow in flows:
                if flow.demo_event is not None:
                    via = edges.get(flow.name)
                    command = _producer_command(flow, options, via)
                    name = f"the demo producer of {flow.name}"
                    stack.enter_context(_process_group(command, ingest_env, name=name))
        if stop.is_set():
            return 0
        _start_partitions_at_the_data(flows, conf, env)
        dagster_env = {**env, **users.dagster_env}
        dagster = stack.enter_context(_dagster_dev(options, dagster_env))
        print(
            f"tidelake dev: Dagster UI on http://{options.host}:{options.port}, "
            f"ingest edges: {', '.join(f'{n} on {a}' for n, a in edges.items()) or 'none'} "
            f"(DAGSTER_HOME={env['DAGSTER_HOME']}, Kafka {conf['bootstrap.servers']}); "
            "Ctrl-C stops everything",
            file=sys.stderr,
            flush=True,
        )
        while not stop.wait(0.5):
            if dagster.poll() is not None:
                return dagster.returncode or 1
        return 0


def _say(message: str) -> None:
    print(f"tidelake dev: {message}", file=sys.stderr, flush=True)


def _write_client_env(folder: Path, settings: Mapping[str, str]) -> Path:
    """folder/client.env: `export NAME=value` lines another shell can `source`, readable by
    this user alone (it holds a key or a password, which is never printed)."""
    path = folder / CLIENT_ENV_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # a file left by an older run keeps its mode through O_TRUNC
    with os.fdopen(fd, "w") as file:
        file.writelines(f"export {name}={value}\n" for name, value in settings.items())
    return path


@contextlib.contextmanager
def _s3(env: Mapping[str, str]) -> Iterator[dict[str, str]]:
    """A local S3 server (data kept under $TIDELAKE_HOME/s3) and the settings that put the lake
    and the checkpoints on it. A client in another shell (`tidelake dev-check`, DuckDB, a
    backfill from the command line) takes them from a 0600 file: the key is never printed."""
    home = host_settings().home.resolve()
    with LocalS3Server(data_dir=home / "s3") as server:
        settings = {
            **server.env(),
            "TIDELAKE_LAKE": server.uri("lake"),
            "TIDELAKE_CHECKPOINTS": server.uri("checkpoints"),
        }
        client_env = _write_client_env(home / "s3", settings)
        _say(
            f"S3 server (SeaweedFS) at {server.endpoint_url}, bucket {server.bucket}, data in "
            f"{home / 's3'}; lake {settings['TIDELAKE_LAKE']}. Another shell reaches it with "
            f"`source {client_env}`"
        )
        try:
            yield settings
        finally:
            client_env.unlink(missing_ok=True)


@dataclass(frozen=True)
class _KafkaUsers:
    """Who is who on the platform's Kafka: tidelake dev's own client config, and the KAFKA_*
    variables of the ingest service and producers and of `dg dev` (none on a plaintext broker:
    they inherit the environment's)."""

    admin: dict[str, str]
    ingest_env: Mapping[str, str] = field(default_factory=dict)
    dagster_env: Mapping[str, str] = field(default_factory=dict)


def _refuse_configured_kafka(env: Mapping[str, str]) -> None:
    """--secured-kafka runs a broker of its own: a configured cluster as well is a contradiction
    (its other KAFKA_* settings would reach clients of the secured broker), not a choice."""
    configured = sorted(
        name for name, value in env.items() if name.startswith("KAFKA_") and value.strip()
    )
    if "KAFKA_BOOTSTRAP_SERVERS" in configured:
        raise ConfigError(
            "tidelake dev --secured-kafka (TIDELAKE_DEV_SECURED_KAFKA) starts a secured broker of "
            f"its own, but KAFKA_BOOTSTRAP_SERVERS={env['KAFKA_BOOTSTRAP_SERVERS']} names a "
            "cluster to use: unset KAFKA_BOOTSTRAP_SERVERS, or leave out --secured-kafka"
        )
    if configured:
        raise ConfigError(
            "tidelake dev --secured-kafka (TIDELAKE_DEV_SECURED_KAFKA) gives each process the "
            f"settings of its secured broker, but {', '.join(configured)} set here would mix "
            "with them: unset them"
        )


@contextlib.contextmanager
def _secured_kafka(flows: list[FlowSpec]) -> Iterator[_KafkaUsers]:
    """A secured local broker of tidelake dev's own (data kept under
    $TIDELAKE_HOME/kafka-secured, not recorded in the broker state file, so no other command
    takes it for the plaintext broker) with the flows' topics and the alerts topic created and
    each role's ACLs granted, as its admin. Least privilege per process: the ingest service and
    the producers log in as `ingest`, `dg dev` as `dagster` (acls.py says why one user). The
    admin's settings, for a person's own commands in another shell, go into a 0600 file that
    goes at exit: no password is printed."""
    from tidelake.streaming.calls.anomaly.detector import ALERTS_TOPIC  # imports Spark: here

    folder = host_settings().home.resolve() / SECURED_KAFKA_DIR
    with LocalKafkaBroker(data_dir=folder, secured=True) as broker:
        admin = broker.client_config()
        check_reachable(admin)
        ensure_flow_topics(admin, flows)
        ensure_topic(admin, ALERTS_TOPIC, 1)  # the detector may write it, not create it
        broker.grant(role_grants(dict.fromkeys(flow.topic for flow in flows), ALERTS_TOPIC))
        dagster_env = {
            **kafka_client_env(broker.client_config("dagster")),
            # `dagster` may not CREATE topics (least privilege): every topic is made above. A
            # flow added while the platform runs has neither topic nor grants: its stream says
            # the topic is missing (restart tidelake dev) instead of being refused a CREATE
            "TIDELAKE_CREATE_TOPICS": "false",
        }
        client_env = _write_client_env(folder, kafka_client_env(admin))
        _say(
            f"secured Kafka broker at {broker.bootstrap_servers} (SASL_SSL, {SCRAM_MECHANISM}, "
            f"ACLs; data in {folder}): the ingest service and producers log in as 'ingest', "
            f"dg dev as 'dagster'. Another shell reaches it as 'admin' with `source {client_env}`"
        )
        try:
            yield _KafkaUsers(admin, kafka_client_env(broker.client_config("ingest")), dagster_env)
        finally:
            client_env.unlink(missing_ok=True)
            _say("stopped the secured Kafka broker")


@contextlib.contextmanager
def _kafka(env: Mapping[str, str]) -> Iterator[str]:
    """The configured cluster, a `tidelake broker` already running, or a new local Kafka broker
    (its data kept under $TIDELAKE_HOME/kafka, like the lake and checkpoints)."""
    configured = env.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if configured:
        yield configured
        return
    state_file = broker_state_file()
    existing = running_broker(state_file)
    if existing is not None:
        log.info("using the local broker already running at %s", existing)
        yield existing
        return
    with recorded_broker(state_file, kept_data_dir()) as broker:
        try:
            yield broker.bootstrap_servers
        finally:
            _say("stopped the local Kafka broker")


def _seed_history(
    flow: FlowSpec,
    options: DevOptions,
    conf: Mapping[str, str],
    env: Mapping[str, str],
    stop: threading.Event,
) -> None:
    """On an empty topic, demo events for the last `history_days` whole days and today so far,
    at the live rate (the model must see the traffic it will judge). Returns early when `stop`
    is set; a seeding that fails raises DevStackError."""
    if sum(kafka_ends(dict(conf), flow.topic).values()) > 0:
        return
    now = time.time()
    span_s = options.history_days * 86_400 + now % 86_400
    count = int(span_s * options.rate)
    _say(f"seeding {count:,} events of history into {flow.topic}")
    command = [
        *_cli(),
        "produce",
        flow.name,
        "--count",
        str(count),
        "--days",
        str(options.history_days + 1),
        "--duplicate-share",
        "0.01",
        "--no-progress",
    ]
    with _process_group(command, env, name=f"seeding {flow.topic}") as seeding:
        while seeding.poll() is None and not stop.wait(0.5):
            pass
    if not stop.is_set() and seeding.returncode != 0:
        raise DevStackError(f"seeding {flow.topic} failed (exit code {seeding.returncode})")


def _start_partitions_at_the_data(
    flows: list[FlowSpec], conf: Mapping[str, str], env: dict[str, str]
) -> None:
    """Unless TIDELAKE_FIRST_DATE is set, start the partitions at the oldest day Kafka holds
    (the first seeded day), so the UI shows no wall of days that never had data."""
    if env.get("TIDELAKE_FIRST_DATE"):
        return
    found = [first_record_date(dict(conf), flow.topic) for flow in flows]
    dates = [day for day in found if day is not None]
    if dates:
        env["TIDELAKE_FIRST_DATE"] = min(dates).isoformat()
        _say(f"daily partitions start at {env['TIDELAKE_FIRST_DATE']}, the oldest day in Kafka")


def _cli() -> list[str]:
    return [sys.executable, "-m", "tidelake.platform.cli"]


def _producer_command(flow: FlowSpec, options: DevOptions, via: str | None) -> list[str]:
    command = [
        *_cli(),
        "produce",
        flow.name,
        "--rate",
        str(options.rate),
        "--duration",
        str(PRODUCER_DURATION_S),
        "--duplicate-share",
        "0.01",
        "--no-progress",
    ]
    if flow.demo_incidents is not None and options.incident_every_s > 0:
        command += ["--incident-every", str(options.incident_every_s)]
    return command + (["--via-service", via] if via else [])


def _serve_command(flow: str, address: str) -> list[str]:
    host, port = address.rsplit(":", 1)
    return [*_cli(), "serve", flow, "--host", host, "--port", port]


def _dagster_command(options: DevOptions) -> list[str]:
    """`dg dev`: Dagster's project command ([tool.dg] in pyproject.toml), the same webserver,
    daemon and code location as `dagster dev -w workspace.yaml`, which 1.13 marks superseded."""
    dg_cli = Path(sys.executable).with_name("dg")
    return [str(dg_cli), "dev", "--host", options.host, "--port", str(options.port)]


@contextlib.contextmanager
def _dagster_dev(options: DevOptions, env: Mapping[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """`dg dev`, stopped the way its runs end CANCELED rather than FAILURE: the supervisors'
    restarts are paused (restart_pause: they would restart the streams being stopped), the
    active runs are terminated and waited for, then `dg dev` alone gets SIGINT and shuts its
    webserver, daemon and code servers down through their shutdown pipes; a code server waits
    for its runs to finish. Signalling the whole group instead would interrupt every process at
    once: tracebacks, and runs recorded as failed. The runs are read and terminated through the
    instance's storage and run coordinator, as the webserver does it, not through the webserver:
    on a loaded machine its answer is late, and a late answer is not "no runs"."""
    command = _dagster_command(options)
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        resume_restarts(instance)  # a dev stopped by SIGKILL left its pause behind
    with _process_group(
        command,
        env,
        DAGSTER_STOP_GRACE_S,
        name="dg dev",
        leader_only=True,
        stop_signal=signal.SIGINT,  # what dg dev shuts down on, as from a terminal
    ) as dagster:
        try:
            yield dagster
        finally:
            if dagster.poll() is None:
                with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
                    pause_restarts(instance, "tidelake dev is stopping")
                    _terminate_active_runs(instance)


_TERMINABLE_RUN_STATUSES = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]
_ACTIVE_RUN_STATUSES = [*_TERMINABLE_RUN_STATUSES, dg.DagsterRunStatus.CANCELING]


def _terminate_active_runs(instance: dg.DagsterInstance, grace_s: float = RUN_STOP_GRACE_S) -> None:
    """Terminate the active runs and wait (up to grace_s) until none is active, so that `dg dev`
    shuts its services down after its runs ended, not while a run worker is still stopping. A
    run that outlives the grace is killed with dg dev's process group."""
    active = instance.get_runs(dg.RunsFilter(statuses=_TERMINABLE_RUN_STATUSES))
    for run in active:
        _say(f"stopping the {run.job_name} run {run.run_id[:8]}")
        if not instance.run_coordinator.cancel_run(run.run_id):
            _say(f"the {run.job_name} run {run.run_id[:8]} did not take the termination")

    def ended() -> bool | None:
        return None if instance.get_runs(dg.RunsFilter(statuses=_ACTIVE_RUN_STATUSES)) else True

    if active:
        with contextlib.suppress(TimeoutError):
            poll_until(ended, timeout_s=grace_s, interval_s=0.5, timeout_error=TimeoutError)


@contextlib.contextmanager
def _process_group(
    command: list[str],
    env: Mapping[str, str],
    grace_s: float = 10.0,
    *,
    name: str,
    leader_only: bool = False,
    stop_signal: signal.Signals = signal.SIGTERM,
) -> Iterator[subprocess.Popen[bytes]]:
    """A child in its own process group; on exit stop_signal to the group (or, with
    leader_only, to the child alone, which stops its own children), then SIGKILL to the group
    after grace, reported as one line if it was still running. SIGTERM suits tidelake's own
    commands: it stops them as Ctrl-C does once they run, and quietly while their interpreter
    still starts, where a SIGINT printed a KeyboardInterrupt traceback."""
    process = subprocess.Popen(command, env=dict(env), start_new_session=True)
    try:
        yield process
    finally:
        running = process.poll() is None
        stop_group(process, grace_s, leader_only=leader_only, stop_signal=stop_signal)
        if running:
            _say(f"stopped {name}")
