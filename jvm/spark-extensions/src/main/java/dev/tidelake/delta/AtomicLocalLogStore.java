package dev.tidelake.delta;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.channels.Channels;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.Iterator;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;

/**
 * A Delta log store for the local filesystem whose commits are atomic across processes.
 *
 * <p>Delta's own {@code LocalLogStore} checks that the next commit file is absent and then
 * renames, under a lock that only its own JVM sees: two processes (the stream and a backfill,
 * say) can both write version N and one commit is lost. Here the commit file is written to a
 * private temporary file and published with a hard link, which the kernel refuses atomically if
 * the name exists; the loser gets {@link java.nio.file.FileAlreadyExistsException}, which Delta
 * treats as a concurrent commit and resolves by its usual conflict checks. This is what delta-rs
 * does on local disks (rename without replace). Needs a filesystem with hard links (any POSIX
 * one).
 *
 * <p>Enable with {@code spark.delta.logStore.file.impl=dev.tidelake.delta.AtomicLocalLogStore}.
 */
public class AtomicLocalLogStore extends HadoopFileSystemLogStore {

  public AtomicLocalLogStore(Configuration hadoopConf) {
    super(hadoopConf);
  }

  @Override
  public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration conf)
      throws IOException {
    java.nio.file.Path target = java.nio.file.Path.of(path.toUri().getPath());
    java.nio.file.Path temp =
        target.resolveSibling("." + target.getFileName() + "." + UUID.randomUUID() + ".tmp");
    try {
      writeDurably(temp, actions);
      if (overwrite) {
        Files.move(temp, target, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
      } else {
        Files.createLink(target, temp);
      }
    } finally {
      Files.deleteIfExists(temp);
    }
  }

  @Override
  public Boolean isPartialWriteVisible(Path path, Configuration conf) {
    return false;
  }

  private static void writeDurably(java.nio.file.Path file, Iterator<String> lines)
      throws IOException {
    try (FileChannel channel =
            FileChannel.open(file, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE);
        OutputStream out = Channels.newOutputStream(channel)) {
      boolean first = true;
      while (lines.hasNext()) {
        if (!first) {
          out.write('\n');
        }
        out.write(lines.next().getBytes(StandardCharsets.UTF_8));
        first = false;
      }
      out.flush();
      channel.force(true);
    }
  }
}
