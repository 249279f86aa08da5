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
import java.util.List;
import java.util.Map;
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
 * <p>The struct holds the message's fields in declaration order and then {@code _error}: null
 * for a good record, else why it was refused (undecodable bytes, empty value, a wire type that
 * does not match the field's declared type, an enum number the contract does not know, an
 * unsigned 64-bit value beyond Delta's signed long). Types: enums by name; uint32 and fixed32
 * as long (Delta has no unsigned types); a field with presence (proto3 {@code optional}) that
 * was not sent is null, other unset fields hold proto3's zero value.
 *
 * <p>Parsing walks the wire format once with {@link CodedInputStream} against a field table
 * built from the descriptor, instead of building a DynamicMessage per record.
 */
public final class ProtobufDecoder implements UDF1<byte[], Row> {
  private static final long serialVersionUID = 1L;
  public static final String ERROR_FIELD = "_error";

  private final byte[] descriptorSet;
  private final String messageName;
  private transient FieldSlot[] slots;
  private transient Map<Integer, FieldSlot> slotsByNumber;
  private transient Object[] unsetRow;

  public ProtobufDecoder(byte[] descriptorSet, String messageName) {
    this.descriptorSet = descriptorSet.clone();
    this.messageName = messageName;
    prepare();
  }

  /** {@code decode(value)} as a column of the struct described above. */
  public static Column decode(Column value, String messageName, byte[] descriptorSet) {
    ProtobufDecoder decoder = new ProtobufDecoder(descriptorSet, messageName);
    return functions.udf(decoder, decoder.schema()).apply(value);
  }

  /** The struct type {@link #decode} returns. */
  public StructType schema() {
    List<StructField> fields = new ArrayList<>();
    for (FieldSlot slot : slots) {
      fields.add(DataTypes.createStructField(slot.name, slot.sparkType, true));
    }
    fields.add(DataTypes.createStructField(ERROR_FIELD, DataTypes.StringType, true));
    return DataTypes.createStructType(fields);
  }

  @Override
  public Row call(byte[] value) {
    if (slots == null) {
      prepare();
    }
    Object[] row = unsetRow.clone();
    if (value == null || value.length == 0) {
      row[slots.length] = "empty value";
      return RowFactory.create(row);
    }
    try {
      CodedInputStream in = CodedInputStream.newInstance(value);
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
          row[slots.length] = "undecodable: invalid wire type " + wireType;
          return RowFactory.create(row);
        }
        if (wireType != slot.wireType) {
          row[slots.length] = slot.name + ": wire type " + wireType
              + " does not match its declared type " + slot.protoType;
          return RowFactory.create(row);
        }
        Object parsed = read(in, slot);
        if (parsed instanceof Refusal refusal) {
          row[slots.length] = refusal.reason;
          return RowFactory.create(row);
        }
        row[slot.index] = parsed;
      }
    } catch (InvalidProtocolBufferException e) {
      row[slots.length] = "undecodable: " + e.getMessage();
    } catch (IOException e) {
      row[slots.length] = "undecodable: " + e;
    }
    return RowFactory.create(row);
  }

  private static Object read(CodedInputStream in, FieldSlot slot) throws IOException {
    switch (slot.protoType) {
      case INT32: return in.readInt32();
      case SINT32: return in.readSInt32();
      case SFIXED32: return in.readSFixed32();
      case UINT32: return Integer.toUnsignedLong(in.readUInt32());
      case FIXED32: return Integer.toUnsignedLong(in.readFixed32());
      case INT64: return in.readInt64();
      case SINT64: return in.readSInt64();
      case SFIXED64: return in.readSFixed64();
      case UINT64: return unsignedLong(in.readUInt64(), slot);
      case FIXED64: return unsignedLong(in.readFixed64(), slot);
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
            : new Refusal(slot.name + ": unknown value " + number + "; one of " + slot.enumKnown);
      }
      default: throw new IllegalStateException("unsupported type " + slot.protoType);
    }
  }

  private static Object unsignedLong(long raw, FieldSlot slot) {
    return raw >= 0
        ? raw
        : new Refusal(slot.name + " out of range: " + Long.toUnsignedString(raw));
  }

  private void prepare() {
    Descriptor message = findMessage(descriptorSet, messageName);
    List<FieldDescriptor> fields = message.getFields();
    slots = new FieldSlot[fields.size()];
    slotsByNumber = new HashMap<>();
    unsetRow = new Object[fields.size() + 1];
    for (int i = 0; i < fields.size(); i++) {
      FieldSlot slot = new FieldSlot(i, fields.get(i));
      slots[i] = slot;
      slotsByNumber.put(slot.number, slot);
      unsetRow[i] = slot.unsetValue;
    }
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

  /** Returned by {@link #read} instead of a value when the record must be refused. */
  private record Refusal(String reason) {}

  private static final class FieldSlot {
    final int index;
    final int number;
    final String name;
    final FieldDescriptor.Type protoType;
    final int wireType;
    final DataType sparkType;
    final Object unsetValue;
    final Map<Integer, String> enumNames = new HashMap<>();
    final List<String> enumKnown = new ArrayList<>();

    FieldSlot(int index, FieldDescriptor field) {
      if (field.isRepeated() || field.getJavaType() == FieldDescriptor.JavaType.MESSAGE) {
        throw new IllegalArgumentException(
            "field " + field.getName() + " is repeated or a message; not supported yet");
      }
      this.index = index;
      this.number = field.getNumber();
      this.name = field.getName();
      this.protoType = field.getType();
      this.wireType = field.getLiteType().getWireType();
      this.sparkType = sparkType(protoType);
      if (protoType == FieldDescriptor.Type.ENUM) {
        for (EnumValueDescriptor v : field.getEnumType().getValues()) {
          enumNames.putIfAbsent(v.getNumber(), v.getName());
          if (v.getNumber() != 0) {
            enumKnown.add(v.getName());
          }
        }
      }
      this.unsetValue = field.hasPresence() ? null : zeroValue();
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
