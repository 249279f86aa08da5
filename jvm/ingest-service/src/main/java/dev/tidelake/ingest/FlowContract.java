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
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
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

    /** Several violations in one message, as the refusals word them. */
    static String joined(List<Violation> problems) {
      return String.join("; ", problems.stream().map(Violation::toString).toList());
    }
  }

  private record Rule(
      FieldDescriptor field,
      boolean required,
      Set<Integer> enumNumbers,
      String enumChoices,
      Pattern pattern,
      String patternProblem,
      Double min,
      Double max,
      String rangeText) {}

  private static final DateTimeFormatter ISO =
      DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss'Z'").withZone(ZoneOffset.UTC);

  private final Descriptor message;
  private final List<Rule> rules = new ArrayList<>();
  private final FieldDescriptor key;
  private final FieldDescriptor eventTime;
  private final long eventTimeUnitsPerSecond;
  private final String eventTimeUnitName;
  private final long maxClockSkewMs;
  private final String maxClockSkewText;
  private final long dayMs;
  private final long allowedLatenessMs;
  private final Map<String, String> wording = new HashMap<>();

  FlowContract(JsonObject contract, Descriptor message) {
    this.message = message;
    this.key = field(message, contract.get("key_field").getAsString());
    this.eventTime = field(message, contract.get("event_time_field").getAsString());
    this.eventTimeUnitsPerSecond = contract.get("event_time_units_per_second").getAsLong();
    this.eventTimeUnitName = contract.get("event_time_unit_name").getAsString();
    this.maxClockSkewMs = contract.get("max_clock_skew_ms").getAsLong();
    this.maxClockSkewText = contract.get("max_clock_skew_text").getAsString();
    this.dayMs = contract.get("day_ms").getAsLong();
    this.allowedLatenessMs = contract.get("allowed_lateness_ms").getAsLong();
    for (Map.Entry<String, JsonElement> e : contract.getAsJsonObject("wording").entrySet()) {
      wording.put(e.getKey(), e.getValue().getAsString());
    }
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
              text(r, "enum_choices"),
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
                  f.getName(),
                  say("unknown_enum", "number", Integer.toString(number), "choices",
                      rule.enumChoices())));
          continue;
        }
      }
      boolean unset = unset(event, f, value);
      if (rule.required() && unset) {
        problems.add(new Violation(f.getName(), say("required")));
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

  /** The service's clock rules, on the event time converted from its unit to milliseconds. */
  private Violation eventTimeProblem(long rawTime, long nowMs) {
    String name = eventTime.getName();  // set: the contract's rules require it
    long eventTimeMs;
    try {
      eventTimeMs = Math.floorDiv(Math.multiplyExact(rawTime, 1000L), eventTimeUnitsPerSecond);
    } catch (ArithmeticException e) {
      eventTimeMs = rawTime > 0 ? Long.MAX_VALUE : Long.MIN_VALUE;
    }
    if (eventTimeMs > nowMs + maxClockSkewMs) {
      return new Violation(
          name,
          say("ahead_of_service", "time", iso(eventTimeMs), "skew", maxClockSkewText,
              "now", iso(nowMs), "unit", eventTimeUnitName));
    }
    long closesMs = closesAtMs(eventTimeMs);
    if (nowMs > closesMs) {
      return new Violation(
          name,
          say("closed_for_service", "time", iso(eventTimeMs),
              "date", iso(eventTimeMs).substring(0, 10), "closes", iso(closesMs)));
    }
    return null;
  }

  /** FlowSpec.closes_at_ms, from the day length and lateness the FlowSpec exports. */
  long closesAtMs(long eventTimeMs) {
    return (Math.floorDiv(eventTimeMs, dayMs) + 1) * dayMs + allowedLatenessMs;
  }

  /** The exported wording of {@code key}, its {name} placeholders filled from name, value pairs. */
  private String say(String key, String... namesAndValues) {
    String text = wording.get(key);
    if (text == null) {
      throw new IllegalArgumentException("the exported contract has no wording for " + key);
    }
    for (int i = 0; i + 1 < namesAndValues.length; i += 2) {
      text = text.replace("{" + namesAndValues[i] + "}", namesAndValues[i + 1]);
    }
    return text;
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
