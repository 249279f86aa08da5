package dev.tidelake.ingest;

import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.FieldDescriptor;
import com.google.protobuf.DynamicMessage;
import com.google.rpc.Code;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

/** trackCalls' answers (protos/service.proto's TrackCallsResult), bound from the descriptor. */
final class BatchAnswers {
  private final Descriptor batchResult;
  private final Descriptor trackResult;
  private final FieldDescriptor keyField;

  BatchAnswers(Descriptor batchResult, FieldDescriptor keyField) {
    this.batchResult = batchResult;
    this.trackResult = batchResult.findFieldByName("refused").getMessageType();
    this.keyField = keyField;
  }

  /** The event's key (its call_sid). */
  String key(DynamicMessage event) {
    return (String) event.getField(keyField);
  }

  /** The answer for one refused event, at its index in the batch. */
  DynamicMessage refusal(int index, DynamicMessage event, Code code, String message) {
    return DynamicMessage.newBuilder(trackResult)
        .setField(trackResult.findFieldByName("index"), index)
        .setField(trackResult.findFieldByName("call_sid"), key(event))
        .setField(trackResult.findFieldByName("code"), code.getNumber())
        .setField(trackResult.findFieldByName("message"), message)
        .build();
  }

  /** A batch's answer: how many were accepted, the refused ones in batch order. */
  DynamicMessage result(long number, int accepted, List<DynamicMessage> refused) {
    FieldDescriptor index = trackResult.findFieldByName("index");
    List<DynamicMessage> ordered = new ArrayList<>(refused);
    ordered.sort(Comparator.comparingInt(r -> (Integer) r.getField(index)));
    DynamicMessage.Builder out =
        DynamicMessage.newBuilder(batchResult)
            .setField(batchResult.findFieldByName("batch"), number)
            .setField(batchResult.findFieldByName("accepted"), accepted);
    FieldDescriptor refusedField = batchResult.findFieldByName("refused");
    for (DynamicMessage r : ordered) {
      out.addRepeatedField(refusedField, r);
    }
    return out.build();
  }
}
