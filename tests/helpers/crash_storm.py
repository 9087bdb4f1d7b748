"""The SIGKILL storm (issue 12, Reliability), plain async code shared by
``tests/end_to_end/test_crash_storm.py`` and ``benchmarks/soak.py``.

Real ``dpt-launch`` processes with memory-tools and filesystem on one folder (the shipped
layout), writes over stdio with the official mcp client, the launcher killed mid-write, again
and again. After every round: no acknowledged write is lost, no file is torn (each one holds a
whole self-describing payload), no temp file is visible through any tool; at the end, the temp
files of the dead writers are removed at start. :func:`storm` runs it and reports.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from doc_processing_std_tools.containment import RESERVED_PREFIX, TEMP_PREFIX
from doc_processing_std_tools.memory.folder import SWEEP_DELAY
from helpers.launch import text_of

WRITERS = 2  # tasks per kind of write, all on one session


# -- payloads: every file says what it must hold, so a torn one is caught -----------------


def payload(tag: str, size: int) -> str:
    """``<tag|size|filler>``: the header names the whole, the filler depends on the tag."""
    unit = tag + "."
    return f"<{tag}|{size}|{(unit * (size // len(unit) + 1))[:size]}>"


def whole(text: str) -> str | None:
    """The tag of a payload that is whole, else None (torn, empty, or not a payload)."""
    if not text.startswith("<") or "|" not in text:
        return None
    tag, _, rest = text[1:].partition("|")
    size, _, _ = rest.partition("|")
    if not size.isdigit():
        return None
    return tag if text == payload(tag, int(size)) else None


# -- the launcher ---------------------------------------------------------------------------


def storm_config(folder: Path, *, popoto: bool = False) -> Path:
    """memory-tools in folder/agent_memory and filesystem on folder (+ popoto-memory)."""
    config = folder.parent / f"{folder.name}-tools.yaml"
    text = (
        "servers:\n"
        "  memory:\n"
        "    server: memory-tools\n"
        f"    settings: {{memory_dir: {folder / 'agent_memory'}}}\n"
        "  filesystem:\n"
        f"    settings: {{roots: [{folder}], read_only: false}}\n"
    )
    if popoto:
        store = folder.parent / "popoto-store"
        text += (
            "  popoto-memory:\n"
            f"    settings: {{backend: embedded, agent_id: storm, data_dir: {store}}}\n"
        )
    config.write_text(text, encoding="utf-8")
    return config


def launcher_pids(config: Path) -> list[int]:
    """Live processes started with *config* on their command line (Linux: /proc)."""
    wanted = os.fsencode(str(config))
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if wanted in argv and state != "Z":
            found.append(int(entry.name))
    return found


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state == "Z":
            return True
        time.sleep(0.02)
    return False


def session_params(config: Path, folder: Path):  # -> StdioServerParameters
    from mcp import StdioServerParameters

    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "doc_processing_std_tools.launcher.cli", "--config", str(config)],
        env={**os.environ, "FASTMCP_LOG_LEVEL": "WARNING"},
        cwd=str(folder),
    )


# -- what was acknowledged ------------------------------------------------------------------


@dataclass
class Acks:
    """Every write the launcher acknowledged (a reply without isError)."""

    memory_keys: dict[str, str] = field(default_factory=dict)  # key -> payload tag
    counters: dict[str, int] = field(default_factory=dict)  # key -> highest acked sequence
    log_lines: dict[str, int] = field(default_factory=dict)  # memory file -> lines acked
    files: dict[str, str] = field(default_factory=dict)  # relative path -> payload tag
    big: dict[str, int] = field(default_factory=dict)  # relative path -> highest acked seq
    slots: dict[str, int] = field(default_factory=dict)  # relative path -> slots done
    errors: list[str] = field(default_factory=list)  # isError replies: none expected
    calls: int = 0


@dataclass
class StormReport:
    rounds: int = 0
    calls: int = 0
    killed_mid_call: int = 0  # rounds whose kill caught at least one call in flight
    litter_seen: int = 0  # temp files on disk right after the kills, summed
    problems: list[str] = field(default_factory=list)


SLOTS = 400


def lost_to_the_kill(exc: BaseException, killed: anyio.Event) -> bool:
    """True when *exc* (or every error inside it) is how the mcp client reports that the
    launcher died, after the test killed it: a crash or a bug before the kill is not."""
    from mcp import MCPError
    from mcp_types import CONNECTION_CLOSED

    if not killed.is_set():
        return False
    if isinstance(exc, BaseExceptionGroup):
        return all(lost_to_the_kill(inner, killed) for inner in exc.exceptions)
    if isinstance(exc, MCPError):
        return exc.error.code == CONNECTION_CLOSED
    return isinstance(
        exc, (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)
    )


async def writer(
    session, kind: str, n: int, round_: int, acks: Acks, stop: anyio.Event, killed: anyio.Event
) -> bool:
    """Write until *stop*; return whether a call was in flight when the launcher was killed."""
    rng = random.Random(f"{round_}-{kind}-{n}")
    seq = 0
    while not stop.is_set():
        seq += 1
        if kind == "kv":
            if seq % 2:
                key = f"r{round_}-w{n}-{seq}"
                call = (
                    "write_memory",
                    {"key": key, "value": payload(key, rng.randint(10, 30_000))},
                )
            else:
                key = f"counter-{n}"
                tag = f"{key}#{round_}.{seq:06d}"
                call = (
                    "write_memory",
                    {"key": key, "value": payload(tag, rng.randint(10, 30_000))},
                )
        elif kind == "log":
            path = f"logs/log-{n}.md"
            line = acks.log_lines.get(path, 0)
            call = (
                "memory_insert",
                {"path": path, "insert_line": line, "insert_text": f"line {line}\n"},
            )
        elif kind == "files":
            if seq % 2:
                path = f"files/r{round_}-w{n}-{seq}.txt"
                tag = path
            else:
                path = f"files/big-{n}.txt"
                tag = f"{path}#{round_}.{seq:06d}"
            call = ("write_file", {"path": path, "content": payload(tag, rng.randint(10, 100_000))})
        else:  # "edit": one slot after the other, through edit_file
            path = f"slots-{n}.md"
            slot = acks.slots.get(path, 0)
            if slot >= SLOTS:
                await anyio.sleep(0.01)
                continue
            edit = {"oldText": f"slot-{slot:04d}: empty", "newText": f"slot-{slot:04d}: done"}
            call = ("edit_file", {"path": path, "edits": [edit]})
        try:
            result = await session.call_tool(*call)
        except Exception as exc:
            if not lost_to_the_kill(exc, killed):
                raise
            return True  # the launcher died under this call
        acks.calls += 1
        if result.is_error:
            acks.errors.append(
                f"{call[0]} {call[1].get('path') or call[1].get('key')}: {text_of(result)[:300]}"
            )
            continue
        args = call[1]
        if kind == "kv":
            if seq % 2:
                acks.memory_keys[args["key"]] = args["key"]
            else:
                acks.counters[args["key"]] = max(
                    acks.counters.get(args["key"], 0), round_ * 10**6 + seq
                )
        elif kind == "log":
            acks.log_lines[args["path"]] = args["insert_line"] + 1
        elif kind == "files":
            if seq % 2:
                acks.files[args["path"]] = args["path"]
            else:
                acks.big[args["path"]] = max(acks.big.get(args["path"], 0), round_ * 10**6 + seq)
        else:
            acks.slots[args["path"]] = acks.slots.get(args["path"], 0) + 1
    return False


def seq_of(tag: str) -> int:
    """``name#round.seq`` -> round * 10**6 + seq."""
    round_, _, seq = tag.rpartition("#")[2].partition(".")
    return int(round_) * 10**6 + int(seq)


def check_disk(folder: Path, acks: Acks) -> list[str]:
    """What is on disk against what was acknowledged: lost writes and torn files."""
    problems: list[str] = []
    mem = folder / "agent_memory"
    for path in sorted(mem.glob("*.json")):
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
            value = entry["value"]
        except (ValueError, KeyError, TypeError) as exc:
            problems.append(f"torn memory entry {path.name}: {exc}")
            continue
        tag = whole(value)
        if tag is None or entry["key"] != path.stem:
            problems.append(f"torn memory entry {path.name}")
        elif tag.startswith("counter-") and seq_of(tag) < acks.counters.get(path.stem, 0):
            problems.append(
                f"lost write: {path.name} holds {tag}, acked {acks.counters[path.stem]}"
            )
    for key in acks.memory_keys:
        if not (mem / f"{key}.json").exists():
            problems.append(f"lost write: memory key {key}")
    for key in acks.counters:
        if not (mem / f"{key}.json").exists():
            problems.append(f"lost write: memory key {key}")
    for rel, count in acks.log_lines.items():
        path = mem / rel
        lines = path.read_text().splitlines() if path.exists() else []
        if lines[:count] != [f"line {i}" for i in range(count)] or len(lines) > count + 1:
            problems.append(f"log {rel}: {len(lines)} lines, {count} acked: {lines[:3]}...")
        # the insert in flight at the kill may have landed: it is whole or absent
        if len(lines) == count + 1 and lines[-1] != f"line {count}":
            problems.append(f"torn log line in {rel}: {lines[-1]!r}")
        acks.log_lines[rel] = len(lines)  # the next round appends after what is there
    files = folder / "files"
    for path in sorted(files.glob("*")) if files.exists() else []:
        if path.name.startswith(RESERVED_PREFIX):
            continue
        rel = f"files/{path.name}"
        tag = whole(path.read_text(encoding="utf-8"))
        if tag is None:
            problems.append(f"torn file {rel}")
        elif tag.startswith("files/big-") and seq_of(tag) < acks.big.get(rel, 0):
            problems.append(f"lost write: {rel} holds {tag}, acked {acks.big[rel]}")
    for rel in [*acks.files, *acks.big]:
        if not (folder / rel).exists():
            problems.append(f"lost write: {rel}")
    for rel, done in acks.slots.items():
        lines = (folder / rel).read_text().splitlines()
        expected_done = [f"slot-{i:04d}: done" for i in range(done)]
        now_done = sum(line.endswith(": done") for line in lines)
        if lines[:done] != expected_done or now_done not in (done, done + 1) or len(lines) != SLOTS:
            problems.append(f"{rel}: {now_done} slots done, {done} acked")
        acks.slots[rel] = now_done
    return problems


def litter(folder: Path) -> list[Path]:
    return sorted(folder.rglob(f"{TEMP_PREFIX}*"))


LITTERED = ("", "files", "agent_memory", "agent_memory/logs")


def drop_litter(folder: Path, round_: int) -> None:
    """What a writer killed between creating its temp file and renaming it leaves (a kill
    lands in that window only now and then): a half-written temp file in every folder."""
    for where in LITTERED:
        (folder / where / f"{TEMP_PREFIX}dead{round_}").write_text('{"key": "half", "value": "wr')


SHOWN_BY = [  # every listing of both servers: none may show a .dpt* name
    ("list_directory", {"path": "."}),
    ("list_directory", {"path": "files"}),
    ("list_directory", {"path": "agent_memory"}),
    ("list_directory_with_sizes", {"path": "agent_memory"}),
    ("directory_tree", {"path": "."}),
    ("search_files", {"path": ".", "pattern": "**"}),
    ("search_files", {"path": ".", "pattern": "**/.dpt*"}),
    ("memory_view", {"path": "/"}),
    ("memory_view", {"path": "/logs"}),
    ("list_memory_keys", {}),
    ("search_memory", {"query": "dpt-tmp"}),
]


async def check_listings(session) -> list[str]:
    problems = []
    for tool, args in SHOWN_BY:
        result = await session.call_tool(tool, args)
        text = text_of(result)
        if result.is_error:
            problems.append(f"{tool} {args}: error {text[:200]}")
        elif RESERVED_PREFIX in text:
            problems.append(f"{tool} {args} shows a reserved name: {text[:300]}")
    return problems


def prepare(folder: Path) -> None:
    (folder / "agent_memory" / "logs").mkdir(parents=True, exist_ok=True)
    (folder / "files").mkdir(exist_ok=True)
    for n in range(WRITERS):
        (folder / "agent_memory" / "logs" / f"log-{n}.md").touch()
        slots = folder / f"slots-{n}.md"
        if not slots.exists():
            slots.write_text("".join(f"slot-{i:04d}: empty\n" for i in range(SLOTS)))


async def one_round(
    config: Path, folder: Path, round_: int, acks: Acks, report: StormReport, rng: random.Random
) -> None:
    """Start a launcher, check it shows no litter, write from every kind of task, SIGKILL it."""
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    stop, killed = anyio.Event(), anyio.Event()
    in_flight: list[bool] = []
    with tempfile.TemporaryFile("w+") as errlog:
        try:
            with anyio.fail_after(60):
                async with (
                    stdio_client(session_params(config, folder), errlog=errlog) as (read, write),
                    ClientSession(read, write) as session,
                ):
                    await session.initialize()
                    report.problems += [
                        f"round {round_}: {p}" for p in await check_listings(session)
                    ]
                    (pid,) = launcher_pids(config)

                    async def run(kind: str, n: int) -> None:
                        in_flight.append(await writer(session, kind, n, round_, acks, stop, killed))

                    async with anyio.create_task_group() as group:
                        for kind in ("kv", "log", "files", "edit"):
                            for n in range(WRITERS):
                                group.start_soon(run, kind, n)
                        await anyio.sleep(rng.uniform(0.1, 0.6))
                        killed.set()
                        os.kill(pid, signal.SIGKILL)
                        await anyio.to_thread.run_sync(wait_gone, pid)
                        stop.set()
        except Exception as exc:
            if not lost_to_the_kill(exc, killed):
                errlog.seek(0)
                raise AssertionError(f"round {round_}: {exc!r}\n{errlog.read()[-2000:]}") from exc
    report.killed_mid_call += any(in_flight)


async def storm(folder: Path, rounds: int, *, seed: int = 12) -> StormReport:
    """*rounds* launches of memory-tools + filesystem on *folder*, each SIGKILLed mid-write."""
    folder.mkdir(parents=True, exist_ok=True)
    prepare(folder)
    config = storm_config(folder)
    acks = Acks()
    report = StormReport()
    rng = random.Random(seed)
    for round_ in range(1, rounds + 1):
        await one_round(config, folder, round_, acks, report, rng)
        report.rounds += 1
        planted = f"{TEMP_PREFIX}dead"
        report.litter_seen += sum(not p.name.startswith(planted) for p in litter(folder))
        drop_litter(folder, round_)  # the next launcher must not show it
        report.problems += [f"round {round_}: {p}" for p in check_disk(folder, acks)]
    report.calls = acks.calls
    report.problems += [f"isError reply: {e}" for e in acks.errors]
    # Dead writers' temp files older than the staleness age go at start: age them all.
    for path in litter(folder):
        past = time.time() - 3600
        os.utime(path, (past, past))
    report.problems += await final_start(config, folder)
    return report


async def final_start(config: Path, folder: Path) -> list[str]:
    """Start once more: litter of dead writers is swept at start and shown nowhere."""
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    problems: list[str] = []
    with tempfile.TemporaryFile("w+") as errlog, anyio.fail_after(60):
        async with (
            stdio_client(session_params(config, folder), errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            top = [p for p in litter(folder) if p.parent == folder]
            if top:
                problems.append(f"filesystem root litter left after start: {top}")
            first = await session.call_tool("list_memory_keys", {})  # memory's first use
            if RESERVED_PREFIX in text_of(first):
                problems.append(f"list_memory_keys shows litter: {text_of(first)[:300]}")
            # memory sweeps its folder tree a moment after its first call (SWEEP_DELAY),
            # so the first call does not wait for it; listings hide the litter meanwhile
            deadline = time.monotonic() + SWEEP_DELAY + 15
            while (left := litter(folder / "agent_memory")) and time.monotonic() < deadline:
                await anyio.sleep(0.2)
            if left:
                problems.append(f"memory litter left after its sweep: {left[:5]}")
            problems += await check_listings(session)  # the tree walk sweeps the rest
    left = litter(folder)
    if left:
        problems.append(f"{len(left)} temp files left after every folder was listed: {left[:5]}")
    return problems
