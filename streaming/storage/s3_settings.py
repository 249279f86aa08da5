"""The AWS settings every S3 client of tidelake is given, read from the standard variables.

AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION (or AWS_DEFAULT_REGION),
AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL (an S3-compatible store: MinIO, R2, SeaweedFS) and
AWS_PROFILE (a profile of ~/.aws/config and ~/.aws/credentials). Read here and nowhere else, as
they are when asked (parsed once per set of values: a stream asks on every S3 commit), and never
logged: the secret and the token are SecretStr.

Spark's s3a is not handed the keys: it runs the AWS SDK's default credential chain, which reads
the same variables (or the profile, or an instance role) in the JVM, so no secret ever sits in a
Spark setting, an event log or a child's command line.
"""

from __future__ import annotations

import os
from functools import cache, lru_cache
from typing import Any
from urllib.parse import urlparse

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, SettingsConfigDict

from tidelake.streaming.errors import ConfigError

DEFAULT_REGION = "us-east-1"

S3A_FILESYSTEMS: dict[str, str] = {
    "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.s3.impl": "org.apache.hadoop.fs.s3a.S3A",
}
"""s3:// (the lake's and the checkpoints' URIs on S3, as delta-rs and DuckDB read them) is
Hadoop's s3a (hadoop-aws from the jar cache): FileSystem, and FileContext for a checkpoint's logs.
Part of hadoop_conf(), whose Spark settings the ingest service takes without "spark.hadoop."."""


class S3Settings(BaseSettings):
    """The standard AWS settings, as far as an S3 client needs them."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True, frozen=True)

    access_key_id: str | None = Field(default=None, validation_alias="AWS_ACCESS_KEY_ID")
    secret_access_key: SecretStr | None = Field(
        default=None, validation_alias="AWS_SECRET_ACCESS_KEY"
    )
    session_token: SecretStr | None = Field(default=None, validation_alias="AWS_SESSION_TOKEN")
    region: str | None = Field(
        default=None, validation_alias=AliasChoices("AWS_REGION", "AWS_DEFAULT_REGION")
    )
    endpoint_url: str | None = Field(
        default=None, validation_alias=AliasChoices("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
    )
    profile: str | None = Field(default=None, validation_alias="AWS_PROFILE")

    @field_validator("*", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("endpoint_url")
    @classmethod
    def _an_http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parsed = urlparse(value)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"expected http(s)://host[:port], got {value!r}")
        return value.rstrip("/")

    @property
    def endpoint_is_plain_http(self) -> bool:
        return self.endpoint_url is not None and self.endpoint_url.startswith("http://")

    def where(self) -> str:
        """The store, as an error message names it (no secret)."""
        return f"AWS_ENDPOINT_URL={self.endpoint_url}" if self.endpoint_url else "AWS S3"

    def delta_storage_options(self) -> dict[str, str]:
        """storage_options for delta-rs (object_store's names). Commits are conditional PUTs
        (If-None-Match: *) on every store since delta-rs 1.0: no lock service is configured."""
        options = {"AWS_REGION": self.region or DEFAULT_REGION}
        if self.endpoint_url:
            options["AWS_ENDPOINT_URL"] = self.endpoint_url
            options["AWS_ALLOW_HTTP"] = str(self.endpoint_is_plain_http).lower()
        if self.access_key_id and self.secret_access_key:
            options["AWS_ACCESS_KEY_ID"] = self.access_key_id
            options["AWS_SECRET_ACCESS_KEY"] = self.secret_access_key.get_secret_value()
            if self.session_token:
                options["AWS_SESSION_TOKEN"] = self.session_token.get_secret_value()
        elif self.profile:
            options["AWS_PROFILE"] = self.profile
        return options

    def arrow_filesystem_options(self) -> dict[str, Any]:
        """Keyword arguments of pyarrow.fs.S3FileSystem."""
        options: dict[str, Any] = {"region": self.region or DEFAULT_REGION}
        if self.endpoint_url:
            parsed = urlparse(self.endpoint_url)
            options["endpoint_override"] = parsed.netloc
            options["scheme"] = parsed.scheme
        if self.access_key_id and self.secret_access_key:
            options["access_key"] = self.access_key_id
            options["secret_key"] = self.secret_access_key.get_secret_value()
            if self.session_token:
                options["session_token"] = self.session_token.get_secret_value()
        return options

    def boto3_client_options(self) -> dict[str, Any]:
        """Keyword arguments of a boto3 S3 client (it reads a profile by itself)."""
        options: dict[str, Any] = {"region_name": self.region or DEFAULT_REGION}
        if self.endpoint_url:
            options["endpoint_url"] = self.endpoint_url
        if self.access_key_id and self.secret_access_key:
            options["aws_access_key_id"] = self.access_key_id
            options["aws_secret_access_key"] = self.secret_access_key.get_secret_value()
            if self.session_token:
                options["aws_session_token"] = self.session_token.get_secret_value()
        return options

    def hadoop_conf(self) -> dict[str, str]:
        """Spark settings for s3a: s3:// mapped to it, endpoint and region, credentials from the
        SDK's chain (no secret)."""
        conf = {
            **S3A_FILESYSTEMS,
            "spark.hadoop.fs.s3a.endpoint.region": self.region or DEFAULT_REGION,
            "spark.hadoop.fs.s3a.aws.credentials.provider": (
                "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider"
            ),
        }
        if self.endpoint_url:
            conf["spark.hadoop.fs.s3a.endpoint"] = self.endpoint_url
            # S3-compatible stores answer at http(s)://host/bucket, not at bucket.host
            conf["spark.hadoop.fs.s3a.path.style.access"] = "true"
            conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(
                not self.endpoint_is_plain_http
            ).lower()
        return conf


def s3_client(settings: S3Settings, *, timeout_s: float = 10) -> Any:
    """A boto3 S3 client of these settings: path-style on an S3-compatible endpoint, few
    retries, so an unreachable store is reported within seconds."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        config=Config(
            connect_timeout=5,
            read_timeout=timeout_s,
            retries={"max_attempts": 2, "mode": "standard"},
            s3={"addressing_style": "path"} if settings.endpoint_url else {},
        ),
        **settings.boto3_client_options(),
    )


def s3_settings() -> S3Settings:
    """S3Settings from the environment as it is now; errors name the variable."""
    names = _variables()
    return _parsed(
        tuple(sorted((k.upper(), v) for k, v in os.environ.items() if k.upper() in names))
    )


@cache
def _variables() -> frozenset[str]:
    """Every variable S3Settings reads (pydantic-settings matches names case-insensitively)."""
    return frozenset(
        name.upper() for info in S3Settings.model_fields.values() for name in _aliases(info)
    )


@lru_cache(maxsize=16)
def _parsed(_values: tuple[tuple[str, str], ...]) -> S3Settings:
    """Parsing takes ~0.5 ms; the values are the key, so a changed variable is read again."""
    try:
        return S3Settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"{_variable(err['loc'][0])}: {err['msg'].removeprefix('Value error, ')}"
            for err in exc.errors()
        )
        raise ConfigError(f"invalid AWS settings: {problems}") from None


def _variable(loc: object) -> str:
    """The variable(s) an error is about (pydantic names an alias, or the field)."""
    for name, info in S3Settings.model_fields.items():
        choices = _aliases(info)
        if loc == name or loc in choices:
            return " or ".join(choices)
    return str(loc)


def _aliases(info: FieldInfo) -> list[str]:
    """The variables of a field, in the order pydantic tries them."""
    alias = info.validation_alias
    return [str(c) for c in (alias.choices if isinstance(alias, AliasChoices) else [alias])]
