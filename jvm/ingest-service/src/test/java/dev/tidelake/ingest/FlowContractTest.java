package dev.tidelake.ingest;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.FieldDescriptor;
import com.google.protobuf.DynamicMessage;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The service's contract as the FlowSpec exports it (scripts/export_jvm_test_data.py writes it,
 * with the FlowSpec's own closing times, before Maven runs these tests).
 */
class FlowContractTest {
  private static final long HOUR_MS = 3_600_000L;
  private static JsonObject exported;
  private static FlowContract contract;
  private static Descriptor callEvent;

  @BeforeAll
  static void load() throws Exception {
    Path data = Path.of(System.getProperty("tidelake.testdata", "../target/test-data"));
    Path file = data.resolve("call_events.contract.json");
    if (!Files.exists(file)) {
      throw new IllegalStateException(
          file + " is missing: run `make jvm-test` (it exports the contract first)");
    }
    exported = JsonParser.parseString(Files.readString(file)).getAsJsonObject();
    Path protos = Path.of(System.getProperty("tidelake.protos", "../../protos"));
    callEvent = DescriptorSets.message(
        DescriptorSets.files(Files.readAllBytes(protos.resolve("call.binpb"))),
        exported.get("message").getAsString());
    contract = new FlowContract(exported, callEvent);
  }

  private static DynamicMessage.Builder call(long eventTimeMs) {
    return DynamicMessage.newBuilder(callEvent)
        .setField(field("call_sid"), "CA" + "0".repeat(32))
        .setField(field("account_sid"), "AC" + "1".repeat(32))
        .setField(field("duration"), 42)
        .setField(field("call_state"),
            callEvent.findEnumTypeByName("CallState").findValueByName("completed"))
        .setField(field("region"), callEvent.findEnumTypeByName("Region").findValueByName("us1"))
        .setField(field("event_time"), eventTimeMs);
  }

  private static FieldDescriptor field(String name) {
    return callEvent.findFieldByName(name);
  }

  private static List<String> problems(DynamicMessage.Builder event, long nowMs) {
    return contract.violations(event.build(), nowMs).stream().map(Object::toString).toList();
  }

  @Test
  void daysCloseWhenTheFlowSpecSays() {
    for (JsonElement example : exported.getAsJsonArray("closes_at_ms_examples")) {
      long eventTime = example.getAsJsonArray().get(0).getAsLong();
      long closes = example.getAsJsonArray().get(1).getAsLong();
      assertEquals(closes, contract.closesAtMs(eventTime), "event time " + eventTime);
    }
  }

  @Test
  void anEventIsAcceptedUntilItsDayClosesAndRefusedOneMillisecondLater() {
    long eventTime = 1_795_000_000_000L;
    long closes = contract.closesAtMs(eventTime);
    assertEquals(List.of(), problems(call(eventTime), closes));
    List<String> late = problems(call(eventTime), closes + 1);
    assertEquals(1, late.size());
    assertTrue(late.get(0).startsWith("event_time: 2026-11-18T11:06:40Z is on 2026-11-18,"), late.get(0));
    assertTrue(late.get(0).endsWith(
        "which closed at 2026-11-19T02:00:00Z: the table accepts no more events of that day"),
        late.get(0));
  }

  @Test
  void anEventTooFarAheadNamesTheSkewAndTheUnit() {
    long now = 1_795_000_000_000L;
    assertEquals(
        List.of("event_time: 2026-11-18T12:06:40Z is more than 1:00:00 ahead of the service's "
            + "clock (2026-11-18T11:06:40Z); is it in milliseconds?"),
        problems(call(now + HOUR_MS + 1), now));
    assertEquals(List.of(), problems(call(now + HOUR_MS), now));
  }

  @Test
  void contractProblemsUseTheExportedWordingInDeclarationOrder() {
    long now = 1_795_000_000_000L;
    DynamicMessage.Builder event = call(now)
        .setField(field("call_sid"), "bad")
        .clearField(field("account_sid"))
        .setField(field("duration"), 90_000)
        .setField(field("region"),
            callEvent.findEnumTypeByName("Region").findValueByNumberCreatingIfUnknown(99));
    assertEquals(
        List.of(
            "call_sid: does not match ^CA[0-9a-f]{32}$",
            "account_sid: is required",
            "duration: 90000 is outside [0, 86400]",
            "region: unknown value 99; one of [us1, us2, de1]"),
        problems(event, now));
    assertEquals(List.of("event_time: is required"),
        problems(call(0), now));
  }
}
