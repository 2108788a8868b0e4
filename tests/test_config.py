"""``LlogConfig``: environment parsing, overrides, validation (pure; no servers)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from llog.config import LlogConfig
from llog.errors import ConfigError
from llog.store import LocalStore, open_store


def test_defaults_from_an_empty_environment() -> None:
    cfg = LlogConfig.from_env({})
    assert cfg == LlogConfig()
    assert cfg.etcd_endpoints == ("127.0.0.1:2379",)
    assert cfg.root_prefix == "llog"
    assert cfg.broker_token is None


def test_explicit_env_mapping_ignores_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLOG_ROOT_PREFIX", "from-process")
    assert LlogConfig.from_env({}).root_prefix == "llog"
    assert LlogConfig.from_env().root_prefix == "from-process"


def test_every_field_has_an_llog_variable() -> None:
    env = {
        "LLOG_ETCD_ENDPOINTS": "h1:1, h2:2 ,,h3:3",
        "LLOG_ETCD_TIMEOUT_S": "2.5",
        "LLOG_OBJECT_STORE": "s3://bucket/pre",
        "LLOG_S3_ENDPOINT_URL": "http://127.0.0.1:9000",
        "LLOG_S3_REGION": "eu-west-1",
        "LLOG_ROOT_PREFIX": "myroot",
        "LLOG_MAX_RECORD_BYTES": "1024",
        "LLOG_BATCH_MAX_BYTES": "2048",
        "LLOG_BATCH_MAX_DELAY_MS": "7",
        "LLOG_AUTO_CREATE_TOPICS": "yes",
        "LLOG_BROKER_PORT": "9090",
        "LLOG_BROKER_TOKEN": "s3cret",
        "LLOG_VACUUM_GRACE_S": "12.5",
        "LLOG_SETTLE_AFTER_MS": "0",
    }
    cfg = LlogConfig.from_env(env)
    assert cfg.etcd_endpoints == ("h1:1", "h2:2", "h3:3")
    assert cfg.etcd_timeout_s == 2.5
    assert cfg.object_store == "s3://bucket/pre"
    assert cfg.s3_endpoint_url == "http://127.0.0.1:9000"
    assert cfg.s3_region == "eu-west-1"
    assert cfg.root_prefix == "myroot"
    assert cfg.max_record_bytes == 1024
    assert cfg.batch_max_bytes == 2048
    assert cfg.batch_max_delay_ms == 7
    assert cfg.auto_create_topics is True
    assert cfg.broker_port == 9090
    assert cfg.broker_token == "s3cret"
    assert cfg.vacuum_grace_s == 12.5
    assert cfg.settle_after_ms == 0


def test_each_field_reads_its_own_variable() -> None:
    # A sample value per type proves the name mapping for every field, not just a few.
    default = LlogConfig()
    for f in fields(LlogConfig):
        current = getattr(default, f.name)
        if f.name == "etcd_endpoints":
            raw, want = "10.0.0.1:2379", ("10.0.0.1:2379",)
        elif f.name == "object_store":
            raw, want = "file:///tmp/x", "file:///tmp/x"
        elif f.name == "root_prefix":
            raw, want = "other", "other"
        elif f.name == "put_hedge_quantile":  # a quantile: below 1
            raw, want = "0.5", 0.5
        elif f.name == "s3_sse":
            raw, want = "aws:kms", "aws:kms"
        elif f.name == "auth_super_users":  # principals
            raw, want = "User:admin;User:ops", "User:admin;User:ops"
        elif f.name == "kafka_zone_listeners":  # zone=port each, beside a Kafka listener
            raw, want = "a=19092,b=0", ("a=19092", "b=0")
        elif f.name in ("peer_url", "http_advertised_url"):  # an http(s) URL of a host
            raw, want = "http://10.0.0.5:8080", "http://10.0.0.5:8080"
        elif f.name == "kafka_max_batch_inflated_bytes":  # at least max_record_bytes
            raw, want = str(64 << 20), 64 << 20
        elif f.type == "int | None":
            raw, want = "9092", 9092
        elif isinstance(current, bool):
            raw, want = ("false", False) if current else ("true", True)
        elif isinstance(current, int):
            raw, want = str(current + 1), current + 1
        elif isinstance(current, float):
            raw, want = str(current + 0.5), current + 0.5
        else:
            raw, want = "value", "value"
        env = {f"LLOG_{f.name.upper()}": raw}
        if f.name.startswith("kafka_tls_"):  # the certificate and its key go together
            env = {"LLOG_KAFKA_TLS_CERT_FILE": "other", "LLOG_KAFKA_TLS_KEY_FILE": "other", **env}
        if f.name.startswith("broker_tls_"):
            env = {"LLOG_BROKER_TLS_CERT_FILE": "other", "LLOG_BROKER_TLS_KEY_FILE": "other", **env}
        if f.name.startswith(("etcd_cert", "etcd_key")):  # a client certificate needs a CA
            env = {"LLOG_ETCD_CA_FILE": "ca", "LLOG_ETCD_CERT_FILE": "other", "LLOG_ETCD_KEY_FILE": "other", **env}
        if f.name in ("etcd_user", "etcd_password"):
            env = {"LLOG_ETCD_USER": "other", "LLOG_ETCD_PASSWORD": "other", **env}
        if f.name == "kafka_zone_listeners":
            env = {"LLOG_KAFKA_PORT": "9092", **env}
        if f.name.startswith("s3_sse"):
            env = {"LLOG_S3_SSE": "aws:kms", **env} if f.name == "s3_sse_kms_key_id" else env
        cfg = LlogConfig.from_env(env)
        assert getattr(cfg, f.name) == want, f.name


def test_kafka_limits_are_checked_against_each_other() -> None:
    from llog.kafka.batch_checks import inflate_cap

    assert inflate_cap(LlogConfig()) == 4 * LlogConfig().max_record_bytes
    assert inflate_cap(LlogConfig(max_record_bytes=1 << 20)) == 4 << 20
    with pytest.raises(ConfigError, match="kafka_max_queued_bytes"):
        LlogConfig(kafka_max_frame_bytes=2 << 20, kafka_max_queued_bytes=1 << 20)
    with pytest.raises(ConfigError, match="kafka_max_batch_inflated_bytes"):
        LlogConfig(kafka_max_batch_inflated_bytes=1 << 20)  # below the 8 MiB record limit
    for name in ("kafka_max_preauth_frame_bytes", "kafka_frame_timeout_s", "kafka_check_threads"):
        with pytest.raises(ConfigError, match=name):
            LlogConfig(**{name: 0})


@pytest.mark.parametrize(("raw", "want"), [("1", True), ("true", True), ("ON", True), ("0", False),
                                           ("no", False), ("off", False), ("", False)])
def test_booleans(raw: str, want: bool) -> None:
    assert LlogConfig.from_env({"LLOG_AUTO_CREATE_TOPICS": raw}).auto_create_topics is want


def test_empty_optional_string_means_none() -> None:
    cfg = LlogConfig.from_env({"LLOG_BROKER_TOKEN": "", "LLOG_S3_ENDPOINT_URL": ""})
    assert cfg.broker_token is None
    assert cfg.s3_endpoint_url is None


def test_overrides_win_over_the_environment() -> None:
    env = {"LLOG_ROOT_PREFIX": "env-root", "LLOG_MAX_RECORD_BYTES": "100", "LLOG_ETCD_ENDPOINTS": "e:1"}
    cfg = LlogConfig.from_env(env, root_prefix="arg-root", etcd_endpoints="a:1,b:2")
    assert cfg.root_prefix == "arg-root"
    assert cfg.etcd_endpoints == ("a:1", "b:2")
    assert cfg.max_record_bytes == 100


def test_none_overrides_leave_the_environment_value() -> None:
    cfg = LlogConfig.from_env({"LLOG_ROOT_PREFIX": "env-root"}, root_prefix=None, broker_token=None)
    assert cfg.root_prefix == "env-root"


def test_config_is_frozen() -> None:
    cfg = LlogConfig()
    with pytest.raises(AttributeError):
        cfg.root_prefix = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    "env",
    [
        {"LLOG_MAX_RECORD_BYTES": "abc"},
        {"LLOG_MAX_RECORD_BYTES": "1.5"},
        {"LLOG_MAX_RECORD_BYTES": "0"},
        {"LLOG_MAX_RECORD_BYTES": "-5"},
        {"LLOG_READ_MAX_FETCH_BYTES": "0"},
        {"LLOG_ETCD_TIMEOUT_S": "soon"},
        {"LLOG_AUTO_CREATE_TOPICS": "maybe"},
        {"LLOG_ETCD_ENDPOINTS": ""},
        {"LLOG_ETCD_ENDPOINTS": "localhost"},
        {"LLOG_ETCD_ENDPOINTS": "host:port"},
        {"LLOG_ETCD_ENDPOINTS": ":2379"},
        {"LLOG_ROOT_PREFIX": "a/b"},
        {"LLOG_ROOT_PREFIX": ""},
        {"LLOG_VACUUM_GRACE_S": "-1"},
        {"LLOG_SESSION_TTL_S": "0"},
        {"LLOG_SESSION_TTL_S": "1.5"},
        {"LLOG_SESSION_ROTATE_S": "0"},
        {"LLOG_COMPACT_TARGET_BYTES": str(2 * 1024**3)},
        {"LLOG_BROKER_MAX_REQUEST_BYTES": "0"},
        {"LLOG_BROKER_SEND_TIMEOUT_S": "0"},
        {"LLOG_TAIL_CACHE_BYTES": "-1"},
    ],
)
def test_bad_values_raise_config_error(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        LlogConfig.from_env(env)


def test_bad_override_raises_config_error() -> None:
    with pytest.raises(ConfigError):
        LlogConfig.from_env({}, batch_max_bytes=0)
    with pytest.raises(ConfigError):
        LlogConfig.from_env({}, etcd_endpoints="nope")


def test_config_error_is_a_value_error_naming_the_variable() -> None:
    with pytest.raises(ValueError, match="LLOG_BROKER_PORT"):
        LlogConfig.from_env({"LLOG_BROKER_PORT": "eighty"})


@pytest.mark.parametrize("uri", ["s3://", "s3:///prefix", "gs://bucket", "http://x/y"])
def test_bad_object_store_uris(uri: str) -> None:
    with pytest.raises(ConfigError):
        open_store(LlogConfig(object_store=uri))


def test_file_and_plain_path_object_stores(tmp_path: Path) -> None:
    for uri in (f"file://{tmp_path}/a", f"{tmp_path}/b"):
        with open_store(LlogConfig(object_store=uri)) as s:
            assert isinstance(s, LocalStore)
            s.put("k", b"v")
            assert s.get("k") == b"v"


def test_llog_names_that_are_no_setting_are_named_with_the_closest_one() -> None:
    from llog.environment import environment_warnings

    env = {"LLOG_SESION_TTL_S": "3", "LLOG_ZONE": "a", "LLOG_TEST_ETCD_ENDPOINT": "h:1", "LLOG_ETCD_BIN": "/x",
           "LLOG_NOTHING_LIKE_IT": "1", "PATH": "/bin"}
    assert environment_warnings(env) == [
        "LLOG_NOTHING_LIKE_IT is not a setting of this llog and is ignored (README.md's Configuration lists "
        "the settings)",
        "LLOG_SESION_TTL_S is not a setting of this llog and is ignored; did you mean LLOG_SESSION_TTL_S?",
    ]
    assert environment_warnings({"LLOG_ZONE": "a", "HOME": "/"}) == []


def test_a_renamed_setting_is_read_under_its_old_name_for_a_release(monkeypatch: pytest.MonkeyPatch) -> None:
    from llog import config
    from llog.environment import environment_warnings

    monkeypatch.setitem(config.RENAMED, "LLOG_WRITER_SESSION_TTL_S", "LLOG_SESSION_TTL_S")
    assert LlogConfig.from_env({"LLOG_WRITER_SESSION_TTL_S": "7"}).session_ttl_s == 7
    assert LlogConfig.from_env({"LLOG_WRITER_SESSION_TTL_S": "7", "LLOG_SESSION_TTL_S": "9"}).session_ttl_s == 9
    assert environment_warnings({"LLOG_WRITER_SESSION_TTL_S": "7"}) == [
        "LLOG_WRITER_SESSION_TTL_S is renamed LLOG_SESSION_TTL_S: LLOG_WRITER_SESSION_TTL_S is read as "
        "LLOG_SESSION_TTL_S in this release; set LLOG_SESSION_TTL_S instead"]
    assert environment_warnings({"LLOG_WRITER_SESSION_TTL_S": "7", "LLOG_SESSION_TTL_S": "9"}) == [
        "LLOG_WRITER_SESSION_TTL_S is renamed LLOG_SESSION_TTL_S: LLOG_SESSION_TTL_S is set too, so "
        "LLOG_WRITER_SESSION_TTL_S is ignored; set LLOG_SESSION_TTL_S instead"]
