"""The class archive is used when built and ignored when not; `make venv` builds the real one."""

from __future__ import annotations

from tidelake.streaming.spark import class_archive as spark_class_archive


def test_no_archive_means_no_jvm_options(tmp_path, monkeypatch):
    monkeypatch.setenv("TIDELAKE_CACHE", str(tmp_path))
    assert spark_class_archive.java_options() == ""


def test_a_built_archive_is_mapped_by_the_driver(tmp_path, monkeypatch):
    monkeypatch.setenv("TIDELAKE_CACHE", str(tmp_path))
    path = spark_class_archive.archive_path()
    assert path.parent == tmp_path and path.suffix == ".jsa"
    path.write_bytes(b"archive")
    assert spark_class_archive.java_options().startswith(f"-XX:SharedArchiveFile={path} ")


def test_the_archive_name_is_stable_for_one_install(tmp_path, monkeypatch):
    monkeypatch.setenv("TIDELAKE_CACHE", str(tmp_path))
    assert spark_class_archive.archive_path() == spark_class_archive.archive_path()


def test_only_the_newest_archives_are_kept(tmp_path):
    import os

    for i in range(5):
        archive = tmp_path / f"spark-classes-{i}.jsa"
        archive.write_bytes(b"x")
        os.utime(archive, (1_000 + i, 1_000 + i))
    spark_class_archive._prune(tmp_path, keep=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "spark-classes-2.jsa",
        "spark-classes-3.jsa",
        "spark-classes-4.jsa",
    ]
