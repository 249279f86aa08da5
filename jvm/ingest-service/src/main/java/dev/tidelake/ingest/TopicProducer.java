package dev.tidelake.ingest;

import java.time.Duration;
import java.util.Arrays;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;
import java.util.logging.Logger;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.AuthenticationException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.SslAuthenticationException;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The service's way onto Kafka: an idempotent acks=all producer for one topic, and a probe of the
 * cluster every few seconds that drives health. A send fails at once while Kafka is known to be
 * unreachable, instead of queueing events nobody will be told about in time.
 */
final class TopicProducer implements RecordSender, AutoCloseable {
  static final String RETRY_IS_SAFE = "Retrying is safe: the stream drops repeats of a call_sid.";
  private static final Logger LOG = Logger.getLogger(IngestMain.LOGGER);

  /** Kafka cannot take events now; the message says why. */
  static final class Unavailable extends Exception {
    Unavailable(String message) {
      super(message, null, false, false);
    }
  }

  private final Properties clientConfig;
  private final Properties producerConfig;
  private final String topic;
  private final byte[] valuePrefix;
  private final String bootstrap;
  private final String protocol;
  private volatile Producer<byte[], byte[]> producer;
  private volatile String down;
  private final AtomicLong waiting = new AtomicLong();
  private final Thread prober;
  private volatile boolean closed;

  TopicProducer(IngestConfig config) {
    this.clientConfig = config.kafka();
    this.topic = config.topic();
    this.valuePrefix = config.valuePrefix();
    this.bootstrap = config.bootstrapServers();
    this.protocol = config.securityProtocol().toUpperCase(java.util.Locale.ROOT);
    this.producerConfig = new Properties();
    producerConfig.putAll(clientConfig);
    producerConfig.put(ProducerConfig.ACKS_CONFIG, "all");
    producerConfig.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
    producerConfig.put(ProducerConfig.LINGER_MS_CONFIG, "2");
    // a record waits for Kafka up to a minute (a short outage delays it instead of failing it);
    // calls stop waiting at the shorter ack timeout
    producerConfig.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
    producerConfig.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "30000");
    // send() must not hold a gRPC thread: a full buffer or missing metadata fails fast
    producerConfig.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "2000");
    producerConfig.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
    producerConfig.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
    this.producer = new KafkaProducer<>(producerConfig);
    if (config.kafkaUnreachable() != null) {
      markDown(config.kafkaUnreachable());
    } else {
      probeOnce();
    }
    long interval = config.healthIntervalMs();
    this.prober =
        IngestMain.daemon(
            "kafka-probe",
                () -> {
                  while (!closed) {
                    try {
                      Thread.sleep(interval);
                    } catch (InterruptedException e) {
                      return;
                    }
                    probeOnce();
                  }
                });
  }

  /** Why Kafka is unreachable, as last seen; null while it answers. */
  String unavailableReason() {
    return down;
  }

  /** The value as written: after the configured prefix (a Confluent frame), if any. */
  private byte[] framed(byte[] value) {
    if (valuePrefix.length == 0) {
      return value;
    }
    byte[] out = Arrays.copyOf(valuePrefix, valuePrefix.length + value.length);
    System.arraycopy(value, 0, out, valuePrefix.length, value.length);
    return out;
  }

  /** Events handed to Kafka and not answered yet. */
  long waiting() {
    return waiting.get();
  }

  /**
   * Hand one record to Kafka; {@code done} runs on the producer's thread once Kafka answered
   * (error null: acknowledged, else why it was not). Throws Unavailable at once when it cannot
   * take the record; {@code done} then never runs.
   */
  @Override
  public void send(byte[] key, byte[] value, long timestampMs, Callback done) throws Unavailable {
    String reason = down;
    if (reason != null) {
      throw new Unavailable("Kafka is unreachable: " + reason);
    }
    ProducerRecord<byte[], byte[]> record =
        new ProducerRecord<>(topic, null, timestampMs, key, framed(value));
    waiting.incrementAndGet();
    Callback counted =
        (metadata, error) -> {
          waiting.decrementAndGet();
          if (error == null) {
            down = null;
          }
          done.onCompletion(metadata, error);
        };
    try {
      producer.send(record, counted);
    } catch (KafkaException | IllegalStateException e) {
      waiting.decrementAndGet();
      if (fatal(e)) {
        replaceProducer(e);
      }
      throw new Unavailable(refusal(e));
    }
  }

  /** Why events are refused once the ack timeout has passed without Kafka's answer. */
  static String notInTime(long waitMs) {
    return "Kafka did not acknowledge the event within " + seconds(waitMs) + " s. " + RETRY_IS_SAFE;
  }

  /** Seconds as Python's {@code :g} writes them (3 s, 0.5 s), so the wording stays the same. */
  private static String seconds(long ms) {
    return ms % 1000 == 0 ? Long.toString(ms / 1000) : Double.toString(ms / 1000.0);
  }

  static String notAcknowledged(Exception error) {
    return "Kafka did not acknowledge the event: " + error.getMessage() + ". " + RETRY_IS_SAFE;
  }

  private static String refusal(Exception e) {
    if (e instanceof org.apache.kafka.common.errors.TimeoutException) {
      return "the service's Kafka queue is full or the topic's metadata is unknown (Kafka is"
          + " slow or down); retry later";
    }
    return "Kafka refused the event: " + e.getMessage() + ". " + RETRY_IS_SAFE;
  }

  private static boolean fatal(Exception e) {
    return e instanceof ProducerFencedException
        || e instanceof OutOfOrderSequenceException
        || e instanceof IllegalStateException;
  }

  /** After a fatal error: what the old client holds fails (its senders are told), a new one
   * takes over. */
  private synchronized void replaceProducer(Exception cause) {
    LOG.severe("Kafka producer failed (" + cause + "); starting a new one");
    Producer<byte[], byte[]> old = producer;
    producer = new KafkaProducer<>(producerConfig);
    old.close(Duration.ZERO);
  }

  private void probeOnce() {
    try (Admin admin = Admin.create(probeConfig())) {
      admin
          .describeCluster(new DescribeClusterOptions().timeoutMs(5000))
          .nodes()
          .get(6, TimeUnit.SECONDS);
      if (down != null) {
        LOG.info("Kafka reachable again");
      }
      down = null;
    } catch (ExecutionException e) {
      markDown(unreachable(e.getCause()));
    } catch (TimeoutException e) {
      markDown(unreachable(e));
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } catch (KafkaException e) {
      markDown(unreachable(e));
    }
  }

  private Properties probeConfig() {
    Properties p = new Properties();
    p.putAll(clientConfig);
    p.put("request.timeout.ms", "5000");
    p.put("default.api.timeout.ms", "5000");
    p.put("reconnect.backoff.max.ms", "1000");
    return p;
  }

  /** Where Kafka did not answer, with a TLS or SASL mismatch named as such. */
  private String unreachable(Throwable cause) {
    String detail = cause.getMessage() == null ? cause.getClass().getSimpleName() : cause.getMessage();
    String head = "Kafka is unreachable at bootstrap.servers=" + bootstrap + ": ";
    if (cause instanceof SslAuthenticationException) {
      return head + "the TLS handshake failed (" + detail + "); check KAFKA_SECURITY_PROTOCOL and"
          + " KAFKA_SSL_CA_LOCATION against the broker's listener";
    }
    if (cause instanceof AuthenticationException) {
      return head + "authentication failed (" + detail + "); check KAFKA_SASL_MECHANISM,"
          + " KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD";
    }
    String hint = protocol.equals("PLAINTEXT") ? "" : "; the client speaks KAFKA_SECURITY_PROTOCOL="
        + protocol + ": check that the broker's listener at that address expects it";
    return head + "no metadata within 5s (" + detail + ")" + hint;
  }

  private void markDown(String reason) {
    if (down == null) {
      LOG.warning(reason + "; health NOT_SERVING until it answers");
    }
    down = reason;
  }

  /** Flush what is queued for up to {@code graceMs}; returns the events Kafka never
   * acknowledged. */
  long close(long graceMs) {
    closed = true;
    prober.interrupt();
    producer.close(Duration.ofMillis(graceMs));
    long left = waiting.get();
    if (left > 0) {
      LOG.severe(left + " events were not acknowledged by Kafka before shutdown");
    }
    return left;
  }

  @Override
  public void close() {
    close(0);
  }
}
