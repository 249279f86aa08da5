"""Kafka admin helpers: is the cluster there, and do the flow topics exist as declared.

Topics are created explicitly with the partition count a flow declares, never auto-created by a
producer: the partition count fixes which partition a key lands in, so a topic that a broker
auto-created with its own default would silently differ from the declaration. For the same reason
an existing topic with a different count is an error, not something to "fix" by adding partitions
(which would move keys between partitions).

All helpers take a librdkafka config dict, as returned by `settings.kafka_client_config()`.
"""

from __future__ import annotations

import collections
import functools
import logging
import re
import socket
import time
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata, NewPartitions, NewTopic

from tidelake.streaming.errors import ConfigError, TidelakeError
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.polling import poll_until

# librdkafka logs every failed connection attempt to stderr (about 20 lines a second against a
# closed port). Route its logs into Python logging instead; silent unless the application
# configures logging, as usual for a library.
log = logging.getLogger(__name__)
librdkafka_logger = logging.getLogger("tidelake.kafka.librdkafka")
librdkafka_logger.addHandler(logging.NullHandler())


class OncePerMinute(logging.Filter):
    """Lets a message through once a minute: librdkafka repeats a failed handshake twice a
    second for as long as it lasts. Messages that differ only in numbers (ports, timings,
    client ids) count as the same."""

    def __init__(self, window_s: float = 60.0):
        super().__init__()
        self._window_s = window_s
        self._last: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        shape = re.sub(r"\d+", "#", record.getMessage())
        now = time.monotonic()
        if now - self._last.get(shape, -self._window_s) < self._window_s:
            return False
        self._last[shape] = now
        return True


librdkafka_logger.addFilter(OncePerMinute())

BROKER_DEFAULT_REPLICATION = -1
"""Replication factor meaning "the broker's default.replication.factor" (Kafka 2.4+, KIP-464)."""


class KafkaAdminError(TidelakeError, RuntimeError):
    """A Kafka admin operation failed; the message names the cluster and the topic."""


class KafkaUnreachableError(KafkaAdminError):
    """No metadata could be fetched from bootstrap.servers in time."""

    exit_code = 2


class KafkaAuthorizationError(KafkaAdminError):
    """The principal lacks an ACL it needs; the message names the topic and the operation."""

    exit_code = 2


class KafkaAuthenticationError(KafkaUnreachableError):
    """Kafka answered but refused the client: its credentials, its certificate, or the TLS
    handshake; the message names which setting to check."""


class TopicConfigError(KafkaAdminError):
    """A topic exists but not as declared (e.g. another partition count)."""


class TopicMissingError(KafkaAdminError):
    """A topic that must already exist does not."""

    exit_code = 2


def quiet_client_config(conf: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of conf whose librdkafka logs go to Python logging unless conf sets a logger."""
    quiet = dict(conf)
    quiet.setdefault("logger", librdkafka_logger)
    return quiet


def check_reachable(conf: Mapping[str, Any], timeout_s: float = 10.0) -> None:
    """Raise KafkaUnreachableError unless cluster metadata arrives within timeout_s."""
    _metadata(conf, timeout_s)


def topic_partition_count(
    conf: Mapping[str, Any], topic: str, timeout_s: float = 10.0
) -> int | None:
    """Partition count of topic, or None if it does not exist (never auto-creates it)."""
    return _partition_count(_metadata(conf, timeout_s), topic)


def require_topic(conf: Mapping[str, Any], topic: str, timeout_s: float = 10.0) -> int:
    """Partition count of topic; TopicMissingError saying how to create it if it does not exist."""
    partitions = topic_partition_count(conf, topic, timeout_s)
    if partitions is None:
        _require_describe(conf, topic, timeout_s)
        raise TopicMissingError(
            f"topic {topic!r} does not exist on {_bootstrap(conf)}; create it first "
            "(`tidelake topics create`)"
        )
    return partitions


def _require_describe(conf: Mapping[str, Any], topic: str, timeout_s: float) -> None:
    """Kafka leaves out of a metadata answer the topics the principal may not DESCRIBE: name the
    missing ACL instead of "does not exist"."""
    require_access(conf, topic, ("DESCRIBE",), timeout_s)


def require_access(
    conf: Mapping[str, Any], topic: str, operations: Iterable[str], timeout_s: float = 10.0
) -> None:
    """KafkaAuthorizationError naming the principal, the topic and the operations it lacks,
    before anything starts: Kafka tells a client which operations its principal may perform on
    a topic (all of them on a cluster without an authorizer). Asks for the topic by name, never
    creating it."""
    from confluent_kafka import TopicCollection

    admin = _admin_client(conf)  # kept until the answer: a destroyed client fails its futures
    future = admin.describe_topics(
        TopicCollection([topic]), include_authorized_operations=True, request_timeout=timeout_s
    )[topic]
    try:
        allowed = future.result(timeout=timeout_s + 1).authorized_operations
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_AUTHORIZATION_FAILED:
            return  # a missing topic or a slow broker: the caller's own checks report those
        allowed = []
    if allowed is None:  # the broker did not say: the read or write itself will tell
        return
    names = {operation.name for operation in allowed}
    wanted = list(operations)
    missing = [operation for operation in wanted if operation not in names]
    if missing:
        user = conf.get("sasl.username") or "this client's certificate"
        may = ", ".join(sorted(names)) or "nothing"
        raise KafkaAuthorizationError(
            f"Kafka at bootstrap.servers={_bootstrap(conf)} does not let {user!r} "
            f"{' or '.join(missing)} topic {topic!r} (it may: {may}): grant it "
            f"{' and '.join(wanted)} on it (docs/deployment.md)"
        )


def ensure_topic(
    conf: Mapping[str, Any],
    topic: str,
    partitions: int,
    *,
    replication_factor: int = BROKER_DEFAULT_REPLICATION,
    timeout_s: float = 30.0,
) -> None:
    """Create topic with exactly `partitions` partitions; a no-op if it already exists so."""
    _ensure_topics(conf, {topic: partitions}, replication_factor, timeout_s)


def delete_topic(conf: Mapping[str, Any], topic: str, timeout_s: float = 15.0) -> None:
    """Delete a topic and its data; a topic that does not exist is not an error."""
    admin = _admin_client(conf)
    for future in admin.delete_topics([topic], operation_timeout=timeout_s).values():
        try:
            future.result(timeout=timeout_s + 5)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise KafkaAdminError(f"cannot delete topic {topic!r}: {exc}") from exc


def ensure_flow_topics(
    conf: Mapping[str, Any],
    flows: Iterable[FlowSpec],
    *,
    replication_factor: int = BROKER_DEFAULT_REPLICATION,
    timeout_s: float = 30.0,
) -> None:
    """ensure_topic for each flow's topic with the flow's declared partition count."""
    wanted: dict[str, int] = {}
    declared_by: dict[str, str] = {}
    for flow in flows:
        if wanted.setdefault(flow.topic, flow.topic_partitions) != flow.topic_partitions:
            raise TopicConfigError(
                f"flows {declared_by[flow.topic]} and {flow.name} share topic {flow.topic!r} but "
                f"declare {wanted[flow.topic]} and {flow.topic_partitions} partitions"
            )
        declared_by.setdefault(flow.topic, flow.name)
    _ensure_topics(conf, wanted, replication_factor, timeout_s)


def _ensure_topics(
    conf: Mapping[str, Any], wanted: Mapping[str, int], replication_factor: int, timeout_s: float
) -> None:
    for topic, partitions in wanted.items():
        if partitions < 1:
            raise ValueError(f"topic {topic!r}: partitions must be >= 1, got {partitions}")
    if replication_factor < 1 and replication_factor != BROKER_DEFAULT_REPLICATION:
        raise ValueError(
            f"replication_factor must be >= 1 or {BROKER_DEFAULT_REPLICATION} (broker default), "
            f"got {replication_factor}"
        )
    deadline = time.monotonic() + timeout_s
    admin = _admin_client(conf)
    metadata = _metadata(conf, timeout_s)
    missing = {}
    for topic, partitions in wanted.items():
        existing = _partition_count(metadata, topic)
        if existing is None:
            missing[topic] = partitions
        else:
            _check_count(conf, topic, existing, partitions)
    if not missing:
        return

    futures = admin.create_topics(
        [NewTopic(topic, partitions, replication_factor) for topic, partitions in missing.items()],
        operation_timeout=timeout_s,
        request_timeout=timeout_s,
    )
    for topic, future in futures.items():
        try:
            future.result(timeout=max(0.0, deadline - time.monotonic()) + 1.0)
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.code() != KafkaError.TOPIC_ALREADY_EXISTS:  # a concurrent creator won
                raise KafkaAdminError(
                    f"could not create topic {topic!r} with {missing[topic]} partitions on "
                    f"{_bootstrap(conf)}: {error.str()}"
                ) from None
        except TimeoutError:
            raise KafkaAdminError(
                f"creating topic {topic!r} on {_bootstrap(conf)} did not finish within "
                f"{timeout_s:g}s"
            ) from None

    # Creation is acknowledged by the controller; wait until metadata shows it, so that callers
    # can produce at once, and check the count in case a concurrent creator chose another.
    pending = dict(missing)

    def shown() -> bool | None:
        metadata = _metadata(conf, max(0.1, deadline - time.monotonic()))
        for topic in [t for t in pending if _partition_count(metadata, t) is not None]:
            _check_count(conf, topic, _partition_count(metadata, topic), pending.pop(topic))
        return None if pending else True

    poll_until(
        shown,
        timeout_s=max(0.0, deadline - time.monotonic()),
        interval_s=0.05,
        timeout_error=lambda _: KafkaAdminError(
            f"topics {sorted(pending)} were created on {_bootstrap(conf)} but do not show in "
            f"its metadata after {timeout_s:g}s"
        ),
    )


def _check_count(conf: Mapping[str, Any], topic: str, existing: int | None, wanted: int) -> None:
    """A topic may have more partitions than declared (added while it streams: the declaration
    is the count a new topic starts with), not fewer."""
    if existing is None or existing < wanted:
        raise TopicConfigError(
            f"topic {topic!r} on {_bootstrap(conf)} has {existing} partitions, but {wanted} are "
            "declared; partitions are not added implicitly (keys would move between "
            f"partitions): add them with `tidelake topics add-partitions FLOW --to {wanted}`, "
            "or declare the actual count"
        )
    if existing > wanted:
        log.info("topic %r has %s partitions (%s declared)", topic, existing, wanted)


def add_partitions(conf: Mapping[str, Any], topic: str, total: int, timeout_s: float = 30.0) -> int:
    """Grow topic to `total` partitions and wait until metadata shows them; returns the count it
    had. Running streams, backfills and lag reports pick the new partitions up from offset 0."""
    before = require_topic(conf, topic, timeout_s)
    if total < before:
        raise TopicConfigError(
            f"topic {topic!r} has {before} partitions; Kafka cannot remove partitions, so "
            f"{total} is not possible"
        )
    if total == before:
        return before
    admin = _admin_client(conf)
    future = admin.create_partitions(
        [NewPartitions(topic, total)], operation_timeout=timeout_s, request_timeout=timeout_s
    )[topic]
    try:
        future.result(timeout=timeout_s + 1)
    except KafkaException as exc:
        raise KafkaAdminError(
            f"could not grow topic {topic!r} to {total} partitions: {exc.args[0].str()}"
        ) from None
    poll_until(
        lambda: True if topic_partition_count(conf, topic, timeout_s) == total else None,
        timeout_s=timeout_s,
        interval_s=0.05,
        timeout_error=lambda _: KafkaAdminError(
            f"topic {topic!r} does not show {total} partitions yet"
        ),
    )
    return before


def _admin_client(conf: Mapping[str, Any]) -> AdminClient:
    """One client per client config in this process, kept: a stream's preflight asks several
    questions, and on TLS with SCRAM each new client's handshake cost ~0.3 s (2.4 s of a
    secured stream's start-up before it was shared)."""
    return _listening_admin_client(conf)[0]


def _listening_admin_client(conf: Mapping[str, Any]) -> tuple[AdminClient, _SecurityErrors]:
    if not str(conf.get("bootstrap.servers", "")).strip():
        raise ConfigError("Kafka client config has no bootstrap.servers")
    return _shared_admin_client(tuple(sorted((str(k), v) for k, v in conf.items())))


class _SecurityErrors:
    """The failed TLS handshakes and SASL logins librdkafka reports to a client's error callback.
    A refused client hears of it there within a connection attempt, while its metadata request
    only says "Broker transport failure" once its timeout has passed."""

    def __init__(self) -> None:
        self.heard: collections.deque[KafkaError] = collections.deque(maxlen=8)

    def __call__(self, error: KafkaError) -> None:
        # a refused client certificate reaches the client as a TLS alert on a transport error
        if error.code() in _SECURITY_ERRORS or "ssl/tls alert" in error.str().lower():
            self.heard.append(error)


_SECURITY_ERRORS = {KafkaError._AUTHENTICATION, KafkaError._SSL}
_METADATA_SLICE_S = 0.5
"""How often a metadata request that has no answer yet looks at what the error callback heard."""


@functools.lru_cache(maxsize=16)
def _shared_admin_client(conf: tuple[tuple[str, Any], ...]) -> tuple[AdminClient, _SecurityErrors]:
    listener = _SecurityErrors()
    settings: dict[str, Any] = {**quiet_client_config(dict(conf)), "error_cb": listener}
    try:
        return AdminClient(settings), listener
    except KafkaException as exc:
        raise ConfigError(f"invalid Kafka client setting: {exc.args[0].str()}") from None


def _metadata(conf: Mapping[str, Any], timeout_s: float) -> ClusterMetadata:
    """All topics' metadata from the shared client. A refused login or TLS handshake fails at
    once, naming what to check; no answer within timeout_s is KafkaUnreachableError."""
    admin, listener = _listening_admin_client(conf)
    bootstrap = _bootstrap(conf)
    if _all_refuse_connections(bootstrap, timeout_s):
        raise KafkaUnreachableError(
            f"Kafka is unreachable at bootstrap.servers={bootstrap}: connection refused"
        )
    listener.heard.clear()
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            # All topics on purpose: naming one topic auto-creates it on a cluster with Kafka's
            # default auto.create.topics.enable=true.
            return admin.list_topics(
                timeout=max(0.05, min(_METADATA_SLICE_S, deadline - time.monotonic()))
            )
        except KafkaException as exc:
            failure: KafkaError = exc.args[0]
        admin.poll(0)  # serves the error callback
        if listener.heard or time.monotonic() >= deadline:
            break
    refused = _security_refusal(conf, bootstrap, listener.heard[-1]) if listener.heard else None
    if refused is not None:
        raise refused
    raise KafkaUnreachableError(
        f"Kafka is unreachable at bootstrap.servers={bootstrap}: no metadata within "
        f"{timeout_s:g}s ({failure.str()}){_protocol_hint(conf)}"
    )


def _security_refusal(
    conf: Mapping[str, Any], bootstrap: str, error: KafkaError
) -> KafkaAuthenticationError | None:
    """Why Kafka refused the client, from what its error callback heard; None where that says
    only that the listener speaks no SASL (the caller names the protocol the client spoke)."""
    reason = re.sub(r"^\S+://\S+/\S+: ", "", error.str())
    offered = re.search(r"supported mechanisms: ([^(]*)", reason)
    if offered is not None and not offered[1].strip():
        return None
    if error.code() == KafkaError._AUTHENTICATION:
        user = conf.get("sasl.username", "")
        mechanism = str(conf.get("sasl.mechanism", "GSSAPI")).upper()
        check = (
            "KAFKA_SASL_MECHANISM"
            if "Unsupported SASL mechanism" in reason
            else "KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD"
        )
        return KafkaAuthenticationError(
            f"Kafka at bootstrap.servers={bootstrap} refused user {user!r} ({mechanism}): "
            f"{reason}; check {check}"
        )
    if "certificate verify failed" in reason:
        hint = "check that KAFKA_SSL_CA_LOCATION holds the CA that signed the broker's certificate"
    else:
        hint = (
            "the broker may have refused the client's certificate: check "
            "KAFKA_SSL_CERTIFICATE_LOCATION and KAFKA_SSL_KEY_LOCATION"
        )
    return KafkaAuthenticationError(
        f"the TLS handshake with Kafka at bootstrap.servers={bootstrap} failed: {reason}; {hint}"
    )


def _protocol_hint(conf: Mapping[str, Any]) -> str:
    """A listener that speaks another protocol drops the connection: librdkafka then says only
    "Broker transport failure", so name the protocol the client tried."""
    protocol = str(conf.get("security.protocol", "plaintext")).upper()
    if protocol == "PLAINTEXT":
        return ""
    return (
        f"; the client speaks KAFKA_SECURITY_PROTOCOL={protocol}: check that the broker's "
        "listener at that address expects it"
    )


def _partition_count(metadata: ClusterMetadata, topic: str) -> int | None:
    found = metadata.topics.get(topic)
    if found is None:
        return None
    if found.error is not None and found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return None
    return len(found.partitions)


def _bootstrap(conf: Mapping[str, Any]) -> str:
    return str(conf.get("bootstrap.servers", ""))


def _all_refuse_connections(bootstrap: str, timeout_s: float) -> bool:
    """True only if every bootstrap address actively refuses TCP: fail fast, not after timeout_s.

    Anything less certain (unparsable address, DNS trouble, a slow network) returns False and
    is left to librdkafka's own metadata request and timeout.
    """
    addresses = []
    for entry in bootstrap.split(","):
        host_port = entry.strip().rsplit("://", 1)[-1]
        host, _, port = host_port.rpartition(":")
        if not host or not port.isdigit():
            return False
        addresses.append((host.strip("[]"), int(port)))
    if not addresses:
        return False
    for address in addresses:
        try:
            with socket.create_connection(address, timeout=min(1.0, timeout_s)):
                return False
        except ConnectionRefusedError:
            continue
        except OSError:
            return False
    return True
