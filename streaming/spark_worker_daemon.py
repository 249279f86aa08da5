"""Spark's Python worker daemon with tidelake's worker-side imports done once, before fork.

Every Spark Python worker (task readers and writers, data-source planners, the sink's commit
runner) is forked from a daemon. The stock daemon imports almost nothing, so each new worker
spent ~0.5 s of CPU importing pyarrow, numpy, protobuf and confluent-kafka, and a cold stream
start forks a dozen of them on two cores. Forked from here, they start with all of it loaded.
Selected with `spark.python.daemon.module`. deltalake is deliberately not imported: its tokio
runtime does not survive fork.
"""

import confluent_kafka  # noqa: F401
import numpy  # noqa: F401
import pyarrow.compute
import pyarrow.fs
import pyarrow.parquet  # noqa: F401
import pyspark.sql.worker.create_data_source
import pyspark.sql.worker.plan_data_source_read
import pyspark.sql.worker.python_streaming_sink_runner
import pyspark.sql.worker.write_into_data_source
import pyspark.worker  # noqa: F401
from pyspark.daemon import manager

import tidelake.streaming.delta_sink
import tidelake.streaming.kafka_source  # noqa: F401

if __name__ == "__main__":
    manager()
