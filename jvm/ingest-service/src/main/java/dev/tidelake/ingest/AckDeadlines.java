package dev.tidelake.ingest;

import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The ack timeout of unary calls, checked by one sweep every 50 ms instead of a timer a call: at
 * 10,000 calls a second, scheduling and cancelling a timer each cost more than the rest of the
 * call's bookkeeping. Calls share one timeout, so they expire in the order they arrived: a FIFO
 * queue whose head is the next to expire.
 */
final class AckDeadlines {
  private record Pending(long dueNanos, AtomicBoolean answered, Runnable expire) {}

  private static final long SWEEP_MS = 50;
  private final long timeoutNanos;
  private final ConcurrentLinkedQueue<Pending> queue = new ConcurrentLinkedQueue<>();

  AckDeadlines(long timeoutMs, ScheduledExecutorService timers) {
    this.timeoutNanos = TimeUnit.MILLISECONDS.toNanos(timeoutMs);
    timers.scheduleWithFixedDelay(this::sweep, SWEEP_MS, SWEEP_MS, TimeUnit.MILLISECONDS);
  }

  /** Runs {@code expire} after the timeout unless {@code answered} is set first (by whoever
   * answers the call, with compareAndSet, as expire is run only after winning it too). */
  void watch(AtomicBoolean answered, Runnable expire) {
    queue.add(new Pending(System.nanoTime() + timeoutNanos, answered, expire));
  }

  private void sweep() {
    long now = System.nanoTime();
    for (Pending head = queue.peek(); head != null; head = queue.peek()) {
      boolean answered = head.answered().get();
      if (!answered && head.dueNanos() - now > 0) {
        return;
      }
      queue.poll();
      if (!answered && head.answered().compareAndSet(false, true)) {
        head.expire().run();
      }
    }
  }
}
