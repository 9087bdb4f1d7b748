"""Bad-argument fuzz over every tool of the shipped config (issue 12, Reliability).

The composed server of ``configs/tools.yaml`` (memory-tools, filesystem and, with the extra,
popoto-memory) is driven in-process through fastmcp's Client; memory-tools and filesystem share
one folder, as in the shipped layout. Every tool gets wrong types, 2 MB strings, lone
surrogates, NUL, missing and extra arguments, one argument at a time (then hypothesis mixes
them). Every call ends in an ``isError`` or a result: never a traceback, never a crash; an
error quotes at most ~1 KB of the input and carries no library URL; a refused call changes
nothing in the folder (names and bytes, before and after). A real launcher over stdio answers
every request, malformed or not.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from doc_processing_std_tools.launcher.compose import compose
from doc_processing_std_tools.launcher.config import load_config
from helpers.paths import REPO
from helpers.rpc import initialize_params, message

HUGE = "x" * (2 * 1024 * 1024)
HUGE_PATH = "a/" * (1024 * 1024)
BAD_VALUES: list[Any] = [
    None,
    0,
    -1,
    10**30,
    1.5,
    True,
    "",
    [],
    {},
    ["x", 1],
    {"nested": {"deeper": [None]}},
    HUGE,
    HUGE_PATH,
    "\ud800",
    "a\udfffb",
    "\x00",
    "../" * 50,
    "/",
    ".dpt.lock",
    "agent_memory/.dpt.lock",
]
# Sensible values by parameter name, so a call differs from a good one in one argument only.
GOOD_BY_NAME: dict[str, Any] = {
    "key": "seed",
    "value": "v",
    "query": "seed",
    "file_text": "x",
    "old_str": "alpha",
    "new_str": "alpha",
    "insert_line": 0,
    "insert_text": "x",
    "old_path": "/notes.md",
    "new_path": "/moved.md",
    "view_range": None,
    "paths": ["a.txt"],
    "head": None,
    "tail": None,
    "sortBy": "name",
    "excludePatterns": [],
    "pattern": "*.txt",
    "content": "The fuzz test saved this fact.",
    "edits": [{"oldText": "alpha", "newText": "alpha"}],
    "dryRun": True,
    "source": "m1.txt",
    "destination": "m2.txt",
    "limit": 5,
    "importance": 0.5,
    "outcome": "useful",
}
GOOD_BY_TYPE = {"string": "x", "integer": 1, "number": 0.5, "boolean": False, "array": []}
ERROR_LIMIT = 2048  # ~1 KB of quoted input plus the sentence around it
WRITE_REPLY_LIMIT = 8 * 1024
LIBRARY_URLS = ("https://", "http://", "errors.pydantic.dev")


def good_value(tool: str, name: str, schema: dict[str, Any]) -> Any:
    if name == "path":
        return "/notes.md" if tool.startswith("memory_") else "a.txt"
    if name in GOOD_BY_NAME:
        return GOOD_BY_NAME[name]
    kind = schema.get("type") or next(
        (alt.get("type") for alt in schema.get("anyOf", []) if alt.get("type") != "null"), None
    )
    return GOOD_BY_TYPE.get(kind, "x")


def shipped_environment(base: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The shipped config on one folder: memory in base/work/agent_memory, filesystem on
    base/work, which is also the working directory (settings defaults read os.environ)."""
    work = base / "work"
    (work / "agent_memory").mkdir(parents=True)
    (work / "a.txt").write_text("alpha\nbeta\n")
    (work / "m1.txt").write_text("to move")
    (work / "agent_memory" / "notes.md").write_text("alpha\n")
    (work / "agent_memory" / "seed.json").write_text('{"key": "seed", "value": "seed value"}')
    monkeypatch.setenv("DPTTOOLS_MEMORY_DIR", str(work / "agent_memory"))
    monkeypatch.setenv("DPTTOOLS_FS_ROOTS", str(work))
    monkeypatch.setenv("XDG_DATA_HOME", str(base / "xdg"))  # popoto-memory's embedded store
    monkeypatch.chdir(work)
    return work


@asynccontextmanager
async def shipped_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Client, Path]]:
    """A client on the composed shipped config (entered and left in the test's own task:
    the composition's task group must be)."""
    work = shipped_environment(tmp_path, monkeypatch)
    composition = await compose(load_config(REPO / "configs" / "tools.yaml"))
    try:
        async with Client(composition.root) as client:
            seed = await call(client, "read_memory", {"key": "seed"})
            assert seed == (False, "seed value"), seed  # the folder the test watches
            # The first write makes the memory folder's lock marker (kept from then on).
            assert not (await call(client, "write_memory", {"key": "warm", "value": "up"}))[0]
            yield client, work
    finally:
        await composition.aclose()


def state(work: Path) -> dict[str, tuple]:
    """Names and bytes of everything in the folder; a big file (the 2 MB writes that
    succeeded) by size, inode and mtime instead, so a snapshot per call stays cheap (an
    atomic rewrite gets a new inode)."""
    found: dict[str, tuple] = {}
    for folder, dirs, files in os.walk(work):
        for name in [*dirs, *files]:
            path = Path(folder) / name
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode) and info.st_size > 65536:
                found[str(path)] = ("big", info.st_size, info.st_ino, info.st_mtime_ns)
            elif stat.S_ISREG(info.st_mode):
                found[str(path)] = ("file", path.read_bytes(), stat.S_IMODE(info.st_mode))
            elif stat.S_ISLNK(info.st_mode):
                found[str(path)] = ("link", os.readlink(path))
            else:
                found[str(path)] = ("dir", stat.S_IMODE(info.st_mode))
    return found


def changes(before: dict[str, tuple], after: dict[str, tuple]) -> str:
    """What differs between two snapshots, briefly."""
    lines = []
    for name in sorted(before.keys() | after.keys()):
        if before.get(name) != after.get(name):
            old, new = before.get(name), after.get(name)
            lines.append(f"{name}: {str(old)[:80]} -> {str(new)[:80]}")
    return "; ".join(lines)[:600]


def problems_of(tool: str, args: dict[str, Any], is_error: bool, text: str) -> list[str]:
    shown = {
        k: (v if len(repr(v)) < 80 else f"<{type(v).__name__} of {len(v):,}>")
        for k, v in args.items()
    }
    where = f"{tool}({shown})"
    found = []
    if "Traceback" in text or 'File "' in text:
        found.append(f"{where}: traceback text: {text[:300]}")
    if is_error:
        if not text.strip():
            found.append(f"{where}: empty error")
        if len(text) > ERROR_LIMIT:
            found.append(f"{where}: error of {len(text):,} characters: {text[:200]}")
        if any(url in text for url in LIBRARY_URLS):
            found.append(f"{where}: error carries a URL: {text[:300]}")
    elif len(text) > WRITE_REPLY_LIMIT and tool in WRITES:
        found.append(f"{where}: write reply of {len(text):,} characters")
    return found


WRITES = {
    "write_memory",
    "delete_memory",
    "memory_create",
    "memory_str_replace",
    "memory_insert",
    "memory_delete",
    "memory_rename",
    "write_file",
    "edit_file",
    "create_directory",
    "move_file",
    "memory_save",
    "memory_feedback",
}


async def call(client: Client, tool: str, args: dict[str, Any]) -> tuple[bool, str]:
    with anyio.fail_after(60):
        result = await client.call_tool(tool, args, raise_on_error=False)
    return result.is_error, "\n".join(getattr(block, "text", "") for block in result.content)


def bad_calls(tool: str, schema: dict[str, Any]) -> list[dict[str, Any]]:
    """One bad thing per call: each argument missing, of each bad value, or one extra."""
    properties = schema.get("properties", {})
    good = {name: good_value(tool, name, prop) for name, prop in properties.items()}
    calls: list[dict[str, Any]] = [{}]
    for name in properties:
        calls.append({k: v for k, v in good.items() if k != name})
        calls += [{**good, name: bad} for bad in BAD_VALUES]
    calls.append({**good, "unexpected": 1})
    calls.append({**good, "unexpected": HUGE})
    return calls


@pytest.mark.slow  # (a storm: every bad-argument shape against every tool, ~4 s of CPU)
async def test_every_tool_of_the_shipped_config_survives_bad_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with shipped_client(tmp_path, monkeypatch) as (client, work):
        await every_tool_survives_bad_arguments(client, work)


async def every_tool_survives_bad_arguments(client: Client, work: Path) -> None:
    tools = {tool.name: tool.input_schema for tool in await client.list_tools()}
    assert {"write_memory", "memory_rename", "edit_file", "move_file"} <= set(tools)
    problems: list[str] = []
    refusals = 0
    for tool, schema in sorted(tools.items()):
        for args in bad_calls(tool, schema):
            before = state(work)
            is_error, text = await call(client, tool, args)
            problems += problems_of(tool, args, is_error, text)
            if is_error:
                refusals += 1
                after = state(work)
                if after != before:
                    problems.append(
                        f"{tool}: a refused call changed the folder: {text[:200]}: "
                        f"{changes(before, after)}"
                    )
    assert problems == [], "\n".join(problems[:40])
    assert refusals > len(tools) * 10  # the bad arguments were refused, not ignored
    # still serving every server
    assert not (await call(client, "list_allowed_directories", {}))[0]
    assert not (await call(client, "list_memory_keys", {}))[0]


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("memory_insert", {"path": "/notes.md", "insert_line": 0, "insert_text": HUGE}),
        ("memory_str_replace", {"path": "/notes.md", "old_str": "alpha", "new_str": HUGE}),
    ],
)
async def test_edit_replies_quote_at_most_a_kilobyte_of_the_text_sent(
    tmp_path: Path, tool: str, args: dict[str, Any]
) -> None:
    from doc_processing_std_tools import memory

    (tmp_path / "notes.md").write_text("alpha\n")
    async with Client(memory.create_server(memory.Settings(memory_dir=tmp_path))) as client:
        is_error, text = await call(client, tool, args)
    assert not is_error, text[:300]
    assert len(text) <= ERROR_LIMIT, f"a reply of {len(text):,} characters"


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
ARG_VALUES = JSON_VALUES | st.sampled_from(BAD_VALUES) | st.text(max_size=40)


# Hypothesis warns when the global `random` state moves while it draws; here the composed
# server's own threads (the embedded store, redis-py's jittered backoff) may move it, which
# does not touch hypothesis's draws: it uses its own generator (CI saw this once).
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")
async def test_random_argument_mixes_on_the_shipped_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with shipped_client(tmp_path, monkeypatch) as (client, work):
        await random_argument_mixes(client, work)


async def random_argument_mixes(client: Client, work: Path) -> None:
    tools = {tool.name: tool.input_schema for tool in await client.list_tools()}
    problems: list[str] = []

    @st.composite
    def one_call(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
        tool = draw(st.sampled_from(sorted(tools)))
        params = sorted(tools[tool].get("properties", {}))
        chosen = draw(st.lists(st.sampled_from(params), unique=True)) if params else []
        args = {}
        for name in chosen:
            good = good_value(tool, name, tools[tool]["properties"][name])
            args[name] = draw(st.one_of(st.just(good), ARG_VALUES))
        if draw(st.integers(0, 4)) == 0:
            args[draw(st.sampled_from(["extra", "path2", ""]))] = draw(JSON_VALUES)
        return tool, args

    drawn: list[list[tuple[str, dict[str, Any]]]] = []

    @settings(
        max_examples=40,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.lists(one_call(), min_size=1, max_size=5))
    def collect(calls: list[tuple[str, dict[str, Any]]]) -> None:
        drawn.append(calls)

    collect()  # hypothesis draws; the calls run on the one composed server below
    for calls in drawn:
        for tool, args in calls:
            before = state(work)
            is_error, text = await call(client, tool, args)
            problems += problems_of(tool, args, is_error, text)
            after = state(work)
            if is_error and after != before:
                problems.append(
                    f"{tool}: a refused call changed the folder: {text[:200]}: "
                    f"{changes(before, after)}"
                )
    assert problems == [], "\n".join(problems[:40])


# -- a real launcher over stdio answers every request, malformed or not ------------------------

MALFORMED_LINES = [  # (id, line): well-formed JSON-RPC with bad content
    (
        12,
        b'{"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": {"name": "nope", '
        b'"arguments": {}}}',
    ),
    (
        13,
        b'{"jsonrpc": "2.0", "id": 13, "method": "tools/call", "params": {"name": "write_memory"}}',
    ),
    (15, b'{"jsonrpc": "2.0", "id": 15, "method": "no/such/method", "params": {}}'),
    (
        16,
        b'{"jsonrpc": "2.0", "id": 16, "method": "tools/call", "params": {"name": "read_memory", '
        b'"arguments": {"key": "' + b"y" * (2 * 1024 * 1024) + b'"}}}',
    ),
]
UNANSWERED_TODAY = [  # the "never gets any reply" over stdio
    (
        10,
        b'{"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {"name": "write_memory", '
        b'"arguments": {"key": "k\\ud800", "value": "v"}}}',
    ),
    (
        11,
        b'{"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {"name": "memory_view", '
        b'"arguments": {"path": "/\\udfff"}}}',
    ),
    (14, b'{"jsonrpc": "2.0", "id": 14, "method": "tools/call", "params": "not an object"}'),
]


def read_replies(
    config: Path, cwd: Path, lines: list[bytes], expected: set[int], timeout: float = 30
) -> dict[int, dict[str, Any]]:
    """Send *lines* to a launcher over stdio and keep its stdin open (as a client does) until
    every *expected* id is answered or *timeout* passes; the replies by id."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "doc_processing_std_tools.launcher.cli", "--config", str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=cwd,
    )
    assert proc.stdin is not None and proc.stdout is not None
    replies: dict[int, dict[str, Any]] = {}

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            message = json.loads(line)
            if "id" in message:
                replies[message["id"]] = message
            if expected <= set(replies):
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        proc.stdin.write(b"\n".join(lines) + b"\n")
        proc.stdin.flush()
        reader.join(timeout)
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return dict(replies)


@pytest.mark.slow
def test_a_real_launcher_answers_every_malformed_request(write_config, tmp_path: Path) -> None:
    check_every_request_is_answered(write_config, tmp_path, MALFORMED_LINES)


@pytest.mark.slow
def test_a_real_launcher_answers_lone_surrogates_and_non_object_params(
    write_config, tmp_path: Path
) -> None:
    check_every_request_is_answered(write_config, tmp_path, UNANSWERED_TODAY, timeout=5)


def check_every_request_is_answered(
    write_config, tmp_path: Path, requests: list[tuple[int, bytes]], timeout: float = 30
) -> None:
    config = write_config(
        f"""\
        servers:
          memory:
            server: memory-tools
            settings: {{memory_dir: {tmp_path / "mem"}}}
        """
    )
    lines = [
        json.dumps(message("initialize", initialize_params("fuzz"), id=1)).encode(),
        json.dumps(message("notifications/initialized")).encode(),
        *(line for _, line in requests),
        json.dumps(message("tools/list", {}, id=99)).encode(),
    ]
    expected = {1, 99, *(ident for ident, _ in requests)}
    replies = read_replies(config, tmp_path, lines, expected, timeout)
    assert set(replies) == expected, sorted(replies)
    for ident, _ in requests:
        reply = replies[ident]
        text = json.dumps(reply)
        assert "error" in reply or reply["result"].get("isError"), text[:300]
        assert len(text) < 4 * ERROR_LIMIT, text[:300]
        assert "Traceback" not in text and "errors.pydantic.dev" not in text, text[:300]


# -- cross-server tampering through the composed shipped config ------------------------------

RESERVED_TARGETS = [
    "agent_memory/.dpt.lock",  # memory-tools' lock marker
    ".dpt.lock",  # the filesystem root's own marker
    "agent_memory/.dpt-tmp-x",
    "agent_memory/.dpt",
    "lock-alias",  # a symlink to agent_memory/.dpt.lock
    "agent_memory/.DPT.lock/../.dpt.lock",
]


def tampering_calls(target: str) -> list[tuple[str, dict[str, Any]]]:
    if target == "lock-alias":  # the link is followed by these (move_file moves the link)
        return [
            ("write_file", {"path": target, "content": "x"}),
            ("edit_file", {"path": target, "edits": [{"oldText": "a", "newText": "b"}]}),
            ("create_directory", {"path": f"{target}/x"}),
            ("read_text_file", {"path": target}),
            ("get_file_info", {"path": target}),
        ]
    return [
        ("write_file", {"path": target, "content": "x"}),
        ("edit_file", {"path": target, "edits": [{"oldText": "a", "newText": "b"}]}),
        ("create_directory", {"path": target}),
        ("create_directory", {"path": f"{target}/x"}),
        ("move_file", {"source": target, "destination": "stolen"}),
        ("move_file", {"source": "a.txt", "destination": target}),
        ("read_text_file", {"path": target}),
        ("get_file_info", {"path": target}),
    ]


async def test_filesystem_tools_cannot_touch_any_reserved_name_of_either_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 12 item 8 through the shipped composition: every filesystem tool on every
    ``.dpt*`` name (directly, via ``..`` or a symlink) is refused, changes nothing, and
    memory-tools keeps working after each attempt."""
    async with shipped_client(tmp_path, monkeypatch) as (client, work):
        assert not (await call(client, "write_memory", {"key": "first", "value": "v"}))[0]
        assert (work / "agent_memory" / ".dpt.lock").exists()
        alias = work / "lock-alias"
        problems = []
        for n, (tool, args) in enumerate(
            [call_ for target in RESERVED_TARGETS for call_ in tampering_calls(target)]
        ):
            if not alias.is_symlink():
                alias.symlink_to("agent_memory/.dpt.lock")
            before = state(work)
            is_error, text = await call(client, tool, args)
            if not is_error:
                problems.append(f"{tool}({args}) was allowed: {text[:200]}")
            if state(work) != before:
                problems.append(f"{tool}({args}) changed the folder: {text[:200]}")
            wrote = await call(client, "write_memory", {"key": f"after-{n}", "value": tool})
            if wrote[0]:
                problems.append(f"memory broken after {tool}({args}): {wrote[1][:200]}")
        for tool, args in [
            ("list_directory", {"path": "agent_memory"}),
            ("directory_tree", {"path": "."}),
            ("search_files", {"path": ".", "pattern": "**/.dpt*"}),
        ]:
            is_error, text = await call(client, tool, args)
            if is_error or ".dpt" in text:
                problems.append(f"{tool} shows a reserved name: {text[:300]}")
    assert problems == [], "\n".join(problems)
