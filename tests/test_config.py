"""Configuration: defaults < TOML file < LSMSTORE_* environment < arguments; unknown keys fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from lsmstore.config import Config, MiB, load_config, parse_size
from lsmstore.errors import InvalidInputError


def test_defaults_and_embedded_urls(tmp_path: Path) -> None:
    cfg = load_config(environ={"LSMSTORE_HOME": str(tmp_path)})
    assert cfg.home == tmp_path
    assert cfg.refstore_url == f"local://{tmp_path}/refs"
    assert cfg.cache_path == tmp_path / "cache"
    assert cfg.batch_interval_ms == 10.0
    assert cfg.max_key_bytes == 1024 and cfg.max_value_bytes == 16 * MiB
    assert cfg.max_pending_bytes > cfg.max_value_bytes + cfg.max_key_bytes


def test_precedence_arguments_env_file_defaults(tmp_path: Path) -> None:
    f = tmp_path / "lsm.toml"
    f.write_text(
        'refstore = "redis://127.0.0.1:1/0"\n'
        "batch_interval_ms = 5\n"
        'cache_ram_bytes = "64MiB"\n'
        "l1_soft_limit = 10\n"
    )
    env = {
        "LSMSTORE_HOME": str(tmp_path),
        "LSMSTORE_CONFIG": str(f),
        "LSMSTORE_BATCH_INTERVAL_MS": "7",
    }
    cfg = load_config(environ=env)
    assert cfg.refstore == "redis://127.0.0.1:1/0"  # file
    assert cfg.cache_ram_bytes == 64 * MiB  # file, with a unit
    assert cfg.batch_interval_ms == 7.0  # env beats file
    assert cfg.l1_soft_limit == 10
    cfg = load_config("local:///elsewhere", environ=env, batch_interval_ms=2, l1_soft_limit=None)
    assert cfg.refstore_url == "local:///elsewhere"  # argument beats file
    assert cfg.batch_interval_ms == 2.0  # argument beats env
    assert cfg.l1_soft_limit == 10  # None arguments do not override
    # an explicit config= beats $LSMSTORE_CONFIG
    g = tmp_path / "other.toml"
    g.write_text("[lsmstore]\nmax_key_bytes = 100\n")
    cfg = load_config(config=g, environ=env)
    assert cfg.max_key_bytes == 100 and cfg.refstore == ""


@pytest.mark.parametrize(
    ("where", "text"),
    [
        ("file", "batch_interval = 5\n"),
        ("env", "LSMSTORE_BATCH_INTERVAL"),
        ("arg", "batch_intervl_ms"),
    ],
)
def test_unknown_keys_are_rejected(tmp_path: Path, where: str, text: str) -> None:
    env = {"LSMSTORE_HOME": str(tmp_path)}
    kwargs = {}
    if where == "file":
        f = tmp_path / "c.toml"
        f.write_text(text)
        env["LSMSTORE_CONFIG"] = str(f)
    elif where == "env":
        env[text] = "5"
    else:
        kwargs[text] = 5
    with pytest.raises(InvalidInputError, match="unknown setting"):
        load_config(environ=env, **kwargs)


def test_bad_values_are_rejected(tmp_path: Path) -> None:
    env = {"LSMSTORE_HOME": str(tmp_path)}
    with pytest.raises(InvalidInputError, match="max_pending_bytes"):
        load_config(environ=env, max_value_bytes="200MiB")
    with pytest.raises(InvalidInputError, match="l1_soft_limit"):
        load_config(environ=env, l1_soft_limit=100, l1_hard_limit=50)
    with pytest.raises(InvalidInputError, match="batch_max_bytes"):
        load_config(environ={**env, "LSMSTORE_BATCH_MAX_BYTES": "lots"})
    with pytest.raises(InvalidInputError, match="cannot use"):
        load_config(environ=env, batch_max_records="many")
    bad = tmp_path / "bad.toml"
    bad.write_text("this is = = not toml")
    with pytest.raises(InvalidInputError, match=r"bad\.toml"):
        load_config(config=bad, environ=env)
    with pytest.raises(InvalidInputError, match="does not exist"):
        load_config(config=tmp_path / "missing.toml", environ=env)


def test_parse_size() -> None:
    assert parse_size(5) == 5
    assert parse_size("16MiB") == 16 * MiB
    assert parse_size("1 GB") == 10**9
    assert parse_size("512kib") == 512 * 1024
    for bad in ("1.5MiB", "MiB", "5 parsecs", True, 1.5):
        with pytest.raises(InvalidInputError):
            parse_size(bad)


def test_replace_validates() -> None:
    cfg = Config(home=Path("/tmp/x"))
    assert cfg.replace(batch_interval_ms=1).batch_interval_ms == 1
    with pytest.raises(InvalidInputError):
        cfg.replace(append_attempts=0)


def test_lakectl_configuration(tmp_path: Path) -> None:
    from lsmstore.config import lakectl_settings

    assert lakectl_settings(environ={"HOME": str(tmp_path)}) == {}  # no file: nothing
    f = tmp_path / ".lakectl.yaml"
    f.write_text(
        "credentials:\n  access_key_id: AKIA\n  secret_access_key: s3cr3t\n"
        "server:\n  endpoint_url: http://127.0.0.1:8000/api/v1\nmetastore:\n  type: hive\n"
    )
    assert lakectl_settings(environ={"HOME": str(tmp_path)}) == {
        "access_key_id": "AKIA",
        "secret_access_key": "s3cr3t",
        "server_url": "http://127.0.0.1:8000",
    }
    env = {"HOME": str(tmp_path), "LAKECTL_CREDENTIALS_ACCESS_KEY_ID": "FROMENV",
           "LAKECTL_SERVER_ENDPOINT_URL": "http://127.0.0.1:9000/"}  # fmt: skip
    got = lakectl_settings(environ=env)
    assert got["access_key_id"] == "FROMENV" and got["server_url"] == "http://127.0.0.1:9000"
    bad = tmp_path / "bad.yaml"
    bad.write_text("credentials: [unclosed\n")
    with pytest.raises(InvalidInputError, match="not valid YAML"):
        lakectl_settings(bad, environ={})
    bad.write_text("credentials:\n  access_key_id: 12\n")
    with pytest.raises(InvalidInputError, match="must be a string"):
        lakectl_settings(bad, environ={})
    with pytest.raises(InvalidInputError, match="does not exist"):
        lakectl_settings(tmp_path / "missing.yaml", environ={})
    bad.write_text("# " + "x" * (1 << 20) + "\n")
    with pytest.raises(InvalidInputError, match="larger than 1 MiB"):
        lakectl_settings(bad, environ={})


def test_user_setting(tmp_path: Path) -> None:
    import getpass

    assert load_config(environ={}).user == getpass.getuser()
    assert load_config(environ={"LSMSTORE_USER": "alice"}).user == "alice"
    assert load_config(environ={"LSMSTORE_USER": "alice"}, user="bob").user == "bob"


async def test_local_sync_setting_reaches_local_stores(tmp_path: Path) -> None:
    """``local_sync`` picks how a Store's local namespaces make puts durable; a value
    outside auto/file/filesystem is refused."""
    from lsmstore.client import Store
    from lsmstore.storage.local import LocalStore

    env = {"LSMSTORE_HOME": str(tmp_path)}
    with pytest.raises(InvalidInputError, match="local_sync"):
        load_config(environ={**env, "LSMSTORE_LOCAL_SYNC": "never"})
    for mode, expected in (("file", "file"), ("filesystem", "filesystem"), ("auto", None)):
        store = Store(load_config(environ={**env, "LSMSTORE_LOCAL_SYNC": mode}))
        try:
            objects = store.objects((tmp_path / "ns").as_uri())
            assert isinstance(objects, LocalStore)
            assert objects.sync == (expected or LocalStore(tmp_path).sync)
        finally:
            await store.aclose()
