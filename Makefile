# tidelake developer commands. `make test` is what CI runs (.ci/run) on a fresh clone.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: help dev dev-s3 dev-secured schema-registry bench-s3 bench-framed bench-secured venv test lint typecheck format protos check-protos unit jvm-test test-packages bench bench-throughput bench-latency bench-backfill bench-quality bench-ingest bench-anomaly bench-cluster soak bench-delta-log bench-open-date bench-dagster-history bench-dedup-state bench-use-case bench-upsert-scale bench-daily-use-case bench-driver-memory bench-read-threads bench-faults broker clean

help:
	@echo "make dev               the whole platform locally; Dagster UI on http://127.0.0.1:3000"
	@echo "make venv              create $(VENV) and install tidelake with its dev tools"
	@echo "make test              everything CI checks: generated code, lint, the whole test suite"
	@echo "make unit              tests/unit: needs no broker, no Spark, no JVM"
	@echo "make jvm-test          the JVM code's JUnit tests (seconds; part of make test)"
	@echo "make typecheck         mypy, strict on streaming/"
	@echo "make protos            regenerate Python code from the .proto files"
	@echo "make bench             throughput and latency benchmarks (minutes; prints figures)"
	@echo "make bench-framed      throughput with every value Confluent-framed, next to bare"
	@echo "make bench-secured     throughput from a secured broker (SASL_SSL, SCRAM, TLS), next to plaintext"
	@echo "make bench-s3          throughput and latency with the lake on a local S3 server, next to the local disk"
	@echo "make bench-cluster     the throughput benchmark on a Spark standalone cluster and on local[2]"
	@echo "make soak              the platform for an hour at 6,000 events/s with faults: drift of every cost (SOAK_ARGS=...)"
	@echo "make bench-use-case    the flow and account_activity at 2,000 events/s: freshness p50/p99, RSS"
	@echo "make bench-upsert-scale  an upsert's micro-batch on 10,000 and on 1,000,000 keys, alternating: rows rewritten, MERGE time"
	@echo "make bench-daily-use-case  calls_by_region_daily: seconds to make a day of 2 M calls, the refresh"
	@echo "make bench-delta-log   the stream's commit path on a log holding 30 days of commits, local disk and S3"
	@echo "make bench-open-date   a date's small files: the stream's checkpoint and readers, daily vs hourly compaction (~25 min)"
	@echo "make bench-dedup-state one stream's micro-batches before and after a 30 M-key backlog (~40 min)"
	@echo "make bench-driver-memory the stream's Python driver over thousands of small micro-batches (~25 min)"
	@echo "make bench-read-threads  delta-rs's threads in a process that reads a log as a stream's driver does (~1 min)"
	@echo "make bench-dagster-history  the supervisor's tick and the asset pages with 30 days of Dagster history"
	@echo "make bench-faults      fault scenarios: kills, stops and races at random moments, clusters losing nodes (~20 min)"
	@echo "make dev-s3            the same with the lake and checkpoints on a local S3 server"
	@echo "make dev-secured       the same on a secured broker (SASL_SSL, SCRAM, ACLs), a user per process"
	@echo "make schema-registry   build the local schema registry (Apicurio) into the cache, once"
	@echo "make broker            run a local Apache Kafka broker (KRaft) in the foreground"

JAVA   := $(shell find jvm/spark-extensions/src/main jvm/ingest-service/src/main -name '*.java')

# --compile-bytecode: uv does not compile by default, and where PYTHONDONTWRITEBYTECODE is set every
# Python process (Dagster's webserver, daemon, code servers, each run) compiled the libraries again
$(STAMP): pyproject.toml setup.py jvm/pom.xml jvm/spark-jars/pom.xml jvm/kafka-broker/pom.xml jvm/spark-extensions/pom.xml jvm/ingest-service/pom.xml $(JAVA)
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (set PYTHON=...)"; exit 1; }
	@command -v mvn >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && apt-get install -y -qq maven >/dev/null; } || { echo "need Maven 3.8+ (Debian package maven) for the JVM jars"; exit 1; }
	@scripts/install_debian_packages.sh runtime libjemalloc2
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip "uv>=0.13,<0.14"
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -e ".[dev]"
	$(BIN)/tidelake install-jars
	$(BIN)/tidelake spark-archive
	@touch $@

venv: $(STAMP)

check-protos: $(STAMP)
	$(BIN)/python scripts/gen_protos.py --check

protos: $(STAMP)
	$(BIN)/python scripts/gen_protos.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

test: check-protos lint typecheck jvm-test test-packages schema-registry
	$(BIN)/pytest --timeout=900 --durations=40

# Apicurio Registry (Confluent's registry API), built from Maven Central into the cache, once
schema-registry: $(STAMP)
	$(BIN)/tidelake install-schema-registry

# chromium and postgresql from Debian, for the browser and distributed tests (when this user can)
test-packages:
	@scripts/install_debian_packages.sh tests chromium postgresql

# the JUnit tests check the Java against what the FlowSpecs export, written here first
jvm-test: $(STAMP)
	$(BIN)/python scripts/export_jvm_test_data.py jvm/target/test-data
	mvn -B -ntp -f jvm/pom.xml test

typecheck: $(STAMP)
	$(BIN)/python scripts/typecheck.py

unit: $(STAMP)
	$(BIN)/pytest tests/unit

bench: bench-throughput bench-latency bench-backfill bench-quality bench-ingest bench-anomaly

bench-throughput: $(STAMP)
	cd bench && ../$(BIN)/python engine_throughput.py --out ../bench-results/throughput.json

bench-cluster: $(STAMP)
	cd bench && ../$(BIN)/python engine_throughput.py --skip-floor --also-on-cluster --out ../bench-results/cluster.json

# both engine benchmarks again with the lake and checkpoints on a local S3 server, same run
bench-s3: $(STAMP)
	cd bench && ../$(BIN)/python engine_throughput.py --also-on-s3 --out ../bench-results/throughput-s3.json
	cd bench && ../$(BIN)/python engine_latency.py --also-on-s3 --out ../bench-results/latency-s3.json

# throughput with every value in Confluent's wire format next to bare values, same run
bench-framed: $(STAMP)
	cd bench && ../$(BIN)/python engine_throughput.py --also-framed --out ../bench-results/throughput-framed.json

bench-secured: $(STAMP)
	cd bench && ../$(BIN)/python engine_throughput.py --also-secured --out ../bench-results/throughput-secured.json

# an hour (SOAK_ARGS="--minutes 120" for longer): bench-results/soak/soak.{csv,png,json}
soak: $(STAMP)
	cd bench && ../$(BIN)/python -m soak --out-dir ../bench-results/soak $(SOAK_ARGS)

# the flow plus account_activity at 2,000 events/s for 10 minutes: keeping up, freshness, RSS
# (USE_CASE_ARGS="--rate 2000 --minutes 10")
bench-use-case: $(STAMP)
	cd bench && ../$(BIN)/python use_case_freshness.py --out ../bench-results/use-case.json $(USE_CASE_ARGS)

# (UPSERT_ARGS="--small 10000 --large 1000000 --batches 8 --events 3000")
bench-upsert-scale: $(STAMP)
	cd bench && ../$(BIN)/python upsert_scale.py --out ../bench-results/upsert-scale.json $(UPSERT_ARGS)

# (DAILY_ARGS="--calls 2000000 --days 3")
bench-daily-use-case: $(STAMP)
	cd bench && ../$(BIN)/python daily_use_case.py --out ../bench-results/daily-use-case.json $(DAILY_ARGS)

# a stream live at 2,000 events/s, a backlog of 30 M keys, live again (DEDUP_ARGS=...)
bench-dedup-state: $(STAMP)
	cd bench && ../$(BIN)/python dedup_state.py --out ../bench-results/dedup-state.json $(DEDUP_ARGS)

bench-driver-memory: $(STAMP)
	cd bench && ../$(BIN)/python stream_driver_memory.py --out ../bench-results/driver-memory.json $(DRIVER_ARGS)

bench-read-threads: $(STAMP)
	cd bench && ../$(BIN)/python delta_read_threads.py $(READ_THREADS_ARGS)

bench-delta-log: $(STAMP)
	cd bench && ../$(BIN)/python delta_log_age.py --out ../bench-results/delta-log.json

bench-open-date: $(STAMP)
	cd bench && ../$(BIN)/python open_date_files.py --out ../bench-results/open-date.json $(OPEN_DATE_ARGS)

bench-dagster-history: test-packages
	cd bench && ../$(BIN)/python -m dagster_history --out ../bench-results/dagster-history.json

# the tests marked faults (pytest leaves them out unless -m faults): each prints its recovery
bench-faults: test-packages
	$(BIN)/pytest -m faults -s --timeout=900 --durations=0

bench-latency: $(STAMP)
	cd bench && ../$(BIN)/python engine_latency.py --out ../bench-results/latency.json

dev: $(STAMP)
	$(BIN)/tidelake dev

dev-s3: $(STAMP)
	$(BIN)/tidelake dev --s3

dev-secured: $(STAMP)
	$(BIN)/tidelake dev --secured-kafka

bench-backfill: $(STAMP)
	cd bench && ../$(BIN)/python backfill_maintenance.py --out ../bench-results/backfill.json

bench-quality: $(STAMP)
	cd bench && ../$(BIN)/python quality_checks.py --out ../bench-results/quality.json

bench-ingest: $(STAMP)
	cd bench && ../$(BIN)/python ingest_load.py --out ../bench-results/ingest.json

bench-anomaly: $(STAMP)
	cd bench && ../$(BIN)/python anomaly_latency.py --out ../bench-results/anomaly.json

broker: $(STAMP)
	$(BIN)/tidelake broker

clean:
	rm -rf $(VENV) .tidelake bench-results .pytest_cache .ruff_cache jvm/target
