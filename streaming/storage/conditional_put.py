"""Refuse, before anything is written, an S3 store that does not honour conditional PUTs.

delta-rs commits version N of a table as `PUT _delta_log/N.json` with `If-None-Match: *`: the
store must refuse the second of two such PUTs of one key, or two processes committing at once
both "succeed" and one commit is lost. There is no lock service to fall back on. So at start the
store is asked twice for the same new key; the second answer must be 412 (or 409, a concurrent
conditional write). A store that answers 200 is refused in one line naming the setting.
"""

from __future__ import annotations

import contextlib
import uuid
from functools import cache
from urllib.parse import urlparse

from botocore.exceptions import BotoCoreError, ClientError

from tidelake.streaming.errors import ConfigError
from tidelake.streaming.storage.s3_settings import s3_client, s3_settings
from tidelake.streaming.storage.uri import is_object_store, join

PROBE_FOLDER = "_tidelake_probe"
_REFUSED = {"PreconditionFailed", "ConditionalRequestConflict", "412", "409"}


class ConditionalPutUnsupportedError(ConfigError):
    """The store answered a second conditional PUT of one key with success."""


def require_conditional_put(root: str, variable: str) -> None:
    """Raise ConfigError naming `variable` unless the store under `root` honours If-None-Match
    (checked once per process and store root); nothing for a local folder."""
    if is_object_store(root):
        settings = s3_settings()
        _probe(root, variable, settings.where(), tuple(sorted(settings.boto3_client_options())))


@cache
def _probe(root: str, variable: str, where: str, _settings_key: tuple[str, ...]) -> None:
    client = s3_client(s3_settings())
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


def _code(exc: ClientError) -> str:
    error = exc.response.get("Error", {})
    return str(error.get("Code") or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode"))
