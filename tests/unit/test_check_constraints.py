"""A table's CHECK constraints as delta-spark stores them, read as the stream checks them."""

from tidelake.streaming.delta.constraints import check_constraints


def test_constraints_are_read_from_the_table_configuration_by_their_prefix() -> None:
    configuration = {
        "delta.constraints.positive_duration": "duration > 0",
        "Delta.Constraints.KnownRegion": "region IN ('us1', 'ie1')",  # set as a property
        "delta.checkpointInterval": "100",
        "delta.logRetentionDuration": "interval 1 days",
    }
    assert check_constraints(configuration) == {
        "KnownRegion": "region IN ('us1', 'ie1')",
        "positive_duration": "duration > 0",
    }
    assert check_constraints({"delta.appendOnly": "true"}) == {}
