package dev.tidelake.ingest;

import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.EnumDescriptor;
import com.google.protobuf.Descriptors.EnumValueDescriptor;
import com.google.protobuf.Descriptors.FieldDescriptor;
import com.google.protobuf.DynamicMessage;
import io.delta.kernel.Scan;
import io.delta.kernel.Snapshot;
import io.delta.kernel.TableManager;
import io.delta.kernel.data.ColumnarBatch;
import io.delta.kernel.data.FilteredColumnarBatch;
import io.delta.kernel.data.Row;
import io.delta.kernel.defaults.engine.DefaultEngine;
import io.delta.kernel.engine.Engine;
import io.delta.kernel.engine.FileReadResult;
import io.delta.kernel.exceptions.TableNotFoundException;
import io.delta.kernel.internal.InternalScanFileUtils;
import io.delta.kernel.internal.data.ScanStateRow;
import io.delta.kernel.types.StructField;
import io.delta.kernel.types.StructType;
import io.delta.kernel.types.TimestampType;
import io.delta.kernel.utils.CloseableIterator;
import io.delta.kernel.utils.FileStatus;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.apache.hadoop.conf.Configuration;

/**
 * getCallInfo's read: the newest stored event of a key from the flow's Delta table, with
 * delta-kernel. It scans the table (the key has no index), which is fine for local volumes; ties
 * on the event time go to the later Kafka offset. The table is a local path or an s3:// URI.
 */
final class CallLookup {
  private final String tableUri;
  /** The engine's Kafka offset column (streaming/flow/engine_columns.py), the tie-breaker. */
  private final String offsetColumn;
  private final FlowContract contract;
  private final Engine engine;

  /**
   * hadoop: the launcher's Hadoop settings (IngestConfig), set on the engine's Configuration;
   * with them an s3:// table is read through s3a.
   */
  CallLookup(
      String tableUri, String offsetColumn, FlowContract contract, Map<String, String> hadoop) {
    this.tableUri = tableUri;
    this.offsetColumn = offsetColumn;
    this.contract = contract;
    Configuration conf = new Configuration();
    hadoop.forEach(conf::set);
    this.engine = DefaultEngine.create(conf);
  }

  /** The newest stored event of the key, or empty when there is none (or no table yet). */
  Optional<DynamicMessage> latest(String key) throws IOException {
    Snapshot snapshot;
    try {
      snapshot = TableManager.loadSnapshot(tableUri).build(engine);
    } catch (TableNotFoundException e) {
      return Optional.empty();
    }
    Descriptor message = contract.message();
    StructType tableSchema = snapshot.getSchema();
    List<StructField> columns = new ArrayList<>();
    for (FieldDescriptor f : message.getFields()) {
      if (tableSchema.indexOf(f.getName()) >= 0 && !f.isRepeated()
          && f.getJavaType() != FieldDescriptor.JavaType.MESSAGE) {
        columns.add(tableSchema.get(f.getName()));
      }
    }
    columns.add(tableSchema.get(offsetColumn));
    StructType readSchema = new StructType(columns);
    Scan scan = snapshot.getScanBuilder().withReadSchema(readSchema).build();
    Row scanState = scan.getScanState(engine);
    StructType physical = ScanStateRow.getPhysicalDataReadSchema(scanState);
    int keyColumn = readSchema.indexOf(contract.keyField().getName());
    int timeColumn = readSchema.indexOf(contract.eventTimeField().getName());
    int offsetIndex = readSchema.indexOf(offsetColumn);
    Object[] best = null;
    long bestTime = Long.MIN_VALUE;
    long bestOffset = Long.MIN_VALUE;
    try (CloseableIterator<FilteredColumnarBatch> files = scan.getScanFiles(engine)) {
      while (files.hasNext()) {
        try (CloseableIterator<Row> fileRows = files.next().getRows()) {
          while (fileRows.hasNext()) {
            Row fileRow = fileRows.next();
            FileStatus file = InternalScanFileUtils.getAddFileStatus(fileRow);
            CloseableIterator<ColumnarBatch> data =
                engine
                    .getParquetHandler()
                    .readParquetFiles(singleton(file), physical, Optional.empty())
                    .map(FileReadResult::getData);
            try (CloseableIterator<FilteredColumnarBatch> rows =
                Scan.transformPhysicalData(engine, scanState, fileRow, data)) {
              while (rows.hasNext()) {
                try (CloseableIterator<Row> it = rows.next().getRows()) {
                  while (it.hasNext()) {
                    Row row = it.next();
                    if (row.isNullAt(keyColumn) || !key.equals(row.getString(keyColumn))) {
                      continue;
                    }
                    long time = row.isNullAt(timeColumn) ? Long.MIN_VALUE : row.getLong(timeColumn);
                    long offset = row.isNullAt(offsetIndex) ? Long.MIN_VALUE : row.getLong(offsetIndex);
                    if (best == null || time > bestTime || (time == bestTime && offset > bestOffset)) {
                      best = copy(row, readSchema);
                      bestTime = time;
                      bestOffset = offset;
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
    return best == null ? Optional.empty() : Optional.of(toMessage(best, readSchema, message));
  }

  private static CloseableIterator<FileStatus> singleton(FileStatus file) {
    return io.delta.kernel.internal.util.Utils.singletonCloseableIterator(file);
  }

  /** Rows are views of a batch that is closed after the loop: keep the values. */
  private static Object[] copy(Row row, StructType schema) {
    Object[] values = new Object[schema.length()];
    for (int i = 0; i < values.length; i++) {
      if (row.isNullAt(i)) {
        continue;
      }
      var type = schema.at(i).getDataType();
      if (type instanceof io.delta.kernel.types.StringType) {
        values[i] = row.getString(i);
      } else if (type instanceof io.delta.kernel.types.IntegerType) {
        values[i] = (long) row.getInt(i);
      } else if (type instanceof io.delta.kernel.types.BooleanType) {
        values[i] = row.getBoolean(i);
      } else if (type instanceof io.delta.kernel.types.DoubleType) {
        values[i] = row.getDouble(i);
      } else if (type instanceof io.delta.kernel.types.FloatType) {
        values[i] = (double) row.getFloat(i);
      } else if (type instanceof io.delta.kernel.types.BinaryType) {
        values[i] = row.getBinary(i);
      } else {
        values[i] = row.getLong(i);
      }
    }
    return values;
  }

  private DynamicMessage toMessage(Object[] row, StructType schema, Descriptor message) {
    DynamicMessage.Builder event = DynamicMessage.newBuilder(message);
    for (int i = 0; i < schema.length(); i++) {
      FieldDescriptor f = message.findFieldByName(schema.at(i).getName());
      Object value = row[i];
      if (f == null || value == null) {
        continue;
      }
      if (f.getType() == FieldDescriptor.Type.ENUM) {
        EnumDescriptor e = f.getEnumType();
        EnumValueDescriptor v = e.findValueByName((String) value);
        if (v != null) {
          event.setField(f, v);
        }
      } else if (f.equals(contract.eventTimeField())
          && schema.at(i).getDataType() instanceof TimestampType) {
        event.setField(f, Math.floorDiv((Long) value, 1000L));
      } else {
        event.setField(f, convert(f, value));
      }
    }
    return event.build();
  }

  private static Object convert(FieldDescriptor f, Object value) {
    return switch (f.getJavaType()) {
      case INT -> ((Number) value).intValue();
      case LONG -> ((Number) value).longValue();
      case FLOAT -> ((Number) value).floatValue();
      case DOUBLE -> ((Number) value).doubleValue();
      case BYTE_STRING -> com.google.protobuf.ByteString.copyFrom((byte[]) value);
      default -> value;
    };
  }
}
