package dev.tidelake.ingest;

import com.google.protobuf.DescriptorProtos.FileDescriptorProto;
import com.google.protobuf.DescriptorProtos.FileDescriptorSet;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.DescriptorValidationException;
import com.google.protobuf.Descriptors.FileDescriptor;
import com.google.protobuf.InvalidProtocolBufferException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Descriptors from a FileDescriptorSet as `make protos` writes it (a file after its imports):
 * what the service binds its methods to, and what its load client builds requests with.
 */
public final class DescriptorSets {
  private DescriptorSets() {}

  /** Every file of the set, built in order. */
  public static List<FileDescriptor> files(byte[] descriptorSet)
      throws InvalidProtocolBufferException, DescriptorValidationException {
    Map<String, FileDescriptor> built = new HashMap<>();
    List<FileDescriptor> files = new ArrayList<>();
    for (FileDescriptorProto proto : FileDescriptorSet.parseFrom(descriptorSet).getFileList()) {
      FileDescriptor[] deps =
          proto.getDependencyList().stream().map(built::get).toArray(FileDescriptor[]::new);
      FileDescriptor file = FileDescriptor.buildFrom(proto, deps);
      built.put(proto.getName(), file);
      files.add(file);
    }
    return files;
  }

  /** The top-level message of that full name in any of the files; IllegalArgumentException if
   * none has it. */
  public static Descriptor message(List<FileDescriptor> files, String fullName) {
    for (FileDescriptor file : files) {
      for (Descriptor message : file.getMessageTypes()) {
        if (message.getFullName().equals(fullName)) {
          return message;
        }
      }
    }
    throw new IllegalArgumentException("the descriptor set has no message " + fullName);
  }
}
