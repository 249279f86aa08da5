"""A lake on a store that does not honour conditional PUTs is refused at start, in one line
naming the setting, before anything is written. The store is the session's S3 server behind a
proxy that answers every refused conditional PUT (412) with success, as a store that ignores
`If-None-Match` would: requests reach the server unchanged (their signatures hold)."""

from __future__ import annotations

import http.client
import http.server
import os
import socketserver
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import pytest
from stream_batches import commit_batch, commit_elsewhere

from tidelake.platform.local.s3_server import LocalS3Server
from tidelake.streaming.delta.tables import open_table
from tidelake.streaming.errors import ConfigError
from tidelake.streaming.settings import kafka_client_env
from tidelake.streaming.storage.conditional_put import require_conditional_put


class _IgnoringProxy(http.server.BaseHTTPRequestHandler):
    upstream: tuple[str, int] = ("127.0.0.1", 0)
    protocol_version = "HTTP/1.1"

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        connection = http.client.HTTPConnection(*self.upstream, timeout=30)
        connection.request(self.command, self.path, body=body, headers=dict(self.headers))
        answer = connection.getresponse()
        data = answer.read()
        status = answer.status
        if status == 412 and self.command == "PUT":  # "stored" (it was not)
            status, data = 200, b""
        self.send_response(status)
        for name, value in answer.getheaders():
            if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        connection.close()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _ProxyServer(socketserver.ThreadingTCPServer):
    # Clients keep connections alive (the boto3 client is cached per settings), so a handler
    # thread waits for the next request until the client goes: closing must not join them.
    daemon_threads = True
    block_on_close = False


@pytest.fixture
def ignoring_store(s3_server: LocalS3Server) -> Iterator[str]:
    """The endpoint URL of the proxy."""
    parsed = urlparse(s3_server.endpoint_url)
    handler = type("Proxy", (_IgnoringProxy,), {"upstream": (parsed.hostname, parsed.port)})
    with _ProxyServer(("127.0.0.1", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{server.server_address[1]}"
        server.shutdown()


def test_the_s3_server_honours_conditional_puts(s3_server: LocalS3Server) -> None:
    require_conditional_put(s3_server.uri("honest", "lake"), "TIDELAKE_LAKE")


def test_a_store_ignoring_if_none_match_is_refused_naming_the_setting(
    ignoring_store: str, monkeypatch: pytest.MonkeyPatch, s3_server: LocalS3Server
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", ignoring_store)
    lake = s3_server.uri("ignored", "lake")
    with pytest.raises(ConfigError, match=r"^TIDELAKE_LAKE=s3://.*does not honour conditional"):
        require_conditional_put(lake, "TIDELAKE_LAKE")


def test_the_stream_is_refused_at_start_and_writes_nothing(
    ignoring_store: str, s3_server: LocalS3Server, kafka_conf: dict[str, Any], tmp_path: Any
) -> None:
    lake = s3_server.uri("refused", "lake")
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": ignoring_store,
        **kafka_client_env(kafka_conf),
        "TIDELAKE_LAKE": lake,
        "TIDELAKE_CHECKPOINTS": s3_server.uri("refused", "checkpoints"),
    }
    run = subprocess.run(
        [sys.executable, "-m", "tidelake.platform.cli", "stream", "call_events", "--available-now"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 2, run.stderr[-2000:]
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("Error: TIDELAKE_LAKE=s3://"), run.stderr[-2000:]
    assert "does not honour conditional writes" in lines[-1]
    objects = s3_server.client().list_objects_v2(Bucket=s3_server.bucket, Prefix="refused/")
    assert [
        o["Key"] for o in objects.get("Contents", []) if "_tidelake_probe" not in o["Key"]
    ] == []


def test_a_batch_that_lost_its_version_on_s3_reads_the_winner_by_name(
    s3_server: LocalS3Server,
) -> None:
    """The stream's append by name (delta/log_append.py) on the S3 server: a zombie driver's
    commit of batch 2 takes the version the kept-open table would append at; batch 2 is then
    skipped and batch 3 goes after it, read back by delta-rs."""
    uri = s3_server.uri(f"append-{uuid.uuid4().hex[:8]}", "events")

    commit_batch(uri, 1)
    commit_elsewhere(uri, 2, 2)  # the zombie
    commit_batch(uri, 2)
    commit_batch(uri, 3)
    table = open_table(uri)
    assert sorted(table.to_pyarrow_table()["n"].to_pylist()) == [1, 2, 3]
    assert table.version() == 3
    assert table.transaction_version("app") == 3
