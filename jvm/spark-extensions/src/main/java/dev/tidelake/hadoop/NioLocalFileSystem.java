package dev.tidelake.hadoop;

import org.apache.hadoop.fs.LocalFileSystem;

/**
 * Hadoop's checksummed local filesystem ({@code file:} through the FileSystem API) over {@link
 * NioRawLocalFileSystem}. Enable with {@code fs.file.impl=dev.tidelake.hadoop.NioLocalFileSystem}.
 */
public class NioLocalFileSystem extends LocalFileSystem {
  public NioLocalFileSystem() {
    super(new NioRawLocalFileSystem());
  }
}
