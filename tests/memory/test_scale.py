"""memory-tools at scale (issue 12): the key-value index stays right when files change
behind its back, big entries are never loaded whole, deep folder chains can be listed and
deleted, and refused edits of big files change nothing. Speed is in benchmarks/memory_scale.py."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from fastmcp import Client

from doc_processing_std_tools import memory
from doc_processing_std_tools.memory import MemoryStore, MemoryStoreError, index, index_file
from helpers.memory_files import list_and_search_peak, write_sparse
from helpers.memory_files import write_entry as entry
from helpers.trees import snapshot


@pytest.fixture
def mem(tmp_path: Path) -> Path:
    folder = tmp_path / "mem"
    folder.mkdir()
    return folder


def search(store: MemoryStore, query: str) -> dict[str, str | None]:
    return {item["key"]: item["value"] for item in json.loads(store.search(query))}


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file counts as changed long ago, so the index trusts what it has read
    (as it does for files older than RACY_NS); each step below then waits a few
    timestamp ticks so a change shows in the file's ctime."""
    real = time.time_ns
    monkeypatch.setattr(index.time, "time_ns", lambda: real() + 10 * index.RACY_NS)


def tick() -> None:
    time.sleep(0.03)  # coarse file timestamps move every few milliseconds


# -- the index follows the disk ----------------------------------------------------


@pytest.mark.usefixtures("settled")
def test_the_index_sees_every_change_made_behind_its_back(mem: Path):
    store = MemoryStore(mem)
    for i in range(50):
        entry(mem, f"k{i}", f"value {i}")
    assert len(search(store, "value")) == 50
    tick()
    # Replaced (new inode), as another launcher or an editor saving atomically does.
    replacement = mem / "tmp-replacement"
    replacement.write_text(json.dumps({"key": "k1", "value": "NEEDLE one"}))
    os.replace(replacement, mem / "k1.json")
    # Rewritten in place, same size, modification time put back.
    path = mem / "k2.json"
    info = path.stat()
    with open(path, "r+b") as handle:
        handle.write(path.read_bytes().replace(b"value 2", b"NEEDLE2"))
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert path.stat().st_size == info.st_size
    entry(mem, "added", "NEEDLE added")
    (mem / "k3.json").unlink()
    assert search(store, "needle") == {"k1": "NEEDLE one", "k2": "NEEDLE2", "added": "NEEDLE added"}
    keys = json.loads(store.list_keys())
    assert "k3" not in keys and "added" in keys and len(keys) == 50
    # Another store on the folder (a second launcher) writes; the first sees it.
    tick()
    MemoryStore(mem).write("k4", "NEEDLE from two")
    assert search(store, "needle")["k4"] == "NEEDLE from two"
    MemoryStore(mem).delete("k1")
    assert "k1" not in search(store, "needle")


def test_a_file_changed_just_before_it_was_read_is_read_again(mem: Path):
    """Racy clean: a change within one timestamp tick of the read would not show in stat."""
    path = entry(mem, "k", "v")
    info = path.stat()
    fd = os.open(path, os.O_RDONLY)
    try:
        fresh = index._entry_from_fd("k.json", fd, info.st_ctime_ns + 1, keep=True)
        os.lseek(fd, 0, os.SEEK_SET)
        old = index._entry_from_fd("k.json", fd, info.st_ctime_ns + index.RACY_NS + 1, True)
    finally:
        os.close(fd)
    assert fresh is not None and fresh.sig is None  # never trusted: read again next time
    assert old is not None and old.sig is not None
    store = MemoryStore(mem)
    assert search(store, "") == {"k": "v"}
    path.write_text(json.dumps({"key": "k", "value": "w"}))  # same size, same tick maybe
    assert search(store, "") == {"k": "w"}


@pytest.mark.usefixtures("settled")
def test_the_saved_index_is_checked_entry_by_entry(mem: Path, tmp_path: Path):
    first = MemoryStore(mem)
    for i in range(20):
        entry(mem, f"k{i}", f"value {i}")
    assert len(search(first, "value")) == 20
    first.index.save()
    saved = first.index._path()
    assert saved.is_file() and not str(saved).startswith(str(tmp_path / "mem"))
    tick()
    entry(mem, "k5", "changed after the save")
    (mem / "k6.json").unlink()
    second = MemoryStore(mem)  # a new process: starts from the saved index
    found = search(second, "")
    assert found["k5"] == "changed after the save" and "k6" not in found and len(found) == 19
    # A damaged or foreign saved index is ignored.
    for damage in (b"garbage", saved.read_bytes()[:-3], index_file.INDEX_MAGIC + b"\0" * 100):
        saved.write_bytes(damage)
        assert search(MemoryStore(mem), "") == found


@pytest.mark.usefixtures("settled")
def test_a_preloaded_saved_index_is_still_checked_entry_by_entry(mem: Path):
    """The server reads the saved copy in the background at start; what it read is only a
    starting point: entries changed since the save are read again at the first search."""
    first = MemoryStore(mem)
    for i in range(20):
        entry(mem, f"k{i}", f"value {i}")
    assert len(search(first, "value")) == 20
    first.index.save()
    tick()
    entry(mem, "k5", "changed after the save")
    (mem / "k6.json").unlink()
    second = MemoryStore(mem)
    second.index.preload()
    assert second.index._by_name is not None and "k6.json" in second.index._by_name
    found = search(second, "")
    assert found["k5"] == "changed after the save" and "k6" not in found and len(found) == 19
    second.index.preload()  # after a scan: keeps what the scan found
    assert "k6.json" not in (second.index._by_name or {})


def test_values_over_the_memory_budget_are_read_when_searched(
    mem: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(index, "INDEX_BUDGET_CHARS", 30)
    for i in range(10):
        entry(mem, f"k{i}", f"value number {i}")
    store = MemoryStore(mem)
    assert search(store, "NUMBER 7") == {"k7": "value number 7"}
    kept = [e for e in store.index.entries(store._jail()) if e.value is not None]
    assert 1 <= len(kept) < 10
    assert len(search(store, "number")) == 10


def test_symlinked_and_odd_entries(mem: Path, tmp_path: Path):
    target = entry(mem, "real", "through a link")
    (mem / "link.json").symlink_to(target.name)
    (tmp_path / "outside.json").write_text(json.dumps({"key": "outside", "value": "secret"}))
    (mem / "escape.json").symlink_to(tmp_path / "outside.json")
    (mem / "folder.json").mkdir()
    (mem / "binary.json").write_bytes(b"\xff\xfe")
    store = MemoryStore(mem)
    assert json.loads(store.list_keys()) == ["binary", "link", "real"]
    assert search(store, "THROUGH") == {"link": "through a link", "real": "through a link"}
    target.write_text(json.dumps({"key": "real", "value": "changed"}))
    assert search(store, "changed") == {"link": "changed", "real": "changed"}
    assert search(store, "secret") == {}


# -- big entries --------------------------------------------------------------------


def test_a_large_entry_is_listed_by_its_key_and_matched_by_key_only(mem: Path):
    path = mem / "big_one.json"
    with open(path, "wb") as handle:
        handle.write(b'{\n  "key": "big/one",\n  "value": "')
        handle.truncate(1 << 30)  # 1 GB, sparse
    entry(mem, "small", "mentions big")
    store = MemoryStore(mem)
    assert json.loads(store.list_keys()) == ["big/one", "small"]
    found = json.loads(store.search("BIG"))
    assert found == [
        {"key": "big/one", "value": None, "size": 1 << 30},
        {"key": "small", "value": "mentions big"},
    ]


def test_list_and_search_stay_small_with_a_1_gb_entry(mem: Path, tmp_path: Path):
    """Peak RSS of a fresh process listing and searching (VmHWM, else ru_maxrss; not timed)."""
    write_sparse(mem / "huge.json")
    for i in range(100):
        entry(mem, f"k{i}", "a" * 1000)
    report = list_and_search_peak(mem, "a", tmp_path / "cache")
    assert "huge" in report["keys"] and report["found"] == 100
    assert report["rss_kb"] < 200 * 1024, report


# -- depth ----------------------------------------------------------------------------


def deep_chain(store: MemoryStore, depth: int) -> str:
    """A chain of *depth* folders under /deep, built with memory_create and memory_rename
    (one path is at most 4,096 characters, so a chain that deep takes a few calls)."""
    step = 2000
    store.create("/" + "/".join(["d"] * min(step, depth)) + "/leaf.md", "bottom\n")
    built = min(step, depth)
    while built < depth:
        more = min(step, depth - built)
        store.rename("/d", "/" + "/".join(["e"] * more) + "/d")
        store.rename("/e", "/d")  # the top is /d again
        built += more
    store.rename("/d", "/deep")
    return "/deep"


async def test_a_deep_chain_can_be_viewed_and_deleted(mem: Path, tmp_path: Path):
    store = MemoryStore(mem)
    top = deep_chain(store, 2600)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    # A symlink to a folder outside, deep down: removed itself, never followed.
    folder = mem
    for name in ["deep", *(["e"] * 5)]:
        folder = folder / name
    (folder / "out").symlink_to(outside)
    async with Client(memory.create_server(memory.Settings(memory_dir=mem))) as client:
        view = await client.call_tool("memory_view", {"path": "/"}, raise_on_error=False)
        assert not view.is_error and "/deep/" in view.content[0].text  # type: ignore[union-attr]
        deleted = await client.call_tool("memory_delete", {"path": top}, raise_on_error=False)
        assert not deleted.is_error, deleted.content
    assert not (mem / "deep").exists()
    assert (outside / "keep.txt").read_text() == "keep"


# -- refused calls on big files change nothing --------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.str_replace("big.txt", "a", "b"),
        lambda s: s.str_replace("big.txt", "zzz", "b"),
        lambda s: s.insert("big.txt", 300_000, "x"),
        lambda s: s.str_replace("big.txt", "a\n" * 200_000, "\ud800"),
    ],
)
def test_a_refused_edit_of_a_big_file_changes_nothing(mem: Path, call):
    store = MemoryStore(mem)
    store.create("big.txt", "a\n" * 200_000)
    store.write("warm", "the lock marker exists")
    before = snapshot(mem)
    with pytest.raises(MemoryStoreError):
        call(store)
    assert snapshot(mem) == before


@pytest.mark.usefixtures("settled")
def test_the_index_is_saved_again_only_when_what_it_saves_changed(mem: Path):
    for i in range(5):
        entry(mem, f"k{i}", f"value {i}")
    (mem / "link.json").symlink_to("k0.json")  # read again every call, never saved
    (mem / "folder.json").mkdir()
    store = MemoryStore(mem)
    search(store, "")
    assert store.index._save_pending
    store.index.save()
    for _ in range(3):
        search(store, "")
        assert not store.index._save_pending
    tick()
    entry(mem, "k1", "changed")
    search(store, "")
    assert store.index._save_pending
    store.index.save()
    (mem / "k2.json").unlink()
    search(store, "")
    assert store.index._save_pending
