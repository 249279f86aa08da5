"""Location on a local folder: the file operations the engine does itself on the lake and the
checkpoints (the same calls on S3 are exercised by the [s3] integration tests)."""

from __future__ import annotations

from pathlib import Path

from tidelake.streaming.storage.location import Location, delta_storage_options


def test_a_checkpoint_folder_is_read_listed_renamed_and_deleted(tmp_path: Path) -> None:
    root = Location(tmp_path / "checkpoints" / "call_events")
    (root / "offsets" / "0").write_text("v1")
    (root / "commits" / "0").write_text("v1")
    assert root.is_dir() and sorted(root.names()) == ["commits", "offsets"]
    assert (root / "offsets" / "0").read_text() == "v1"
    assert not list((tmp_path / "checkpoints" / "call_events" / "offsets").glob("*.tmp"))
    assert (root / "commits" / "0").modified_at().tzinfo is not None

    retired = root.with_name("call_events.retired")
    root.rename(retired)
    assert not root.exists() and retired.is_dir()
    assert retired.parent.uri == str(tmp_path / "checkpoints")

    retired.delete_tree()
    assert not retired.exists()
    retired.delete_tree()  # nothing there: not an error
    assert Location(tmp_path / "nothing").names() == []


def test_a_local_table_needs_no_storage_options(tmp_path: Path) -> None:
    assert delta_storage_options(str(tmp_path / "lake" / "t")) is None
