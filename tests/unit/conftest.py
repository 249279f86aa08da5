"""Unit tests need nothing but Python: asking for the broker, Spark or a topic here fails at
once, naming where such a test belongs."""

from __future__ import annotations

from typing import Any

import pytest

_ELSEWHERE = "unit tests need no broker and no Spark: move {name}'s test to tests/integration"


@pytest.fixture(scope="session")
def local_broker() -> Any:
    pytest.fail(_ELSEWHERE.format(name="local_broker"))


@pytest.fixture(scope="session")
def kafka_conf() -> Any:
    pytest.fail(_ELSEWHERE.format(name="kafka_conf"))


@pytest.fixture(scope="session")
def spark() -> Any:
    pytest.fail(_ELSEWHERE.format(name="spark"))
