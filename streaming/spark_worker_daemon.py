"""Spark's Python worker daemon with tidelake's worker-side imports done once, before fork.

Every Spark Python worker (task readers and writers, data-source planners, the sink's commit
runner) is forked from a daemon. The stock daemon imports almost nothing, so each new worker
spent ~0.5 s of CPU importing pyarrow, numpy, protobuf and confluent-kafka, and a cold stream
start forks a dozen of them on two cores. Forked from here, they start with all of it loaded.
Selected with `spark.python.daemon.module`. deltalake is deliberately not imported: its tokio
runtime does not survive fork.
"""

import importlib
import sys

PRELOADED = (
    "confluent_kafka",
    "numpy",
    "pyarrow.compute",
    "pyarrow.fs",
    "pyarrow.parquet",
    "pyspark.worker",
    "pyspark.sql.worker.create_data_source",
    "pyspark.sql.worker.plan_data_source_read",
    "pyspark.sql.worker.python_streaming_sink_runner",
    "pyspark.sql.worker.write_into_data_source",
    "tidelake.streaming.delta_sink",
    "tidelake.streaming.kafka_source",
)


def main() -> None:
    # Spark puts its pyspark.zip first on workers' sys.path; zipimport keeps no bytecode cache,
    # so every worker recompiled pyspark's sources (seen in py-spy profiles). The pip-installed
    # package is the same version and has cached bytecode: prefer it.
    sys.path.sort(key=lambda entry: entry.endswith(".zip"))
    for module in PRELOADED:
        importlib.import_module(module)
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
