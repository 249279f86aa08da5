"""Where a setting points: a local folder or `s3://bucket/prefix` (pure parsing, cheap to import).

TIDELAKE_LAKE and TIDELAKE_CHECKPOINTS are parsed here (`storage_root`), so a value such as
`gs://x` or `s3:/x` is refused naming the setting instead of becoming a local folder called
`gs:`. Every command imports this with its settings; the file operations (location.py) and the
S3 clients are imported only by what uses them.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from tidelake.streaming.errors import ConfigError

OBJECT_STORE_SCHEMES = ("s3", "s3a")


def is_object_store(uri: str) -> bool:
    return urlparse(str(uri)).scheme in OBJECT_STORE_SCHEMES


def storage_root(value: str | Path, variable: str) -> str:
    """The normalized root a setting names: an absolute local path, or s3://bucket[/prefix]
    (s3a:// is the same place). Raises ConfigError naming the variable otherwise."""
    text = str(value).strip()
    parsed = urlparse(text)
    if parsed.scheme in OBJECT_STORE_SCHEMES:
        if not parsed.netloc or not text.startswith(f"{parsed.scheme}://"):
            raise ConfigError(f"{variable}: expected s3://bucket/prefix, got {text!r}")
        prefix = parsed.path.strip("/")
        return f"s3://{parsed.netloc}" + (f"/{prefix}" if prefix else "")
    if parsed.scheme == "file":
        return str(Path(parsed.path).resolve())
    if "://" in text or (parsed.scheme and len(parsed.scheme) > 1 and ":" in text[:8]):
        raise ConfigError(
            f"{variable}: {text!r} is neither a local folder nor s3://bucket/prefix; object "
            "stores other than S3 and S3-compatible ones are not supported (docs/deployment.md)"
        )
    return str(Path(text).resolve())


def join(root: str | Path, *parts: str) -> str:
    return "/".join([str(root).rstrip("/"), *parts])
