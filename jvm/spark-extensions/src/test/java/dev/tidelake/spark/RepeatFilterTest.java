package dev.tidelake.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.sql.Timestamp;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.junit.jupiter.api.Test;

/** The rule on one key's records, and when a key's state may go. */
class RepeatFilterTest {
  private static final RepeatFilter.Columns COLUMNS = new RepeatFilter.Columns(0, 1, 2, 3);
  private static final long HOUR_US = 3_600_000_000L;
  private static final long T0_US = 1_795_392_000_000_000L; // 2026-11-23T00:00:00Z

  private static Row record(long arrivalUs, int partition, long offset) {
    Instant at = Instant.ofEpochSecond(arrivalUs / 1_000_000L, (arrivalUs % 1_000_000L) * 1_000L);
    return RowFactory.create("key/CA1", Timestamp.from(at), partition, offset);
  }

  private static List<Long> keptOffsets(Long previous, List<Row> records) {
    RepeatFilter.Verdict verdict =
        RepeatFilter.apply(previous, new ArrayList<>(records), COLUMNS, 2 * HOUR_US);
    return verdict.kept().stream().map(r -> r.getLong(3)).toList();
  }

  @Test
  void theFirstRecordIsKeptAndRepeatsWithinTheLatenessOfThePreviousAreDropped() {
    List<Row> records =
        List.of(
            record(T0_US + 5_000_000L, 0, 11), // a retry 5 s later, handed over first
            record(T0_US, 0, 10),
            record(T0_US + 2 * HOUR_US + 5_000_000L, 0, 12), // exactly the lateness after 11
            record(T0_US + 4 * HOUR_US + 5_000_001L, 0, 13)); // just over it after 12
    assertEquals(List.of(10L, 13L), keptOffsets(null, records));
  }

  @Test
  void aRecordArrivingBeforeThePreviousIsARepeat() {
    assertEquals(List.of(), keptOffsets(T0_US, List.of(record(T0_US - HOUR_US * 5, 0, 3))));
  }

  @Test
  void aRememberedArrivalMakesTheNextRecordARepeatOnlyWithinTheLateness() {
    assertEquals(List.of(), keptOffsets(T0_US, List.of(record(T0_US + 2 * HOUR_US, 0, 1))));
    assertEquals(List.of(1L), keptOffsets(T0_US, List.of(record(T0_US + 2 * HOUR_US + 1, 0, 1))));
  }

  @Test
  void theVerdictCarriesTheLastRecordsArrivalInArrivalOrder() {
    RepeatFilter.Verdict verdict =
        RepeatFilter.apply(
            null,
            new ArrayList<>(List.of(record(T0_US + 9, 1, 7), record(T0_US + 3, 1, 8))),
            COLUMNS,
            HOUR_US);
    assertEquals(T0_US + 9, verdict.lastArrivalMicros());
  }

  @Test
  void aRecordReadAfterALaterArrivingOneDoesNotMoveTheKeysLastArrivalBack() {
    // the stream holds the key's arrival at 10:00; a record stamped 09:00 is read in a later
    // micro-batch with one stamped 11:30, within the lateness of 10:00
    long ten = T0_US + 10 * HOUR_US;
    RepeatFilter.Verdict verdict =
        RepeatFilter.apply(
            ten,
            new ArrayList<>(
                List.of(record(ten + 90 * 60_000_000L, 0, 21), record(ten - HOUR_US, 0, 20))),
            COLUMNS,
            2 * HOUR_US);
    assertEquals(List.of(), verdict.kept());
    assertEquals(ten + 90 * 60_000_000L, verdict.lastArrivalMicros());
  }

  @Test
  void theFirstArrivalIsKeptWhateverPartitionsTheKeyWasSentTo() {
    // after add-partitions the key's retry lands in partition 0, its original in partition 5
    List<Row> records = List.of(record(T0_US + 5_000_000L, 0, 11), record(T0_US, 5, 2));
    RepeatFilter.Verdict verdict =
        RepeatFilter.apply(null, new ArrayList<>(records), COLUMNS, 2 * HOUR_US);
    assertEquals(
        List.of(List.of(5, 2L)),
        verdict.kept().stream().map(r -> List.of(r.get(2), r.get(3))).toList());
  }

  @Test
  void recordsArrivingAtTheSameTimeAreOrderedByPartitionAndOffset() {
    List<Row> records = List.of(record(T0_US, 3, 1), record(T0_US, 1, 9), record(T0_US, 1, 4));
    RepeatFilter.Verdict verdict =
        RepeatFilter.apply(null, new ArrayList<>(records), COLUMNS, 2 * HOUR_US);
    assertEquals(List.of(4L), verdict.kept().stream().map(r -> r.getLong(3)).toList());
  }

  @Test
  void aStreamHoldsAKeyTwiceTheLatenessAndAMarginAfterItsLastRecord() {
    assertEquals(Duration.ofHours(5), RepeatFilter.keyLifetime(2 * HOUR_US));
    assertEquals(Duration.ofMinutes(12), RepeatFilter.keyLifetime(60_000_000L));
  }

  @Test
  void arrivalsAreReadAsMicrosecondsFromEveryJavaTimestampType() {
    Instant at = Instant.ofEpochSecond(1_795_392_000L, 123_456_789L);
    assertEquals(1_795_392_000_123_456L, RepeatFilter.micros(at));
    assertEquals(1_795_392_000_123_456L, RepeatFilter.micros(Timestamp.from(at)));
    assertThrows(IllegalArgumentException.class, () -> RepeatFilter.micros("2026-11-23"));
  }
}
