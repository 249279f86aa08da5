package dev.tidelake.ingest;

import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.FieldDescriptor;
import com.google.protobuf.DynamicMessage;
import com.google.rpc.Code;
import io.grpc.Metadata;
import io.grpc.ServerCall;
import io.grpc.Status;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Executor;
import java.util.concurrent.ScheduledExecutorService;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * One trackCalls stream: a batch is read only when the stream, and all streams together, have
 * room for its events; each batch is answered once every event of it is settled, and the stream
 * closes OK after the client's half-close once every batch is answered.
 */
final class BatchStream extends ServerCall.Listener<DynamicMessage> {
  private static final Logger LOG = Logger.getLogger(IngestMain.LOGGER);

  /** What every stream of the service shares. */
  record Shared(
      FlowContract contract,
      Descriptor batch,
      BatchAnswers answers,
      RecordSender sender,
      ScheduledExecutorService timers,
      long ackTimeoutMs,
      long maxInFlight,
      EventWindow allStreams,
      StreamSlots slots,
      Executor resume) {}

  private final ServerCall<DynamicMessage, DynamicMessage> call;
  private final String client;
  private final Shared shared;
  private final EventWindow window;
  private int openBatches;
  private boolean halfClosed;
  private boolean closed;

  /** The stream of a client that holds one of the slots (given back when the stream ends). */
  BatchStream(ServerCall<DynamicMessage, DynamicMessage> call, String client, Shared shared) {
    this.call = call;
    this.client = client;
    this.shared = shared;
    this.window = new EventWindow(shared.maxInFlight(), shared.resume());
  }

  @Override
  public void onMessage(DynamicMessage message) {
    try {
      receive(message);
    } catch (RuntimeException e) {
      LOG.log(Level.SEVERE, "trackCalls from " + client + " failed", e);
      end(
          Status.INTERNAL.withDescription(
              "the ingest service failed on this stream; it logged why. The results you"
                  + " received stand: send the batches without a result again (retrying is"
                  + " safe)"));
    }
  }

  private void receive(DynamicMessage message) {
    long nowMs = System.currentTimeMillis();
    Descriptor batch = shared.batch();
    long number = (Long) message.getField(batch.findFieldByName("batch"));
    FieldDescriptor eventsField = batch.findFieldByName("events");
    int size = message.getRepeatedFieldCount(eventsField);
    List<DynamicMessage> refused = new ArrayList<>();
    List<Integer> positions = new ArrayList<>(size);
    List<DynamicMessage> events = new ArrayList<>(size);
    for (int i = 0; i < size; i++) {
      DynamicMessage event = (DynamicMessage) message.getRepeatedField(eventsField, i);
      events.add(event);
      List<FlowContract.Violation> problems = shared.contract().violations(event, nowMs);
      if (problems.isEmpty()) {
        positions.add(i);
      } else {
        String why = FlowContract.Violation.joined(problems);
        refused.add(shared.answers().refusal(i, event, Code.INVALID_ARGUMENT, why));
      }
    }
    BatchTracker tracker =
        new BatchTracker(number, events, positions, refused, shared.answers(), this::finished);
    synchronized (this) {
      openBatches++;
    }
    send(tracker, nowMs);
  }

  /** Sends the batch once both windows have room; parks it (and stops reading) until then.
   * A batch still parked when its stream ends is dropped: nobody would hear its result. */
  private void send(BatchTracker tracker, long nowMs) {
    int count = tracker.sent();
    synchronized (this) {
      if (closed) {
        openBatches--;
        return;
      }
    }
    if (!window.take(count, () -> send(tracker, nowMs))) {
      return;
    }
    if (!shared.allStreams().take(count, () -> {
      window.giveBack(count);
      send(tracker, nowMs);
    })) {
      return;
    }
    synchronized (this) {
      if (!closed) {
        call.request(1);
      }
    }
    tracker.start(shared.sender(), nowMs, shared.timers(), shared.ackTimeoutMs());
  }

  private void finished(BatchTracker tracker) {
    int count = tracker.sent();
    window.giveBack(count);
    shared.allStreams().giveBack(count);
    synchronized (this) {
      openBatches--;
      if (!closed) {
        call.sendMessage(tracker.result());
        if (halfClosed && openBatches == 0) {
          end(Status.OK);
        }
      }
    }
  }

  @Override
  public synchronized void onHalfClose() {
    halfClosed = true;
    if (openBatches == 0) {
      end(Status.OK);
    }
  }

  private synchronized void end(Status status) {
    if (!closed) {
      closed = true;
      call.close(status, new Metadata());
      shared.slots().giveBack(client);
    }
  }

  @Override
  public synchronized void onCancel() {
    if (!closed) {
      closed = true;
      shared.slots().giveBack(client);
    }
  }
}
