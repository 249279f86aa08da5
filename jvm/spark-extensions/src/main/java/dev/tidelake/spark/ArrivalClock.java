package dev.tidelake.spark;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Per partition and closing time, where the partition's arrival clock first passed that time: the
 * offset of the first <em>data</em> record (committed, under read_committed) stamped after it.
 *
 * <p>Answers are kept for the life of the JVM: a found offset never changes; "none yet" holds below
 * the offset the lookup had read to (the partition's last stable offset when it asked), which
 * covers every record a micro-batch planned before it. A later question past that offset goes on
 * from there, so a partition is never read twice for one closing time.
 */
final class ArrivalClock {
  /** Where a lookup stands: {@code found >= 0} is final; else no data record below {@code readTo}. */
  record Answer(long found, long readTo) {
    static Answer at(long offset) {
      return new Answer(offset, Long.MAX_VALUE);
    }

    static Answer noneBelow(long offset) {
      return new Answer(-1L, offset);
    }

    boolean passed(long offset) {
      return found >= 0 && offset >= found;
    }

    boolean covers(long offset) {
      return found >= 0 || offset < readTo;
    }
  }

  /** Reads a partition for the first data record stamped after a time, from an offset on. */
  interface Lookup {
    Answer firstDataRecordAfter(String topic, int partition, long afterMs, long from);
  }

  private record Key(String topic, int partition, long afterMs) {}

  private final Map<Key, Answer> answers = new ConcurrentHashMap<>();

  /** True when a data record stamped after {@code afterMs} stands at or before {@code offset}. */
  boolean passed(String topic, int partition, long offset, long afterMs, Lookup lookup) {
    Key key = new Key(topic, partition, afterMs);
    Answer answer = answers.get(key);
    if (answer == null || !answer.covers(offset)) {
      long from = answer == null ? 0L : answer.readTo();
      answer = lookup.firstDataRecordAfter(topic, partition, afterMs, from);
      answers.put(key, answer);
    }
    return answer.passed(offset);
  }
}
