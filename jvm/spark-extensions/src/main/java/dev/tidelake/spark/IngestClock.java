package dev.tidelake.spark;

import java.time.Instant;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.api.java.UDF0;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;

/**
 * A record's ingest time: the wall clock when the engine reads it, in epoch microseconds.
 *
 * <p>Not Spark's {@code current_timestamp()}: a stream turns that into each micro-batch's time
 * as a literal in the batch's generated code, so every micro-batch compiled the decode stage
 * again (73 KB of Java through Janino, then the JIT): measured at 5,000 events/s, the JIT's
 * threads took 13.4 of the driver JVM's 24.3 CPU seconds. A non-deterministic function is
 * neither folded nor inlined, so the code stays the same from batch to batch and is compiled
 * once.
 */
public final class IngestClock {
  private IngestClock() {}

  /** The clock as a column, read for every row. */
  public static Column micros() {
    UDF0<Long> now = IngestClock::nowMicros;
    return functions.udf(now, DataTypes.LongType).asNondeterministic().apply();
  }

  static long nowMicros() {
    Instant now = Instant.now();
    return now.getEpochSecond() * 1_000_000L + now.getNano() / 1_000;
  }
}
