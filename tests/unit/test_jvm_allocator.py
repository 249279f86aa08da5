"""TIDELAKE_JVM_MALLOC: the variables a driver JVM is started with (spark/session.py). Whether
the JVM then runs on jemalloc is read from a running one in tests/integration/test_driver_jvm.py."""

from __future__ import annotations

import pytest

from tidelake.streaming.errors import ConfigError
from tidelake.streaming.spark import session
from tidelake.streaming.spark.session import jvm_allocator_env


def test_system_keeps_glibcs_allocator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDELAKE_JVM_MALLOC", "system")
    assert jvm_allocator_env() == {}


def test_a_wrong_value_fails_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDELAKE_JVM_MALLOC", "tcmalloc")
    with pytest.raises(ConfigError, match="TIDELAKE_JVM_MALLOC"):
        jvm_allocator_env()


def test_jemalloc_asked_for_and_missing_fails_saying_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(session, "installed_jemalloc", lambda: None)
    with pytest.raises(ConfigError, match=r"^TIDELAKE_JVM_MALLOC=jemalloc: .*libjemalloc2"):
        jvm_allocator_env("jemalloc")
    assert jvm_allocator_env("auto") == {}  # a warning, and glibc's allocator


def test_auto_preloads_jemalloc_before_what_is_preloaded_already(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if session.installed_jemalloc() is None:
        pytest.skip("libjemalloc2 is not installed")
    monkeypatch.setenv("LD_PRELOAD", "libother.so")
    assert jvm_allocator_env("auto") == {"LD_PRELOAD": "libjemalloc.so.2 libother.so"}
