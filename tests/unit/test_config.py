"""config.yaml and EVALKIT_* overrides."""

from __future__ import annotations

import pytest

from evalkit.config import Settings, env_var_names, load_settings
from evalkit.errors import ConfigError


def write(tmp_path, text: str):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_defaults_without_a_file():
    settings = load_settings(env={})
    assert settings == Settings()
    assert settings.database.url is None
    assert settings.auth.token_ttl_hours == 168


def test_file_values(tmp_path):
    path = write(
        tmp_path, "database:\n  url: postgresql://db/evalkit\nauth:\n  token_ttl_hours: 8\n"
    )
    settings = load_settings(path, env={})
    assert settings.database.url == "postgresql://db/evalkit"
    assert settings.auth.token_ttl_hours == 8


def test_config_path_from_env(tmp_path):
    path = write(tmp_path, "server:\n  port: 9999\n")
    assert load_settings(env={"EVALKIT_CONFIG": str(path)}).server.port == 9999


def test_env_overrides_file(tmp_path):
    path = write(tmp_path, "auth:\n  token_ttl_hours: 8\n")
    settings = load_settings(
        path,
        env={
            "EVALKIT_AUTH_TOKEN_TTL_HOURS": "2",
            "EVALKIT_EGRESS_ALLOW_PRIVATE": "true",
            "EVALKIT_EGRESS_ALLOWED_PREFIXES": "[http://10.0.0.1/, http://agent.internal/]",
            "EVALKIT_AUTH_OIDC_ISSUER": "https://idp.example",
            "EVALKIT_AUTH_OIDC_CLIENT_ID": "evalkit",
        },
    )
    assert settings.auth.token_ttl_hours == 2
    assert settings.egress.allow_private is True
    assert settings.egress.allowed_prefixes == ["http://10.0.0.1/", "http://agent.internal/"]
    assert settings.auth.oidc is not None and settings.auth.oidc.issuer == "https://idp.example"


def test_every_key_has_an_env_var():
    names = env_var_names()
    assert names["database.url"] == "EVALKIT_DATABASE_URL"
    assert names["otel.max_batch_bytes"] == "EVALKIT_OTEL_MAX_BATCH_BYTES"
    assert names["auth.oidc.client_secret"] == "EVALKIT_AUTH_OIDC_CLIENT_SECRET"
    assert all(v.startswith("EVALKIT_") for v in names.values())
    assert "EVALKIT_SERVER_URL" not in names.values(), "reserved for the CLI's server URL"


def test_unknown_key_is_named(tmp_path):
    path = write(tmp_path, "auth:\n  token_ttl: 3\n")
    with pytest.raises(ConfigError) as err:
        load_settings(path, env={})
    assert str(err.value) == (
        f"{path}: unknown key 'auth.token_ttl'; "
        "remove it or check its spelling (see docs/config.md)"
    )


def test_unknown_top_level_key(tmp_path):
    with pytest.raises(ConfigError, match="unknown key 'databse'"):
        load_settings(write(tmp_path, "databse: {}\n"), env={})


def test_mcp_oauth_points_to_auth_oidc(tmp_path):
    path = write(tmp_path, "mcp:\n  oauth:\n    issuer: https://idp.example\n")
    with pytest.raises(ConfigError) as err:
        load_settings(path, env={})
    assert "'mcp.oauth' is no longer read: move the issuer" in str(err.value)
    assert "'auth.oidc'" in str(err.value)


def test_wrong_type_names_the_key(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_settings(write(tmp_path, "server:\n  port: eighty\n"), env={})
    assert "Expected `int`, got `str` at 'server.port'" in str(err.value)


def test_bad_env_value_names_the_key():
    with pytest.raises(ConfigError, match=r"at 'otel\.settle_seconds'"):
        load_settings(env={"EVALKIT_OTEL_SETTLE_SECONDS": "soon"})


def test_malformed_yaml_reports_the_line(tmp_path):
    path = write(tmp_path, "server:\n  port: 1\n  host: [unclosed\n")
    with pytest.raises(ConfigError) as err:
        load_settings(path, env={})
    assert str(err.value).startswith(f"{path} at line ")
    assert "not valid YAML" in str(err.value)


def test_top_level_must_be_a_mapping(tmp_path):
    with pytest.raises(ConfigError, match="the top level must be a mapping"):
        load_settings(write(tmp_path, "- a\n- b\n"), env={})


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_settings(tmp_path / "nope.yaml", env={})


def test_empty_file_is_defaults(tmp_path):
    assert load_settings(write(tmp_path, ""), env={}) == Settings()
