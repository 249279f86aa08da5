package dev.tidelake.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local filesystem, with file modes set and symbolic links told apart through
 * {@code java.nio} instead of a forked {@code chmod} or {@code readlink} process.
 *
 * <p>Without Hadoop's native library (not served from Maven Central, so absent here) every file
 * Spark creates through Hadoop gets its mode from a forked {@code chmod}, and every rename through
 * FileContext (how Spark's checkpoint files are published) first forks {@code readlink} on both
 * names. A micro-batch of the stream forked ~118 processes that way (measured at 5,000 events/s:
 * offset and commit logs, state changelogs, their checksum files, the Parquet files). The
 * behaviour is Hadoop's; only the system calls differ. A sticky bit, which java.nio cannot set,
 * still goes through Hadoop's own code.
 */
public class NioRawLocalFileSystem extends RawLocalFileSystem {

  private static final PosixFilePermission[] BY_BIT = {
    PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE,
    PosixFilePermission.OTHERS_READ, PosixFilePermission.GROUP_EXECUTE,
    PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
    PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE,
    PosixFilePermission.OWNER_READ,
  };

  @Override
  public void setPermission(Path p, FsPermission permission) throws IOException {
    if (permission.getStickyBit()) {
      super.setPermission(p, permission);
      return;
    }
    Files.setPosixFilePermissions(pathToFile(p).toPath(), posix(permission.toShort()));
  }

  /** The nine permission bits of a mode as java.nio's set. */
  static Set<PosixFilePermission> posix(short mode) {
    Set<PosixFilePermission> set = EnumSet.noneOf(PosixFilePermission.class);
    for (int bit = 0; bit < BY_BIT.length; bit++) {
      if ((mode & (1 << bit)) != 0) {
        set.add(BY_BIT[bit]);
      }
    }
    return set;
  }

  @Override
  public FileStatus getFileLinkStatus(Path f) throws IOException {
    if (Files.isSymbolicLink(pathToFile(f).toPath())) {
      return super.getFileLinkStatus(f);
    }
    return getFileStatus(f);
  }
}
