package dev.tidelake.spark;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Instant;
import org.junit.jupiter.api.Test;

/** The ingest clock reads the wall clock in microseconds, every time it is asked. */
class IngestClockTest {
  private static long micros(Instant t) {
    return t.getEpochSecond() * 1_000_000L + t.getNano() / 1_000;
  }

  @Test
  void readsTheWallClockInMicroseconds() throws InterruptedException {
    long before = micros(Instant.now());
    long first = IngestClock.nowMicros();
    Thread.sleep(2);
    long second = IngestClock.nowMicros();
    long after = micros(Instant.now());
    assertTrue(before <= first && first < second && second <= after,
        before + " " + first + " " + second + " " + after);
  }
}
