package dev.tidelake.ingest;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Executor;

/**
 * Events waiting for Kafka, up to a limit, shared by the streams that draw on it. A stream that
 * finds no room parks a wake-up and stops reading (HTTP/2 flow control then slows its sender);
 * one batch larger than the whole window is let through alone, so a sender's batch size never
 * deadlocks it. Wake-ups run on {@code resume}, never on the thread that gave room back (Kafka's
 * producer thread, which must not send from its own callback).
 */
final class EventWindow {
  private final long limit;
  private long used;
  private final ArrayDeque<Runnable> parked = new ArrayDeque<>();
  private final Executor resume;

  EventWindow(long limit, Executor resume) {
    this.limit = limit;
    this.resume = resume;
  }

  /** Takes room for {@code count} events, or parks {@code retry} until some is given back. */
  synchronized boolean take(long count, Runnable retry) {
    if (used > 0 && used + count > limit) {
      parked.add(retry);
      return false;
    }
    used += count;
    return true;
  }

  void giveBack(long count) {
    List<Runnable> wake;
    synchronized (this) {
      used -= count;
      if (parked.isEmpty()) {
        return;
      }
      wake = new ArrayList<>(parked);
      parked.clear();
    }
    wake.forEach(resume::execute);
  }
}
