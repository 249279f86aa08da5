"""A secured local Kafka's security: its CA and certificates, SCRAM users, listener settings and
ACLs. A secured broker (`tidelake dev --secured-kafka`, the tests) takes SASL_SSL with
SCRAM-SHA-512 from clients, mutual TLS on its SSL listener and between its own broker and
controller, and Kafka's StandardAuthorizer: only the admin and the brokers are super users."""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidelake.platform.local.ports import LOOPBACK
from tidelake.streaming.errors import TidelakeError
from tidelake.streaming.kafka.acls import ROLES, Grant
from tidelake.streaming.polling import poll_until

SCRAM_MECHANISM = "SCRAM-SHA-512"
ADMIN_USER = "admin"
ROLE_USERS = ROLES
"""The SCRAM users a secured broker creates besides its admin: one per role (issue 31)."""
BROKER_PRINCIPAL = LOOPBACK
"""The CN of the broker's own certificate, its principal between broker and controller."""
_USERS_FILE = "users.json"
"""In a kept secured data folder's tls/ (0600): the SCRAM passwords it was formatted with."""


class KafkaSecurityError(TidelakeError, RuntimeError):
    """A secured local broker's users or ACLs could not be set up."""


@dataclass(frozen=True)
class BrokerCredentials:
    """What a secured local broker's clients need: its CA, the SCRAM users' passwords, and a
    client certificate the CA signed."""

    ca: Path
    broker_keystore: Path
    client_cert: Path
    client_key: Path
    users: dict[str, str]


def make_credentials(folder: Path, users: dict[str, str] | None = None) -> BrokerCredentials:
    """A CA and certificates made for this start, and a password per user (0600 files): new
    ones, or `users` (a kept data folder's)."""
    from tidelake.platform.local.certificates import make_certificates

    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    made = make_certificates(folder)
    keystore = folder / "broker.pem"
    keystore.touch(mode=0o600)
    keystore.write_bytes(made.server_key.read_bytes() + made.server_cert.read_bytes())
    client_cert, client_key = folder / "client.pem", folder / "client.key"
    client_cert.write_bytes(made.client_cert)
    client_key.touch(mode=0o600)
    client_key.write_bytes(made.client_key)
    users = users or {name: secrets.token_urlsafe(18) for name in (ADMIN_USER, *ROLE_USERS)}
    return BrokerCredentials(made.client_ca, keystore, client_cert, client_key, users)


def kept_users(folder: Path) -> dict[str, str] | None:
    """The SCRAM passwords a kept data folder was formatted with (its metadata holds their
    secrets), from the 0600 file record_users wrote; None for a folder not formatted yet."""
    if not (folder / "data" / "meta.properties").exists():
        return None
    users_file = folder / "tls" / _USERS_FILE
    try:
        users: dict[str, str] = json.loads(users_file.read_text())
    except (OSError, ValueError):
        raise KafkaSecurityError(
            f"{users_file} (the passwords of the users {folder} was formatted with) is "
            f"missing or unreadable; delete {folder} to start afresh"
        ) from None
    if set(users) != {ADMIN_USER, *ROLE_USERS}:
        raise KafkaSecurityError(
            f"{folder} was formatted with the users {sorted(users)}, not "
            f"{sorted([ADMIN_USER, *ROLE_USERS])}; delete it to start afresh"
        )
    return users


def record_users(folder: Path, users: dict[str, str]) -> None:
    """Keep the passwords a kept data folder is about to be formatted with (0600)."""
    fd = os.open(folder / "tls" / _USERS_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        json.dump(users, file)


def secured_listener_settings(
    credentials: BrokerCredentials, port: int, ssl_port: int, controller_port: int
) -> dict[str, str]:
    """server.properties of a secured node: SASL_SSL on port, SSL with client certificates on
    ssl_port and between broker and controller, the StandardAuthorizer."""
    return {
        "listeners": f"SASL_SSL://{LOOPBACK}:{port},SSL://{LOOPBACK}:{ssl_port},"
        f"CONTROLLER://{LOOPBACK}:{controller_port}",
        "advertised.listeners": f"SASL_SSL://{LOOPBACK}:{port},SSL://{LOOPBACK}:{ssl_port}",
        "inter.broker.listener.name": "SSL",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,SSL:SSL,CONTROLLER:SSL",
        "sasl.enabled.mechanisms": SCRAM_MECHANISM,
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(credentials.broker_keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(credentials.ca),
        "ssl.client.auth": "required",
        "listener.name.sasl_ssl.ssl.client.auth": "none",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]+)$/$1/,DEFAULT",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{ADMIN_USER};User:{BROKER_PRINCIPAL}",
    }


def sasl_client_config(
    bootstrap: str, credentials: BrokerCredentials | None, user: str = ADMIN_USER
) -> dict[str, str]:
    """librdkafka settings of a client of bootstrap: plaintext without credentials, else
    SASL_SSL as `user` (SCRAM-SHA-512), trusting the brokers' CA."""
    conf = {"bootstrap.servers": bootstrap}
    if credentials is None:
        return conf
    return conf | {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": SCRAM_MECHANISM,
        "sasl.username": user,
        "sasl.password": credentials.users[user],
        "ssl.ca.location": str(credentials.ca),
    }


def certificate_client_config(credentials: BrokerCredentials, ssl_port: int) -> dict[str, str]:
    """librdkafka settings of a client of the SSL listener, as the client the CA signed."""
    return {
        "bootstrap.servers": f"{LOOPBACK}:{ssl_port}",
        "security.protocol": "SSL",
        "ssl.ca.location": str(credentials.ca),
        "ssl.certificate.location": str(credentials.client_cert),
        "ssl.key.location": str(credentials.client_key),
    }


def grant_acls(admin_conf: dict[str, str], grants: dict[str, list[Grant]]) -> None:
    """Create the users' topic ACLs, and return once every broker of admin_conf's cluster
    enforces them (a cluster's nodes learn ACLs from the metadata log, each in its own time)."""
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    bindings = [
        AclBinding(
            ResourceType.TOPIC,
            grant.topic,
            ResourcePatternType.LITERAL,
            f"User:{user}",
            "*",
            AclOperation[operation],
            AclPermissionType.ALLOW,
        )
        for user, user_grants in grants.items()
        for grant in user_grants
        for operation in grant.operations
    ]
    admin = AdminClient(dict[str, Any](admin_conf))  # kept: a destroyed client fails its futures
    for future in admin.create_acls(bindings).values():
        future.result(timeout=30)
    anything: Any = None  # matches any name, principal and host (the stubs say str)
    every = AclBindingFilter(
        ResourceType.ANY,
        anything,
        ResourcePatternType.ANY,
        anything,
        anything,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    for node in admin_conf["bootstrap.servers"].split(","):
        one = AdminClient(dict[str, Any](admin_conf | {"bootstrap.servers": node}))
        _wait_for_acls(one, node, set(bindings), every)


def _wait_for_acls(admin: Any, node: str, bindings: set[Any], every: Any) -> None:
    """Until the node lists every binding (a broker applies ACLs asynchronously)."""
    poll_until(
        lambda: True if bindings <= set(admin.describe_acls(every).result(timeout=30)) else None,
        timeout_s=30,
        interval_s=0.1,
        timeout_error=lambda _: KafkaSecurityError(
            f"the broker at {node} did not take the ACLs within 30 s"
        ),
    )
