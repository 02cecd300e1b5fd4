"""Blob stores: file:// in a temp dir, gs:// against gcp-storage-emulator on loopback."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest

from evalkit.blobs import fixture_key, open_blob_store
from evalkit.errors import ConfigError
from tests.conftest import free_port
from tests.integration.datasets_helpers import Repo, login


@pytest.fixture
def gcs_emulator(monkeypatch) -> Iterator[str]:
    """gcp-storage-emulator in memory on a free loopback port, with bucket ``evalkit``."""
    from gcp_storage_emulator.server import create_server

    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket="evalkit")
    server.start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def _roundtrip(store, tmp_path) -> None:
    data = b"fixture bytes\n" * 100
    sha = hashlib.sha256(data).hexdigest()
    key = fixture_key(sha)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    assert not store.exists(key)
    assert store.put_file(key, src) is True
    assert store.exists(key)
    # content-addressed: a second writer of the same key never replaces the bytes
    other = tmp_path / "other.bin"
    other.write_bytes(b"something else")
    assert store.put_file(key, other) is False
    with store.open(key) as f:
        assert f.read() == data
    store.delete(key)
    assert not store.exists(key)


def test_file_store(tmp_path):
    store = open_blob_store((tmp_path / "blobs").as_uri())
    _roundtrip(store, tmp_path)
    with pytest.raises(ValueError, match="leaves the store"):
        store.exists("../../etc/passwd")


def test_gcs_store(gcs_emulator, tmp_path):
    store = open_blob_store("gs://evalkit/some/prefix")
    assert store.url == "gs://evalkit/some/prefix"
    _roundtrip(store, tmp_path)


def test_bad_blob_urls():
    for url, message in [
        ("s3://bucket/x", "not supported"),
        ("gs:///x", "names no bucket"),
        ("file://host/x", "local path"),
    ]:
        with pytest.raises(ConfigError, match=message):
            open_blob_store(url)


def test_sync_into_gcs(gcs_emulator, cli, server, tmp_path):
    server.settings.blob_url = "gs://evalkit/prod"
    login(cli, server)
    repo = Repo(tmp_path / "repo")
    data = b"%PDF-1.4 pretend\n" * 500
    repo.fixture("report", data)
    repo.case("finance", "a", files="report")
    out = cli("sync", str(repo.suite("finance")), "--json")
    assert out.code == 0, out.err
    assert out.json["fixtures_uploaded"] == 1
    store = open_blob_store("gs://evalkit/prod")
    key = fixture_key(hashlib.sha256(data).hexdigest())
    with store.open(key) as f:
        assert f.read() == data
    assert not (server.settings.data_path / "blobs").exists()
