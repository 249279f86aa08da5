package dev.tidelake.spark;

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.api.java.UDF4;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;

/**
 * The partition half of tidelake's arrival rule, evaluated where the records are read.
 *
 * <p>{@code behind(topic, partition, offset, closesMs)} is true when a committed data record
 * stamped after {@code closesMs} stands at or before {@code offset} in its partition. Kafka's time
 * index (ListOffsets by timestamp) gives the first offset stamped after a time, but it counts
 * transaction markers, stamped with the coordinator's wall clock, and aborted records: a
 * transactional producer that stamps event times would move the clock of every record behind its
 * markers. So the index only says where to start reading; a read_committed consumer then reads
 * from there to the first data record stamped after the time (one fetch, unless markers or
 * aborted records stand there). Answers are kept per executor JVM ({@link ArrivalClock}), so a
 * batch costs at most one lookup per partition and closing time, and none per record.
 */
public final class KafkaTimeIndex implements UDF4<String, Integer, Long, Long, Boolean> {
  private static final long serialVersionUID = 1L;
  private static final Map<Map<String, String>, KafkaConsumer<byte[], byte[]>> CONSUMERS =
      new HashMap<>();
  private static final Map<Map<String, String>, ArrivalClock> CLOCKS = new HashMap<>();

  private final HashMap<String, String> kafkaConf;
  private final long timeoutMs;
  private transient ArrivalClock clock;
  private transient ArrivalClock.Lookup lookup;

  public KafkaTimeIndex(Map<String, String> kafkaConf, long timeoutMs) {
    this.kafkaConf = new HashMap<>(kafkaConf);
    this.timeoutMs = timeoutMs;
  }

  /** {@code behind(topic, partition, offset, closesMs)} as a boolean column (null in, null out). */
  public static Column behind(
      Column topic, Column partition, Column offset, Column closesMs,
      Map<String, String> kafkaConf, long timeoutMs) {
    KafkaTimeIndex index = new KafkaTimeIndex(kafkaConf, timeoutMs);
    return functions.udf(index, DataTypes.BooleanType)
        .asNondeterministic()
        .apply(topic, partition, offset, closesMs);
  }

  @Override
  public Boolean call(String topic, Integer partition, Long offset, Long closesMs) {
    if (topic == null || partition == null || offset == null || closesMs == null) {
      return null;
    }
    if (clock == null) {  // once per task: this instance serves one task's thread
      synchronized (CLOCKS) {
        clock = CLOCKS.computeIfAbsent(cacheKey(), k -> new ArrivalClock());
      }
      lookup = this::firstDataRecordAfter;
    }
    return clock.passed(topic, partition, offset, closesMs, lookup);
  }

  /**
   * The first committed data record stamped after {@code afterMs} at or after {@code from}, or
   * none below the partition's last stable offset as it stood before the question was asked.
   */
  ArrivalClock.Answer firstDataRecordAfter(String topic, int partition, long afterMs, long from) {
    TopicPartition tp = new TopicPartition(topic, partition);
    KafkaConsumer<byte[], byte[]> consumer = consumer();
    synchronized (consumer) {
      Duration timeout = Duration.ofMillis(timeoutMs);
      // the end first: a record appended after it may be stamped after afterMs
      long end = consumer.endOffsets(List.of(tp), timeout).get(tp);
      OffsetAndTimestamp first = consumer.offsetsForTimes(Map.of(tp, afterMs + 1), timeout).get(tp);
      long start = Math.max(from, first == null ? end : first.offset());
      if (start >= end) {
        return ArrivalClock.Answer.noneBelow(end);
      }
      long deadline = System.nanoTime() + timeout.toNanos();
      consumer.assign(List.of(tp));
      consumer.seek(tp, start);
      try {
        while (consumer.position(tp, timeout) < end) {
          for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(100))) {
            if (record.offset() >= end) {
              return ArrivalClock.Answer.noneBelow(end);
            }
            if (record.timestamp() > afterMs) {
              return ArrivalClock.Answer.at(record.offset());
            }
          }
          if (System.nanoTime() > deadline) {
            throw new TimeoutException(
                "reading " + tp + " from offset " + start + " to " + end + " took over "
                    + timeoutMs + " ms");
          }
        }
        return ArrivalClock.Answer.noneBelow(end);
      } finally {
        consumer.unsubscribe();
      }
    }
  }

  private Map<String, String> cacheKey() {
    return clientKey(kafkaConf);
  }

  /**
   * Clients and clocks are kept per whole client config, not per cluster: two principals on one
   * cluster in one Spark application (a stream's user and the detector's) each read as
   * themselves, and neither is answered from what the other was allowed to read.
   */
  static Map<String, String> clientKey(Map<String, String> kafkaConf) {
    return Map.copyOf(kafkaConf);
  }

  private KafkaConsumer<byte[], byte[]> consumer() {
    synchronized (CONSUMERS) {
      return CONSUMERS.computeIfAbsent(cacheKey(), k -> {
        Properties props = new Properties();
        props.putAll(kafkaConf);
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        return new KafkaConsumer<>(props);
      });
    }
  }
}
