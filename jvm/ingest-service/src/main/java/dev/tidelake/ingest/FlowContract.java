package dev.tidelake.ingest;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.EnumValueDescriptor;
import com.google.protobuf.Descriptors.FieldDescriptor;
import com.google.protobuf.Message;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.regex.Pattern;

/**
 * What the service accepts: the flow's contract as the FlowSpec declares it (exported once by
 * streaming/flow/contract.py's {@code service_contract}, with the wording of every problem, so
 * the service, the stream and the quality suite say the same thing), then the service's clock
 * rules for the event time: not too far ahead, not on a day that has closed.
 */
final class FlowContract {
  /** One broken rule, named by its field. */
  record Violation(String field, String description) {
    @Override
    public String toString() {
      return field + ": " + description;
    }
  }

  private record Rule(
      FieldDescriptor field,
      boolean required,
      Set<Integer> enumNumbers,
      String unknownEnumChoices,
      Pattern pattern,
      String patternProblem,
      Double min,
      Double max,
      String rangeText) {}

  private static final long DAY_MS = 86_400_000L;
  private static final DateTimeFormatter ISO =
      DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss'Z'").withZone(ZoneOffset.UTC);

  private final Descriptor message;
  private final List<Rule> rules = new ArrayList<>();
  private final FieldDescriptor key;
  private final FieldDescriptor eventTime;
  private final long maxClockSkewMs;
  private final String maxClockSkewText;
  private final long allowedLatenessMs;
  private final String requiredText;

  FlowContract(JsonObject contract, Descriptor message) {
    this.message = message;
    this.key = field(message, contract.get("key_field").getAsString());
    this.eventTime = field(message, contract.get("event_time_field").getAsString());
    this.maxClockSkewMs = contract.get("max_clock_skew_ms").getAsLong();
    this.maxClockSkewText = contract.get("max_clock_skew_text").getAsString();
    this.allowedLatenessMs = contract.get("allowed_lateness_ms").getAsLong();
    this.requiredText = contract.get("required_text").getAsString();
    for (JsonElement element : contract.getAsJsonArray("rules")) {
      JsonObject r = element.getAsJsonObject();
      Set<Integer> numbers = null;
      if (r.has("enum_numbers")) {
        numbers = new HashSet<>();
        for (JsonElement n : r.getAsJsonArray("enum_numbers")) {
          numbers.add(n.getAsInt());
        }
      }
      rules.add(
          new Rule(
              field(message, r.get("field").getAsString()),
              r.get("required").getAsBoolean(),
              numbers,
              text(r, "unknown_enum_choices"),
              r.has("pattern") ? Pattern.compile(r.get("pattern").getAsString()) : null,
              text(r, "pattern_problem"),
              r.has("min") ? r.get("min").getAsDouble() : null,
              r.has("max") ? r.get("max").getAsDouble() : null,
              text(r, "range_text")));
    }
  }

  Descriptor message() {
    return message;
  }

  FieldDescriptor keyField() {
    return key;
  }

  FieldDescriptor eventTimeField() {
    return eventTime;
  }

  /** Every reason the event cannot be accepted at {@code nowMs}; empty if it can. */
  List<Violation> violations(Message event, long nowMs) {
    List<Violation> problems = contractViolations(event);
    for (Violation p : problems) {
      if (p.field().equals(eventTime.getName())) {
        return problems;
      }
    }
    Violation late = eventTimeProblem(((Number) event.getField(eventTime)).longValue(), nowMs);
    if (late != null) {
      problems.add(late);
    }
    return problems;
  }

  /** Why the key is not well-formed; empty if it is (getCallInfo's check). */
  List<Violation> keyViolations(Message probe) {
    List<Violation> out = new ArrayList<>();
    for (Violation v : contractViolations(probe)) {
      if (v.field().equals(key.getName())) {
        out.add(v);
      }
    }
    return out;
  }

  private List<Violation> contractViolations(Message event) {
    List<Violation> problems = new ArrayList<>();
    for (Rule rule : rules) {
      FieldDescriptor f = rule.field();
      Object value = event.getField(f);
      if (rule.enumNumbers() != null) {
        int number = ((EnumValueDescriptor) value).getNumber();
        if (!rule.enumNumbers().contains(number)) {
          problems.add(
              new Violation(
                  f.getName(), "unknown value " + number + "; one of " + rule.unknownEnumChoices()));
          continue;
        }
      }
      boolean unset = unset(event, f, value);
      if (rule.required() && unset) {
        problems.add(new Violation(f.getName(), requiredText));
      } else if (!unset) {
        String problem = checkProblem(rule, value);
        if (problem != null) {
          problems.add(new Violation(f.getName(), problem));
        }
      }
    }
    return problems;
  }

  /** proto3: a zero value, the empty string or an enum's zero entry is unset; a field with
   * presence must be present; a repeated field must hold a value. */
  private static boolean unset(Message event, FieldDescriptor f, Object value) {
    if (f.isRepeated()) {
      return event.getRepeatedFieldCount(f) == 0;
    }
    if (f.hasPresence()) {
      return !event.hasField(f);
    }
    if (value instanceof EnumValueDescriptor e) {
      return e.getNumber() == 0;
    }
    return value.equals(f.getDefaultValue());
  }

  private static String checkProblem(Rule rule, Object value) {
    if (rule.pattern() != null && !rule.pattern().matcher(String.valueOf(value)).matches()) {
      return rule.patternProblem();
    }
    if (value instanceof Number n && (rule.min() != null || rule.max() != null)) {
      double v = n.doubleValue();
      if ((rule.min() != null && v < rule.min()) || (rule.max() != null && v > rule.max())) {
        return value + " " + rule.rangeText();
      }
    }
    return null;
  }

  private Violation eventTimeProblem(long eventTimeMs, long nowMs) {
    String name = eventTime.getName();
    if (eventTimeMs == 0) {
      return new Violation(name, "is required (epoch milliseconds, UTC)");
    }
    if (eventTimeMs > nowMs + maxClockSkewMs) {
      return new Violation(
          name,
          iso(eventTimeMs)
              + " is more than "
              + maxClockSkewText
              + " ahead of the service's clock ("
              + iso(nowMs)
              + "); is it in seconds instead of milliseconds?");
    }
    long closesMs = (Math.floorDiv(eventTimeMs, DAY_MS) + 1) * DAY_MS + allowedLatenessMs;
    if (nowMs > closesMs) {
      return new Violation(
          name,
          iso(eventTimeMs)
              + " is on "
              + iso(eventTimeMs).substring(0, 10)
              + ", which closed at "
              + iso(closesMs)
              + ": the table accepts no more events of that day");
    }
    return null;
  }

  private static String iso(long ms) {
    Instant at = Instant.ofEpochMilli(ms);
    int year = at.atZone(ZoneOffset.UTC).getYear();
    if (year < 1 || year > 9999) {
      return ms + " ms since 1970 (beyond year 9999)";
    }
    return ISO.format(at);
  }

  private static FieldDescriptor field(Descriptor message, String name) {
    FieldDescriptor f = message.findFieldByName(name);
    if (f == null) {
      throw new IllegalArgumentException(message.getFullName() + " has no field " + name);
    }
    return f;
  }

  private static String text(JsonObject r, String name) {
    return r.has(name) ? r.get(name).getAsString() : null;
  }
}
