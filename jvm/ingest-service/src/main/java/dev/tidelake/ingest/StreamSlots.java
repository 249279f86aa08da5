package dev.tidelake.ingest;

import java.util.HashMap;
import java.util.Map;

/** Open trackCalls streams, counted per client address and in all. */
final class StreamSlots {
  private final int perClient;
  private final int total;
  private final Map<String, Integer> open = new HashMap<>();
  private int used;

  StreamSlots(int perClient, int total) {
    this.perClient = perClient;
    this.total = total;
  }

  /** Null if the client may open one more stream; else why not. */
  synchronized String take(String client) {
    if (used >= total) {
      return "the service has " + total + " trackCalls streams open, its limit: retry later, or"
          + " send on a stream you already have open";
    }
    int mine = open.getOrDefault(client, 0);
    if (mine >= perClient) {
      return "this client has " + perClient + " trackCalls streams open, the limit per client:"
          + " close idle streams or send on one you already have open";
    }
    open.put(client, mine + 1);
    used++;
    return null;
  }

  synchronized void giveBack(String client) {
    int left = open.get(client) - 1;
    if (left == 0) {
      open.remove(client);
    } else {
      open.put(client, left);
    }
    used--;
  }
}
