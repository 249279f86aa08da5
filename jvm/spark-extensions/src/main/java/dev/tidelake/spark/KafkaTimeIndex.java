package dev.tidelake.spark;

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.api.java.UDF4;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;

/**
 * The time-index half of tidelake's arrival rule, evaluated where the records are read.
 *
 * <p>{@code behind(topic, partition, offset, closesMs)} is true when the partition holds a record
 * stamped after {@code closesMs} at an offset at or before {@code offset}: Kafka's own time index
 * answers "the first offset stamped after T" (ListOffsets by timestamp) exactly, whatever the
 * timestamp type. Answers are kept per executor JVM: a found offset never changes; "none yet" is
 * valid below the partition's last stable offset at the time of asking, which covers every
 * record a micro-batch planned before it. So a batch costs one request per partition and
 * closing time that was not asked before, and none per record.
 */
public final class KafkaTimeIndex implements UDF4<String, Integer, Long, Long, Boolean> {
  private static final long serialVersionUID = 1L;
  private static final Map<String, KafkaConsumer<byte[], byte[]>> CONSUMERS = new HashMap<>();
  private static final Map<String, long[]> ANSWERS = new ConcurrentHashMap<>();

  private final HashMap<String, String> kafkaConf;
  private final long timeoutMs;

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
    String key = cacheKey() + "\u0000" + topic + "\u0000" + partition + "\u0000" + closesMs;
    long[] answer = ANSWERS.get(key);  // {first offset stamped after, or -1; valid below}
    if (answer == null || (answer[0] < 0 && offset >= answer[1])) {
      answer = ask(new TopicPartition(topic, partition), closesMs);
      ANSWERS.put(key, answer);
    }
    return answer[0] >= 0 && offset >= answer[0];
  }

  private long[] ask(TopicPartition tp, long closesMs) {
    KafkaConsumer<byte[], byte[]> consumer = consumer();
    synchronized (consumer) {
      Duration timeout = Duration.ofMillis(timeoutMs);
      Map<TopicPartition, OffsetAndTimestamp> found =
          consumer.offsetsForTimes(Map.of(tp, closesMs + 1), timeout);
      OffsetAndTimestamp first = found.get(tp);
      if (first != null) {
        return new long[] {first.offset(), Long.MAX_VALUE};
      }
      long stable = consumer.endOffsets(java.util.List.of(tp), timeout).get(tp);
      return new long[] {-1L, stable};
    }
  }

  private String cacheKey() {
    return String.valueOf(kafkaConf.get("bootstrap.servers"));
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
