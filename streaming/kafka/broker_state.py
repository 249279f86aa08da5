"""Where a local broker on this machine listens: `tidelake broker` and `tidelake dev` record it in
a small state file ($TIDELAKE_HOME/broker.json), and settings.kafka_client_config reads it when
no KAFKA_BOOTSTRAP_SERVERS is set, so that every command finds the broker without setup."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tidelake.streaming.errors import ConfigError


def broker_state_file(home: Path) -> Path:
    return home / "broker.json"


def write_broker_state(state_file: Path, bootstrap_servers: str, pid: int, log: Path) -> None:
    """Atomically record where the broker listens (pid: the broker's own process)."""
    state_file.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "bootstrap_servers": bootstrap_servers,
        "pid": pid,
        "supervisor_pid": os.getpid(),
        "log": str(log),
    }
    partial = state_file.with_name(f".{state_file.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(state, indent=2) + "\n")
    os.replace(partial, state_file)


def running_broker(state_file: Path) -> str | None:
    """Bootstrap address of the broker recorded in state_file, if its process is still alive."""
    try:
        state = json.loads(state_file.read_text())
        address, pid = state["bootstrap_servers"], state["pid"]
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"broker state file {state_file} is unreadable ({exc}); delete it"
        ) from None
    if not isinstance(address, str) or not isinstance(pid, int) or not _pid_alive(pid):
        return None
    return address


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True
