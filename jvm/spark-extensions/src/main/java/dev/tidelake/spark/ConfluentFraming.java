package dev.tidelake.spark;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.google.protobuf.CodedInputStream;
import java.io.IOException;
import java.util.HashMap;
import java.util.Map;

/**
 * The Confluent frame of a protobuf value for {@link ProtobufDecoder}: byte 0 (magic), the
 * writer schema's registry id (4 bytes, big-endian), the message-index array (a zig-zag varint
 * count, then the zig-zag varint indexes of the path from the .proto file's top level to the
 * message; the common path [0] as the single byte 0), then the message.
 *
 * <p>What a frame's record becomes is decided on the driver, once per schema id, and handed over
 * as the decoder's {@code framing} JSON (streaming/schemas/writer_schemas.py); every reason text
 * comes from there, this class only fills its {@code {id}} and {@code {path}}. All lookups are
 * built once, with the answer for the single-byte path [0] ready, as every record asks it.
 */
final class ConfluentFraming {
  static final byte MAGIC = 0;
  /** Magic byte and schema id: the bytes before the message-index array. */
  private static final int ID_END = 5;
  private static final ObjectMapper JSON = new ObjectMapper();

  private final boolean registry;
  private final Verdict own;
  private final Map<Integer, Verdict> schemas = new HashMap<>();
  private final String unknown;
  private final String truncated;

  ConfluentFraming(String framing) {
    JsonNode root;
    try {
      root = JSON.readTree(framing);
    } catch (JsonProcessingException e) {
      throw new IllegalArgumentException("framing is not JSON: " + e.getOriginalMessage(), e);
    }
    if (root == null || !root.isObject()) {
      throw new IllegalArgumentException("framing is not a JSON object: " + framing);
    }
    JsonNode registryNode = required(root, "registry");
    if (!registryNode.isBoolean()) {
      throw new IllegalArgumentException("framing.registry is not true or false");
    }
    registry = registryNode.booleanValue();
    own = new Verdict(required(root, "own"), null, "framing.own");
    JsonNode byId = required(root, "schemas");
    if (!byId.isObject()) {
      throw new IllegalArgumentException("framing.schemas is not an object: " + byId);
    }
    for (Map.Entry<String, JsonNode> entry : byId.properties()) {
      int id;
      try {
        id = Integer.parseInt(entry.getKey());
      } catch (NumberFormatException e) {
        throw new IllegalArgumentException(
            "framing.schemas key " + entry.getKey() + " is not a schema id", e);
      }
      schemas.put(id, new Verdict(entry.getValue(), Integer.toString(id), "framing.schemas." + id));
    }
    unknown = text(required(root, "unknown"), "framing.unknown");
    truncated = text(required(root, "truncated"), "framing.truncated");
  }

  /**
   * Reads the frame of {@code value} ({@code value[0] == MAGIC}): puts its schema id in
   * {@code row[idSlot]} once the whole frame was read (a cut-off frame names no schema the
   * driver should look up), and returns the offset of the message to decode, or -1 with the
   * record's refusal in {@code row[errorSlot]}.
   */
  int read(byte[] value, Object[] row, int idSlot, int errorSlot) {
    if (value.length <= ID_END) {
      row[errorSlot] = truncated;
      return -1;
    }
    int id = schemaId(value);
    int offset;
    String path;
    if (value[ID_END] == 0) {
      offset = ID_END + 1;
      path = null;  // [0], the answer every verdict holds ready
    } else {
      CodedInputStream in = CodedInputStream.newInstance(value, ID_END, value.length - ID_END);
      try {
        int count = in.readSInt32();
        // each index takes at least a byte: a larger count is cut off (or garbage)
        if (count < 0 || count > value.length - ID_END - in.getTotalBytesRead()) {
          row[errorSlot] = truncated;
          return -1;
        }
        StringBuilder indexes = new StringBuilder(2 * count);
        for (int i = 0; i < count; i++) {
          int index = in.readSInt32();
          if (index < 0) {
            row[errorSlot] = truncated;
            return -1;
          }
          if (i > 0) {
            indexes.append('.');
          }
          indexes.append(index);
        }
        path = count == 0 ? null : indexes.toString();  // count 0 means [0]
        offset = ID_END + in.getTotalBytesRead();
      } catch (IOException e) {  // InvalidProtocolBufferException: cut off or malformed
        row[errorSlot] = truncated;
        return -1;
      }
    }
    row[idSlot] = id;
    Verdict verdict = schemas.isEmpty() ? null : schemas.get(id);
    if (verdict == null) {
      if (registry) {
        row[errorSlot] = unknown.replace("{id}", Integer.toString(id));
        return -1;
      }
      verdict = own;
    }
    String refusal = path == null ? verdict.zero : verdict.answer(path);
    if (refusal == null) {
      return offset;
    }
    row[errorSlot] = verdict.idFilled ? refusal : refusal.replace("{id}", Integer.toString(id));
    return -1;
  }

  private static int schemaId(byte[] value) {
    return (value[1] & 0xff) << 24 | (value[2] & 0xff) << 16 | (value[3] & 0xff) << 8
        | (value[4] & 0xff);
  }

  private static JsonNode required(JsonNode node, String key) {
    JsonNode value = node.get(key);
    if (value == null) {
      throw new IllegalArgumentException("framing lacks " + key + ": " + node);
    }
    return value;
  }

  private static String text(JsonNode node, String where) {
    if (!node.isTextual()) {
      throw new IllegalArgumentException(where + " is not a string: " + node);
    }
    return node.textValue();
  }

  /** One writer schema's answers by message-index path: null to decode, else the refusal. */
  private static final class Verdict {
    /** Path -> refusal with {path} (and {id} when known) filled, or null to decode. */
    private final Map<String, String> paths = new HashMap<>();
    /** The refusal for a path the schema does not have; {path} unfilled. */
    private final String other;
    /** The answer for path "0". */
    final String zero;
    /** Whether {id} is filled already (a schema the driver has read) or per record (own). */
    final boolean idFilled;

    Verdict(JsonNode node, String id, String where) {
      idFilled = id != null;
      JsonNode byPath = required(node, "paths");
      if (!byPath.isObject()) {
        throw new IllegalArgumentException(where + ".paths is not an object: " + byPath);
      }
      for (Map.Entry<String, JsonNode> entry : byPath.properties()) {
        String path = entry.getKey();
        JsonNode answer = entry.getValue();
        paths.put(path, answer.isNull()
            ? null
            : withId(text(answer, where + ".paths." + path), id).replace("{path}", path));
      }
      other = withId(text(required(node, "other"), where + ".other"), id);
      zero = answer("0");
    }

    String answer(String path) {
      String refusal = paths.get(path);
      return refusal != null || paths.containsKey(path) ? refusal : other.replace("{path}", path);
    }

    private static String withId(String reason, String id) {
      return id == null ? reason : reason.replace("{id}", id);
    }
  }
}
