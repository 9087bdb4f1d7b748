"""Overlapping state-changing calls through spawned ``dpt-launch`` processes lose no edit.

Each ``memory_str_replace`` reads the whole file, changes one slot and writes the
whole file back, so without the lock overlapping calls would overwrite each
other's slots; ``memory_insert`` likewise rewrites the file. After the storm every
slot must be done, every inserted line present, every entry parseable, and no
temp file left behind.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from helpers.launch import launched, text_of

CALLS = 50


def memory_config(write_config, memory_dir: Path, name: str = "tools.yaml") -> Path:
    return write_config(
        f"""\
        servers:
          memory:
            server: memory-tools
            settings:
              memory_dir: {memory_dir}
        """,
        name=name,
    )


def slots_file(memory_dir: Path, count: int) -> None:
    memory_dir.mkdir(parents=True, exist_ok=True)
    (memory_dir / "slots.md").write_text("".join(f"slot-{i:03d}: empty\n" for i in range(count)))


async def storm(session, start: int, stop: int, errors: list[str]) -> None:
    """For each i: fill slot i, insert a line, and write key k-i and the shared key."""

    async def one(i: int) -> None:
        calls = [
            (
                "memory_str_replace",
                {
                    "path": "slots.md",
                    "old_str": f"slot-{i:03d}: empty",
                    "new_str": f"slot-{i:03d}: done",
                },
            ),
            ("memory_insert", {"path": "log.md", "insert_line": 0, "insert_text": f"line {i}"}),
            (
                "write_memory",
                {"key": "shared", "value": json.dumps({"writer": i, "pad": "x" * 2000})},
            ),
            ("write_memory", {"key": f"k/{i}", "value": f"value {i}"}),
        ]
        for name, arguments in calls:
            result = await session.call_tool(name, arguments)
            if result.is_error:
                errors.append(f"{name}: {text_of(result)}")

    async with anyio.create_task_group() as group:
        for i in range(start, stop):
            group.start_soon(one, i)


def assert_nothing_lost(memory_dir: Path, count: int) -> None:
    slots = (memory_dir / "slots.md").read_text().splitlines()
    assert slots == [f"slot-{i:03d}: done" for i in range(count)]
    log_lines = (memory_dir / "log.md").read_text().splitlines()
    assert sorted(log_lines) == sorted(f"line {i}" for i in range(count))
    shared = json.loads((memory_dir / "shared.json").read_text())
    assert json.loads(shared["value"])["writer"] in range(count)
    for i in range(count):
        entry = json.loads((memory_dir / f"k_{i}.json").read_text())
        assert entry == {"key": f"k/{i}", "value": f"value {i}"}
    leftovers = [p.name for p in memory_dir.iterdir() if p.name.startswith(".dpt-tmp")]
    assert leftovers == []


async def test_overlapping_calls_in_one_launcher(write_config, tmp_path: Path) -> None:
    memory_dir = tmp_path / "mem"
    slots_file(memory_dir, CALLS)
    (memory_dir / "log.md").write_text("")
    errors: list[str] = []
    async with launched(memory_config(write_config, memory_dir)) as session:
        await storm(session, 0, CALLS, errors)
        keys = json.loads(text_of(await session.call_tool("list_memory_keys", {})))
    assert errors == []
    assert_nothing_lost(memory_dir, CALLS)
    assert {f"k/{i}" for i in range(CALLS)} <= set(keys)


@pytest.mark.slow  # a storm: two launchers writing one folder at once
async def test_two_launchers_on_one_directory(write_config, tmp_path: Path) -> None:
    memory_dir = tmp_path / "mem"
    slots_file(memory_dir, CALLS)
    (memory_dir / "log.md").write_text("")
    first = memory_config(write_config, memory_dir, "a.yaml")
    second = memory_config(write_config, memory_dir, "b.yaml")
    errors: list[str] = []
    half = CALLS // 2

    async def run(config: Path, start: int, stop: int) -> None:
        async with launched(config) as session:
            await storm(session, start, stop, errors)

    async with anyio.create_task_group() as group:
        group.start_soon(run, first, 0, half)
        group.start_soon(run, second, half, CALLS)
    assert errors == []
    assert_nothing_lost(memory_dir, CALLS)
