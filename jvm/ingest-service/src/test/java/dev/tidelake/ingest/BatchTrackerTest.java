package dev.tidelake.ingest;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.FileDescriptor;
import com.google.protobuf.DynamicMessage;
import com.google.rpc.Code;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.stream.IntStream;
import org.apache.kafka.clients.producer.Callback;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * A trackCalls batch settled by Kafka's answers, by an unavailable Kafka, or by the ack timeout:
 * its answer counts each event once, in batch order, and it finishes exactly once.
 */
class BatchTrackerTest {
  private static final long TIMEOUT_MS = 30_000;
  private static Descriptor callEvent;
  private static BatchAnswers answers;
  private static ScheduledExecutorService timers;

  @BeforeAll
  static void load() throws Exception {
    Path protos = Path.of(System.getProperty("tidelake.protos", "../../protos"));
    List<FileDescriptor> files =
        DescriptorSets.files(Files.readAllBytes(protos.resolve("service.binpb")));
    callEvent = DescriptorSets.message(files, "tidelake.v1.CallEvent");
    Descriptor batchResult = DescriptorSets.message(files, "tidelake.v1.TrackBatchResult");
    answers = new BatchAnswers(batchResult, callEvent.findFieldByName("call_sid"));
    timers = Executors.newSingleThreadScheduledExecutor();
  }

  @AfterAll
  static void stop() {
    timers.shutdownNow();
  }

  /** Records what it is handed; the test answers for Kafka. */
  private static final class RecordingSender implements RecordSender {
    final List<Callback> pending = new CopyOnWriteArrayList<>();
    final List<String> keys = new CopyOnWriteArrayList<>();
    int unavailableFrom = Integer.MAX_VALUE;

    @Override
    public void send(byte[] key, byte[] value, long timestampMs, Callback done)
        throws TopicProducer.Unavailable {
      if (keys.size() >= unavailableFrom) {
        throw new TopicProducer.Unavailable("Kafka is unreachable: broker down");
      }
      keys.add(new String(key, java.nio.charset.StandardCharsets.UTF_8));
      pending.add(done);
    }
  }

  /** A tracker over `size` events of which those at `invalid` were refused before Kafka. */
  private record Batch(BatchTracker tracker, List<BatchTracker> finished, CountDownLatch done) {}

  private static Batch batch(int size, List<Integer> invalid) {
    List<DynamicMessage> events = new ArrayList<>();
    List<Integer> positions = new ArrayList<>();
    List<DynamicMessage> refused = new ArrayList<>();
    for (int i = 0; i < size; i++) {
      DynamicMessage event =
          DynamicMessage.newBuilder(callEvent)
              .setField(callEvent.findFieldByName("call_sid"), "CA" + i)
              .build();
      events.add(event);
      if (invalid.contains(i)) {
        refused.add(answers.refusal(i, event, Code.INVALID_ARGUMENT, "region: required"));
      } else {
        positions.add(i);
      }
    }
    List<BatchTracker> finished = new CopyOnWriteArrayList<>();
    CountDownLatch done = new CountDownLatch(1);
    BatchTracker tracker =
        new BatchTracker(
            7,
            events,
            positions,
            refused,
            answers,
            t -> {
              finished.add(t);
              done.countDown();
            });
    return new Batch(tracker, finished, done);
  }

  private static int accepted(DynamicMessage result) {
    return (Integer) result.getField(result.getDescriptorForType().findFieldByName("accepted"));
  }

  /** (index, code, message) of each refusal, in the answer's order. */
  private static List<String> refusals(DynamicMessage result) {
    var refused = result.getDescriptorForType().findFieldByName("refused");
    List<String> out = new ArrayList<>();
    for (int i = 0; i < result.getRepeatedFieldCount(refused); i++) {
      DynamicMessage r = (DynamicMessage) result.getRepeatedField(refused, i);
      var d = r.getDescriptorForType();
      out.add(
          r.getField(d.findFieldByName("index"))
              + " "
              + r.getField(d.findFieldByName("call_sid"))
              + " "
              + r.getField(d.findFieldByName("code"))
              + " "
              + r.getField(d.findFieldByName("message")));
    }
    return out;
  }

  @Test
  void everyAcknowledgementCountsOnceAndTheRefusedStayInBatchOrder() throws Exception {
    Batch b = batch(5, List.of(1, 3));
    RecordingSender kafka = new RecordingSender();
    b.tracker().start(kafka, 0, timers, TIMEOUT_MS);
    assertEquals(List.of("CA0", "CA2", "CA4"), kafka.keys);
    assertEquals(3, b.tracker().sent());
    kafka.pending.forEach(done -> done.onCompletion(null, null));
    assertTrue(b.done().await(10, TimeUnit.SECONDS));
    DynamicMessage result = b.tracker().result();
    assertEquals(7L, result.getField(result.getDescriptorForType().findFieldByName("batch")));
    assertEquals(3, accepted(result));
    assertEquals(
        List.of("1 CA1 3 region: required", "3 CA3 3 region: required"), refusals(result));
  }

  @Test
  void anEventKafkaRefusedIsUnavailableWithKafkasReason() throws Exception {
    Batch b = batch(3, List.of());
    RecordingSender kafka = new RecordingSender();
    b.tracker().start(kafka, 0, timers, TIMEOUT_MS);
    kafka.pending.get(0).onCompletion(null, null);
    kafka.pending.get(2).onCompletion(null, null);
    kafka.pending.get(1).onCompletion(null, new RuntimeException("NOT_ENOUGH_REPLICAS"));
    assertTrue(b.done().await(10, TimeUnit.SECONDS));
    DynamicMessage result = b.tracker().result();
    assertEquals(2, accepted(result));
    assertEquals(
        List.of("1 CA1 14 " + TopicProducer.notAcknowledged(new RuntimeException("NOT_ENOUGH_REPLICAS"))),
        refusals(result));
  }

  @Test
  void kafkaUnavailableAtSendRefusesThatEventAndEveryLaterOne() throws Exception {
    Batch b = batch(4, List.of());
    RecordingSender kafka = new RecordingSender();
    kafka.unavailableFrom = 2;
    b.tracker().start(kafka, 0, timers, TIMEOUT_MS);
    kafka.pending.forEach(done -> done.onCompletion(null, null));
    assertTrue(b.done().await(10, TimeUnit.SECONDS));
    DynamicMessage result = b.tracker().result();
    assertEquals(2, accepted(result));
    String why = " 14 Kafka is unreachable: broker down";
    assertEquals(List.of("2 CA2" + why, "3 CA3" + why), refusals(result));
    assertEquals(1, b.finished().size());
  }

  @Test
  void theAckTimeoutRefusesWhatKafkaHasNotAnsweredAndALateAnswerChangesNothing()
      throws Exception {
    Batch b = batch(3, List.of());
    RecordingSender kafka = new RecordingSender();
    b.tracker().start(kafka, 0, timers, 50);
    kafka.pending.get(0).onCompletion(null, null);
    assertTrue(b.done().await(10, TimeUnit.SECONDS));
    kafka.pending.get(1).onCompletion(null, null);  // after the timeout: too late
    DynamicMessage result = b.tracker().result();
    assertEquals(1, accepted(result));
    String why = " 14 " + TopicProducer.notInTime(50);
    assertEquals(List.of("1 CA1" + why, "2 CA2" + why), refusals(result));
    assertEquals(1, b.finished().size());
  }

  @Test
  void aBatchWithNothingToSendFinishesAtOnce() {
    Batch b = batch(2, List.of(0, 1));
    b.tracker().start(new RecordingSender(), 0, timers, TIMEOUT_MS);
    assertEquals(1, b.finished().size());
    assertEquals(0, accepted(b.tracker().result()));
    assertEquals(2, refusals(b.tracker().result()).size());
  }

  @Test
  void answersFromManyThreadsFinishTheBatchExactlyOnce() throws Exception {
    Batch b = batch(200, List.of());
    RecordingSender kafka = new RecordingSender();
    b.tracker().start(kafka, 0, timers, TIMEOUT_MS);
    IntStream.range(0, 200).parallel().forEach(i -> kafka.pending.get(i).onCompletion(null, null));
    assertTrue(b.done().await(10, TimeUnit.SECONDS));
    assertEquals(200, accepted(b.tracker().result()));
    assertEquals(1, b.finished().size());
  }
}
