"""The training workload of Spark's class archive (spark/class_archive.py): what a stream does
(decode, deduplicate, write data files, commit with delta-rs, read Delta with delta-spark), on
Spark's rate source instead of Kafka, with a demo event of the first declared flow.

Run as a program by class_archive.build_archive: `python -m ... ARCHIVE WORK_DIR`.
"""

from __future__ import annotations

import random
import sys
from typing import Any

from pyspark.sql import functions as F

from tidelake.streaming.delta.write import MicroBatchWriter, ensure_flow_tables
from tidelake.streaming.flow.declared import declared_flows
from tidelake.streaming.records.decode import decode_records
from tidelake.streaming.records.dedup import drop_repeats_in_stream
from tidelake.streaming.schemas.writer_schemas import WriterSchemas
from tidelake.streaming.spark.session import build_spark_session

EVENT_TIME_MS = 1_700_000_000_000


def train(archive: str, work: str) -> None:
    """Run the workload in a session that writes the class archive as its JVM exits."""
    flow = next(f for f in declared_flows().values() if f.demo_event is not None)
    assert flow.demo_event is not None
    spark = build_spark_session(
        conf={"spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={archive} -Xlog:cds=off"},
        use_class_archive=False,
    )
    event = flow.demo_event(random.Random(0), EVENT_TIME_MS).SerializeToString()
    records = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 1000)
        .load()
        .select(
            F.lit(None).cast("binary").alias("key"),
            F.lit(event).alias("value"),
            F.lit("training").alias("topic"),
            F.lit(0).alias("partition"),
            F.col("value").alias("offset"),
            F.timestamp_seconds(F.lit(EVENT_TIME_MS // 1000)).alias("timestamp"),
        )
    )
    table, quarantine, checkpoint = f"{work}/table", f"{work}/quarantine", f"{work}/checkpoint"
    schemas = WriterSchemas(flow, registry=None)
    decoded = decode_records(records, flow, schemas=schemas)
    ensure_flow_tables(decoded, flow, table, quarantine)
    writer = MicroBatchWriter(flow, table, quarantine, checkpoint, schemas)

    def write(batch: Any, batch_id: int) -> None:
        writer(batch, batch_id)
        spark.read.format("delta").load(table).count()

    query = (
        drop_repeats_in_stream(decoded, flow)
        .writeStream.foreachBatch(write)
        .option("checkpointLocation", checkpoint)
        .trigger(once=True)
        .start()
    )
    query.awaitTermination(300)
    spark.range(1000).selectExpr("sum(id)").collect()
    # The JVM writes the archive as it exits, which it does when our end of its stdin closes.
    # Wait for that here, so the caller finds a complete file.
    gateway = spark.sparkContext._gateway
    assert gateway is not None
    jvm = gateway.proc
    spark.stop()
    gateway.shutdown()
    jvm.stdin.close()
    jvm.wait(timeout=300)


if __name__ == "__main__":
    train(sys.argv[1], sys.argv[2])
