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
import java.nio.file.Files;
import java.nio.file.Path;
import org.apache.spark.sql.Row;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The decoder on CallEvent, from the descriptor set `make protos` writes (protos/call.binpb). */
class ProtobufDecoderTest {
  private static final String MESSAGE = "tidelake.v1.CallEvent";
  private static final String UNKNOWN_ENUM = "unknown value {number}; one of {choices}";
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
    decoder = new ProtobufDecoder(descriptorSet, MESSAGE, UNKNOWN_ENUM);
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
    return row.getString(row.length() - 1);
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
            + "region:string,event_time:bigint,_error:string>",
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
        () -> new ProtobufDecoder(descriptorSet, "tidelake.v1.Nope", UNKNOWN_ENUM));
    assertTrue(e.getMessage().contains("tidelake.v1.Nope is not in the descriptor set"),
        e.getMessage());
  }
}
