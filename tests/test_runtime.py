"""Start-up refuses tenants that ask more of Milvus than the engine can do, before opening anything."""

import pytest

from gateway.errors import ConfigError, StorageUnavailable
from gateway.runtime import build_runtime
from gateway.settings import Settings

SHARED_TENANT = """
id: small-co
isolation: partition_key
namespaces:
  docs:
    collections:
      guides: {trust_tier: first-party}
"""


def _tenants(tmp_path, text=SHARED_TENANT):
    directory = tmp_path / "tenants"
    directory.mkdir()
    (directory / "small-co.yaml").write_text(text)
    return directory


def test_partition_key_on_embedded_milvus_lite_is_refused_before_the_store_opens(tmp_path):
    store = tmp_path / "data" / "gateway.db"
    settings = Settings(milvus_uri=str(store), tenants_dir=_tenants(tmp_path))
    with pytest.raises(ConfigError, match=r"tenant 'small-co' sets isolation: partition_key, which needs a Milvus "
                                          r"server .*Allowed here: isolation: collection"):
        build_runtime(settings)
    assert not store.exists()


@pytest.mark.server
def test_partition_key_on_a_milvus_lite_server_is_refused_after_detection(tmp_path, milvus_server):
    settings = Settings(milvus_uri=milvus_server, tenants_dir=_tenants(tmp_path))
    with pytest.raises(ConfigError, match=rf"{milvus_server}' is milvus-lite \(milvus_lite-"):
        build_runtime(settings)


def test_an_unknown_isolation_lists_the_allowed_values(tmp_path):
    settings = Settings(milvus_uri=str(tmp_path / "g.db"),
                        tenants_dir=_tenants(tmp_path, SHARED_TENANT.replace("partition_key", "shard")))
    with pytest.raises(ConfigError, match=r"small-co.yaml: isolation: .*'collection' or 'partition_key'; got 'shard'"):
        build_runtime(settings)


def test_the_milvus_token_never_reaches_messages_or_logs(tmp_path, caplog):
    settings = Settings(milvus_uri="http://127.0.0.1:9", milvus_token="gateway:s3cret-value",
                        tenants_dir=_tenants(tmp_path, SHARED_TENANT.replace("isolation: partition_key\n", "")))
    caplog.set_level("DEBUG")
    with pytest.raises(StorageUnavailable) as raised:
        build_runtime(settings)
    assert "cannot connect to Milvus at 'http://127.0.0.1:9'" in raised.value.message
    assert "s3cret" not in raised.value.message and "s3cret" not in caplog.text
    assert "s3cret" not in repr(settings)


@pytest.mark.server
def test_a_server_opened_with_a_token_starts_and_reports_its_engine(tmp_path, milvus_server, caplog):
    # milvus-lite's server accepts any token; a Milvus server with authorizationEnabled checks it.
    settings = Settings(milvus_uri=milvus_server, milvus_token="root:Milvus", ingest_demo_on_start=False,
                        tenants_dir=_tenants(tmp_path, SHARED_TENANT.replace("isolation: partition_key\n", "")))
    caplog.set_level("INFO", logger="gateway")
    runtime = build_runtime(settings)
    try:
        assert runtime.store.capabilities.is_lite
        assert "milvus: milvus-lite milvus_lite-" in caplog.text and "root:Milvus" not in caplog.text
    finally:
        runtime.close()
