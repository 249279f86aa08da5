"""TIDELAKE_LAKE / TIDELAKE_CHECKPOINTS as a local folder or s3://, and the AWS settings each
S3 client gets (pure parsing; the store itself is exercised in tests/integration)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelake.streaming.errors import ConfigError
from tidelake.streaming.settings import load_engine_settings
from tidelake.streaming.storage.s3_settings import S3Settings, s3_settings
from tidelake.streaming.storage.uri import is_object_store, storage_root

AWS = {
    "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI-very-secret",
    "AWS_SESSION_TOKEN": "token-very-secret",
    "AWS_REGION": "eu-west-1",
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9000/",
}


@pytest.mark.parametrize(
    ("value", "root"),
    [
        ("s3://bucket/lake/", "s3://bucket/lake"),
        ("s3a://bucket/a/b", "s3://bucket/a/b"),
        ("s3://bucket", "s3://bucket"),
        ("file:///srv/lake", "/srv/lake"),
    ],
)
def test_object_store_roots_are_normalized(value: str, root: str) -> None:
    assert storage_root(value, "TIDELAKE_LAKE") == root


def test_a_local_folder_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert storage_root("lake", "TIDELAKE_LAKE") == str(tmp_path / "lake")
    assert not is_object_store(str(tmp_path / "lake"))


@pytest.mark.parametrize(
    "value", ["gs://bucket/lake", "abfss://c@a.dfs.core.windows.net/x", "s3:/x"]
)
def test_other_stores_and_typos_are_refused_naming_the_setting(value: str) -> None:
    with pytest.raises(ConfigError, match="TIDELAKE_CHECKPOINTS"):
        storage_root(value, "TIDELAKE_CHECKPOINTS")


def test_engine_settings_take_s3_roots_and_join_tables_under_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TIDELAKE_LAKE", "s3://bucket/lake/")
    monkeypatch.setenv("TIDELAKE_CHECKPOINTS", "s3a://bucket/cp")
    settings = load_engine_settings()
    assert settings.table_uri("call_events") == "s3://bucket/lake/call_events"
    assert settings.checkpoint_uri("call_events") == "s3://bucket/cp/call_events"


def test_a_wrong_lake_fails_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDELAKE_LAKE", "gs://bucket/lake")
    with pytest.raises(ConfigError, match="TIDELAKE_LAKE"):
        load_engine_settings()


def test_each_client_gets_the_endpoint_and_spark_gets_no_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in AWS.items():
        monkeypatch.setenv(name, value)
    s3 = s3_settings()
    delta = s3.delta_storage_options()
    assert delta["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9000"
    assert delta["AWS_ALLOW_HTTP"] == "true"
    assert delta["AWS_SECRET_ACCESS_KEY"] == AWS["AWS_SECRET_ACCESS_KEY"]
    arrow = s3.arrow_filesystem_options()
    assert (arrow["endpoint_override"], arrow["scheme"]) == ("127.0.0.1:9000", "http")
    hadoop = s3.hadoop_conf()
    assert hadoop["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert hadoop["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert hadoop["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert hadoop["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    text = repr(s3) + str(hadoop)
    assert "very-secret" not in text


def test_a_profile_is_handed_on_when_there_are_no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in AWS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_PROFILE", "lake")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-central-1")
    options = S3Settings().delta_storage_options()
    assert options == {"AWS_REGION": "eu-central-1", "AWS_PROFILE": "lake"}


def test_a_malformed_endpoint_fails_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "127.0.0.1:9000")
    with pytest.raises(ConfigError, match="AWS_ENDPOINT_URL"):
        s3_settings()


def test_the_settings_follow_the_environment_as_it_is_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Parsed once per set of values (a stream asks on every S3 commit), yet a variable set,
    changed or removed since (a test's, a Dagster run's) is what the next call returns."""
    for name in AWS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert s3_settings() is s3_settings()
    monkeypatch.setenv("aws_endpoint_url", "http://127.0.0.1:9000")
    assert (s3_settings().region, s3_settings().endpoint_url) == (
        "eu-west-1",
        "http://127.0.0.1:9000",
    )
    monkeypatch.delenv("AWS_REGION")
    assert s3_settings().region is None
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "store:9000")
    with pytest.raises(ConfigError, match="AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL"):
        s3_settings()
