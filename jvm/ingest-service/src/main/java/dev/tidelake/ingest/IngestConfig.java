package dev.tidelake.ingest;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Base64;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;

/**
 * What the launcher ({@code tidelake serve}, platform/calls/ingest_launcher.py) hands the service: its
 * settings, the Kafka client's properties, the Hadoop settings the table is read with (s3a's
 * endpoint and region for a lake on S3; its credentials come from the environment) and the flow's
 * contract, worked out in Python where every setting is read. The file may hold a token or a
 * password, so the service deletes it once read.
 */
record IngestConfig(
    String host,
    int port,
    long ackTimeoutMs,
    int maxInFlight,
    int maxInFlightTotal,
    int streamsPerClient,
    int streamsTotal,
    long healthIntervalMs,
    long shutdownGraceMs,
    String tlsCert,
    String tlsKey,
    String clientCa,
    String token,
    Properties kafka,
    String bootstrapServers,
    String securityProtocol,
    String kafkaUnreachable,
    String topic,
    byte[] valuePrefix,
    String tableUri,
    Map<String, String> hadoop,
    String tableName,
    String offsetColumn,
    JsonObject contract) {

  static IngestConfig read(Path file) throws IOException {
    JsonObject o =
        JsonParser.parseString(Files.readString(file, StandardCharsets.UTF_8)).getAsJsonObject();
    Files.deleteIfExists(file);
    Properties kafka = new Properties();
    for (Map.Entry<String, JsonElement> e : o.getAsJsonObject("kafka").entrySet()) {
      kafka.setProperty(e.getKey(), e.getValue().getAsString());
    }
    Map<String, String> hadoop = new HashMap<>();
    for (Map.Entry<String, JsonElement> e : o.getAsJsonObject("hadoop").entrySet()) {
      hadoop.put(e.getKey(), e.getValue().getAsString());
    }
    return new IngestConfig(
        o.get("host").getAsString(),
        o.get("port").getAsInt(),
        o.get("ack_timeout_ms").getAsLong(),
        o.get("max_in_flight").getAsInt(),
        o.get("max_in_flight_total").getAsInt(),
        o.get("streams_per_client").getAsInt(),
        o.get("streams_total").getAsInt(),
        o.get("health_interval_ms").getAsLong(),
        o.get("shutdown_grace_ms").getAsLong(),
        optional(o, "tls_cert"),
        optional(o, "tls_key"),
        optional(o, "client_ca"),
        optional(o, "token"),
        kafka,
        kafka.getProperty("bootstrap.servers"),
        kafka.getProperty("security.protocol", "PLAINTEXT"),
        optional(o, "kafka_unreachable"),
        o.get("topic").getAsString(),
        valuePrefix(o),
        o.get("table_uri").getAsString(),
        Map.copyOf(hadoop),
        o.get("table").getAsString(),
        o.get("offset_column").getAsString(),
        o.getAsJsonObject("contract"));
  }

  /** Written before every value: a Confluent frame (streaming/schemas/framing.py), or none. */
  private static byte[] valuePrefix(JsonObject o) {
    String prefix = optional(o, "value_prefix");
    return prefix == null ? new byte[0] : Base64.getDecoder().decode(prefix);
  }

  private static String optional(JsonObject o, String name) {
    JsonElement value = o.get(name);
    return value == null || value.isJsonNull() ? null : value.getAsString();
  }
}
