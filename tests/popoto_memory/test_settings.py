"""popoto-memory's settings: how the backend, URL, data folder and scope are resolved from
settings, the environment and the working folder, and what ``describe`` shows."""

from __future__ import annotations

import pytest

pytest.importorskip("popoto")

from pydantic import ValidationError

from doc_processing_std_tools import popoto_memory as pm


def test_settings_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    s = pm.Settings.model_validate({}, context={"base_dir": tmp_path / "configs"})
    # per user, not next to the config file; XDG_DATA_HOME honoured
    assert s.data_dir == tmp_path / "xdg" / "doc-processing-std-tools" / "popoto-redis"
    s = pm.Settings.model_validate({"data_dir": "store"}, context={"base_dir": tmp_path})
    assert s.data_dir == tmp_path / "store"  # a setting wins, relative to the config's folder
    r = pm.resolve(s, environ={})
    assert (r.backend, r.backend_source) == ("embedded", "default")
    assert r.agent_follows_roots
    monkeypatch.chdir(tmp_path)  # a project folder
    r = pm.resolve(s, environ={})
    assert (r.agent_id, r.agent_source) == (
        tmp_path.name,
        f"the project working directory, {tmp_path}",
    )
    monkeypatch.setenv("HOME", str(tmp_path / "alice"))
    monkeypatch.chdir("/")  # Claude Desktop's start folder: no project
    r = pm.resolve(s, environ={})
    assert r.agent_id == "alice" and r.agent_source.startswith("the per-user default")
    assert not pm.resolve(pm.Settings(agent_id="x"), environ={}).agent_follows_roots
    assert not pm.resolve(s, environ={"POPOTO_MEMORY_AGENT_ID": "y"}).agent_follows_roots

    env = {"REDIS_URL": "redis://h:6379/3"}
    r = pm.resolve(pm.Settings(), environ=env)
    assert (r.backend, r.url, r.env["POPOTO_MEMORY_URL"]) == (
        "redis",
        env["REDIS_URL"],
        env["REDIS_URL"],
    )
    env = {"POPOTO_MEMORY_URL": "redis://a:1/2", "REDIS_URL": "redis://b:1/3"}
    assert pm.resolve(pm.Settings(), environ=env).url == "redis://a:1/2"
    r = pm.resolve(pm.Settings(url="redis://c:1/4", agent_id="me"), environ=env)
    assert (r.url, r.url_source, r.env["POPOTO_MEMORY_AGENT_ID"]) == (
        "redis://c:1/4",
        "settings",
        "me",
    )
    r = pm.resolve(pm.Settings(backend="embedded"), environ=env)
    assert r.backend == "embedded" and r.notes
    r = pm.resolve(
        pm.Settings(max_items=9, ingest="heuristic"), environ={"POPOTO_MEMORY_MAX_TOKENS": "50"}
    )
    assert (r.env["POPOTO_MEMORY_MAX_ITEMS"], r.env["POPOTO_MEMORY_INGEST"]) == ("9", "heuristic")
    assert r.env["POPOTO_MEMORY_MAX_TOKENS"] == "50"  # unmapped variables keep working
    r = pm.resolve(pm.Settings(url="postgresql://u:p@h/db"), environ={})
    assert r.backend == "postgres" and r.env["POPOTO_POSTGRES_URL"] == "postgresql://u:p@h/db"

    for bad in (
        {"backend": "redis", "port": 7000},
        {"url": "redis://h:1/1", "data_dir": "x"},
        {"backend": "embedded", "url": "redis://h:1/1"},
        {"backend": "redis", "url": "postgresql://h/db"},
        {"url": "unix:///tmp/redis.sock"},
        {"port": 0},
    ):
        with pytest.raises(ValidationError):
            pm.Settings(**bad)


def test_describe(monkeypatch, tmp_path):
    monkeypatch.delenv("POPOTO_MEMORY_URL", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("POPOTO_BACKEND", raising=False)
    monkeypatch.delenv("POPOTO_MEMORY_AGENT_ID", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    rows = dict(
        pm.describe(pm.Settings.model_validate({"port": 7001}, context={"base_dir": tmp_path}))
    )
    assert rows["backend"].startswith("embedded")
    assert rows["url"] == "redis://:***@127.0.0.1:7001/1"
    assert rows["data_dir"] == str(tmp_path / "xdg" / "doc-processing-std-tools" / "popoto-redis")
    monkeypatch.chdir(tmp_path)
    rows = dict(pm.describe(pm.Settings.model_validate({}, context={"base_dir": tmp_path})))
    assert rows["agent_id"] == (
        f"the name of the client's first root, per session; without roots {tmp_path.name} "
        f"(from the project working directory, {tmp_path})"
    )
    rows = dict(pm.describe(pm.Settings(url="redis://:hunter2@db:6379/2", agent_id="proj")))
    assert rows["url"] == "redis://:***@db:6379/2 (from settings)"
    assert rows["agent_id"] == "proj (from settings)"
    monkeypatch.setenv("POPOTO_MEMORY_AGENT_ID", "envproj")
    assert dict(pm.describe(pm.Settings()))["agent_id"] == (
        "envproj (from environment POPOTO_MEMORY_AGENT_ID)"
    )
