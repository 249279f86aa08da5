package dev.tidelake.ingest;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.FileDescriptor;
import com.google.protobuf.DynamicMessage;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.ServerCall;
import io.grpc.Status;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * One trackCalls stream: it reads a batch only while its window has room, answers each batch
 * once Kafka settled it, closes OK after the client's half-close once every batch is answered,
 * and gives its slot back however it ends.
 */
class BatchStreamTest {
  private static final String CLIENT = "10.0.0.1";
  private static FlowContract contract;
  private static Descriptor callEvent;
  private static Descriptor batch;
  private static BatchAnswers answers;
  private static ScheduledExecutorService timers;

  @BeforeAll
  static void load() throws Exception {
    Path data = Path.of(System.getProperty("tidelake.testdata", "../target/test-data"));
    JsonObject exported =
        JsonParser.parseString(Files.readString(data.resolve("call_events.contract.json")))
            .getAsJsonObject();
    Path protos = Path.of(System.getProperty("tidelake.protos", "../../protos"));
    List<FileDescriptor> files =
        DescriptorSets.files(Files.readAllBytes(protos.resolve("service.binpb")));
    callEvent = DescriptorSets.message(files, exported.get("message").getAsString());
    contract = new FlowContract(exported, callEvent);
    batch = DescriptorSets.message(files, "tidelake.v1.CallEventBatch");
    answers =
        new BatchAnswers(
            DescriptorSets.message(files, "tidelake.v1.TrackBatchResult"), contract.keyField());
    timers = Executors.newSingleThreadScheduledExecutor();
  }

  @AfterAll
  static void stop() {
    timers.shutdownNow();
  }

  /** The gRPC side of the stream: what it was asked to read, sent and closed with. */
  private static final class RecordingCall extends ServerCall<DynamicMessage, DynamicMessage> {
    int requested;
    final List<DynamicMessage> sent = new CopyOnWriteArrayList<>();
    Status closed;

    @Override
    public void request(int numMessages) {
      requested += numMessages;
    }

    @Override
    public void sendHeaders(Metadata headers) {}

    @Override
    public void sendMessage(DynamicMessage message) {
      sent.add(message);
    }

    @Override
    public void close(Status status, Metadata trailers) {
      closed = status;
    }

    @Override
    public boolean isCancelled() {
      return false;
    }

    @Override
    public MethodDescriptor<DynamicMessage, DynamicMessage> getMethodDescriptor() {
      throw new UnsupportedOperationException();
    }
  }

  /** Kafka, answered by the test. */
  private static final class RecordingSender implements RecordSender {
    final List<Callback> pending = new CopyOnWriteArrayList<>();

    @Override
    public void send(byte[] key, byte[] value, long timestampMs, Callback done) {
      pending.add(done);
    }

    void acknowledgeAll() {
      List<Callback> due = List.copyOf(pending);
      pending.clear();
      RecordMetadata where =
          new RecordMetadata(new TopicPartition("call-events", 0), 0, 0, 0, 0, 0);
      due.forEach(done -> done.onCompletion(where, null));
    }
  }

  private record Stream(BatchStream stream, RecordingCall call, RecordingSender kafka,
      StreamSlots slots) {}

  /** A stream whose window holds `maxInFlight` events; wake-ups run on the calling thread. */
  private static Stream open(long maxInFlight) {
    RecordingCall call = new RecordingCall();
    RecordingSender kafka = new RecordingSender();
    StreamSlots slots = new StreamSlots(1, 10);
    assertNull(slots.take(CLIENT));
    BatchStream.Shared shared =
        new BatchStream.Shared(
            contract, batch, answers, kafka, timers, 30_000, maxInFlight,
            new EventWindow(1_000_000, Runnable::run), slots, Runnable::run);
    return new Stream(new BatchStream(call, CLIENT, shared), call, kafka, slots);
  }

  private static DynamicMessage calls(long number, int size, boolean valid) {
    DynamicMessage.Builder out = DynamicMessage.newBuilder(batch);
    out.setField(batch.findFieldByName("batch"), number);
    for (int i = 0; i < size; i++) {
      DynamicMessage.Builder event =
          DynamicMessage.newBuilder(callEvent)
              .setField(callEvent.findFieldByName("call_sid"),
                  String.format("CA%032x", number * 1000 + i))
              .setField(callEvent.findFieldByName("account_sid"), "AC" + "1".repeat(32))
              .setField(callEvent.findFieldByName("duration"), 42)
              .setField(callEvent.findFieldByName("call_state"),
                  callEvent.findEnumTypeByName("CallState").findValueByName("completed"))
              .setField(callEvent.findFieldByName("event_time"), System.currentTimeMillis());
      if (valid) {
        event.setField(callEvent.findFieldByName("region"),
            callEvent.findEnumTypeByName("Region").findValueByName("us1"));
      }
      out.addRepeatedField(batch.findFieldByName("events"), event.build());
    }
    return out.build();
  }

  private static Object answer(DynamicMessage result, String field) {
    return result.getField(result.getDescriptorForType().findFieldByName(field));
  }

  @Test
  void aFullWindowStopsReadingUntilKafkaAnswers() {
    Stream s = open(10);
    s.stream().onMessage(calls(1, 10, true));
    assertEquals(1, s.call().requested, "room was left after a first batch: read the next");
    s.stream().onMessage(calls(2, 5, true));
    assertEquals(1, s.call().requested, "the window is full: the second batch is parked");
    assertEquals(10, s.kafka().pending.size());

    s.kafka().acknowledgeAll();  // the first batch settles, the parked one is sent
    assertEquals(1, s.call().sent.size());
    assertEquals(1L, answer(s.call().sent.get(0), "batch"));
    assertEquals(10, answer(s.call().sent.get(0), "accepted"));
    assertEquals(5, s.kafka().pending.size());
    assertEquals(2, s.call().requested);
  }

  @Test
  void aHalfCloseWaitsForTheLastAnswerThenClosesOkAndGivesTheSlotBack() {
    Stream s = open(100);
    s.stream().onMessage(calls(1, 3, true));
    s.stream().onHalfClose();
    assertNull(s.call().closed, "a batch is still waiting for Kafka");

    s.kafka().acknowledgeAll();
    assertEquals(Status.Code.OK, s.call().closed.getCode());
    assertEquals(3, answer(s.call().sent.get(0), "accepted"));
    assertNull(s.slots().take(CLIENT), "the client's only slot is free again");
  }

  @Test
  void invalidEventsAreAnsweredWithoutKafka() {
    Stream s = open(100);
    s.stream().onMessage(calls(4, 2, false));
    assertTrue(s.kafka().pending.isEmpty());
    DynamicMessage result = s.call().sent.get(0);
    assertEquals(0, answer(result, "accepted"));
    assertEquals(2, result.getRepeatedFieldCount(result.getDescriptorForType()
        .findFieldByName("refused")));
  }

  @Test
  void aCancelledStreamDropsItsParkedBatchAndGivesTheSlotBack() {
    Stream s = open(10);
    s.stream().onMessage(calls(1, 10, true));
    s.stream().onMessage(calls(2, 10, true));  // parked: the window is full
    s.stream().onCancel();
    s.kafka().acknowledgeAll();  // the first batch settles; nobody hears it, the parked is dropped
    assertTrue(s.call().sent.isEmpty());
    assertTrue(s.kafka().pending.isEmpty(), "the parked batch never reached Kafka");
    assertNull(s.call().closed);
    assertNull(s.slots().take(CLIENT));
  }
}
