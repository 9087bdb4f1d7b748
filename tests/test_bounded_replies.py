"""Every tool that lists or searches caps its reply and says how many more there are and how to
page or narrow (issue 35, point 6): memory-tools (folder and Redis stores, the same texts), the
filesystem server, popoto-memory's memory_search. Small caps in the quick tests; the slow ones
fill 100,000 entries and check the defaults."""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client
from memory_helpers import RedisFiles

from doc_processing_std_tools import filesystem
from doc_processing_std_tools.memory import Settings, create_server
from doc_processing_std_tools.memory.formats import _encode_entry
from doc_processing_std_tools.shared.reply_bounds import (
    DEFAULT_MAX_REPLY_CHARS,
    DEFAULT_MAX_REPLY_ENTRIES,
)

SMALL = {"max_reply_entries": 20, "max_reply_chars": 3_000}


async def call(client: Client, tool: str, **args: Any) -> str:
    result = await client.call_tool(tool, args, raise_on_error=False)
    text = "\n".join(block.text for block in result.content if hasattr(block, "text"))
    assert not result.is_error, text
    return text


def fill(backend: dict[str, Any], tmp_path: Path, entries: dict[str, bytes]) -> None:
    """Put *entries* (path -> bytes) in the store directly, as a bulk import would."""
    if backend.get("backend") != "redis":
        root = Path(backend["memory_dir"])
        for rel, data in entries.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)
        return
    files = RedisFiles(str(backend["url"]), str(backend["namespace"]))
    db, pipe = files.memory, files.redis.pipeline(transaction=False)
    for n, (rel, data) in enumerate(entries.items()):
        pipe.hset(db.k_files, rel, data)
        pipe.hset(db.k_versions, rel, f"{secrets.randbits(60):015x}")
        parts = rel.split("/")[:-1]
        for i in range(len(parts)):
            pipe.hset(db.k_dirs, "/".join(parts[: i + 1]), "1")
        if n % 5000 == 4999:
            pipe.execute()
    pipe.hset(db.k_meta, mapping={"epoch": "bulk", "gen": secrets.token_hex(7), "seq": 1})
    pipe.execute()


def keys(count: int, width: int = 3, value: str = "note {i} with the needle") -> dict[str, bytes]:
    return {
        f"k{i:0{width}}.json": _encode_entry(f"k{i:0{width}}", value.format(i=i))
        for i in range(count)
    }


def cut(text: str, field: str, caps: dict[str, int] = SMALL) -> dict[str, Any]:
    """A reply that was cut: within the caps, an object saying how many more and where next."""
    assert len(text) <= caps["max_reply_chars"], len(text)
    reply = json.loads(text)
    assert isinstance(reply, dict) and list(reply) == ["note", "total", "next_offset", field]
    assert 0 < len(reply[field]) <= caps["max_reply_entries"]
    return reply


async def all_pages(client: Client, tool: str, field: str, **args: Any) -> list[Any]:
    """Every item, page after page, each page checked."""
    items: list[Any] = []
    offset = 0
    while True:
        text = await call(client, tool, offset=offset, **args)
        reply = json.loads(text)
        if isinstance(reply, list):
            return items + reply
        reply = cut(text, field)
        more = reply["total"] - offset - len(reply[field])
        shown = f"{offset + 1:,}-{offset + len(reply[field]):,} of {reply['total']:,}"
        assert f"{field.capitalize()} {shown} ({more:,} more)" in reply["note"]
        assert f"again with offset={reply['next_offset']}" in reply["note"]
        assert reply["next_offset"] == offset + len(reply[field])
        items += reply[field]
        offset = reply["next_offset"]


# -- memory-tools ---------------------------------------------------------------------------


async def test_search_and_list_come_in_pages(memory_backend: dict[str, Any], tmp_path: Path):
    fill(memory_backend, tmp_path, keys(95))
    async with Client(create_server(Settings(**memory_backend, **SMALL))) as client:
        listed = await all_pages(client, "list_memory_keys", "keys")
        assert listed == [f"k{i:03}" for i in range(95)]
        found = await all_pages(client, "search_memory", "results", query="NEEDLE")
        assert found == [
            {"key": f"k{i:03}", "value": f"note {i} with the needle"} for i in range(95)
        ]
        assert json.loads(await call(client, "search_memory", query="k09")) == [
            {"key": f"k09{i}", "value": f"note 9{i} with the needle"} for i in range(5)
        ]  # a narrower query fits
        assert await call(client, "list_memory_keys", offset=1000) == "[]"


async def test_a_value_too_large_for_any_reply_is_listed_by_size(
    memory_backend: dict[str, Any], tmp_path: Path
):
    big = "needle " + "x" * 5_000
    entries = {**keys(3), "k001.json": _encode_entry("k001", big)}
    fill(memory_backend, tmp_path, entries)
    async with Client(create_server(Settings(**memory_backend, **SMALL))) as client:
        first = cut(await call(client, "search_memory", query="needle"), "results")
        assert first["results"] == [{"key": "k000", "value": "note 0 with the needle"}]
        rest = json.loads(await call(client, "search_memory", query="needle", offset=1))
        assert rest == [
            {"key": "k001", "value": None, "size": len(big)},
            {"key": "k002", "value": "note 2 with the needle"},
        ]
        assert await call(client, "read_memory", key="k001") == big


async def test_a_folder_view_says_how_many_more(memory_backend: dict[str, Any], tmp_path: Path):
    entries = {f"notes/n{i:02}.md": b"a note\n" for i in range(30)}
    fill(memory_backend, tmp_path, {**entries, **keys(10)})
    async with Client(create_server(Settings(**memory_backend, **SMALL))) as client:
        text = await call(client, "memory_view", path="/")
        lines = text.splitlines()
        assert len(text) <= SMALL["max_reply_chars"] and len(lines) == 2 + 20 + 1
        assert lines[-1] == (
            "[21 more entries not shown: a reply stops at 20 entries or 3,000 characters "
            "(max_reply_entries, max_reply_chars); view one of the folders listed to see its "
            "part, or find keys with list_memory_keys or search_memory]"
        )
        assert lines[2].endswith("\t/k000.json") and lines[-2].endswith("/notes/n08.md")
        inner = (await call(client, "memory_view", path="/notes")).splitlines()
        assert inner[-1].startswith("[10 more entries not shown:")


@pytest.mark.parametrize("offset", [0, 7, 40])
async def test_both_stores_answer_the_same_texts(redis_url: str, tmp_path: Path, offset: int):
    """The same entries in a folder and a namespace: the same replies, cut or not."""
    backends = [
        {"memory_dir": tmp_path / "mem"},
        {"backend": "redis", "url": redis_url, "namespace": f"same-{os.getpid()}-{offset}"},
    ]
    entries = {**keys(45), "deep/a/b.md": b"x\n", "notes/one.md": b"1\n"}
    texts = []
    for backend in backends:
        fill(backend, tmp_path, entries)
        async with Client(create_server(Settings(**backend, **SMALL))) as client:
            texts.append(
                [
                    await call(client, "search_memory", query="needle", offset=offset),
                    await call(client, "search_memory", query="note 1", offset=offset),
                    await call(client, "list_memory_keys", offset=offset),
                    await call(client, "memory_view", path="/"),
                    await call(client, "memory_view", path="/deep"),
                ]
            )
    assert texts[0] == texts[1]
    assert any("more" in text for text in texts[0])


@pytest.mark.slow
async def test_100k_memories_give_bounded_replies(memory_backend: dict[str, Any], tmp_path: Path):
    """At the default caps: a search matching all 100,000 keys was 5.5 MB, memory_view 1.9 MB."""
    fill(memory_backend, tmp_path, keys(100_000, width=6))
    caps = {
        "max_reply_entries": DEFAULT_MAX_REPLY_ENTRIES,
        "max_reply_chars": DEFAULT_MAX_REPLY_CHARS,
    }
    async with Client(create_server(Settings(**memory_backend))) as client:
        found = cut(await call(client, "search_memory", query="needle"), "results", caps)
        assert found["total"] == 100_000 and "(99,500 more)" in found["note"]
        listed = cut(await call(client, "list_memory_keys"), "keys", caps)
        assert listed["total"] == 100_000 and len(listed["keys"]) == 500
        view = await call(client, "memory_view", path="/")
        assert len(view) <= DEFAULT_MAX_REPLY_CHARS
        assert view.splitlines()[-1].startswith("[99,500 more entries not shown: a reply stops")


# -- filesystem --------------------------------------------------------------------------


def many_files(root: Path, count: int = 2_000) -> list[str]:
    """*count* files in 20 folders of *root* (sorted by path)."""
    names = []
    for i in range(count):
        folder = root / f"dir{i % 20:02}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"file{i:05}.txt").write_text("x" * (i % 7))
        names.append(f"dir{i % 20:02}/file{i:05}.txt")
    return sorted(names)


def note_line(text: str) -> str:
    last = text.splitlines()[-1]
    assert last.startswith("[") and " more " in last and last.endswith("]"), last
    return last


async def test_filesystem_listings_and_searches_are_capped_and_paged(tmp_path: Path):
    root = tmp_path / "root"
    flat = root / "flat"
    flat.mkdir(parents=True)
    for i in range(2_000):
        (flat / f"entry-{i:05}.txt").write_text("x")
    names = many_files(root / "tree")
    settings = filesystem.Settings(roots=[root])
    async with Client(filesystem.create_server(settings)) as client:
        listed = await call(client, "list_directory", path="flat")
        assert len(listed) <= DEFAULT_MAX_REPLY_CHARS and len(listed.splitlines()) == 501
        assert note_line(listed) == (
            "[1,500 more entries not shown: a reply stops at 500 entries or 64,000 characters "
            "(max_reply_entries, max_reply_chars); call list_directory again with offset=500 "
            "for the next ones, or list a subfolder, or find entries by name with search_files]"
        )
        seen: list[str] = []
        offset = 0
        while True:
            page = (await call(client, "list_directory", path="flat", offset=offset)).splitlines()
            if "more entries not shown" not in page[-1]:
                seen += page
                break
            seen += page[:-1]
            offset = int(re.search(r"offset=(\d+)", page[-1]).group(1))  # type: ignore[union-attr]
        assert seen == [f"[FILE] entry-{i:05}.txt" for i in range(2_000)]

        sized = await call(client, "list_directory_with_sizes", path="flat", offset=1_800)
        assert sized.splitlines()[-2:] == [
            "Total: 2000 files, 0 directories",
            "Combined size: 1.95 KB",
        ]
        assert sized.splitlines()[0].startswith("[FILE] entry-01800.txt")

        found = await call(client, "search_files", path="tree", pattern="**/*.txt")
        assert len(found) <= DEFAULT_MAX_REPLY_CHARS and len(found.splitlines()) == 501
        assert note_line(found).startswith("[1,500 more matches not shown: a reply stops at 500")
        assert "search_files again with offset=500" in note_line(found)
        rest = await call(client, "search_files", path="tree", pattern="**/*.txt", offset=1_900)
        assert [p.removeprefix(f"{root}/tree/") for p in rest.splitlines()] == sorted(
            names, key=lambda n: (n.split("/")[0], n)
        )[1_900:]

        tree = await call(client, "directory_tree", path="tree")
        assert len(tree) <= DEFAULT_MAX_REPLY_CHARS
        body, note = tree.rsplit("\n\n", 1)
        shown = body.count('"name"')
        assert 0 < shown <= 500 and note.startswith(f"[{2_020 - shown:,} more entries not shown:")
        assert "call directory_tree on a subfolder, or add excludePatterns" in note
        assert json.loads(body)[0]["name"] == "dir00"


async def test_read_multiple_files_stops_at_the_read_limit(tmp_path: Path):
    root = tmp_path / "root"
    root.mkdir()
    for i in range(5):
        (root / f"f{i}.txt").write_text(str(i) * 400)
    settings = filesystem.Settings(roots=[root], max_read_bytes=1_000, max_reply_entries=4)
    async with Client(filesystem.create_server(settings)) as client:
        text = await call(client, "read_multiple_files", paths=[f"f{i}.txt" for i in range(5)])
    parts = text.split("\n---\n")
    assert parts[0] == "f0.txt:\n" + "0" * 400 + "\n" and parts[1].startswith("f1.txt:\n1111")
    assert parts[2].startswith("f2.txt: not read: its 400 characters would take this reply past")
    assert parts[3].startswith("f3.txt: not read: its 400")
    assert parts[4] == (
        "[1 more paths not read: a reply reads at most 4 files (max_reply_entries); read them "
        "in another call]"
    )


# -- popoto-memory ---------------------------------------------------------------------------


@pytest.fixture
def popoto_url(tmp_path: Path) -> Any:
    from redis_helpers import REDIS_SERVER, SKIP_REASON, start_redis

    pytest.importorskip("popoto")
    if REDIS_SERVER is None:
        pytest.skip(SKIP_REASON)
    proc, port = start_redis(tmp_path)
    yield f"redis://127.0.0.1:{port}/1"
    proc.kill()
    proc.wait()


async def test_popoto_search_passes_on_a_bounded_answer(popoto_url: str):
    from doc_processing_std_tools import popoto_memory

    settings = popoto_memory.Settings(
        url=popoto_url, agent_id="bounds", max_reply_entries=3, max_reply_chars=2_000
    )
    async with Client(popoto_memory.create_server(settings)) as client:
        for i in range(5):
            fact = f"Fact {i}: the heron colony on island {i} nests in March."
            assert await call(client, "memory_save", content=fact) == "Saved 1 memory record(s)."
        text = await call(client, "memory_search", query="heron colony nests", limit=10)
        lines = text.splitlines()
        assert lines[0] == "5 memory result(s):" and len(lines) == 1 + 3 + 1
        assert all("heron colony" in line and "[key: " in line for line in lines[1:4])
        assert lines[-1] == (
            "[2 more results not shown: a reply stops at 3 entries or 2,000 characters "
            "(max_reply_entries, max_reply_chars); ask with a more specific query (or a "
            "smaller limit)]"
        )
        long = "The heron survey notes: " + "wading birds " * 120
        assert await call(client, "memory_save", content=long) == "Saved 1 memory record(s)."
        text = await call(client, "memory_search", query="heron survey wading", limit=10)
        assert len(text) <= 2_000 and "more results not shown" in text.splitlines()[-1]
