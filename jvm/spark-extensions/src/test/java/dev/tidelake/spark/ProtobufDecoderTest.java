package dev.tidelake.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.DescriptorProtos.FileDescriptorProto;
import com.google.protobuf.DescriptorProtos.FileDescriptorSet;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.FieldDescriptor;
import com.google.protobuf.Descriptors.FileDescriptor;
import com.google.protobuf.DynamicMessage;
import com.google.protobuf.UnknownFieldSet;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import org.apache.spark.sql.Row;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The decoder on CallEvent, from the descriptor set `make protos` writes (protos/call.binpb). */
class ProtobufDecoderTest {
  private static final String MESSAGE = "tidelake.v1.CallEvent";
  private static final String UNKNOWN_ENUM = "unknown value {number}; one of {choices}";
  private static final String CALL_SID_REASON =
      "schema id {id} names message tidelake.v1.CallSid, not the flow's tidelake.v1.CallEvent";
  private static final String OWN = """
      {"paths": {"0": null, "1": "%s"},
       "other": "schema id {id}: message index [{path}] names no message of its schema"}"""
      .formatted(CALL_SID_REASON);
  private static final String UNKNOWN = "schema id {id} is not yet read from the schema registry";
  private static final String TRUNCATED = "undecodable: a Confluent frame (magic byte 0) too short "
      + "for its schema id and message indexes";
  /** Framed records without a registry: read as the flow's own .proto (CallEvent, CallSid). */
  private static final String NO_REGISTRY = framing(false, "{}");
  private static byte[] descriptorSet;
  private static Descriptor callEvent;
  private static ProtobufDecoder decoder;

  @BeforeAll
  static void load() throws Exception {
    Path protos = Path.of(System.getProperty("tidelake.protos", "../../protos"));
    descriptorSet = Files.readAllBytes(protos.resolve("call.binpb"));
    FileDescriptorProto file = FileDescriptorSet.parseFrom(descriptorSet).getFile(0);
    callEvent = FileDescriptor.buildFrom(file, new FileDescriptor[0]).findMessageTypeByName(
        "CallEvent");
    decoder = new ProtobufDecoder(descriptorSet, MESSAGE, UNKNOWN_ENUM, NO_REGISTRY);
  }

  /** The decoder's framing argument, as streaming/schemas/writer_schemas.py writes it. */
  private static String framing(boolean registry, String schemas) {
    return """
        {"registry": %s, "own": %s, "schemas": %s, "unknown": "%s", "truncated": "%s"}"""
        .formatted(registry, OWN, schemas, UNKNOWN, TRUNCATED);
  }

  /** Magic byte 0, the schema id big-endian, the index bytes, then the message. */
  private static byte[] framed(int schemaId, byte[] indexes, byte[] message) {
    byte[] value = new byte[5 + indexes.length + message.length];
    value[1] = (byte) (schemaId >>> 24);
    value[2] = (byte) (schemaId >>> 16);
    value[3] = (byte) (schemaId >>> 8);
    value[4] = (byte) schemaId;
    System.arraycopy(indexes, 0, value, 5, indexes.length);
    System.arraycopy(message, 0, value, 5 + indexes.length, message.length);
    return value;
  }

  private static byte[] bytes(int... values) {
    byte[] out = new byte[values.length];
    for (int i = 0; i < values.length; i++) {
      out[i] = (byte) values[i];
    }
    return out;
  }

  private static DynamicMessage.Builder call() {
    return DynamicMessage.newBuilder(callEvent)
        .setField(field("call_sid"), "CA" + "0".repeat(32))
        .setField(field("account_sid"), "AC" + "1".repeat(32))
        .setField(field("duration"), 42)
        .setField(field("call_state"), callEvent.findEnumTypeByName("CallState")
            .findValueByName("completed"))
        .setField(field("region"), callEvent.findEnumTypeByName("Region").findValueByName("de1"))
        .setField(field("event_time"), 1_795_000_000_000L);
  }

  private static FieldDescriptor field(String name) {
    return callEvent.findFieldByName(name);
  }

  private static String error(Row row) {
    return row.getString(row.length() - 2);
  }

  private static Integer schemaId(Row row) {
    return (Integer) row.get(row.length() - 1);
  }

  private static void assertSameFields(Row expected, Row actual) {
    for (int i = 0; i < expected.length() - 2; i++) {
      assertEquals(expected.get(i), actual.get(i), "field " + i);
    }
  }

  @Test
  void aGoodRecordBecomesItsColumnsInDeclarationOrder() {
    Row row = decoder.call(call().build().toByteArray());
    assertNull(error(row));
    assertEquals("CA" + "0".repeat(32), row.getString(0));
    assertEquals(42L, row.getLong(2), "uint32 is a long: Delta has no unsigned types");
    assertEquals("completed", row.getString(3));
    assertEquals("de1", row.getString(4));
    assertEquals(1_795_000_000_000L, row.getLong(5));
    assertEquals(
        "struct<call_sid:string,account_sid:string,duration:bigint,call_state:string,"
            + "region:string,event_time:bigint,_error:string,_schema_id:int>",
        decoder.schema().simpleString());
  }

  @Test
  void unsetFieldsHoldProto3ZeroValuesAndUnknownFieldsAreSkipped() {
    byte[] value = DynamicMessage.newBuilder(callEvent)
        .setField(field("call_sid"), "CAx")
        .setUnknownFields(UnknownFieldSet.newBuilder()
            .addField(99, UnknownFieldSet.Field.newBuilder().addVarint(7).build()).build())
        .build().toByteArray();
    Row row = decoder.call(value);
    assertNull(error(row));
    assertEquals("", row.getString(1));
    assertEquals(0L, row.getLong(2));
    assertEquals("unknown_state", row.getString(3));
  }

  @Test
  void anUnknownEnumNumberIsRefusedInTheExportedWording() {
    byte[] value = call().setField(field("region"),
        callEvent.findEnumTypeByName("Region").findValueByNumberCreatingIfUnknown(99))
        .build().toByteArray();
    assertEquals("region: unknown value 99; one of [us1, us2, de1]", error(decoder.call(value)));
  }

  @Test
  void emptyUndecodableAndMistypedValuesAreRefusedWithAReason() {
    assertEquals("empty value", error(decoder.call(new byte[0])));
    assertEquals("empty value", error(decoder.call(null)));
    assertTrue(error(decoder.call(new byte[] {0x0a, 0x7f, 0x41})).startsWith("undecodable: "));
    // field 1 (call_sid, a string) sent as a varint
    assertEquals("call_sid: wire type 0 does not match its declared type STRING",
        error(decoder.call(new byte[] {0x08, 0x01})));
  }

  @Test
  void aUint64PastASignedLongIsRefused() {
    byte[] value = call().setField(field("event_time"), -1L).build().toByteArray();
    assertEquals("event_time out of range: 18446744073709551615", error(decoder.call(value)));
  }

  @Test
  void aMessageTheSetDoesNotHoldIsNamed() {
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> new ProtobufDecoder(descriptorSet, "tidelake.v1.Nope", UNKNOWN_ENUM, NO_REGISTRY));
    assertTrue(e.getMessage().contains("tidelake.v1.Nope is not in the descriptor set"),
        e.getMessage());
  }

  @Test
  void aFramedRecordWithTheSingleByteIndexDecodesAsTheBareOneAndNamesItsSchema() {
    byte[] bare = call().build().toByteArray();
    Row bareRow = decoder.call(bare);
    Row framedRow = decoder.call(framed(17, bytes(0), bare));
    assertNull(error(framedRow));
    assertSameFields(bareRow, framedRow);
    assertEquals(17, schemaId(framedRow));
    assertNull(schemaId(bareRow), "a bare record has no schema id");
  }

  @Test
  void theCountedFormOfIndexZeroDecodesToo() {
    byte[] bare = call().build().toByteArray();
    Row row = decoder.call(framed(17, bytes(0x02, 0x00), bare));  // count 1, index 0
    assertNull(error(row));
    assertSameFields(decoder.call(bare), row);
    assertEquals(17, schemaId(row));
  }

  @Test
  void aFramedEmptyMessageHoldsZeroValues() {
    Row row = decoder.call(framed(17, bytes(0), new byte[0]));
    assertNull(error(row), "proto3's all-default message is zero bytes after its frame");
    assertEquals("", row.getString(0));
    assertEquals(17, schemaId(row));
  }

  @Test
  void aPathToAnotherMessageIsRefusedWithItsReason() {
    byte[] value = framed(17, bytes(0x02, 0x02), call().build().toByteArray());  // [1]
    Row row = decoder.call(value);
    assertEquals(CALL_SID_REASON.replace("{id}", "17"), error(row));
    assertEquals(17, schemaId(row));
    assertEquals("", row.getString(0), "a refused record's fields are unset");
  }

  @Test
  void aPathTheSchemaDoesNotHaveIsRefusedAsOther() {
    byte[] message = call().build().toByteArray();
    assertEquals("schema id 5: message index [1.0] names no message of its schema",
        error(decoder.call(framed(5, bytes(0x04, 0x02, 0x00), message))));  // [1, 0]
    assertEquals("schema id 300: message index [7] names no message of its schema",
        error(decoder.call(framed(300, bytes(0x02, 0x0e), message))));  // [7]
  }

  @Test
  void anIdTheRegistryHasNotAnsweredIsPending() {
    ProtobufDecoder withRegistry =
        new ProtobufDecoder(descriptorSet, MESSAGE, UNKNOWN_ENUM, framing(true, "{}"));
    Row row = withRegistry.call(framed(99, bytes(0), call().build().toByteArray()));
    assertEquals("schema id 99 is not yet read from the schema registry", error(row));
    assertEquals(99, schemaId(row));
    assertNull(schemaId(withRegistry.call(call().build().toByteArray())));
  }

  @Test
  void aReadSchemaIsJudgedByItsOwnVerdict() {
    String schemas = """
        {"17": {"paths": {"0": "schema id {id}: field duration is %s"},
                "other": "schema id {id} holds no [{path}]"},
         "18": {"paths": {"0": null, "1": "schema id {id} names message tidelake.v1.CallSid"},
                "other": "schema id {id} holds no [{path}]"}}"""
        .formatted("string there and uint32 in the flow");
    ProtobufDecoder withRegistry =
        new ProtobufDecoder(descriptorSet, MESSAGE, UNKNOWN_ENUM, framing(true, schemas));
    byte[] message = call().build().toByteArray();
    Row refused = withRegistry.call(framed(17, bytes(0), message));
    assertEquals("schema id 17: field duration is string there and uint32 in the flow",
        error(refused));
    assertEquals(17, schemaId(refused));
    assertEquals("schema id 17: field duration is string there and uint32 in the flow",
        error(withRegistry.call(framed(17, bytes(0x02, 0x00), message))));
    Row read = withRegistry.call(framed(18, bytes(0), message));
    assertNull(error(read));
    assertSameFields(decoder.call(message), read);
    assertEquals("schema id 18 names message tidelake.v1.CallSid",
        error(withRegistry.call(framed(18, bytes(0x02, 0x02), message))));
    assertEquals("schema id 18 holds no [2.1]",
        error(withRegistry.call(framed(18, bytes(0x04, 0x04, 0x02), message))));
    // without a registry a read schema is still judged by its verdict, others by the own one
    ProtobufDecoder offline =
        new ProtobufDecoder(descriptorSet, MESSAGE, UNKNOWN_ENUM, framing(false, schemas));
    assertEquals("schema id 17: field duration is string there and uint32 in the flow",
        error(offline.call(framed(17, bytes(0), message))));
    assertNull(error(offline.call(framed(19, bytes(0), message))));
  }

  @Test
  void aFrameTooShortForItsIdOrIndexesIsTruncatedAndNamesNoSchema() {
    byte[][] cut = {
        bytes(0),
        bytes(0, 0, 0, 1),
        bytes(0, 0, 0, 0, 1),  // no index array
        bytes(0, 0, 0, 0, 1, 0x04, 0x02),  // count 2, one index
        bytes(0, 0, 0, 0, 1, 0x02, 0x82),  // the index varint cut off
        bytes(0, 0, 0, 0, 1, 0x01, 0x00),  // count -1
        bytes(0, 0, 0, 0, 1, 0x02, 0x01),  // index -1
    };
    for (byte[] value : cut) {
      Row row = decoder.call(value);
      assertEquals(TRUNCATED, error(row));
      assertNull(schemaId(row), "a cut-off frame names no schema to look up");
    }
  }

  @Test
  void aFramedRecordKeepsTheUsualReasons() {
    byte[] value = call().setField(field("region"),
        callEvent.findEnumTypeByName("Region").findValueByNumberCreatingIfUnknown(99))
        .build().toByteArray();
    Row row = decoder.call(framed(17, bytes(0), value));
    assertEquals("region: unknown value 99; one of [us1, us2, de1]", error(row));
    assertEquals(17, schemaId(row));
    assertTrue(error(decoder.call(framed(17, bytes(0), bytes(0x0a, 0x7f, 0x41))))
        .startsWith("undecodable: "));
  }

  @Test
  void theFramingIsRebuiltAfterTheUdfIsShipped() throws Exception {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    try (ObjectOutputStream o = new ObjectOutputStream(out)) {
      o.writeObject(decoder);
    }
    ProtobufDecoder shipped;
    try (ObjectInputStream in =
        new ObjectInputStream(new ByteArrayInputStream(out.toByteArray()))) {
      shipped = (ProtobufDecoder) in.readObject();
    }
    byte[] message = call().build().toByteArray();
    assertSameFields(decoder.call(message), shipped.call(framed(3, bytes(0), message)));
    assertEquals(CALL_SID_REASON.replace("{id}", "3"),
        error(shipped.call(framed(3, bytes(0x02, 0x02), message))));
  }

  @Test
  void aFramingThatIsNotTheAgreedJsonIsNamed() {
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> new ProtobufDecoder(descriptorSet, MESSAGE, UNKNOWN_ENUM, "{\"registry\": false}"));
    assertTrue(e.getMessage().contains("framing lacks own"), e.getMessage());
  }
}
