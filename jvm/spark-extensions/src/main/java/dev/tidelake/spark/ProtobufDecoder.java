package dev.tidelake.spark;

import com.google.protobuf.CodedInputStream;
import com.google.protobuf.DescriptorProtos.FileDescriptorProto;
import com.google.protobuf.DescriptorProtos.FileDescriptorSet;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.DescriptorValidationException;
import com.google.protobuf.Descriptors.EnumValueDescriptor;
import com.google.protobuf.Descriptors.FieldDescriptor;
import com.google.protobuf.Descriptors.FileDescriptor;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.protobuf.WireFormat;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * Protobuf bytes to a Spark struct on the JVM, from a binary descriptor set: the part of Spark's
 * {@code from_protobuf} that tidelake uses (spark-protobuf is not served by the Maven Central
 * this project reaches), plus a reason for every record it cannot turn into a row.
 *
 * <p>The struct holds the message's fields in declaration order, then {@code _error}: null
 * for a good record, else why it was refused (undecodable bytes, empty value, a wire type that
 * does not match the field's declared type, an enum number the contract does not know, an
 * unsigned 64-bit value beyond Delta's signed long), naming the field by its path
 * ({@code position.x}); then {@code _schema_id}. Types: enums by name; uint32 and fixed32 as
 * long (Delta has no unsigned types); a nested message as a struct, null when not sent; a
 * repeated field as an array (packed or not on the wire), empty when not sent; a map as an array
 * of key/value structs; a field with presence (proto3 {@code optional}) that was not sent is
 * null, other unset fields hold proto3's zero value. Recursive message types are refused (a
 * Spark type is finite).
 *
 * <p>A value may be bare or Confluent-framed (what Confluent's serializers write), told apart per
 * record with no setting: a bare message never begins with byte 0 (field number 0 does not
 * exist), a frame always does. A frame's record is decoded or refused by the driver's verdict on
 * its schema id and message path, the {@code framing} argument ({@link ConfluentFraming}), and
 * {@code _schema_id} holds the id (also when refused) so the driver can learn new ones; it is
 * null for a bare record.
 *
 * <p>Parsing walks the wire format once with {@link CodedInputStream} against field tables
 * built from the descriptor, in place in the value (no copy), instead of building a
 * DynamicMessage per record: this runs for every record of every flow.
 */
public final class ProtobufDecoder implements UDF1<byte[], Row> {
  private static final long serialVersionUID = 1L;
  public static final String ERROR_FIELD = "_error";
  public static final String SCHEMA_ID_FIELD = "_schema_id";

  private final byte[] descriptorSet;
  private final String messageName;
  private final String unknownEnum;
  private final String framing;
  // rebuilt from the fields above after the UDF is shipped to an executor
  private transient MessageLayout layout;
  private transient ConfluentFraming frames;

  /**
   * @param unknownEnum the reason for an enum number the message does not declare, with
   *     {@code {number}} and {@code {choices}} to fill (streaming/flow/contract.py's WORDING)
   * @param framing the verdicts on framed records, as JSON (streaming/schemas/writer_schemas.py,
   *     {@code WriterSchemas.framing}); see {@link ConfluentFraming}
   */
  public ProtobufDecoder(
      byte[] descriptorSet, String messageName, String unknownEnum, String framing) {
    this.descriptorSet = descriptorSet.clone();
    this.messageName = messageName;
    this.unknownEnum = unknownEnum;
    this.framing = framing;
    prepare();
  }

  /** {@code decode(value)} as a column of the struct described above. */
  public static Column decode(Column value, String messageName, byte[] descriptorSet,
      String unknownEnum, String framing) {
    ProtobufDecoder decoder = new ProtobufDecoder(descriptorSet, messageName, unknownEnum, framing);
    return functions.udf(decoder, decoder.schema()).apply(value);
  }

  /** The struct type {@link #decode} returns. */
  public StructType schema() {
    List<StructField> fields = new ArrayList<>(List.of(layout.type.fields()));
    fields.add(DataTypes.createStructField(ERROR_FIELD, DataTypes.StringType, true));
    fields.add(DataTypes.createStructField(SCHEMA_ID_FIELD, DataTypes.IntegerType, true));
    return DataTypes.createStructType(fields);
  }

  @Override
  public Row call(byte[] value) {
    if (layout == null) {
      prepare();
    }
    int width = layout.slots.length;
    int errorSlot = width;
    Object[] row = new Object[width + 2];  // the fields, _error, _schema_id
    if (value == null || value.length == 0) {
      return refused(row, "empty value");
    }
    int offset = 0;
    if (value[0] == ConfluentFraming.MAGIC) {
      offset = frames.read(value, row, width + 1, errorSlot);
      if (offset < 0) {
        return refused(row, (String) row[errorSlot]);
      }
    }
    try {
      Object parsed =
          layout.parse(CodedInputStream.newInstance(value, offset, value.length - offset), "");
      if (parsed instanceof Refusal refusal) {
        return refused(row, refusal.reason);
      }
      System.arraycopy((Object[]) parsed, 0, row, 0, width);
    } catch (InvalidProtocolBufferException e) {
      return refused(row, "undecodable: " + e.getMessage());
    } catch (IOException e) {
      return refused(row, "undecodable: " + e);
    }
    return RowFactory.create(row);
  }

  /** The row of a refused record: unset fields and the reason (its _schema_id kept). */
  private Row refused(Object[] row, String reason) {
    int width = layout.slots.length;
    System.arraycopy(layout.unsetValues(), 0, row, 0, width);
    row[width] = reason;
    return RowFactory.create(row);
  }

  private void prepare() {
    layout = new MessageLayout(
        findMessage(descriptorSet, messageName), new LinkedHashSet<>(), unknownEnum);
    frames = new ConfluentFraming(framing);
  }

  private static Descriptor findMessage(byte[] descriptorSet, String messageName) {
    FileDescriptorSet set;
    try {
      set = FileDescriptorSet.parseFrom(descriptorSet);
    } catch (InvalidProtocolBufferException e) {
      throw new IllegalArgumentException("not a binary FileDescriptorSet: " + e.getMessage(), e);
    }
    Map<String, FileDescriptor> built = new HashMap<>();
    List<String> known = new ArrayList<>();
    for (FileDescriptorProto file : set.getFileList()) {
      FileDescriptor[] deps = new FileDescriptor[file.getDependencyCount()];
      for (int d = 0; d < deps.length; d++) {
        deps[d] = built.get(file.getDependency(d));
        if (deps[d] == null) {
          throw new IllegalArgumentException(
              file.getName() + " imports " + file.getDependency(d)
                  + ", which the descriptor set does not hold before it");
        }
      }
      try {
        FileDescriptor fd = FileDescriptor.buildFrom(file, deps);
        built.put(file.getName(), fd);
        for (Descriptor d : fd.getMessageTypes()) {
          if (d.getFullName().equals(messageName)) {
            return d;
          }
          known.add(d.getFullName());
        }
      } catch (DescriptorValidationException e) {
        throw new IllegalArgumentException("invalid descriptor " + file.getName() + ": " + e, e);
      }
    }
    throw new IllegalArgumentException(
        "message " + messageName + " is not in the descriptor set; it holds " + known);
  }

  /** Returned instead of a value when the record must be refused. */
  private record Refusal(String reason) {}

  /** The field table of one message type: parses its wire format into an Object[] of columns. */
  private static final class MessageLayout {
    final FieldSlot[] slots;
    final Map<Integer, FieldSlot> slotsByNumber = new HashMap<>();
    final StructType type;
    private final Object[] unset;

    MessageLayout(Descriptor message, Set<String> enclosing, String unknownEnum) {
      if (!enclosing.add(message.getFullName())) {
        throw new IllegalArgumentException(
            "message " + message.getFullName() + " contains itself (" + String.join(" > ", enclosing)
                + "); recursive messages cannot be a table's columns");
      }
      List<FieldDescriptor> fields = message.getFields();
      slots = new FieldSlot[fields.size()];
      unset = new Object[fields.size()];
      List<StructField> columns = new ArrayList<>();
      for (int i = 0; i < fields.size(); i++) {
        FieldSlot slot = new FieldSlot(i, fields.get(i), enclosing, unknownEnum);
        slots[i] = slot;
        slotsByNumber.put(slot.number, slot);
        unset[i] = slot.unsetValue;
        columns.add(DataTypes.createStructField(slot.name, slot.sparkType, true));
      }
      type = DataTypes.createStructType(columns);
      enclosing.remove(message.getFullName());
    }

    /** A fresh copy of the columns of a message with no field sent. */
    Object[] unsetValues() {
      Object[] values = unset.clone();
      for (FieldSlot slot : slots) {
        if (slot.repeated) {
          values[slot.index] = new ArrayList<>();
        }
      }
      return values;
    }

    /** The columns of the message read from in (to its end or limit), or a Refusal. */
    Object parse(CodedInputStream in, String path) throws IOException {
      Object[] row = unsetValues();
      for (int tag = in.readTag(); tag != 0; tag = in.readTag()) {
        FieldSlot slot = slotsByNumber.get(WireFormat.getTagFieldNumber(tag));
        if (slot == null) {
          if (!in.skipField(tag)) {
            break;
          }
          continue;
        }
        int wireType = WireFormat.getTagWireType(tag);
        if (wireType > WireFormat.WIRETYPE_FIXED32) {
          return new Refusal("undecodable: invalid wire type " + wireType);
        }
        Object parsed;
        if (slot.repeated && slot.packable && wireType == WireFormat.WIRETYPE_LENGTH_DELIMITED) {
          parsed = readPacked(in, slot, path, row);
        } else if (wireType != slot.wireType) {
          return new Refusal(path + slot.name + ": wire type " + wireType
              + " does not match its declared type " + slot.protoType);
        } else {
          parsed = read(in, slot, path);
          if (!(parsed instanceof Refusal) && slot.repeated) {
            list(row, slot).add(parsed);
            continue;
          }
        }
        if (parsed instanceof Refusal) {
          return parsed;
        }
        if (!slot.repeated) {
          row[slot.index] = parsed;
        }
      }
      return row;
    }

    @SuppressWarnings("unchecked")
    private static List<Object> list(Object[] row, FieldSlot slot) {
      return (List<Object>) row[slot.index];
    }

    /** Appends a packed run of values to the slot's list; returns null, or a Refusal. */
    private static Object readPacked(CodedInputStream in, FieldSlot slot, String path, Object[] row)
        throws IOException {
      int limit = in.pushLimit(in.readRawVarint32());
      try {
        while (in.getBytesUntilLimit() > 0) {
          Object value = read(in, slot, path);
          if (value instanceof Refusal) {
            return value;
          }
          list(row, slot).add(value);
        }
        return null;
      } finally {
        in.popLimit(limit);
      }
    }

    private static Object read(CodedInputStream in, FieldSlot slot, String path)
        throws IOException {
      switch (slot.protoType) {
        case INT32: return in.readInt32();
        case SINT32: return in.readSInt32();
        case SFIXED32: return in.readSFixed32();
        case UINT32: return Integer.toUnsignedLong(in.readUInt32());
        case FIXED32: return Integer.toUnsignedLong(in.readFixed32());
        case INT64: return in.readInt64();
        case SINT64: return in.readSInt64();
        case SFIXED64: return in.readSFixed64();
        case UINT64: return unsignedLong(in.readUInt64(), slot, path);
        case FIXED64: return unsignedLong(in.readFixed64(), slot, path);
        case BOOL: return in.readBool();
        case FLOAT: return in.readFloat();
        case DOUBLE: return in.readDouble();
        case STRING: return in.readStringRequireUtf8();
        case BYTES: return in.readByteArray();
        case ENUM: {
          int number = in.readEnum();
          String name = slot.enumNames.get(number);
          return name != null
              ? name
              : new Refusal(path + slot.name + ": " + slot.unknownEnum.replace(
                  "{number}", Integer.toString(number)));
        }
        case MESSAGE: {
          int limit = in.pushLimit(in.readRawVarint32());
          try {
            Object nested = slot.message.parse(in, path + slot.name + ".");
            return nested instanceof Object[] values ? RowFactory.create(values) : nested;
          } finally {
            in.popLimit(limit);
          }
        }
        default: throw new IllegalStateException("unsupported type " + slot.protoType);
      }
    }

    private static Object unsignedLong(long raw, FieldSlot slot, String path) {
      return raw >= 0
          ? raw
          : new Refusal(path + slot.name + " out of range: " + Long.toUnsignedString(raw));
    }
  }

  private static final class FieldSlot {
    final int index;
    final int number;
    final String name;
    final FieldDescriptor.Type protoType;
    final int wireType;
    final boolean repeated;
    final boolean packable;
    final MessageLayout message;
    final DataType sparkType;
    final Object unsetValue;
    final Map<Integer, String> enumNames = new HashMap<>();
    final String unknownEnum;

    FieldSlot(int index, FieldDescriptor field, Set<String> enclosing, String unknownEnum) {
      if (field.getType() == FieldDescriptor.Type.GROUP) {
        throw new IllegalArgumentException("field " + field.getName() + " is a group; not supported");
      }
      this.index = index;
      this.number = field.getNumber();
      this.name = field.getName();
      this.protoType = field.getType();
      this.wireType = field.getLiteType().getWireType();
      this.repeated = field.isRepeated();
      this.packable = field.isPackable();
      this.message = protoType == FieldDescriptor.Type.MESSAGE
          ? new MessageLayout(field.getMessageType(), enclosing, unknownEnum)
          : null;
      DataType single = message != null ? message.type : sparkType(protoType);
      this.sparkType = repeated ? DataTypes.createArrayType(single, true) : single;
      List<String> known = new ArrayList<>();
      if (protoType == FieldDescriptor.Type.ENUM) {
        for (EnumValueDescriptor v : field.getEnumType().getValues()) {
          enumNames.putIfAbsent(v.getNumber(), v.getName());
          if (v.getNumber() != 0) {
            known.add(v.getName());  // proto3's zero entry means "not set"
          }
        }
      }
      this.unknownEnum = unknownEnum.replace("{choices}", known.toString());
      this.unsetValue = repeated || field.hasPresence() ? null : zeroValue();
    }

    private Object zeroValue() {
      switch (protoType) {
        case INT32: case SINT32: case SFIXED32: return 0;
        case UINT32: case FIXED32: case INT64: case SINT64: case SFIXED64: case UINT64:
        case FIXED64: return 0L;
        case BOOL: return false;
        case FLOAT: return 0.0f;
        case DOUBLE: return 0.0d;
        case STRING: return "";
        case BYTES: return new byte[0];
        case ENUM: return enumNames.get(0);
        default: return null;
      }
    }

    private static DataType sparkType(FieldDescriptor.Type type) {
      switch (type) {
        case INT32: case SINT32: case SFIXED32: return DataTypes.IntegerType;
        case UINT32: case FIXED32: case INT64: case SINT64: case SFIXED64: case UINT64:
        case FIXED64: return DataTypes.LongType;
        case BOOL: return DataTypes.BooleanType;
        case FLOAT: return DataTypes.FloatType;
        case DOUBLE: return DataTypes.DoubleType;
        case STRING: case ENUM: return DataTypes.StringType;
        case BYTES: return DataTypes.BinaryType;
        default: throw new IllegalArgumentException("unsupported type " + type);
      }
    }
  }
}
