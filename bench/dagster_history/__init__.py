"""Dagster's storage after 30 days of one always-on stream, and what it costs (issue 38).

Seeds Dagster instances (SQLite, and PostgreSQL from Debian's package as the tests start it) with
the history one stream leaves: its supervisor's ticks (every 20 s), the health the supervisor
records (an observation of the table and two check evaluations), the stream's runs (a few
restarts a day) with their progress reports (a log line and an observation every 30 s), and the
daily partitions the supervisor closes. Two profiles:

- `before`: what the code of main f7e4780 leaves: health recorded on every tick, an observation
  from the run every 30 s, Dagster's default tick retention (SKIPPED ticks purged after 7 days,
  SUCCESS and FAILURE kept forever);
- `after`: what the code of issue 38 leaves: health recorded when it changes and at least every
  HEALTH_HEARTBEAT_S, the run's observation at that heartbeat too, the tick retention of
  platform/dev/dagster.yaml.

How it seeds, and why that is faithful: one real tick (the real sensor, evaluated with
build_sensor_context against a real broker, its events stored with report_runless_asset_event as
the sensor daemon does) and one real progress report (the stream job's ProgressReporter, called
from an op run with a Spark-shaped progress) are stored in a scratch instance; the entries they
wrote are the templates. They are replicated with their own timestamps (and run ids) into the
rows store_event writes, through the event log storage's own row builder, in bulk: event_logs
(on SQLite also mirrored into the index shard), asset_check_executions for each check
evaluation, job_ticks for each tick (TickData as the daemon writes it). Runs, their start and
failure events and the partition materializations go through the instance's own APIs.
`--verify` seeds one hour both ways (bulk, and the real store_event per event) and compares row
counts per table.

Then it times, on a new instance (1 hour of history) and on the 30-day one: (a) the supervisor's
tick: the real sensor evaluated with build_sensor_context (its Kafka probe against a local broker),
then what the daemon writes for it (the events, the tick, the retention purge); and the Dagster
reads inside it; (b) the table asset's page: the UI's own GraphQL documents, read from the
installed dagster-webserver's bundle, sent to a dagster-webserver started on the instance.
Prints storage sizes (bytes and rows per table, per day) and the ratios 30 days / new.
`--purge-only` seeds the aged instances, purges them to `--retention-days` and times the
purge's longest statement and transaction, nothing else.

Modules: profiles (what a design leaves), templates (one real tick and progress report),
seeding (their copies in bulk, checked against store_event), storage (rows, bytes, the timed
purge), statements (the longest statement and transaction of a block), site (an instance and its
webserver), page (the asset page's queries), ticks (the supervisor's tick), report.
`python -m dagster_history --help` from bench/.
"""
