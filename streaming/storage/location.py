"""A place of the lake or the checkpoints: a local folder or `s3://bucket/prefix`, one API.

The settings are parsed in uri.py. `Location` gives the few file operations the engine does
itself (the checkpoint's metadata and logs, staging data files, the anomaly model's files)
through pyarrow's filesystems, with the credentials of s3_settings.py. Spark reads the same
URIs: s3:// is mapped to s3a.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from urllib.parse import urlparse

import pyarrow.fs as pafs

from tidelake.streaming.storage.s3_settings import S3Settings, s3_client, s3_settings
from tidelake.streaming.storage.uri import is_object_store, join


@cache
def _s3_filesystem(settings: S3Settings) -> pafs.S3FileSystem:
    return pafs.S3FileSystem(**settings.arrow_filesystem_options())


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem of a URI or local path, and the path within it."""
    if is_object_store(uri):
        parsed = urlparse(uri)
        fs = _s3_filesystem(s3_settings())
        return fs, f"{parsed.netloc}{parsed.path}".rstrip("/")
    return pafs.LocalFileSystem(), str(uri)


@dataclass(frozen=True)
class Location:
    """A file or folder of the lake or the checkpoints, local or on S3 (a pathlib-like subset)."""

    uri: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "uri", str(self.uri))  # a pathlib.Path is welcome too

    def __truediv__(self, name: str) -> Location:
        return Location(join(self.uri, name))

    def __str__(self) -> str:
        return self.uri

    @property
    def name(self) -> str:
        return self.uri.rstrip("/").rsplit("/", 1)[-1]

    def _info(self) -> pafs.FileInfo:
        fs, path = filesystem(self.uri)
        return fs.get_file_info(path)

    def exists(self) -> bool:
        return bool(self._info().type != pafs.FileType.NotFound)

    def is_dir(self) -> bool:
        """A folder; on S3, any key under this prefix."""
        if not is_object_store(self.uri):
            return bool(self._info().type == pafs.FileType.Directory)
        fs, path = filesystem(self.uri)
        return bool(fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)))

    def names(self) -> list[str]:
        """Names of the entries directly in this folder (none if it does not exist)."""
        fs, path = filesystem(self.uri)
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        return [info.base_name for info in infos]

    def read_text(self) -> str:
        fs, path = filesystem(self.uri)
        with fs.open_input_stream(path) as stream:
            return str(stream.read().decode())

    def write_text(self, text: str) -> None:
        self.write_bytes(text.encode())

    def write_bytes(self, data: bytes) -> None:
        """Write the whole file (its folder made if needed), never half of it: locally a
        temporary file renamed into place, on S3 one PUT."""
        fs, path = filesystem(self.uri)
        if is_object_store(self.uri):
            with fs.open_output_stream(path) as stream:
                stream.write(data)
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(f"{path}.tmp", "wb") as file:
            file.write(data)
        os.replace(f"{path}.tmp", path)

    def modified_at(self) -> datetime:
        mtime: datetime | None = self._info().mtime
        if mtime is None:
            raise OSError(f"{self.uri} has no modification time")
        return mtime.astimezone(UTC) if mtime.tzinfo else mtime.replace(tzinfo=UTC)

    def delete_file(self) -> None:
        """Delete this file; nothing if it does not exist."""
        fs, path = filesystem(self.uri)
        if self.exists():
            fs.delete_file(path)

    def delete_tree(self) -> None:
        """Delete this folder and everything under it; nothing if it does not exist.

        On S3 the folders go too, deepest first: stores backed by a file system (SeaweedFS,
        MinIO) keep an emptied folder and list it, and Spark takes a listed `state/0/0/` for
        state left behind ("should be empty on batch 0")."""
        fs, path = filesystem(self.uri)
        if not is_object_store(self.uri):
            if self.is_dir():
                fs.delete_dir(path)
            return
        # boto3, not pyarrow: pyarrow puts a marker in place of a deleted folder's parent
        bucket, _, prefix = path.partition("/")
        client = s3_client(s3_settings())
        keys: list[str] = []
        folders = [f"{prefix}/"]
        todo = [f"{prefix}/"]
        while todo:
            pages = client.get_paginator("list_objects_v2").paginate(
                Bucket=bucket, Prefix=todo.pop(), Delimiter="/"
            )
            for page in pages:
                keys += [item["Key"] for item in page.get("Contents", [])]
                below = [item["Prefix"] for item in page.get("CommonPrefixes", [])]
                folders += below
                todo += below
        # files, then folders deepest first, markers ("x/", which s3a writes) among them: a
        # folder goes only once it is empty
        files = [key for key in keys if not key.endswith("/")]
        markers = {key for key in keys if key.endswith("/")}
        for key in [*files, *sorted(markers | set(folders), key=len, reverse=True)]:
            client.delete_object(Bucket=bucket, Key=key)

    @property
    def parent(self) -> Location:
        return Location(self.uri.rstrip("/").rsplit("/", 1)[0])

    def with_name(self, name: str) -> Location:
        return self.parent / name

    def rename(self, target: Location) -> None:
        """Move this folder to `target` (same store). Atomic on a local disk; on S3 a copy of
        every object, then a delete: a crash between leaves both, never neither."""
        fs, path = filesystem(self.uri)
        _, destination = filesystem(target.uri)
        if not is_object_store(self.uri):
            os.rename(path, destination)
            return
        pafs.copy_files(path, destination, fs, fs)
        self.delete_tree()


def delta_storage_options(uri: str) -> dict[str, str] | None:
    """storage_options for a delta-rs call on this table URI (None for a local path)."""
    return s3_settings().delta_storage_options() if is_object_store(uri) else None
