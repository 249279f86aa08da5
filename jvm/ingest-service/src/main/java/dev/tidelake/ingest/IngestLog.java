package dev.tidelake.ingest;

import com.google.gson.JsonObject;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.logging.Formatter;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogManager;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import java.util.logging.StreamHandler;

/**
 * The service's log: one JSON object a line on stderr ({level, logger, message}), which the
 * launcher relays into Python's logging under the same logger names. The libraries' own warnings
 * (Kafka's client retries a refused connection every second) are logged once a minute per kind.
 */
final class IngestLog {
  private static final long REPEAT_MS = 60_000;

  /** java.util.logging holds loggers weakly: a level set on one nobody keeps is lost. */
  private static final Map<Logger, Level> LEVELS = new java.util.LinkedHashMap<>();

  private IngestLog() {}

  static void install() {
    LogManager.getLogManager().reset();
    Logger root = Logger.getLogger("");
    Handler stderr =
        new StreamHandler(System.err, new JsonLines()) {
          @Override
          public synchronized void publish(LogRecord record) {
            super.publish(record);
            flush();
          }
        };
    stderr.setLevel(Level.ALL);
    stderr.setFilter(new OncePerMinute());
    root.addHandler(stderr);
    root.setLevel(Level.WARNING);
    LEVELS.put(Logger.getLogger(IngestMain.LOGGER), Level.INFO);
    // routine notes at WARNING (no native Hadoop library, a table without a checkpoint yet)
    LEVELS.put(Logger.getLogger("org.apache.hadoop"), Level.SEVERE);
    LEVELS.put(Logger.getLogger("io.delta.kernel"), Level.SEVERE);
    LEVELS.forEach(Logger::setLevel);
  }

  private static final class JsonLines extends Formatter {
    @Override
    public String format(LogRecord record) {
      JsonObject line = new JsonObject();
      line.addProperty("level", record.getLevel().getName());
      line.addProperty("logger", record.getLoggerName());
      String message = formatMessage(record);
      if (record.getThrown() != null) {
        StringWriter trace = new StringWriter();
        record.getThrown().printStackTrace(new PrintWriter(trace));
        message = message + "\n" + trace;
      }
      line.addProperty("message", message);
      return line + "\n";
    }
  }

  /** Repeats of a library's message (same logger, same first 60 characters) once a minute. */
  private static final class OncePerMinute implements java.util.logging.Filter {
    private final Map<String, Long> lastSeen = new ConcurrentHashMap<>();

    @Override
    public boolean isLoggable(LogRecord record) {
      String logger = record.getLoggerName() == null ? "" : record.getLoggerName();
      if (logger.startsWith(IngestMain.LOGGER)) {
        return true;
      }
      String message = String.valueOf(record.getMessage());
      String kind = logger + ":" + message.substring(0, Math.min(60, message.length()));
      long now = System.currentTimeMillis();
      Long last = lastSeen.get(kind);
      if (last != null && now - last < REPEAT_MS) {
        return false;
      }
      lastSeen.put(kind, now);
      return true;
    }
  }
}
