package dev.tidelake.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The executors' cache of arrival-clock answers: one lookup per partition and time, resumed. */
class ArrivalClockTest {
  /** A partition given as its records' timestamps (null: a marker or an aborted record). */
  private static final class Partition implements ArrivalClock.Lookup {
    final List<Long> stamps = new ArrayList<>();
    final List<Long> askedFrom = new ArrayList<>();

    Partition add(Long... more) {
      stamps.addAll(Arrays.asList(more));
      return this;
    }

    @Override
    public ArrivalClock.Answer firstDataRecordAfter(
        String topic, int partition, long afterMs, long from) {
      askedFrom.add(from);
      for (int offset = (int) from; offset < stamps.size(); offset++) {
        Long stamp = stamps.get(offset);
        if (stamp != null && stamp > afterMs) {
          return ArrivalClock.Answer.at(offset);
        }
      }
      return ArrivalClock.Answer.noneBelow(stamps.size());
    }
  }

  @Test
  void aRecordIsBehindOnlyFromTheFirstDataRecordStampedAfterTheTime() {
    Partition p = new Partition().add(10L, 20L, 30L, 5L);
    ArrivalClock clock = new ArrivalClock();
    assertFalse(clock.passed("t", 0, 1, 25, p));
    assertTrue(clock.passed("t", 0, 2, 25, p));
    assertTrue(clock.passed("t", 0, 3, 25, p));
    assertEquals(List.of(0L), p.askedFrom, "a found offset is final: asked once");
  }

  @Test
  void markersAndAbortedRecordsDoNotMoveTheClock() {
    Partition p = new Partition().add(10L, null, null, 11L);  // e.g. a commit marker at 99 ms
    assertFalse(new ArrivalClock().passed("t", 0, 3, 50, p));
  }

  @Test
  void noneYetHoldsBelowWhatWasReadAndTheNextQuestionGoesOnFromThere() {
    Partition p = new Partition().add(10L, 20L);
    ArrivalClock clock = new ArrivalClock();
    assertFalse(clock.passed("t", 0, 1, 25, p));
    assertFalse(clock.passed("t", 0, 0, 25, p));
    assertEquals(List.of(0L), p.askedFrom);
    p.add(15L, 40L, 12L);
    assertFalse(clock.passed("t", 0, 2, 25, p));
    assertTrue(clock.passed("t", 0, 4, 25, p));
    assertEquals(List.of(0L, 2L), p.askedFrom, "resumed at the offset read to, never from 0");
  }

  @Test
  void answersAreKeptPerPartitionAndClosingTime() {
    Partition p = new Partition().add(10L, 30L);
    ArrivalClock clock = new ArrivalClock();
    assertTrue(clock.passed("t", 0, 1, 25, p));
    assertFalse(clock.passed("t", 0, 1, 35, p));
    assertTrue(clock.passed("t", 1, 1, 25, p));
    assertTrue(clock.passed("u", 0, 1, 25, p));
    assertEquals(4, p.askedFrom.size());
  }
}
