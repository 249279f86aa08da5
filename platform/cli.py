"""The `tidelake` command line.

Start-up time matters for a CLI, so this module imports only click and the standard library;
each command imports what it needs (Kafka client, protobuf, Spark, Dagster) when it runs.
"""

from __future__ import annotations

import math
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click


class CliError(click.ClickException):
    """A known failure, shown as one clean line; exit code 2 for configuration/reachability."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]  # click declares it on the class


@contextmanager
def _clean_errors() -> Iterator[None]:
    """tidelake's own errors as one line and their exit code (TidelakeError.exit_code), not a
    traceback: the one place they are mapped for the command line, applied by the command group
    to every command."""
    from tidelake.streaming.errors import TidelakeError

    try:
        yield
    except TidelakeError as exc:
        raise CliError(str(exc), exit_code=exc.exit_code) from None


def _configure_logging() -> None:
    """Log lines with time and source at $TIDELAKE_LOG_LEVEL (default INFO)."""
    import logging

    from tidelake.streaming.settings import host_settings

    logging.basicConfig(
        level=host_settings().log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _declared_flows() -> dict[str, Any]:
    """tidelake's flows plus those of TIDELAKE_FLOW_MODULES."""
    from tidelake.streaming.flow.declared import declared_flows
    from tidelake.streaming.settings import load_engine_settings

    return declared_flows(load_engine_settings().flow_modules)


def _get_use_case(name: str, flows: dict[str, Any], param: str) -> Any:
    """The declared use case called name (tidelake's and TIDELAKE_USE_CASE_MODULES')."""
    from tidelake.streaming.settings import load_engine_settings
    from tidelake.streaming.usecase.declared import declared_use_cases

    use_cases = declared_use_cases(flows, load_engine_settings().use_case_modules)
    if name not in use_cases:
        raise click.BadParameter(
            f"no flow or use case {name!r} (flows: {', '.join(sorted(flows))}; use cases: "
            f"{', '.join(sorted(use_cases)) or 'none'})",
            param_hint=param,
        )
    return use_cases[name]


def _get_flows(names: tuple[str, ...] | list[str], param: str) -> list[Any]:
    from tidelake.streaming.flow.declared import get_flow

    flows = _declared_flows()
    if not names:
        return list(flows.values())
    try:
        return [get_flow(name, flows) for name in names]
    except KeyError as exc:
        raise click.BadParameter(str(exc.args[0]), param_hint=param) from None


def _must_be_positive(ctx: click.Context, param: click.Parameter, value: float | None) -> Any:
    if value is not None and not (value > 0 and math.isfinite(value)):  # also rejects nan
        raise click.BadParameter(f"must be a finite number > 0, got {value}")
    return value


_kafka_timeout_option = click.option(
    "--kafka-timeout",
    type=float,
    default=10.0,
    show_default=True,
    envvar="TIDELAKE_KAFKA_TIMEOUT",
    callback=_must_be_positive,
    metavar="SECONDS",
    help="How long to wait for the Kafka cluster to answer before giving up.",
)


class StoppedWhileStarting(KeyboardInterrupt):
    """Ctrl-C or SIGTERM before a long-running command has its own handler.

    A subclass because CPython 3.11 marks the process to exit by SIGINT once a plain
    KeyboardInterrupt has left an exec() of a string (dataclasses runs one per class at import),
    caught or not: 1 of 40 start-up Ctrl-Cs of `kafka-cluster` exited -2 after "stopped"."""


def _stop_while_starting(signum: int, _frame: object) -> None:
    raise StoppedWhileStarting


LONG_RUNNING = ("stream", "serve", "broker", "kafka-cluster", "spark-cluster", "dev")
"""Commands that run until stopped: Ctrl-C or SIGTERM is how they end, with exit 0."""


class _Commands(click.Group):
    """tidelake's own errors end a command as one line (see _clean_errors).

    Ctrl-C and SIGTERM stop a long-running command: each installs its own handler (stop after
    the current batch, flush, stop the children) and ends with exit 0 and one line saying so. A
    signal that comes before that handler (while the command starts) ends it the same way. Any
    other command stopped by Ctrl-C exits 130 without click's "Aborted!"."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            with _clean_errors():
                return super().invoke(ctx)
        except KeyboardInterrupt:
            if ctx.invoked_subcommand in LONG_RUNNING:
                # stopped; a signal still pending must not end the exit (measured: 2 of 8
                # Ctrl-Cs during spark-cluster's start-up were raised a second time here)
                for sig in (signal.SIGINT, signal.SIGTERM):
                    signal.signal(sig, signal.SIG_IGN)
                click.echo(f"tidelake {ctx.invoked_subcommand}: stopped", err=True)
                raise click.exceptions.Exit(0) from None
            raise click.exceptions.Exit(130) from None


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tidelake")
def main() -> None:
    """tidelake: protobuf events from Kafka into date-partitioned Delta tables."""
    ctx = click.get_current_context()
    if ctx.invoked_subcommand in LONG_RUNNING:
        # until the command installs its own handler, SIGTERM stops it as Ctrl-C does
        stopping = [signal.SIGTERM]
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not if ignored
            stopping.append(signal.SIGINT)
        previous = {sig: signal.signal(sig, _stop_while_starting) for sig in stopping}
        ctx.call_on_close(lambda: [signal.signal(sig, h) for sig, h in previous.items()])


@main.command()
def broker() -> None:
    """Run a local Apache Kafka broker (KRaft) until Ctrl-C.

    Prints KAFKA_BOOTSTRAP_SERVERS=... and records the address under $TIDELAKE_HOME (default
    .tidelake), where other tidelake commands started from this directory find it. Topics and
    data are kept in $TIDELAKE_HOME/kafka across restarts.
    """
    _configure_logging()
    from tidelake.platform.local.recorded_broker import (
        broker_state_file,
        kept_data_dir,
        run_foreground,
    )

    run_foreground(broker_state_file(), kept_data_dir())


@main.command("spark-cluster")
@click.option("--workers", type=click.IntRange(1, 16), default=2, show_default=True)
@click.option(
    "--cores", type=click.IntRange(1, 64), default=1, show_default=True, help="Per worker."
)
@click.option("--memory", default="2g", show_default=True, help="Per worker, e.g. 2g.")
def spark_cluster(workers: int, cores: int, memory: str) -> None:
    """Run a Spark standalone cluster on loopback until Ctrl-C: a master and workers, each its
    own JVM, from pyspark's own jars. Prints TIDELAKE_SPARK_MASTER=spark://...: set it for
    `tidelake stream`, `tidelake dev` or a Dagster deployment to run the engine on it."""
    _configure_logging()
    from tidelake.platform.local.spark_cluster import LocalSparkCluster
    from tidelake.streaming.stream.stop_signals import graceful_stop_signals

    with graceful_stop_signals(stopping="stopping the Spark cluster") as stop:
        cluster = LocalSparkCluster(workers=workers, cores=cores, worker_memory=memory)
        with cluster:
            click.echo(f"TIDELAKE_SPARK_MASTER={cluster.master_url}")
            click.echo(f"master UI: http://127.0.0.1:{cluster.ui_port}", err=True)
            stop.wait()


@main.command("kafka-cluster")
@click.option("--nodes", type=click.IntRange(1, 9), default=3, show_default=True)
@click.option(
    "--min-insync",
    type=click.IntRange(1, 9),
    default=2,
    show_default=True,
    help="min.insync.replicas of every topic (at most --nodes).",
)
def kafka_cluster(nodes: int, min_insync: int) -> None:
    """Run a Kafka cluster on loopback until Ctrl-C: NODES KRaft nodes (each broker and
    controller, its own JVM) from the jar cache; topics get NODES replicas. Prints
    KAFKA_BOOTSTRAP_SERVERS=...: set it for `tidelake dev`, `serve` or `stream`."""
    _configure_logging()
    from tidelake.platform.local.kafka_cluster import LocalKafkaCluster
    from tidelake.streaming.stream.stop_signals import graceful_stop_signals

    if min_insync > nodes:
        raise click.BadParameter(f"at most --nodes ({nodes})", param_hint="'--min-insync'")
    with (
        graceful_stop_signals(stopping="stopping the Kafka cluster") as stop,
        LocalKafkaCluster(nodes, min_insync=min_insync) as cluster,
    ):
        click.echo(f"KAFKA_BOOTSTRAP_SERVERS={cluster.bootstrap_servers}")
        click.echo(f"data and logs in {cluster.folder}", err=True)
        stop.wait()


@main.group()
def topics() -> None:
    """Kafka topics of the declared flows."""


@topics.command("create")
@click.argument("flows", nargs=-1, metavar="[FLOW]...")
@click.option(
    "--replication-factor",
    type=click.IntRange(min=-1),
    default=-1,
    show_default=True,
    help="Replicas per partition; -1 uses the broker's default.",
)
@_kafka_timeout_option
def topics_create(flows: tuple[str, ...], replication_factor: int, kafka_timeout: float) -> None:
    """Create the topics of FLOWs (default: all declared flows) with their partition counts.

    Topics that already exist as declared are left alone; a different partition count is an
    error.
    """
    if replication_factor == 0:
        raise click.BadParameter("must be >= 1, or -1", param_hint="'--replication-factor'")
    specs = _get_flows(flows, "'FLOW'")
    from tidelake.streaming.kafka.admin import check_reachable, ensure_flow_topics
    from tidelake.streaming.settings import kafka_client_config

    conf = kafka_client_config()
    check_reachable(conf, kafka_timeout)
    ensure_flow_topics(conf, specs, replication_factor=replication_factor)
    for spec in specs:
        click.echo(f"{spec.topic}: {spec.topic_partitions} partitions (flow {spec.name})")


@topics.command("add-partitions")
@click.argument("flow", metavar="FLOW")
@click.option(
    "--to",
    "total",
    type=click.IntRange(min=1),
    required=True,
    help="The topic's partition count afterwards.",
)
@_kafka_timeout_option
def topics_add_partitions(flow: str, total: int, kafka_timeout: float) -> None:
    """Grow FLOW's topic to --to partitions while it streams.

    The stream, backfills and lag reports pick the new partitions up from offset 0 without a
    restart. Keys produced from now on may map to other partitions, so per-key order holds only
    from here on. Raise the flow's topic_partitions afterwards, so that new environments create
    the same count.
    """
    (spec,) = _get_flows([flow], "'FLOW'")
    from tidelake.streaming.kafka.admin import add_partitions, check_reachable
    from tidelake.streaming.settings import kafka_client_config

    conf = kafka_client_config()
    check_reachable(conf, kafka_timeout)
    before = add_partitions(conf, spec.topic, total, kafka_timeout)
    click.echo(f"{spec.topic}: {before} -> {total} partitions (flow {spec.name})")


@main.group()
def schemas() -> None:
    """The flows' protobuf schemas in the schema registry (TIDELAKE_SCHEMA_REGISTRY_URL)."""


@schemas.command("register")
@click.argument("flows", nargs=-1, metavar="[FLOW]...")
def schemas_register(flows: tuple[str, ...]) -> None:
    """Register the .proto of FLOWs (default: all declared flows) under their topics' value
    subjects (<topic>-value), so that producers and other consumers using Confluent's
    serializers agree with the flow. The registry checks the subject's compatibility rule
    first; an incompatible .proto is refused and nothing is registered."""
    specs = _get_flows(flows, "'FLOW'")
    from tidelake.streaming.flow.descriptor_set import proto_source
    from tidelake.streaming.schemas.registry_client import require_registry, value_subject

    registry = require_registry()
    for spec in specs:
        source, subject = proto_source(spec), value_subject(spec)
        schema_id, version = registry.register(subject, source)
        click.echo(
            f"{subject}: {source.name} is schema id {schema_id}, version {version} "
            f"(flow {spec.name}, registry {registry.url})"
        )


@main.command()
@click.argument("flow", metavar="FLOW")
@click.option("--count", type=click.IntRange(min=1), help="Number of messages to send.")
@click.option("--rate", type=float, callback=_must_be_positive, help="Events per second.")
@click.option(
    "--duration",
    type=float,
    callback=_must_be_positive,
    metavar="SECONDS",
    help="Send for this long (at --rate, or as fast as possible).",
)
@click.option(
    "--malformed-share",
    type=click.FloatRange(0, 1),
    default=0.01,
    show_default=True,
    help="Share of poison messages (not protobuf, or missing a required field).",
)
@click.option(
    "--late-share",
    type=click.FloatRange(0, 1),
    default=0.05,
    show_default=True,
    help="Share of good events that arrive 1-3 hours late.",
)
@click.option(
    "--duplicate-share",
    type=click.FloatRange(0, 1),
    default=0.0,
    show_default=True,
    help="Share of good events sent twice, as a retrying producer would.",
)
@click.option(
    "--days",
    type=click.IntRange(1, 7),  # Kafka keeps 7 days by default: older records would be deleted
    default=1,
    show_default=True,
    help="Spread event times over the last D UTC dates (1: event time is now).",
)
@click.option(
    "--via-service",
    metavar="HOST:PORT",
    help="Send through the flow's ingest edge (call_events: the gRPC ingest service) at "
    "HOST:PORT instead of straight to Kafka.",
)
@click.option(
    "--incident-every",
    type=float,
    callback=_must_be_positive,
    metavar="SECONDS",
    help="Inject an incident every SECONDS, for the anomaly detector to find (flows that "
    "declare demo_incidents; call_events: a failure spike on the busiest account, a volume drop "
    "in us1, a duration shift on the second account, in turn).",
)
@click.option(
    "--incident-length",
    type=float,
    default=300.0,
    show_default=True,
    callback=_must_be_positive,
    metavar="SECONDS",
)
@click.option("--seed", type=int, help="Random seed, for reproducible messages.")
@click.option("--progress/--no-progress", default=True, help="Show a progress bar on stderr.")
@_kafka_timeout_option
def produce(
    flow: str,
    count: int | None,
    rate: float | None,
    duration: float | None,
    malformed_share: float,
    late_share: float,
    duplicate_share: float,
    days: int,
    via_service: str | None,
    incident_every: float | None,
    incident_length: float,
    seed: int | None,
    progress: bool,
    kafka_timeout: float,
) -> None:
    """Send demo events of FLOW to its topic (created first if missing).

    Give --count N (optionally paced with --rate R), or --duration S (optionally with --rate R).
    """
    if count is not None and duration is not None:
        raise click.UsageError("give --count or --duration, not both")
    if count is None and duration is None:
        raise click.UsageError("give --count N, or --duration S (with or without --rate R)")
    (spec,) = _get_flows([flow], "'FLOW'")
    if via_service and spec.ingest_edge is None:
        raise click.UsageError(f"--via-service: flow {spec.name} has no ingest edge")
    if via_service and days != 1:
        raise click.UsageError("--via-service sends with --days 1 (the edge stamps arrival times)")
    from tidelake.platform.dev.produce import (
        DemoTraffic,
        produce_demo_events,
        send_demo_events_to_service,
    )

    traffic = DemoTraffic(
        count=count,
        rate=rate,
        duration_s=duration,
        malformed_share=malformed_share,
        late_share=late_share,
        duplicate_share=duplicate_share,
        days=days,
        seed=seed,
    )
    if incident_every is not None:
        if spec.demo_incidents is None:
            raise click.UsageError(f"--incident-every: flow {spec.name} declares no demo incidents")
        now_ms = time.time_ns() // 1_000_000
        horizon_s = duration if duration is not None else 7 * 86_400
        end_ms = now_ms + int(horizon_s * 1000)
        traffic["change_event"] = spec.demo_incidents(
            now_ms, end_ms, incident_every, incident_length
        )
    from tidelake.streaming.kafka.admin import check_reachable, ensure_topic
    from tidelake.streaming.settings import kafka_client_config

    conf = kafka_client_config()
    check_reachable(conf, kafka_timeout)
    ensure_topic(conf, spec.topic, spec.topic_partitions)
    if via_service:
        report = send_demo_events_to_service(spec, conf, via_service, progress=progress, **traffic)
    else:
        report = produce_demo_events(spec, conf, progress=progress, **traffic)
    click.echo(report.summary())


@main.command()
@click.argument("name", metavar="FLOW|USE_CASE")
@click.option(
    "--available-now",
    is_flag=True,
    help="Process everything in Kafka now, commit it, and exit 0 (Trigger.AvailableNow).",
)
@click.option(
    "--max-offsets-per-trigger",
    type=click.IntRange(min=1),
    help="Records per micro-batch at most [env TIDELAKE_MAX_OFFSETS_PER_TRIGGER; 500000].",
)
@click.option("--master", help="Spark master URL [env TIDELAKE_SPARK_MASTER; local[2]].")
@click.option(
    "--conf",
    "spark_conf",
    multiple=True,
    metavar="KEY=VALUE",
    help="A Spark setting; repeatable (added to TIDELAKE_SPARK_CONF).",
)
@click.option(
    "--restart-from-table",
    is_flag=True,
    help="Keep the checkpoint under a new name and start a new one where the table's last batch "
    "ended (after restoring the table from an older copy).",
)
@click.option(
    "--use-cases",
    "with_use_cases",
    is_flag=True,
    help="Also run FLOW's streaming use cases, as queries of the same Spark application (a "
    "FAIR pool each; one that fails is started again alone, with back-off).",
)
def stream(
    name: str,
    available_now: bool,
    restart_from_table: bool,
    with_use_cases: bool,
    max_offsets_per_trigger: int | None,
    master: str | None,
    spark_conf: tuple[str, ...],
) -> None:
    """Run FLOW's stream: Kafka -> decode -> Delta, until SIGTERM/Ctrl-C; or USE_CASE's: its
    input table -> its function -> its table (docs/use-cases.md).

    Tables go to $TIDELAKE_LAKE (default .tidelake/lake), checkpoints to $TIDELAKE_CHECKPOINTS
    (default .tidelake/checkpoints). A first SIGTERM/SIGINT stops after a consistent point; the
    next run resumes from the checkpoint.
    """

    flows = _declared_flows()
    use_case = None if name in flows else _get_use_case(name, flows, "'FLOW|USE_CASE'")
    if use_case is not None and not use_case.streaming:
        raise click.BadParameter(
            f"{name} is a Daily use case: Dagster makes its days (its asset's partitions); "
            f"`tidelake use-case refresh {name}` makes them all again",
            param_hint="'FLOW|USE_CASE'",
        )
    if use_case is not None and (available_now or restart_from_table or with_use_cases):
        raise click.UsageError(
            "--available-now, --restart-from-table and --use-cases are a flow's options"
        )
    if with_use_cases and (available_now or restart_from_table):
        raise click.UsageError(
            "--use-cases runs until stopped: not with --available-now or --restart-from-table"
        )
    extra: dict[str, str] = {}
    for item in spark_conf:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="'--conf'")
        extra[key.strip()] = value
    _configure_logging()
    from tidelake.streaming.settings import kafka_client_config, load_engine_settings
    from tidelake.streaming.stream.runner import run_flow_stream
    from tidelake.streaming.stream.stop_signals import graceful_stop_signals

    # settings first: a wrong one is reported even without a broker
    settings = load_engine_settings(
        max_offsets_per_trigger=max_offsets_per_trigger, spark_master=master
    )
    settings.spark_conf.update(extra)
    with graceful_stop_signals() as stop:
        if use_case is not None:  # reads a Delta table: no Kafka
            from tidelake.streaming.stream.runner import run_use_case_stream

            (source,) = use_case.inputs.values()  # a streaming use case reads a flow
            run_use_case_stream(use_case, flows[source.flow], settings, stop=stop)
            return
        if with_use_cases:
            from tidelake.streaming.stream.runner import run_flow_application
            from tidelake.streaming.usecase.declared import declared_use_cases, streaming_on

            use_cases = declared_use_cases(flows, settings.use_case_modules)
            run_flow_application(
                flows[name],
                streaming_on(flows[name], use_cases),
                settings,
                kafka_client_config(),
                stop=stop,
            )
            return
        run_flow_stream(
            flows[name],
            settings,
            kafka_client_config(),
            available_now=available_now,
            restart_from_table=restart_from_table,
            stop=stop,
        )


@main.group("use-case")
def use_case_group() -> None:
    """Use cases on the lake (docs/use-cases.md)."""


@use_case_group.command("refresh")
@click.argument("name", metavar="USE_CASE")
def use_case_refresh(name: str) -> None:
    """Rebuild USE_CASE's table from its input, after its function changed.

    A Daily use case: its table is deleted and every day of its input up to yesterday made again
    now. A streaming one: the refresh is requested, and its next start (the supervisor's next
    run, or `tidelake stream USE_CASE`) deletes its table and checkpoint and builds the table
    from the whole input; under Dagster, the job USE_CASE_refresh also restarts its run.
    """
    from tidelake.streaming.settings import load_engine_settings
    from tidelake.streaming.usecase.daily import day_source
    from tidelake.streaming.usecase.declared import declared_use_cases
    from tidelake.streaming.usecase.refresh import request_refresh

    flows = _declared_flows()
    use_case = _get_use_case(name, flows, "'USE_CASE'")
    settings = load_engine_settings()
    use_cases = declared_use_cases(flows, settings.use_case_modules)
    if use_case.streaming:
        marker = request_refresh(use_case, settings)
        click.echo(
            f"{name}: refresh requested ({marker}); its next start rebuilds its table from its "
            "input: restart its stream (terminate its run: the supervisor starts it again)"
        )
        return
    _configure_logging()
    from tidelake.streaming.stream.runner import run_daily_refresh

    days = run_daily_refresh(use_case, day_source(use_case, use_cases, flows), settings)
    for built in days:
        click.echo(f"{name} {built.day}: {built.rows} rows (input version {built.input_version})")
    click.echo(f"{name}: {len(days)} days made again")


@main.command()
@click.argument("flow", metavar="[FLOW]", required=False)
@click.option(
    "--host",
    default="127.0.0.1",
    envvar="TIDELAKE_INGEST_HOST",
    show_default=True,
    help="Address to listen on [env TIDELAKE_INGEST_HOST].",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=50051,
    envvar="TIDELAKE_INGEST_PORT",
    show_default=True,
    help="Port to listen on; 0 picks a free one [env TIDELAKE_INGEST_PORT].",
)
@click.option(
    "--ack-timeout",
    type=click.FloatRange(min=0.1),
    default=None,
    metavar="SECONDS",
    help=(
        "Longest an RPC waits for Kafka's acknowledgement before answering UNAVAILABLE "
        "[default: IngestSettings.ack_timeout_s, 30, longer than a partition leader's failover]."
    ),
)
@click.option(
    "--tls-cert",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="TIDELAKE_INGEST_TLS_CERT",
    help="PEM certificate chain to serve TLS with [env TIDELAKE_INGEST_TLS_CERT].",
)
@click.option(
    "--tls-key",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="TIDELAKE_INGEST_TLS_KEY",
    help="Its PEM private key [env TIDELAKE_INGEST_TLS_KEY].",
)
@click.option(
    "--client-ca",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="TIDELAKE_INGEST_CLIENT_CA",
    help="PEM CA bundle: clients must present a certificate it signed (mutual TLS) "
    "[env TIDELAKE_INGEST_CLIENT_CA].",
)
@click.option(
    "--allow-plaintext",
    is_flag=True,
    help="Serve without TLS on an address other than loopback (refused otherwise).",
)
@click.option(
    "--framed-values",
    is_flag=True,
    envvar="TIDELAKE_INGEST_FRAMED_VALUES",
    help="Write values in Confluent's wire format, the flow's .proto registered under the "
    "topic's value subject in TIDELAKE_SCHEMA_REGISTRY_URL [env TIDELAKE_INGEST_FRAMED_VALUES].",
)
def serve(
    flow: str | None,
    host: str,
    port: int,
    ack_timeout: float | None,
    tls_cert: Path | None,
    tls_key: Path | None,
    client_ca: Path | None,
    allow_plaintext: bool,
    framed_values: bool,
) -> None:
    """Run FLOW's ingest edge until SIGTERM/Ctrl-C (FLOW: the one declared flow that has one).

    call_events' is the gRPC ingest service: CallEventService (trackCall, trackCalls,
    getCallInfo), grpc.health.v1 and reflection. An RPC answers OK only once Kafka acknowledged
    the event. On SIGTERM/Ctrl-C it stops taking calls, finishes those in flight and flushes the
    producer. With TIDELAKE_INGEST_TOKEN set, every CallEventService call must carry
    `authorization: Bearer <token>` (kept out of the command line, where other users of the
    machine could read it).
    """
    _configure_logging()
    from tidelake.platform.ingest_edge import ServeOptions, flows_with_edges, ingest_edge

    if flow is None:
        edges = flows_with_edges(_declared_flows().values())
        if len(edges) != 1:
            names = ", ".join(f.name for f in edges) or "none"
            raise click.UsageError(f"name the FLOW to serve; flows with an ingest edge: {names}")
        (spec,) = edges
    else:
        (spec,) = _get_flows([flow], "'FLOW'")
    options = ServeOptions(
        host=host,
        port=port,
        ack_timeout_s=ack_timeout,
        tls_cert=tls_cert,
        tls_key=tls_key,
        client_ca=client_ca,
        allow_plaintext=allow_plaintext,
        framed_values=framed_values,
    )
    ingest_edge(spec).serve(spec, options)


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Dagster UI address.")
@click.option("--port", type=click.IntRange(1, 65535), default=3000, show_default=True)
@click.option(
    "--rate",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    help="Demo events per second per flow (0: no producer, no history).",
)
@click.option(
    "--history-days",
    type=click.IntRange(0, 6),  # Kafka keeps 7 days by default
    default=2,
    show_default=True,
    help="Days of demo history put on an empty topic first (the anomaly model learns from them).",
)
@click.option(
    "--incident-every",
    type=click.FloatRange(min=0),
    default=900.0,
    show_default=True,
    metavar="SECONDS",
    help="The demo producer injects a 5-minute incident this often (0: never).",
)
@click.option(
    "--ingest-port",
    type=click.IntRange(1, 65535),
    default=50051,
    envvar="TIDELAKE_INGEST_PORT",
    show_default=True,
    help="Port of the first flow's ingest edge, which its demo events go through (call_events: "
    "the gRPC ingest service); a further flow's edge takes the next port.",
)
@click.option(
    "--s3",
    is_flag=True,
    envvar="TIDELAKE_DEV_S3",
    help="Keep the lake and checkpoints on a local S3 server (SeaweedFS, installed with "
    "tidelake) instead of local folders.",
)
@click.option(
    "--secured-kafka",
    is_flag=True,
    envvar="TIDELAKE_DEV_SECURED_KAFKA",
    help="Run on a secured local Kafka broker of its own (SASL_SSL, SCRAM-SHA-512, ACLs; data in "
    "$TIDELAKE_HOME/kafka-secured), each process as a least-privileged user; another shell "
    "reaches it as admin with `source $TIDELAKE_HOME/kafka-secured/client.env`. Not with "
    "KAFKA_BOOTSTRAP_SERVERS.",
)
def dev(
    host: str,
    port: int,
    rate: float,
    history_days: int,
    incident_every: float,
    ingest_port: int,
    s3: bool,
    secured_kafka: bool,
) -> None:
    """Run the whole platform locally: broker, topics, ingest service, demo producer and
    `dg dev`.

    Uses KAFKA_BOOTSTRAP_SERVERS if set, else a running `tidelake broker`, else starts one
    (with --secured-kafka: always a secured one of its own). Ctrl-C stops everything this
    command started.
    """
    _configure_logging()
    from tidelake.platform.dev.stack import DevOptions, run_dev

    flows = _get_flows([], "FLOW")
    try:
        options = DevOptions(
            host=host,
            port=port,
            rate=rate,
            history_days=history_days,
            incident_every_s=incident_every,
            ingest_port=ingest_port,
            s3=s3,
            secured_kafka=secured_kafka,
        )
        code = run_dev(flows, options)
    except FileNotFoundError as exc:  # not run from the repository root
        raise CliError(str(exc), exit_code=2) from None
    sys.exit(code)


@main.command("dev-check")
@click.option("--url", default="http://127.0.0.1:3000", show_default=True, help="Dagster UI.")
@click.option("--timeout", type=click.FloatRange(min=1), default=300.0, show_default=True)
def dev_check(url: str, timeout: float) -> None:
    """Wait until the platform started by `tidelake dev` works: exit 0, else 1 naming what not.

    Checks through the webserver's GraphQL API that each flow's assets are listed, its
    supervisor sensor is RUNNING and a stream run is STARTED, then that its table has rows.
    """
    from tidelake.platform.dev.check import check_dev
    from tidelake.platform.dev.dagster_web import DagsterWeb
    from tidelake.streaming.settings import load_engine_settings

    settings = load_engine_settings()
    try:
        check_dev(DagsterWeb(url), _get_flows([], "FLOW"), settings, timeout, click.echo)
    except TimeoutError as exc:
        raise CliError(str(exc)) from None
    click.echo("tidelake dev: OK")


@main.command("install-jars")
def install_jars() -> None:
    """Build tidelake's JVM code and fetch the JVM artifacts (Kafka broker, Spark's Kafka
    source, Delta) into the jar cache.

    Maven builds the JVM build that ships in the package (jvm/ of a clone), offline first (a
    warm ~/.m2), then from Maven Central; jars that pyspark already ships are left out.
    `make venv` runs it; after `pip install tidelake` it is the one set-up step.
    """
    from tidelake.streaming.spark import jars

    try:
        report = jars.install()
    except (OSError, RuntimeError) as exc:
        raise CliError(f"could not install the JVM artifacts: {exc}") from None
    click.echo(
        f"JVM artifacts: {report.jars} jars, {report.size_bytes / 1e6:.0f} MB in "
        f"{jars.jars_home()} ({report.seconds:.1f}s, "
        f"{'offline from ~/.m2' if report.offline else 'from Maven Central'}; "
        f"{len(report.dropped)} left out as pyspark ships them)"
    )


@main.command("install-schema-registry")
def install_schema_registry() -> None:
    """Build the local schema registry (Apicurio Registry, from Maven Central) into the cache, once.

    10-25 s the first time, nothing after; `make schema-registry` (so `make test`) runs it. The
    tests run the registry it builds (platform/local/schema_registry.py).
    """
    from tidelake.platform.local.schema_registry import install_schema_registry as install

    click.echo(f"local schema registry: {install(report=click.echo)}")


@main.command("spark-archive")
def spark_archive() -> None:
    """Build the JVM class archive that cuts Spark's start-up (once per JDK and install).

    Takes about half a minute; `make venv` runs it. Sessions use the archive when present.
    """
    from tidelake.streaming.spark.class_archive import build_archive

    try:
        path = build_archive()
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        raise CliError(f"could not build the Spark class archive: {exc}") from None
    click.echo(f"Spark class archive: {path} ({path.stat().st_size / 1e6:.0f} MB)")


if __name__ == "__main__":
    main()
