"""The schema registry producers register their protobuf schemas in (Confluent's REST API).

`TIDELAKE_SCHEMA_REGISTRY_URL` names it; every other `TIDELAKE_SCHEMA_REGISTRY_<NAME>` variable is
handed to confluent_kafka's SchemaRegistryClient as `<name>` with underscores turned into dots,
as the Kafka settings are to librdkafka: `..._BASIC_AUTH_USER_INFO=user:password`,
`..._SSL_CA_LOCATION`, `..._SSL_CERTIFICATE_LOCATION`, `..._SSL_KEY_LOCATION`, `..._TIMEOUT`. A
name the client does not know fails at start naming the variable. Without a URL there is no
registry: framed records then decode with the flow's own descriptor, as bare ones do.

Only the driver talks to the registry: it reads each writer schema once (schemas/writer_schemas.py)
and hands the executors its verdicts as data.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import FileDescriptor
from google.protobuf.message import DecodeError

from tidelake.streaming.errors import ConfigError, SetupError
from tidelake.streaming.flow.spec import FlowSpec

ENV_PREFIX = "TIDELAKE_SCHEMA_REGISTRY_"
URL_VARIABLE = f"{ENV_PREFIX}URL"
SCHEMA_TYPE = "PROTOBUF"
_NOT_FOUND_CODES = (40401, 40402, 40403)
"""Confluent's error codes for an unknown subject, version and schema id."""


class SchemaRegistryUnavailableError(SetupError, RuntimeError):
    """The registry did not answer (unreachable, refused the credentials, or failed)."""


class SchemaRegistrationError(SetupError, RuntimeError):
    """The registry refused to register a flow's schema (its compatibility check failed)."""


@dataclass(frozen=True)
class WriterSchema:
    """A schema as the registry holds it, compiled: its .proto file and the names it goes by."""

    schema_id: int
    file: FileDescriptor
    versions: tuple[tuple[str, int], ...] = ()
    """(subject, version) pairs the id is registered under."""

    @property
    def registered_as(self) -> str:
        """The subject versions it is registered under: "call_events-value v2", or ""."""
        return ", ".join(f"{subject} v{version}" for subject, version in self.versions)

    @property
    def label(self) -> str:
        """How a person finds it in the registry: "schema id 7 (call_events-value v2)"."""
        named = self.registered_as
        return f"schema id {self.schema_id}" + (f" ({named})" if named else "")


def registry_client_config(env: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """SchemaRegistryClient settings from the environment, or None when no registry is set;
    whole numbers as numbers (the client's timeouts, retries and cache sizes take no strings)."""
    env = os.environ if env is None else env
    url = env.get(URL_VARIABLE, "").strip()
    if not url:
        return None
    conf: dict[str, Any] = {"url": url}
    for name, value in env.items():
        if name.startswith(ENV_PREFIX) and name != URL_VARIABLE:
            key = name[len(ENV_PREFIX) :].lower().replace("_", ".")
            conf[key] = int(value) if value.strip().isdigit() else value
    return conf


def require_registry(env: Mapping[str, str] | None = None) -> SchemaRegistry:
    """The configured registry; ConfigError naming the variable when there is none."""
    registry = SchemaRegistry.from_env(env)
    if registry is None:
        raise ConfigError(
            f"no schema registry configured: set {URL_VARIABLE} (e.g. http://localhost:8081)"
        )
    return registry


def value_subject(flow: FlowSpec) -> str:
    """The subject of the flow topic's values under Confluent's default TopicNameStrategy."""
    return f"{flow.topic}-value"


class SchemaRegistry:
    """The registry's calls tidelake makes, each failure turned into one line naming the
    registry (never its credentials)."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        self.url = _display_url(conf["url"])
        for name, value in conf.items():
            if name.endswith(".location") and not Path(str(value)).is_file():
                variable = f"{ENV_PREFIX}{name.upper().replace('.', '_')}"
                raise ConfigError(f"{variable}={value}: no such file")
        try:
            self._client = SchemaRegistryClient(dict(conf))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{_variables_in(str(exc), conf)}: {exc}") from None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SchemaRegistry | None:
        conf = registry_client_config(env)
        return None if conf is None else cls(conf)

    def writer_schema(self, schema_id: int) -> WriterSchema | None:
        """The schema registered under schema_id, compiled; None if the registry has no such
        id. Raises SchemaRegistryUnavailableError when it cannot say."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            schema = self._call(f"schema id {schema_id}", self._client.get_schema, schema_id)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404 and exc.error_code in _NOT_FOUND_CODES:
                return None
            raise self._unavailable(f"schema id {schema_id}", exc) from None
        versions = self._call(f"schema id {schema_id}", self._client.get_schema_versions, schema_id)
        return WriterSchema(
            schema_id,
            self._compile(schema, f"schema_{schema_id}.proto"),
            tuple((v.subject, v.version) for v in versions or ()),
        )

    def subject_schema_ids(self, subject: str) -> list[int]:
        """The ids of every version registered under subject ([] for an unknown subject)."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            versions = self._call(f"subject {subject}", self._client.get_versions, subject)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                return []
            raise self._unavailable(f"subject {subject}", exc) from None
        return [
            self._call(f"subject {subject}", self._client.get_version, subject, version).schema_id
            for version in versions
        ]

    def register(self, subject: str, proto_file: Path) -> tuple[int, int]:
        """Register the .proto file under subject (the registry checks compatibility with the
        subject's versions); (schema id, version). Imports other than Google's well-known types
        are not supported yet."""
        from confluent_kafka.schema_registry import Schema
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        schema = Schema(proto_file.read_text(encoding="utf-8"), SCHEMA_TYPE)
        try:
            compatible = self._call(
                f"subject {subject}", self._client.test_compatibility, subject, schema
            )
        except SchemaRegistryError as exc:
            if exc.http_status_code != 404:  # 404: no version yet, nothing to be compatible with
                raise self._unavailable(f"subject {subject}", exc) from None
            compatible = True
        if not compatible:
            raise SchemaRegistrationError(
                f"{proto_file} is not compatible with the versions of {subject} at {self.url} "
                "under the subject's compatibility rule: nothing was registered. Keep field "
                "numbers and types, add new fields under new numbers."
            )
        try:
            schema_id = self._call(
                f"subject {subject}", self._client.register_schema, subject, schema
            )
            registered = self._call(
                f"subject {subject}", self._client.lookup_schema, subject, schema
            )
        except SchemaRegistryError as exc:
            raise SchemaRegistrationError(
                f"the schema registry at {self.url} refused {proto_file} under {subject}: "
                f"{exc.error_message}"
            ) from None
        return schema_id, registered.version

    def _call(self, what: str, call: Any, *args: Any) -> Any:
        # the client's HTTP library: httpx2 where installed, else httpx
        from confluent_kafka.schema_registry.common._httpx_compat import httpx

        try:
            return call(*args)
        except httpx.HTTPError as exc:
            raise SchemaRegistryUnavailableError(
                f"the schema registry at {self.url} did not answer for {what}: {exc}"
            ) from None

    def _unavailable(self, what: str, exc: Any) -> SchemaRegistryUnavailableError:
        hint = {
            401: f" (check {ENV_PREFIX}BASIC_AUTH_USER_INFO)",
            403: " (the registry's user may not read it)",
        }.get(exc.http_status_code, "")
        return SchemaRegistryUnavailableError(
            f"the schema registry at {self.url} failed for {what}: HTTP "
            f"{exc.http_status_code}: {exc.error_message}{hint}"
        )

    def _compile(self, schema: Any, name: str) -> FileDescriptor:
        """The registered schema as a FileDescriptor: registries hold .proto text (Java, Go
        serializers) or a base64 FileDescriptorProto (confluent_kafka's Python serializer).
        Raises ValueError for a schema that does not compile."""
        sources = {name: schema.schema_str}
        for ref in schema.references or ():
            registered = self._call(
                f"reference {ref.name}", self._client.get_version, ref.subject, ref.version
            )
            sources[ref.name] = registered.schema.schema_str
        serialized = {n: _serialized_descriptor(text) for n, text in sources.items()}
        if all(proto is not None for proto in serialized.values()):
            files = [proto for proto in serialized.values() if proto is not None]
            main = files[0].name
        else:
            files, main = list(_protoc(sources, name).file), name
        pool = descriptor_pool.DescriptorPool()
        for file in _in_import_order(files):
            pool.Add(file)
        return pool.FindFileByName(main)


def _serialized_descriptor(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    """text as a base64 FileDescriptorProto, or None if it is .proto source."""
    try:
        proto = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text, validate=True))
    except (ValueError, DecodeError):  # not base64 (binascii.Error), or not a descriptor
        return None
    return proto if proto.message_type or proto.name else None


def _in_import_order(
    files: list[descriptor_pb2.FileDescriptorProto],
) -> list[descriptor_pb2.FileDescriptorProto]:
    """files with Google's well-known imports added (registries leave them out of references),
    each after the files it imports, as a descriptor pool takes them."""
    by_name = {f.name: f for f in files}
    for file in files:
        for dependency in file.dependency:
            if dependency not in by_name and dependency.startswith("google/protobuf/"):
                proto = descriptor_pb2.FileDescriptorProto()
                descriptor_pool.Default().FindFileByName(dependency).CopyToProto(proto)
                by_name[dependency] = proto
    ordered: list[descriptor_pb2.FileDescriptorProto] = []
    placed: set[str] = set()
    while len(ordered) < len(by_name):
        ready = [
            f
            for n, f in by_name.items()
            if n not in placed and all(d in placed or d not in by_name for d in f.dependency)
        ]
        if not ready:
            raise ValueError(f"imports in a cycle among {sorted(set(by_name) - placed)}")
        ordered.extend(ready)
        placed.update(f.name for f in ready)
    return ordered


def _protoc(sources: Mapping[str, str], main: str) -> descriptor_pb2.FileDescriptorSet:
    """.proto sources compiled by protoc (grpcio-tools'), imports included."""
    import grpc_tools

    include = Path(grpc_tools.__file__).with_name("_proto")
    with tempfile.TemporaryDirectory(prefix="tidelake-schema-") as folder:
        for name, text in sources.items():
            path = Path(folder, name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        out = Path(folder, "set.binpb")
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                f"-I{folder}",
                f"-I{include}",
                f"--descriptor_set_out={out}",
                "--include_imports",
                main,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise ValueError(f"not a valid .proto schema: {done.stderr.strip()}")
        return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


def _display_url(url: str) -> str:
    """The registry's URL without credentials written into it."""
    parts = urlsplit(url.split(",")[0].strip())
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _variables_in(message: str, conf: Mapping[str, Any]) -> str:
    """The TIDELAKE_SCHEMA_REGISTRY_* variables behind the client properties a message names."""
    if "Unrecognized properties:" in message:
        names = message.split("Unrecognized properties:", 1)[1].split(",")
        unknown = ", ".join(_variable(n.strip()) for n in names)
        return f"{unknown}: not a schema registry setting"
    named = [_variable(key) for key in conf if key in message]
    return ", ".join(named) or f"{ENV_PREFIX}*"


def _variable(key: str) -> str:
    return URL_VARIABLE if key == "url" else f"{ENV_PREFIX}{key.upper().replace('.', '_')}"
