"""Write what the JVM's unit tests check the Java against: each flow's contract as the ingest
service receives it, with closing times the FlowSpec computes, so the JUnit tests hold the Java
to the Python statement of each rule instead of a copy typed into the tests.

Usage: python scripts/export_jvm_test_data.py OUT_DIR (the Makefile's jvm-test target)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.flow.contract import WORDING, service_contract

EVENT_TIMES_MS = [
    -1,
    0,
    1,
    86_399_999,
    86_400_000,
    1_795_000_000_000,
    1_795_046_399_999,
    1_795_046_400_000,
]


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    flow = CALL_EVENTS
    contract = service_contract(flow)
    contract["closes_at_ms_examples"] = [[t, flow.closes_at_ms(t)] for t in EVENT_TIMES_MS]
    (out / f"{flow.name}.contract.json").write_text(json.dumps(contract, indent=1))
    (out / "wording.json").write_text(json.dumps(WORDING, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
