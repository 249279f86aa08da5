"""The root of tidelake's own errors.

A `TidelakeError`'s message says what is wrong and how to fix it, in one line, so that it is
shown as is: the CLI prints it and exits with the class's `exit_code` (1: the operation failed;
2: a setting, a service or the data to fix first), mapped in one place for every command
(platform/cli.py's _clean_errors; tests/unit/test_exit_codes.py holds the table), and a Dagster
step fails with it as its description (assets/dagster_failures.py). Anything else is a bug and
keeps its traceback: no command turns other exceptions into one line. Each error class also keeps
the builtin base callers knew it by (ValueError for a wrong value, RuntimeError for a failed
operation).
"""

from __future__ import annotations


class TidelakeError(Exception):
    """A failure tidelake understands and can explain."""

    exit_code: int = 1
    """The CLI's exit code: 1 for a failed operation, 2 for a setting or a service to fix first."""


class SetupError(TidelakeError):
    """Something to fix before anything can run: a wrong setting, an unreachable service."""

    exit_code = 2


class StartQueryAgainError(TidelakeError, RuntimeError):
    """A stream's batch was abandoned because its query was planned for a table or schemas that
    changed; the query is started again (stream/query.py run_query) and the batch replays."""


class ConfigError(SetupError, ValueError):
    """A setting is missing or invalid; the message names it."""
