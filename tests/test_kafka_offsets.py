"""Pure offset arithmetic of the Kafka source: JSON layout, rate limiting, task planning."""

from __future__ import annotations

import itertools
import json
import random

import numpy as np
import pytest

from tidelake.streaming.kafka_offsets import (
    OffsetRange,
    from_json_offsets,
    plan_ranges,
    rate_limit,
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


# ------------------------------------------------------------------------------- rate_limit


def _tps(n: int) -> list[tuple[str, int]]:
    return [("t", p) for p in range(n)]


def test_rate_limit_gives_everything_under_the_limit():
    start = {("t", 0): 10, ("t", 1): 0}
    end = {("t", 0): 20, ("t", 1): 5}
    assert rate_limit(start, end, 15) == end
    assert rate_limit(start, end, 1000) == end
    assert rate_limit(start, start, 1) == start  # nothing new


def test_rate_limit_caps_exactly_and_shares_by_backlog():
    start = {("t", 0): 100, ("t", 1): 0, ("t", 2): 50}
    end = {("t", 0): 700, ("t", 1): 300, ("t", 2): 50}  # backlog 600, 300, 0
    limited = rate_limit(start, end, 90)
    assert limited == {("t", 0): 160, ("t", 1): 30, ("t", 2): 50}


def test_rate_limit_new_partition_without_start_reads_nothing_yet():
    assert rate_limit({("t", 0): 0}, {("t", 0): 100, ("t", 1): 100}, 10) == {
        ("t", 0): 10,
        ("t", 1): 100,  # no start offset: treated as "no backlog", left at its end
    }


@pytest.mark.parametrize("seed", range(40))
def test_rate_limit_properties_on_random_backlogs(seed):
    rng = random.Random(seed)
    tps = _tps(rng.randint(1, 12))
    start = {tp: rng.randint(0, 10**9) for tp in tps}
    end = {tp: start[tp] + rng.choice([0, 1, 3, rng.randint(0, 10**6)]) for tp in tps}
    total = sum(end[tp] - start[tp] for tp in tps)
    max_rows = rng.randint(1, max(1, total * 2))
    limited = rate_limit(start, end, max_rows)

    assert set(limited) == set(end)
    taken = {tp: limited[tp] - start[tp] for tp in tps}
    assert sum(taken.values()) == min(max_rows, total)  # exactly the cap, or everything
    for tp in tps:
        assert start[tp] <= limited[tp] <= end[tp]  # never backwards, never past the end
        if total > max_rows:  # proportional: within one row of the exact share
            share = max_rows * (end[tp] - start[tp]) / total
            assert abs(taken[tp] - share) < 1


def test_rate_limit_is_deterministic():
    start = dict.fromkeys(_tps(7), 0)
    end = dict.fromkeys(_tps(7), 10)  # seven equal backlogs, 3 rows: ties broken stably
    results = {tuple(sorted(rate_limit(start, end, 3).items())) for _ in range(10)}
    assert len(results) == 1
    assert sum(o for o in rate_limit(start, end, 3).values()) == 3


def test_rate_limit_over_the_limit_keeps_a_rewound_partition_where_it_is():
    start = {("t", 0): 500, ("t", 1): 0}
    end = {("t", 0): 100, ("t", 1): 1000}  # partition 0 went backwards
    assert rate_limit(start, end, 10) == {("t", 0): 500, ("t", 1): 10}


def test_rate_limit_under_the_limit_never_moves_a_partition_backwards():
    start = {("t", 0): 500, ("t", 1): 0}
    end = {("t", 0): 100, ("t", 1): 10}
    assert rate_limit(start, end, 1000) == {("t", 0): 500, ("t", 1): 10}


# ------------------------------------------------------------------------------ plan_ranges


def _assert_tiles(tasks: list[list[OffsetRange]], start: dict, end: dict) -> None:
    """The ranges of all tasks cover [start, end) of every partition, no gap, no overlap."""
    pieces: dict[tuple[str, int], list[OffsetRange]] = {}
    for task in tasks:
        assert task, "empty task"
        for r in task:
            assert r.start < r.end, r
            pieces.setdefault((r.topic, r.partition), []).append(r)
    wanted = {tp for tp in end if end[tp] > start.get(tp, end[tp])}
    assert set(pieces) == wanted
    for tp, rs in pieces.items():
        rs.sort(key=lambda r: r.start)
        assert rs[0].start == start[tp]
        assert rs[-1].end == end[tp]
        for a, b in itertools.pairwise(rs):
            assert a.end == b.start, (a, b)


def test_plan_ranges_empty_batch_has_no_tasks():
    assert plan_ranges({}, {}, min_tasks=2, pack_below_rows=10) == []
    same = {("t", 0): 5, ("t", 1): 9}
    assert plan_ranges(same, same, min_tasks=2, pack_below_rows=10) == []


def test_plan_ranges_packs_a_small_batch_into_one_task():
    start = {("a", 0): 0, ("a", 1): 10, ("b", 0): 7, ("b", 1): 3}
    end = {("a", 0): 100, ("a", 1): 10, ("b", 0): 50, ("b", 1): 4}
    tasks = plan_ranges(start, end, min_tasks=4, pack_below_rows=1000)
    assert tasks == [
        [
            OffsetRange("a", 0, 0, 100),
            OffsetRange("b", 0, 7, 50),
            OffsetRange("b", 1, 3, 4),
        ]
    ]


def test_plan_ranges_splits_a_large_single_partition_for_both_cores():
    tasks = plan_ranges({("t", 0): 1000}, {("t", 0): 201_000}, min_tasks=2, pack_below_rows=100)
    assert tasks == [[OffsetRange("t", 0, 1000, 101_000)], [OffsetRange("t", 0, 101_000, 201_000)]]


def test_plan_ranges_one_task_per_partition_when_enough_partitions():
    start = dict.fromkeys(_tps(4), 0)
    end = dict.fromkeys(_tps(4), 50_000)
    tasks = plan_ranges(start, end, min_tasks=2, pack_below_rows=1000)
    assert tasks == [[OffsetRange("t", p, 0, 50_000)] for p in range(4)]


@pytest.mark.parametrize("seed", range(60))
def test_plan_ranges_large_batches_tile_exactly(seed):
    rng = random.Random(seed)
    tps = [(rng.choice(["a", "b"]), p) for p in range(rng.randint(1, 6))]
    start = {tp: rng.randint(0, 10**6) for tp in tps}
    end = {tp: start[tp] + rng.choice([0, 1, rng.randint(1, 10**5)]) for tp in tps}
    tasks = plan_ranges(start, end, min_tasks=rng.randint(1, 8), pack_below_rows=0)
    _assert_tiles(tasks, start, end)
    assert all(len(task) == 1 for task in tasks)  # large-batch mode: one range per task
    nonempty = sum(1 for tp in tps if end[tp] > start[tp])
    assert len(tasks) >= nonempty


@pytest.mark.parametrize("min_tasks", [2, 4])
def test_plan_ranges_large_batch_reaches_min_tasks_with_uneven_partitions(min_tasks):
    start = {("t", 0): 0, ("t", 1): 0}
    end = {("t", 0): 300_000, ("t", 1): 100_000}
    tasks = plan_ranges(start, end, min_tasks=min_tasks, pack_below_rows=1000)
    _assert_tiles(tasks, start, end)
    assert len(tasks) >= min_tasks


def test_plan_ranges_equal_partitions_reach_min_tasks():
    start = dict.fromkeys(_tps(3), 0)
    end = dict.fromkeys(_tps(3), 100_000)
    tasks = plan_ranges(start, end, min_tasks=4, pack_below_rows=1000)
    _assert_tiles(tasks, start, end)
    assert len(tasks) >= 4
