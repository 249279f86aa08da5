package dev.tidelake.spark;

import java.sql.Timestamp;
import java.time.Duration;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoder;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.KeyValueGroupedDataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessorWithInitialState;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import org.apache.spark.sql.types.StructType;
import scala.Option;
import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Drops repeats of a key: a record is kept unless the key's previous record (in arrival order,
 * then Kafka partition and offset) arrived at most the allowed lateness before it. The rule is the
 * caller's (streaming/records/dedup.py); this is its one implementation, for streams and bounded
 * reads.
 *
 * <p>A bounded read hands each key's records over at once and keeps no state. On a stream, a
 * key's state is its previous record's arrival, kept with Spark's state TTL for {@link
 * #keyLifetime}. Spark finds expired keys by a range scan over its TTL index, so a micro-batch's
 * cost follows the keys that arrive and expire, not the keys held (Spark's {@code
 * dropDuplicatesWithinWatermark}, used before, walked every key held at the end of every
 * micro-batch).
 */
public final class RepeatFilter {
  private RepeatFilter() {}

  /**
   * The rows of {@code rows} that the rule keeps, with the same columns. {@code arrival} is a
   * timestamp column that orders a key's records, {@code partition} and {@code offset} order those
   * that arrived at the same time. {@code remembered}, if not null, seeds a new stream's state:
   * rows of (key, previous arrival in microseconds), e.g. what an earlier operator's checkpoint
   * held. The session's state store coordinator must be running (dedup.py starts it).
   */
  public static Dataset<Row> keepFirstOfRepeats(
      Dataset<Row> rows,
      String key,
      String arrival,
      String partition,
      String offset,
      long latenessMicros,
      Dataset<Row> remembered) {
    StructType schema = rows.schema();
    Columns columns =
        new Columns(
            schema.fieldIndex(key),
            schema.fieldIndex(arrival),
            schema.fieldIndex(partition),
            schema.fieldIndex(offset));
    // grouped by the column, not by a function of the row: a function would decode every row
    // into a Row once more only to read its key
    Encoder<Row> asRows = javaTimeRowEncoder(rows.sparkSession(), schema);
    KeyValueGroupedDataset<String, Row> byKey =
        rows.groupBy(functions.col(key)).as(Encoders.STRING(), asRows);
    RepeatProcessor processor = new RepeatProcessor(columns, latenessMicros, rows.isStreaming());
    TimeMode time = rows.isStreaming() ? TimeMode.ProcessingTime() : TimeMode.None();
    if (remembered == null) {
      return byKey.transformWithState(processor, time, OutputMode.Append(), asRows);
    }
    KeyValueGroupedDataset<String, Long> seeds =
        remembered
            .groupByKey((MapFunction<Row, String>) r -> r.getString(0), Encoders.STRING())
            .mapValues((MapFunction<Row, Long>) r -> r.getLong(1), Encoders.LONG());
    return byKey.transformWithState(
        processor, time, OutputMode.Append(), seeds, asRows, Encoders.LONG());
  }

  /**
   * A Row encoder with java.time values (Instant, LocalDate): java.sql.Timestamp and Date would
   * rebase every timestamp and date of every row through the JVM's time zone, twice. Spark picks
   * the types from the active session's settings when the encoder is made, so it is made with a
   * new session of this thread's own (same SparkContext, its own settings) active: the caller's
   * session, which a run's steps share, is never changed, not even for that moment.
   */
  static Encoder<Row> javaTimeRowEncoder(SparkSession spark, StructType schema) {
    SparkSession javaTime = spark.newSession();
    javaTime.conf().set("spark.sql.datetime.java8API.enabled", "true");
    Option<SparkSession> active = SparkSession.getActiveSession();
    SparkSession.setActiveSession(javaTime);
    try {
      return Encoders.row(schema);
    } finally {
      if (active.isDefined()) {
        SparkSession.setActiveSession(active.get());
      } else {
        SparkSession.clearActiveSession();
      }
    }
  }

  /** Where the rule's columns stand in a row. */
  record Columns(int key, int arrival, int partition, int offset) implements java.io.Serializable {
    long arrivalMicros(Row row) {
      return micros(row.get(arrival));
    }

    /** By arrival, then by Kafka position: one order whatever partitions a key was sent to. */
    Comparator<Row> arrivalOrder() {
      return Comparator.<Row>comparingLong(this::arrivalMicros)
          .thenComparingLong(r -> ((Number) r.get(partition)).longValue())
          .thenComparingLong(r -> ((Number) r.get(offset)).longValue());
    }
  }

  static long micros(Object timestamp) {
    Instant instant;
    if (timestamp instanceof Instant i) {
      instant = i;
    } else if (timestamp instanceof Timestamp t) {
      instant = t.toInstant();
    } else if (timestamp instanceof LocalDateTime t) {
      instant = t.toInstant(ZoneOffset.UTC);
    } else {
      throw new IllegalArgumentException("arrival must be a timestamp, got " + timestamp);
    }
    return Math.addExact(
        Math.multiplyExact(instant.getEpochSecond(), 1_000_000L), instant.getNano() / 1_000L);
  }

  /**
   * How long a stream keeps a key after its last record, in processing time (Spark's state TTL,
   * counted from the start of the micro-batch that wrote it): twice the lateness plus a margin,
   * half the lateness and at least 10 minutes. A repeat arrives at most the lateness after the
   * key's previous record, and a stream reads both within its lag of their arrival; so the key is
   * still held when its repeat is read unless the stream's lag grew by more than the lateness and
   * the margin in between (a stream stopped that long between a record and its repeat keeps the
   * repeat, which a bounded read of the same records drops).
   */
  static Duration keyLifetime(long latenessMicros) {
    Duration lateness = Duration.ofNanos(Math.multiplyExact(latenessMicros, 1_000L));
    Duration margin = lateness.dividedBy(2);
    if (margin.compareTo(MIN_MARGIN) < 0) {
      margin = MIN_MARGIN;
    }
    return lateness.multipliedBy(2).plus(margin);
  }

  private static final Duration MIN_MARGIN = Duration.ofMinutes(10);

  /** The rule on one key's records: those kept, in arrival order, and the last arrival seen. */
  record Verdict(List<Row> kept, long lastArrivalMicros) {}

  static Verdict apply(
      Long previousMicros, List<Row> records, Columns columns, long latenessMicros) {
    if (records.size() > 1) { // most keys come once: no order to build
      records.sort(columns.arrivalOrder());
    }
    List<Row> kept = new ArrayList<>(1);
    Long previous = previousMicros;
    for (Row row : records) {
      long arrival = columns.arrivalMicros(row);
      if (previous == null || arrival - previous > latenessMicros) {
        kept.add(row);
      }
      // a record read after a later-arriving one (a stream's later micro-batch) does not move
      // the key's last arrival back
      previous = previous == null ? arrival : Math.max(previous, arrival);
    }
    return new Verdict(kept, previous);
  }

  /** The stateful processor: one value per key held, its previous record's arrival. */
  static final class RepeatProcessor
      extends StatefulProcessorWithInitialState<String, Row, Row, Long> {
    private final Columns columns;
    private final long latenessMicros;
    private final boolean streaming;
    private transient ValueState<Long> previousArrival;

    RepeatProcessor(Columns columns, long latenessMicros, boolean streaming) {
      this.columns = columns;
      this.latenessMicros = latenessMicros;
      this.streaming = streaming;
    }

    @Override
    public void init(OutputMode outputMode, TimeMode timeMode) {
      TTLConfig ttl = streaming ? new TTLConfig(keyLifetime(latenessMicros)) : TTLConfig.NONE();
      previousArrival = getHandle().getValueState("previous_arrival_us", Encoders.LONG(), ttl);
    }

    @Override
    public void handleInitialState(String key, Long previousMicros, TimerValues timers) {
      previousArrival.update(previousMicros);
    }

    @Override
    public Iterator<Row> handleInputRows(String key, Iterator<Row> rows, TimerValues timers) {
      List<Row> records = new ArrayList<>(CollectionConverters.asJava(rows.toSeq()));
      if (!streaming) { // a bounded read hands over every record of the key at once
        return CollectionConverters.asScala(
            RepeatFilter.apply(null, records, columns, latenessMicros).kept().iterator());
      }
      Verdict verdict = RepeatFilter.apply(previousArrival.get(), records, columns, latenessMicros);
      previousArrival.update(verdict.lastArrivalMicros());
      return CollectionConverters.asScala(verdict.kept().iterator());
    }
  }
}
