"""Writing a file only if it is absent, and refusing a store that cannot.

A Delta commit is the creation of `_delta_log/N.json` by whichever writer gets there first:
`put_if_absent` does it (a PUT with `If-None-Match: *` on S3, a hard link of a complete file on
local disk, as delta-rs does both; the stream's commits, delta/log_append.py). On local disk the
file is forced to disk before its link and the folder after, so that a power loss leaves the
entry whole or absent; a writer killed between writing and linking leaves its temporary file,
which the log upkeep deletes (`remove_leftovers`). On S3 the store must refuse the second of two
such PUTs of one key, or two processes committing at once both "succeed" and one commit is lost;
there is no lock service to fall back on. So at start the store is asked twice for the same new
key; the second answer must be 412 (or 409, a concurrent conditional write). A store that
answers 200 is refused in one line naming the setting.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
import uuid
from functools import cache
from typing import Any
from urllib.parse import urlparse

from botocore.exceptions import BotoCoreError, ClientError

from tidelake.streaming.errors import ConfigError
from tidelake.streaming.storage.s3_settings import S3Settings, s3_client, s3_settings
from tidelake.streaming.storage.uri import is_object_store, join

PROBE_FOLDER = "_tidelake_probe"
_TEMPORARY = re.compile(
    r"_.+\.[0-9a-f]{32}\.tmp"
    r"|\..+\.[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.tmp"
)
"""The name of a temporary file of a local put: `_<name>.<uuid hex>.tmp` (put_if_absent), or
`.<name>.<uuid>.tmp` (the JVM's AtomicLocalLogStore, delta-spark's commits and checkpoints)."""
_REFUSED = {"PreconditionFailed", "ConditionalRequestConflict", "412", "409"}


class ConditionalPutUnsupportedError(ConfigError):
    """The store answered a second conditional PUT of one key with success."""


def require_conditional_put(root: str, variable: str) -> None:
    """Raise ConfigError naming `variable` unless the store under `root` honours If-None-Match
    (checked once per process and store root); nothing for a local folder."""
    if is_object_store(root):
        _probe(root, variable, s3_settings())


@cache
def _probe(root: str, variable: str, settings: S3Settings) -> None:
    client = _client(settings)
    where = settings.where()
    parsed = urlparse(join(root, PROBE_FOLDER, f"{uuid.uuid4().hex}.json"))
    bucket, key = parsed.netloc, parsed.path.lstrip("/")
    try:
        client.put_object(Bucket=bucket, Key=key, Body=b"1", IfNoneMatch="*")
    except ClientError as exc:
        raise ConfigError(
            f"{variable}={root}: the store at {where} refused a write to bucket {bucket!r} "
            f"({_code(exc)}: {exc.response.get('Error', {}).get('Message', '')})"
        ) from None
    except BotoCoreError as exc:
        raise ConfigError(
            f"{variable}={root}: the store at {where} is unreachable: {exc}"
        ) from None
    try:
        client.put_object(Bucket=bucket, Key=key, Body=b"2", IfNoneMatch="*")
    except ClientError as exc:
        if _code(exc) in _REFUSED:
            return
        raise ConfigError(
            f"{variable}={root}: the store at {where} answered a conditional PUT with "
            f"{_code(exc)} instead of 412 Precondition Failed"
        ) from None
    finally:
        with contextlib.suppress(ClientError, BotoCoreError):
            client.delete_object(Bucket=bucket, Key=key)
    raise ConditionalPutUnsupportedError(
        f"{variable}={root}: the store at {where} does not honour conditional writes (a second "
        "PUT with If-None-Match: * of one key succeeded), so two Delta commits at once could "
        "lose one; use a store that does (AWS S3, Cloudflare R2, MinIO, SeaweedFS)"
    )


def put_if_absent(uri: str, body: bytes) -> bool:
    """Create the file at `uri` (a local path or s3://) holding `body`, unless one is there:
    True if this call created it. Readers never see part of it. Raises OSError or botocore's
    errors for anything but "already there"."""
    if not is_object_store(uri):
        return _link_if_absent(uri, body)
    parsed = urlparse(uri)
    try:
        _client(s3_settings()).put_object(
            Bucket=parsed.netloc, Key=parsed.path.lstrip("/"), Body=body, IfNoneMatch="*"
        )
    except ClientError as exc:
        if _code(exc) in _REFUSED:
            return False
        raise
    return True


def _link_if_absent(path: str, body: bytes) -> bool:
    """A hard link of a complete, forced file: a power loss after it leaves the entry whole or
    absent, never empty (as the JVM's AtomicLocalLogStore forces its file). A crash before the
    link leaves the temporary file, which the log upkeep deletes (remove_leftovers)."""
    folder, name = os.path.split(path)
    temporary = os.path.join(folder, f"_{name}.{uuid.uuid4().hex}.tmp")  # see _TEMPORARY
    try:
        with open(temporary, "wb") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.link(temporary, path)  # atomic, and fails if the name exists
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(FileNotFoundError):  # the open itself failed
            os.unlink(temporary)
    _fsync_folder(folder)
    return True


def _fsync_folder(folder: str) -> None:
    """Force the folder's entries (the new name) to disk."""
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


LEFTOVER_AFTER_S = 3600.0
"""Age after which a temporary file of put_if_absent is a crash's leftover: a put links and
removes its own within milliseconds; a writer paused longer than this whose file went fails its
put with an OSError (its batch is tried again), it never commits half an entry."""


def remove_leftovers(folder: str, now: float | None = None) -> list[str]:
    """Delete the temporary files that puts into the local `folder` left when their process
    died between writing and linking, if older than LEFTOVER_AFTER_S; their names. Python's puts
    and the JVM log store's alike (_TEMPORARY). Nothing on an object store, where a put is one
    request."""
    if is_object_store(folder):
        return []
    now = time.time() if now is None else now
    removed = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if not _TEMPORARY.fullmatch(entry.name):
                continue
            with contextlib.suppress(FileNotFoundError):  # its put has just removed it
                if now - entry.stat().st_mtime > LEFTOVER_AFTER_S:
                    os.unlink(entry.path)
                    removed.append(entry.name)
    return removed


@cache
def _client(settings: S3Settings) -> Any:
    """One boto3 client per process and store settings (another endpoint or credentials,
    another client): building one takes ~50 ms."""
    return s3_client(settings)


def _code(exc: ClientError) -> str:
    error = exc.response.get("Error", {})
    return str(error.get("Code") or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode"))
