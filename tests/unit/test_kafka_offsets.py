"""Pure offset arithmetic of the Kafka source: JSON layout, rate limiting, task planning."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from tidelake.streaming.kafka.offsets import (
    from_json_offsets,
    to_json_offsets,
)


def test_to_json_offsets_matches_sparks_layout():
    offsets = {("b-topic", 1): 7, ("a-topic", 0): 42, ("b-topic", 0): 3}
    assert json.dumps(to_json_offsets(offsets)) == (
        '{"a-topic": {"0": 42}, "b-topic": {"0": 3, "1": 7}}'
    )


def test_to_json_offsets_key_order_is_deterministic_and_numeric():
    """Spark compares offsets as JSON text: insertion order must not leak into the output."""
    tps = [(t, p) for t in ("zeta", "alpha", "mid") for p in range(12)]
    texts = set()
    rng = random.Random(5)
    for _ in range(20):
        rng.shuffle(tps)
        texts.add(json.dumps(to_json_offsets({tp: tp[1] * 10 for tp in tps})))
    assert len(texts) == 1
    doc = json.loads(texts.pop())
    assert list(doc) == ["alpha", "mid", "zeta"]
    # partitions in numeric order like Spark's JsonUtils ("10" after "9", not after "1")
    assert list(doc["alpha"]) == [str(p) for p in range(12)]


def test_to_json_offsets_turns_numpy_ints_into_json_ints():
    doc = to_json_offsets({("t", 0): np.int64(5)})
    assert json.dumps(doc) == '{"t": {"0": 5}}'
    assert type(doc["t"]["0"]) is int


def test_from_json_offsets_round_trips_dicts_and_strings():
    offsets = {("t1", 0): 0, ("t1", 1): 12345678901, ("t2", 3): -1, ("t2", 0): -2}
    assert from_json_offsets(to_json_offsets(offsets)) == offsets
    assert from_json_offsets(json.dumps(to_json_offsets(offsets))) == offsets
    assert from_json_offsets('{"t": {"0": 1, "10": 2}}') == {("t", 0): 1, ("t", 10): 2}
    assert from_json_offsets({}) == {}


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"t": 5}', '{"t": {"x": 1}}'])
def test_from_json_offsets_rejects_malformed_documents(text):
    with pytest.raises((ValueError, AttributeError, TypeError)):
        from_json_offsets(text)
