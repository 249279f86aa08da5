package dev.tidelake.ingest;

import com.google.protobuf.DynamicMessage;
import com.google.rpc.Code;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.function.Consumer;

/**
 * One trackCalls batch's answers from Kafka: finished once every event sent is answered, or at
 * the ack timeout with the rest refused UNAVAILABLE (Kafka may still store them: retrying is
 * safe). {@code finished} runs exactly once, on whichever thread settles the batch; the answer
 * is fixed then, so a late acknowledgement changes nothing (its event was refused as retryable).
 */
final class BatchTracker {
  /** Per record sent: 0 while waiting for Kafka, then acknowledged or refused (see failures). */
  private static final int ACKNOWLEDGED = 1;
  private static final int REFUSED = 2;

  private final long number;
  private final List<DynamicMessage> events;
  private final List<Integer> positions;
  private final List<DynamicMessage> refused;
  private final BatchAnswers answers;
  private final Consumer<BatchTracker> finished;
  private final String[] failures;
  private final AtomicIntegerArray states;
  private final AtomicInteger waiting;
  private final AtomicBoolean done = new AtomicBoolean();
  private volatile ScheduledFuture<?> expiry;
  private volatile DynamicMessage result;

  /**
   * {@code events} is the whole batch, {@code positions} the indexes of those to send, {@code
   * refused} the answers already given to the others.
   */
  BatchTracker(
      long number,
      List<DynamicMessage> events,
      List<Integer> positions,
      List<DynamicMessage> refused,
      BatchAnswers answers,
      Consumer<BatchTracker> finished) {
    this.number = number;
    this.events = events;
    this.positions = positions;
    this.refused = refused;
    this.answers = answers;
    this.finished = finished;
    this.failures = new String[positions.size()];
    this.states = new AtomicIntegerArray(positions.size());
    this.waiting = new AtomicInteger(positions.size());
  }

  /** How many events of the batch are sent to Kafka (the room it takes in the windows). */
  int sent() {
    return positions.size();
  }

  /** Send the batch's events; the batch finishes by itself (answers, or the timeout). */
  void start(RecordSender sender, long nowMs, ScheduledExecutorService timers, long ackTimeoutMs) {
    if (positions.isEmpty()) {
      finish(null);
      return;
    }
    for (int p = 0; p < positions.size(); p++) {
      DynamicMessage event = events.get(positions.get(p));
      int position = p;
      try {
        sender.send(
            answers.key(event).getBytes(StandardCharsets.UTF_8),
            event.toByteArray(),
            nowMs,
            (metadata, error) ->
                answered(position, error == null ? null : TopicProducer.notAcknowledged(error)));
      } catch (TopicProducer.Unavailable e) {
        for (int rest = p; rest < positions.size(); rest++) {
          answered(rest, e.getMessage());
        }
        return;
      }
    }
    String late = TopicProducer.notInTime(ackTimeoutMs);
    expiry = timers.schedule(() -> finish(late), ackTimeoutMs, TimeUnit.MILLISECONDS);
    if (done.get()) {
      expiry.cancel(false);
    }
  }

  private void answered(int position, String failure) {
    failures[position] = failure;
    states.set(position, failure == null ? ACKNOWLEDGED : REFUSED);
    if (waiting.decrementAndGet() == 0) {
      finish(null);
    }
  }

  private void finish(String unanswered) {
    if (!done.compareAndSet(false, true)) {
      return;
    }
    ScheduledFuture<?> timer = expiry;
    if (timer != null) {
      timer.cancel(false);
    }
    result = answer(unanswered);
    finished.accept(this);
  }

  /** The batch's answer, once finished (null before). */
  DynamicMessage result() {
    return result;
  }

  private DynamicMessage answer(String unanswered) {
    List<DynamicMessage> all = new ArrayList<>(refused);
    int accepted = 0;
    for (int p = 0; p < positions.size(); p++) {
      int state = states.get(p);
      if (state == ACKNOWLEDGED) {
        accepted++;
        continue;
      }
      String reason = state == REFUSED ? failures[p] : unanswered;
      int index = positions.get(p);
      all.add(answers.refusal(index, events.get(index), Code.UNAVAILABLE, reason));
    }
    return answers.result(number, accepted, all);
  }
}
