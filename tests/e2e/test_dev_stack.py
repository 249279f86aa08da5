"""Pieces of `tidelake dev` that do not need the whole stack (which test_platform_e2e runs)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import yaml
from process_states import signal_in_mask

from tidelake.platform.dev.dagster_web import DagsterWeb, wait_for
from tidelake.platform.dev.stack import dagster_home
from tidelake.platform.local.ports import free_port, free_ports
from tidelake.platform.local.process_group import stop_group
from tidelake.streaming.settings import kafka_client_env

REPO = Path(__file__).resolve().parents[2]
DG = Path(sys.executable).with_name("dg")


def test_dagster_home_links_the_platform_instance_settings(tmp_path: Path) -> None:
    home = dagster_home({"DAGSTER_HOME": str(tmp_path / "dh")})
    config = home / "dagster.yaml"
    assert config.is_symlink()
    assert config.resolve() == (REPO / "platform" / "dev" / "dagster.yaml").resolve()
    assert dagster_home({"DAGSTER_HOME": str(home)}) == home  # idempotent


def test_dagster_home_keeps_a_users_own_settings(tmp_path: Path) -> None:
    (tmp_path / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    dagster_home({"DAGSTER_HOME": str(tmp_path)})
    assert not (tmp_path / "dagster.yaml").is_symlink()
    assert "telemetry" in (tmp_path / "dagster.yaml").read_text()


def test_dagster_home_adds_postgres_storage_while_its_url_is_set(tmp_path: Path) -> None:
    url = "postgresql+psycopg2://u:secret@db:5432/dagster"
    env = {"DAGSTER_HOME": str(tmp_path), "TIDELAKE_DAGSTER_POSTGRES_URL": url}
    config = dagster_home(env) / "dagster.yaml"
    settings = yaml.safe_load(config.read_text())
    assert settings["storage"] == {
        "postgres": {"postgres_url": {"env": "TIDELAKE_DAGSTER_POSTGRES_URL"}}
    }
    assert settings["run_retries"]["max_retries"] == 2  # the platform's settings are all there
    assert "secret" not in config.read_text()
    dagster_home({"DAGSTER_HOME": str(tmp_path)})  # unset again: back to SQLite
    assert config.is_symlink() and "storage" not in yaml.safe_load(config.read_text())


def test_stop_process_group_kills_what_ignores_sigint(tmp_path: Path) -> None:
    # a parent that ignores SIGINT and a grandchild that does too
    script = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "subprocess.Popen([sys.executable, '-c', "
        "'import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(60)'])\n"
        "time.sleep(60)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    parent = psutil.Process(process.pid)

    def ignoring() -> list[psutil.Process] | None:
        family = [parent, *parent.children()]
        ignoring = [p for p in family if signal_in_mask(p.pid, "SigIgn", signal.SIGINT)]
        return family if len(family) == len(ignoring) == 2 else None

    family = wait_for(ignoring, 30, "both processes ignoring SIGINT", 0.05)
    started = time.monotonic()
    stop_group(process, grace_s=1.0, stop_signal=signal.SIGINT)
    assert time.monotonic() - started < 10
    _, alive = psutil.wait_procs(family, timeout=10)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]


def test_ctrl_c_while_seeding_history_stops_cleanly(
    kafka_conf: dict[str, Any], call_events_topic: str, tmp_path: Path
) -> None:
    """Seeding (a day of history at 200 events/s: 17M events) is interrupted: one line per
    stopped component, no traceback, no `Error:`, exit 0, nothing left running."""
    env = {
        **os.environ,
        **kafka_client_env(kafka_conf),
        "DAGSTER_HOME": str(tmp_path / "dagster_home"),
        "TIDELAKE_HOME": str(tmp_path / "home"),
        "TIDELAKE_LAKE": str(tmp_path / "lake"),
        "TIDELAKE_CHECKPOINTS": str(tmp_path / "checkpoints"),
    }
    port, ingest_port = free_ports(2)
    command = [sys.executable, "-m", "tidelake.platform.cli", "dev", "--rate", "200"]
    command += ["--history-days", "1", "--port", str(port), "--ingest-port", str(ingest_port)]
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    assert process.stderr is not None
    lines: list[str] = []
    for line in process.stderr:
        lines.append(line.rstrip())
        if "seeding" in line:
            break

    def seeding() -> list[psutil.Process] | None:
        family = psutil.Process(process.pid).children(recursive=True)
        return family if any("produce" in " ".join(p.cmdline()) for p in family) else None

    family = wait_for(seeding, 60, f"the seeding producer: {lines}", 0.1)
    process.send_signal(signal.SIGINT)
    _, rest = process.communicate(timeout=60)
    lines += rest.splitlines()
    assert process.returncode == 0, lines
    assert not [line for line in lines if "Traceback" in line or line.startswith("Error")], lines
    said = [line for line in lines if line.startswith("tidelake dev: st")]
    assert said == [
        "tidelake dev: stopping (SIGINT)",
        "tidelake dev: stopped seeding call-events",
        "tidelake dev: stopped the ingest edge of call_events",
    ], lines
    _, alive = psutil.wait_procs(family, timeout=30)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]


def test_dg_check_defs_loads_the_definitions() -> None:
    """Dagster's project command finds the same code location as workspace.yaml ([tool.dg])."""
    done = subprocess.run(
        [str(DG), "check", "defs"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "All definitions loaded successfully." in output


def test_dagster_dev_with_the_workspace_serves_the_code_location_and_stops_on_ctrl_c(
    closed_port: int, tmp_path: Path
) -> None:
    """The kept entry point, `dagster dev -w workspace.yaml`, loads the same definitions as
    `dg dev` with their sensors on, and Ctrl-C ends it with nothing left running. No broker
    answers, so stream runs fail before Spark. `dg dev` is what `tidelake dev` runs, and
    test_platform_e2e starts and stops it with runs in flight."""
    command = [sys.executable, "-m", "dagster", "dev", "-w", "workspace.yaml"]
    port = free_port()
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{closed_port}",
        "DAGSTER_HOME": str(dagster_home({"DAGSTER_HOME": str(tmp_path / "dagster_home")})),
        "TIDELAKE_HOME": str(tmp_path / "home"),
        "TIDELAKE_LAKE": str(tmp_path / "lake"),
        "TIDELAKE_CHECKPOINTS": str(tmp_path / "checkpoints"),
    }
    log = tmp_path / "dg-dev.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*command, "--host", "127.0.0.1", "--port", str(port)],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        web = DagsterWeb(f"http://127.0.0.1:{port}")
        keys = wait_for(lambda: web.asset_keys() or None, 180, "workspace.yaml's code location")
        assert {"lake/call_events", "models/call_anomaly_model"} <= set(keys)
        assert web.sensor_states()["call_events_stream_supervisor"] == "RUNNING"
        family = psutil.Process(process.pid).children(recursive=True)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=120) == 0, log.read_text()[-3000:]
        # dev returns before its code server, which goes once its runs and clients are gone
        _, alive = psutil.wait_procs(family, timeout=60)
        assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    finally:
        stop_group(process, 5.0, stop_signal=signal.SIGINT)


CLI = [sys.executable, "-m", "tidelake.platform.cli"]


def _client_settings(process: subprocess.Popen[bytes], client_env: Path, log: Path) -> dict:
    """The settings `tidelake dev` leaves for another shell, once written: readable by the user
    alone, `export NAME=value` lines."""

    def written() -> str | None:
        assert process.poll() is None, log.read_text()
        text = client_env.read_text() if client_env.exists() else ""
        return text if text.endswith("\n") else None  # created, then written in one go

    text = wait_for(written, 120, str(client_env), 0.2)
    assert client_env.stat().st_mode & 0o077 == 0
    return dict(line.removeprefix("export ").split("=", 1) for line in text.splitlines() if line)


def _dev_check(port: int, env: dict[str, str], log: Path) -> subprocess.CompletedProcess[str]:
    """`tidelake dev-check` against the stack's UI, which must pass."""
    check = subprocess.run(
        [*CLI, "dev-check", "--url", f"http://127.0.0.1:{port}", "--timeout", "300"],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    said = log.read_text(errors="replace")
    assert check.returncode == 0, check.stdout + check.stderr + said[-3000:]
    return check


def test_dev_on_the_s3_server_and_the_secured_broker_comes_up_green_with_a_user_per_process(
    tmp_path: Path,
) -> None:
    """`tidelake dev --s3 --secured-kafka` (`make dev-s3` and `make dev-secured` at once; the
    plain stack is test_platform_e2e's): its own S3 server with the lake and the checkpoints on
    it, and a secured broker of its own (SASL_SSL, SCRAM-SHA-512, ACLs); the ingest service and
    producers as `ingest`, `dg dev` as `dagster`; each server's client settings in a 0600 file
    for another shell, where `tidelake dev-check` passes; no password or key is printed or left
    in a log or file, and Ctrl-C cleans up."""
    port, ingest_port = free_ports(2)
    home = tmp_path / "home"
    env = {
        **{name: value for name, value in os.environ.items() if not name.startswith("KAFKA_")},
        "DAGSTER_HOME": str(tmp_path / "dagster_home"),
        "TIDELAKE_HOME": str(home),
        "TIDELAKE_TRIGGER_INTERVAL": "1 second",
        "TIDELAKE_SUPERVISOR_INTERVAL": "5",
        "TIDELAKE_AUTOMATION_INTERVAL": "5",
    }
    command = [*CLI, "dev", "--s3", "--secured-kafka", "--rate", "50", "--history-days", "0"]
    command += ["--port", str(port), "--ingest-port", str(ingest_port)]
    log = tmp_path / "dev.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    client_env = home / "kafka-secured" / "client.env"
    try:
        s3_exported = _client_settings(process, home / "s3" / "client.env", log)  # its key: 0600
        exported = _client_settings(process, client_env, log)  # the admin's password: 0600
        assert exported["KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
        assert exported["KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"
        assert exported["KAFKA_SASL_USERNAME"] == "admin"
        check = _dev_check(port, {**env, **s3_exported, **exported}, log)
        said = log.read_text(errors="replace")
        assert "rows in s3://tidelake/lake/call_events" in check.stdout, check.stdout
        assert "S3 server (SeaweedFS) at http://127.0.0.1:" in said
        bootstrap = exported["KAFKA_BOOTSTRAP_SERVERS"]
        assert (
            f"tidelake dev: secured Kafka broker at {bootstrap} (SASL_SSL, SCRAM-SHA-512, ACLs"
            in said
        )
        assert f"`source {client_env}`" in said
        # least privilege per process: who logs in as whom
        users = {}
        for child in psutil.Process(process.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                line, child_env = " ".join(child.cmdline()), child.environ()
                if child_env.get("KAFKA_SASL_USERNAME"):
                    users[line] = (child_env["KAFKA_SASL_USERNAME"], child_env)
        roles = {
            what: {user for line, (user, _) in users.items() if what in line}
            for what in (" serve ", " produce ", f"{DG} dev")
        }
        assert roles == {" serve ": {"ingest"}, " produce ": {"ingest"}, f"{DG} dev": {"dagster"}}
        dagster_env = next(e for line, (_, e) in users.items() if f"{DG} dev" in line)
        assert dagster_env["TIDELAKE_CREATE_TOPICS"] == "false"
        passwords = json.loads((home / "kafka-secured" / "tls" / "users.json").read_text())
        assert set(passwords) == {"admin", "ingest", "stream", "detector", "dagster"}
        assert passwords["admin"] == exported["KAFKA_SASL_PASSWORD"]
        assert {e["KAFKA_SASL_PASSWORD"] for _, e in users.values()} <= set(passwords.values())
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=120)
    said = log.read_text(errors="replace")
    assert process.returncode == 0, said[-3000:]
    assert not client_env.exists()
    assert "tidelake dev: stopped the secured Kafka broker" in said
    secrets = [*passwords.values(), s3_exported["AWS_SECRET_ACCESS_KEY"]]
    for secret in secrets:
        assert secret not in said + check.stdout + check.stderr
    own = [home / "s3", home / "kafka-secured" / "tls" / "users.json"]  # the servers' own files
    for path in tmp_path.rglob("*"):  # the logs of Dagster, its runs, Spark and the broker
        if path.is_file() and not any(path == o or o in path.parents for o in own):
            content = path.read_bytes()
            assert not [p for p in secrets if p.encode() in content], path
