"""The arrival rule's second half: a record behind one stamped after its date closed.

A date D closes at the end of D (UTC) plus the flow's allowed lateness. A record of D is too late
when its partition had passed that time where it stands: its own Kafka timestamp (decode checks
that), or that of any record before it in the partition, is after D closed. Kafka's time index
answers the second part exactly ("the first offset stamped after T") whatever the timestamp
type: with LogAppendTime or producers stamping send time it is plain arrival time; a producer
that stamps event times and sends hours late lands behind newer records and is caught; history
replayed in order still lands. Both halves bound where a date's records sit in Kafka, which is
what lets a backfill read exactly the offsets the stream accepted for a date
(backfill.plan_backfill).

This half runs on a bounded set of decoded rows (a micro-batch, a backfill's read): one small
Spark job collects the distinct closing times per partition with their last offset, the driver
asks Kafka once per closing time for those partitions, and a broadcast join marks the records at
or past an answer (only where an answer falls inside the rows).
"""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tidelake.streaming.decode import CLOSE_COLUMN, ERROR_COLUMN
from tidelake.streaming.flow_spec import FlowSpec
from tidelake.streaming.kafka_offsets import PartitionEnds, TopicPartitionKey


class TimeIndex:
    """Kafka's "first offset stamped after T", with found answers kept: once a partition has a
    record stamped after T, the first such offset never changes."""

    def __init__(self, ends: PartitionEnds):
        self._ends = ends
        self._found: dict[tuple[TopicPartitionKey, int], int] = {}

    def first_offsets_after(
        self, tps: Iterable[TopicPartitionKey], ts_ms: int
    ) -> dict[TopicPartitionKey, int]:
        """Partitions that have a record stamped after ts_ms, with its offset."""
        tps = list(tps)
        missing = [tp for tp in tps if (tp, ts_ms) not in self._found]
        if missing:
            for tp, offset in self._ends.first_offsets_after(missing, ts_ms).items():
                if offset is not None:
                    self._found[(tp, ts_ms)] = offset
        return {tp: self._found[(tp, ts_ms)] for tp in tps if (tp, ts_ms) in self._found}


def quarantine_late_arrivals(
    rows: DataFrame, flow: FlowSpec, index: TimeIndex
) -> tuple[DataFrame, bool]:
    """Decoded rows with records behind a later-stamped one given their "too late" reason, and
    whether any row is now refused (so that an empty quarantine write can be skipped).

    Costs one Spark job over `rows` (persist them if they are read again) and one ListOffsets
    request per distinct closing time not answered before.
    """
    groups = (
        rows.groupBy("kafka_topic", "kafka_partition", CLOSE_COLUMN)
        .agg(F.max("kafka_offset").alias("last"))
        .collect()
    )
    refused = any(g[CLOSE_COLUMN] is None for g in groups)
    by_close: dict[int, list[TopicPartitionKey]] = {}
    last: dict[tuple[TopicPartitionKey, int], int] = {}
    for topic, partition, closes_ms, top in groups:
        if closes_ms is not None:
            by_close.setdefault(int(closes_ms), []).append((topic, int(partition)))
            last[((topic, int(partition)), int(closes_ms))] = int(top)
    bounds = [
        (topic, partition, closes_ms, offset)
        for closes_ms, tps in sorted(by_close.items())
        for (topic, partition), offset in index.first_offsets_after(tps, closes_ms).items()
        if offset <= last[((topic, partition), closes_ms)]
    ]
    if not bounds:
        return rows, refused
    bound_rows = rows.sparkSession.createDataFrame(
        bounds, f"kafka_topic string, kafka_partition int, {CLOSE_COLUMN} long, _late_from long"
    )
    joined = rows.join(
        F.broadcast(bound_rows), ["kafka_topic", "kafka_partition", CLOSE_COLUMN], "left"
    )
    late = F.col("_late_from").isNotNull() & (F.col("kafka_offset") >= F.col("_late_from"))
    reason = F.concat(
        F.lit("too late: arrived after "),
        F.date_format(flow.partition_column, "yyyy-MM-dd"),
        F.lit(" closed"),
    )
    return joined.withColumns(
        {
            ERROR_COLUMN: F.when(late, reason).otherwise(F.col(ERROR_COLUMN)),
            # a quarantined record's date is its Kafka timestamp's, as decode gives it
            flow.partition_column: F.when(late, F.to_date("kafka_timestamp")).otherwise(
                F.col(flow.partition_column)
            ),
        }
    ).select(*rows.columns), True
