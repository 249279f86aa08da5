package dev.tidelake.hadoop;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.EnumSet;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.CreateFlag;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileContext;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Options;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Hadoop's local filesystem through java.nio: the same modes, renames and link answers. */
class NioRawLocalFileSystemTest {
  @TempDir java.nio.file.Path dir;

  private static Configuration conf() {
    Configuration conf = new Configuration(false);
    conf.set("fs.file.impl", NioLocalFileSystem.class.getName());
    conf.set("fs.AbstractFileSystem.file.impl", NioLocalFs.class.getName());
    conf.setBoolean("fs.file.impl.disable.cache", true);
    return conf;
  }

  private String mode(java.nio.file.Path p) throws IOException {
    return PosixFilePermissions.toString(Files.getPosixFilePermissions(p));
  }

  @Test
  void everyPermissionBitMapsToItsJavaNioPermission() {
    assertEquals("rwxr-x--x", PosixFilePermissions.toString(NioRawLocalFileSystem.posix((short) 0751)));
    assertEquals("---------", PosixFilePermissions.toString(NioRawLocalFileSystem.posix((short) 0)));
    assertEquals("rw-r--r--", PosixFilePermissions.toString(NioRawLocalFileSystem.posix((short) 0644)));
  }

  @Test
  void theFileSystemApiCreatesAndChmodsLikeHadoop() throws IOException {
    FileSystem fs = FileSystem.get(dir.toUri(), conf());
    assertInstanceOf(NioLocalFileSystem.class, fs);
    Path file = new Path(dir.toUri().toString(), "a/b/part-0.parquet");
    try (FSDataOutputStream out = fs.create(file, new FsPermission((short) 0640), false, 4096,
        (short) 1, 1 << 20, null)) {
      out.write(new byte[] {1, 2, 3});
    }
    assertEquals("rw-r-----", mode(dir.resolve("a/b/part-0.parquet")));
    fs.setPermission(file, new FsPermission((short) 0600));
    assertEquals("rw-------", mode(dir.resolve("a/b/part-0.parquet")));
    assertTrue(Files.exists(dir.resolve("a/b/.part-0.parquet.crc")), "checksummed as Hadoop's");
  }

  @Test
  void fileContextWritesAndRenamesCheckpointFiles() throws IOException {
    FileContext fc = FileContext.getFileContext(dir.toUri(), conf());
    Path tmp = new Path(dir.toUri().toString(), "offsets/.0.tmp");
    Path done = new Path(dir.toUri().toString(), "offsets/0");
    try (FSDataOutputStream out = fc.create(tmp, EnumSet.of(CreateFlag.CREATE),
        Options.CreateOpts.createParent(), Options.CreateOpts.perms(new FsPermission((short) 0644)))) {
      out.write("v1".getBytes());
    }
    fc.rename(tmp, done, Options.Rename.NONE);
    assertArrayEquals("v1".getBytes(), Files.readAllBytes(dir.resolve("offsets/0")));
    assertEquals("rw-r--r--", mode(dir.resolve("offsets/0")));
    assertFalse(Files.exists(dir.resolve("offsets/.0.tmp")));
    // a rename onto an existing name is refused without OVERWRITE, as Spark's metadata log needs
    try (FSDataOutputStream out = fc.create(tmp, EnumSet.of(CreateFlag.CREATE))) {
      out.write("v2".getBytes());
    }
    try {
      fc.rename(tmp, done, Options.Rename.NONE);
      throw new AssertionError("rename over an existing file was not refused");
    } catch (org.apache.hadoop.fs.FileAlreadyExistsException expected) {
      // the first writer of a batch wins
    }
    assertArrayEquals("v1".getBytes(), Files.readAllBytes(dir.resolve("offsets/0")));
  }

  @Test
  void linksAndFilesAreReportedAsHadoopsOwnFileSystemReportsThem() throws IOException {
    java.nio.file.Path target = Files.writeString(dir.resolve("target"), "x");
    Files.createSymbolicLink(dir.resolve("link"), target);
    NioRawLocalFileSystem nio = new NioRawLocalFileSystem();
    nio.initialize(dir.toUri(), conf());
    org.apache.hadoop.fs.RawLocalFileSystem hadoop = new org.apache.hadoop.fs.RawLocalFileSystem();
    hadoop.initialize(dir.toUri(), new Configuration(false));
    for (String name : new String[] {"link", "target"}) {
      Path p = new Path(dir.resolve(name).toUri());
      FileStatus expected = hadoop.getFileLinkStatus(p);
      FileStatus actual = nio.getFileLinkStatus(p);
      assertEquals(expected.isSymlink(), actual.isSymlink(), name);
      assertEquals(expected.getLen(), actual.getLen(), name);
      assertEquals(expected.getPath(), actual.getPath(), name);
    }
  }
}
