package dev.tidelake.ingest;

import org.apache.kafka.clients.producer.Callback;

/** Where accepted events go: {@link TopicProducer} onto Kafka (a recording one in the tests). */
interface RecordSender {
  /**
   * Hand one record over; {@code done} runs once it is acknowledged (error null) or refused.
   * Throws Unavailable at once when the record cannot be taken; {@code done} then never runs.
   */
  void send(byte[] key, byte[] value, long timestampMs, Callback done)
      throws TopicProducer.Unavailable;
}
