package dev.tidelake.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;

import java.util.HashMap;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The executors' Kafka clients are kept per principal, not per cluster. */
class KafkaTimeIndexTest {
  private static Map<String, String> user(String name) {
    Map<String, String> conf = new HashMap<>();
    conf.put("bootstrap.servers", "127.0.0.1:9093");
    conf.put("security.protocol", "SASL_SSL");
    conf.put("sasl.jaas.config", "ScramLoginModule required username=\"" + name + "\";");
    return conf;
  }

  @Test
  void twoUsersOfOneClusterGetTwoClients() {
    assertNotEquals(
        KafkaTimeIndex.clientKey(user("stream")), KafkaTimeIndex.clientKey(user("detector")));
  }

  @Test
  void theSameSettingsShareOneClient() {
    assertEquals(
        KafkaTimeIndex.clientKey(user("stream")), KafkaTimeIndex.clientKey(user("stream")));
  }
}
