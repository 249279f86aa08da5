"""Soak: the platform as a user runs it, fed for an hour or more, with faults; drift, not levels.

Starts a Kafka node of its own (so that it can crash and restart it), `tidelake dev` against it
without the demo producer (Dagster runs the stream under its supervisor, the anomaly detector
and the daily assets), and a producer at --rate events/s with late, duplicate and malformed
events. Every --sample-every seconds it records each micro-batch's duration, eviction and commit
times (from the stream's progress log, TIDELAKE_PROGRESS_LOG), the deduplication state's rows
and memory, every process's RSS and CPU, file counts and sizes (`_delta_log`, the checkpoint,
the table, the quarantine) and Dagster's storage. Every --fault-every minutes it injects the
next fault: the stream's JVM SIGKILLed (its Dagster run fails; the supervisor starts another),
the broker crashed and restarted, a compaction and a vacuum racing the stream. At the end it
waits for the stream to catch up and reads the tables back with DuckDB: every good event once,
every malformed one in quarantine. With --aged the table and the quarantine are first seeded
with the tombstones they carry on a stream's 30th day (a file retention of hourly compactions,
expiring as new ones come), so that the hour measured is a month-old stream's, not a new one's.

Its modules, by concern: runner (the command and its sampling loop), platform (the
broker, `tidelake dev`, the producer, the read-back), aged_state (`--aged`), batches, processes
and storage (the samplers), faults, series (the names of what is sampled), figures (the plot
and the drift table, which soak_report.py draws again) and summary.

Writes samples.jsonl as it samples (a run that fails keeps what it measured), then soak.csv
(one row a sample), soak.png (every series over time) and soak.json (the
summary) to --out-dir, and prints, for each series after the first --settle minutes, the
first-tenth and last-tenth medians, the least-squares slope per hour (also as a share of the
median) and the value that slope reaches at 30 days. Samples taken while a fault is being
recovered from are kept in the CSV and left out of the drift figures; so are a process's RSS
and CPU in its own first --settle minutes (a stream the kill fault restarted, the broker), and the
stream's micro-batch figures in its JVM's (SERIES_AGE).

    cd bench && python -m soak --minutes 60 --rate 6000
"""
