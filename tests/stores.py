"""Where a test keeps its lake and checkpoints: the `storage_roots` fixture's params."""

from __future__ import annotations

import pyarrow.fs as pafs
import pytest

from tidelake.streaming.storage.location import filesystem
from tidelake.streaming.storage.uri import is_object_store

ON_BOTH_STORES = pytest.mark.parametrize("storage_roots", ["local", "s3"], indirect=True)
"""Run a test with its lake and checkpoints on a local disk, then on the session's S3 server."""

ON_S3 = pytest.mark.parametrize("storage_roots", ["s3"], indirect=True)
"""Run a test with its lake and checkpoints on the session's S3 server only."""


def copy_tree(source: str, target: str) -> None:
    """Copy a folder of the lake or the checkpoints (local or S3), as a restore from a backup."""
    source_fs, source_path = filesystem(source)
    target_fs, target_path = filesystem(target)
    pafs.copy_files(source_path, target_path, source_fs, target_fs)


def files_under(root: str, suffix: str) -> list[str]:
    """URIs (or paths) of the files under a folder whose names end with suffix."""
    fs, path = filesystem(root)
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    found = [i.path for i in infos if i.type == pafs.FileType.File and i.path.endswith(suffix)]
    return [f"s3://{p}" if is_object_store(root) else p for p in sorted(found)]
