"""``dpt-launch init | tools | call | client-config``, run as users run them (a real process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from doc_processing_std_tools.shared.install_hint import install_extra
from helpers.launch import launcher_command
from helpers.paths import SERVERS


def run(
    *args: str, cwd: Path, env: dict[str, str] | None = None, here: bool = False
) -> subprocess.CompletedProcess:
    """``dpt-launch ARGS`` in a real process; with *here*, ``main(ARGS)`` in this one (for the
    variants of a verb a test has already run as users run it: a process start costs ~1 s)."""
    if here:
        return run_here(*args, cwd=cwd, env=env)
    return subprocess.run(
        [*launcher_command(), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


def run_here(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    import contextlib
    import io

    from doc_processing_std_tools.launcher.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    saved_cwd, saved_env = os.getcwd(), dict(os.environ)
    os.environ.update(env or {})
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def test_init_writes_a_config_that_checks_and_never_overwrites(tmp_path: Path) -> None:
    made = run("init", "tools.yaml", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    check = run("--config", "tools.yaml", "--check", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "write_memory" in check.stdout
    again = run("init", "tools.yaml", cwd=tmp_path, here=True)
    assert again.returncode == 2 and "exists" in again.stderr


def write_memory_config(tmp_path: Path) -> Path:
    config = tmp_path / "tools.yaml"
    config.write_text(
        f"servers:\n  memory-tools:\n    settings: {{memory_dir: {tmp_path / 'm'}}}\n"
    )
    return config


@pytest.mark.slow
def test_tools_lists_the_composed_table_as_json(tmp_path: Path) -> None:
    config = write_memory_config(tmp_path)
    listed = run("tools", "--config", str(config), "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert rows["read_memory"]["read_only"] and not rows["read_memory"]["locked"]
    assert rows["write_memory"]["locked"] and rows["write_memory"]["server"] == "memory-tools"


def test_tools_json_carries_each_tool_s_schemas_and_every_example_fits_them(
    tmp_path: Path,
) -> None:
    """``tools --json`` gives inputSchema and outputSchema; the example arguments ``tools NAME``
    builds from a schema are accepted by that schema, for every tool of every server."""
    import jsonschema

    from doc_processing_std_tools.launcher.cli.tool_help import example_arguments

    config = tmp_path / "tools.yaml"
    config.write_text(
        f"servers:\n  memory-tools:\n    settings: {{memory_dir: {tmp_path / 'm'}}}\n"
        f"  filesystem:\n    settings: {{roots: [{tmp_path}], read_only: false}}\n"
    )
    listed = run("tools", "--config", str(config), "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert len(rows) >= 25
    for row in rows:
        assert "outputSchema" in row and row["inputSchema"]["type"] == "object", row["name"]
        arguments = example_arguments(row["inputSchema"])
        assert set(arguments) == set(row["inputSchema"].get("required", [])), row["name"]
        jsonschema.Draft202012Validator(row["inputSchema"]).validate(arguments)


def test_tools_tables_fit_an_80_column_terminal(tmp_path: Path) -> None:
    """As --check's do: a table wider than the terminal wraps line by line and falls apart."""
    config = write_memory_config(tmp_path)
    for argv in ([], ["memory_insert"], ["--budget", "cursor"]):
        shown = run(
            "tools", "--config", str(config), *argv, cwd=tmp_path, env={"COLUMNS": "80"}, here=True
        )
        assert shown.returncode == 0, shown.stderr
        wide = [
            line
            for line in shown.stdout.splitlines()
            if len(line) > 80 and not line.strip().startswith("dpt-launch call")  # (to copy whole)
        ]
        assert not wide, (argv, wide)


def test_tools_name_shows_one_tool_with_an_example_call(tmp_path: Path) -> None:
    import shlex

    config = write_memory_config(tmp_path)
    shown = run("tools", "--config", str(config), "memory_insert", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "memory_insert (server memory-tools)" in out
    for parameter in ("path", "insert_line", "insert_text"):
        assert parameter in out
    assert "integer" in out and "Annotations: read-only no" in out
    line = next(line for line in out.splitlines() if line.strip().startswith("dpt-launch call"))
    words = shlex.split(line)
    assert words[:5] == ["dpt-launch", "call", "--config", str(config), "memory_insert"]
    assert set(json.loads(words[5])) == {"path", "insert_line", "insert_text"}
    one = run("tools", "--config", str(config), "memory_insert", "--json", cwd=tmp_path, here=True)
    assert json.loads(one.stdout)["inputSchema"]["required"] == [
        "path",
        "insert_line",
        "insert_text",
    ]
    typo = run("tools", "--config", str(config), "memory_insrt", cwd=tmp_path, here=True)
    assert typo.returncode == 2 and typo.stdout == ""
    assert typo.stderr.strip().splitlines() == [
        "dpt-launch: error: no tool 'memory_insrt'; did you mean 'memory_insert'? "
        "(see: dpt-launch tools)"
    ]


def test_call_prints_results_and_exits_1_on_a_tool_error(tmp_path: Path) -> None:
    config = str(write_memory_config(tmp_path))
    ok = run("call", "--config", config, "write_memory", '{"key": "k", "value": "v"}', cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    got = run("call", "--config", config, "read_memory", '{"key": "k"}', cwd=tmp_path, here=True)
    assert got.returncode == 0 and "v" in got.stdout
    missing = run(
        "call", "--config", config, "read_memory", '{"key": "nope"}', cwd=tmp_path, here=True
    )
    assert (
        missing.returncode == 1 and "nope" in missing.stderr and "Traceback" not in missing.stderr
    )
    bad = run("call", "--config", config, "read_memory", "{not json", cwd=tmp_path, here=True)
    assert bad.returncode == 2 and "not JSON" in bad.stderr
    typo = run("call", "--config", config, "read_memroy", "{}", cwd=tmp_path, here=True)
    assert typo.returncode == 2 and "did you mean 'read_memory'?" in typo.stderr


@pytest.mark.slow
def test_client_config_prints_each_client_s_snippet(tmp_path: Path) -> None:
    config = write_memory_config(tmp_path)
    for client, marker in [
        ("claude-code", "claude mcp add dpt -- "),
        ("claude-desktop", '"mcpServers"'),
        ("cursor", '"mcpServers"'),
        ("vscode", '"type": "stdio"'),
        ("codex", "[mcp_servers.dpt]"),
    ]:
        shown = run(
            "client-config", client, "--config", "tools.yaml", cwd=tmp_path,
            here=client != "claude-code",
        )  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        assert marker in shown.stdout and str(config) in shown.stdout  # absolute path
        assert "dpt-launch" in shown.stdout


@pytest.mark.slow
def test_client_config_write_merges_keeps_others_and_backs_up(tmp_path: Path) -> None:
    config = write_memory_config(tmp_path)
    home = tmp_path / "home"
    target = home / ".cursor" / "mcp.json"
    target.parent.mkdir(parents=True)
    target.write_text(json.dumps({"mcpServers": {"other": {"command": "x"}}, "keep": 1}))
    wrote = run(
        "client-config",
        "cursor",
        "--config",
        str(config),
        "--write",
        cwd=tmp_path,
        env={"HOME": str(home)},
    )
    assert wrote.returncode == 0, wrote.stderr
    data = json.loads(target.read_text())
    assert data["keep"] == 1 and data["mcpServers"]["other"] == {"command": "x"}
    assert data["mcpServers"]["dpt"]["args"] == ["--config", str(config), "--profile", "cursor"]
    assert len(list(target.parent.glob("mcp.json.bak-*"))) == 1
    codex = run(
        "client-config",
        "codex",
        "--config",
        str(config),
        "--write",
        cwd=tmp_path,
        env={"HOME": str(home)},
        here=True,
    )
    assert codex.returncode == 0, codex.stderr
    assert "[mcp_servers.dpt]" in (home / ".codex" / "config.toml").read_text()
    twice = run(
        "client-config",
        "codex",
        "--config",
        str(config),
        "--write",
        cwd=tmp_path,
        env={"HOME": str(home)},
        here=True,
    )
    assert twice.returncode == 0 and "already has this 'dpt' entry" in twice.stderr
    broken = home / ".config" / "Claude" / "claude_desktop_config.json"
    broken.parent.mkdir(parents=True)
    broken.write_text("{oops")
    refused = run(
        "client-config",
        "claude-desktop",
        "--config",
        str(config),
        "--write",
        cwd=tmp_path,
        env={"HOME": str(home)},
        here=True,
    )
    assert refused.returncode == 1 and "not valid JSON" in refused.stderr
    assert broken.read_text() == "{oops"  # a refused write changes nothing


def test_client_config_write_refuses_what_it_would_break(tmp_path: Path) -> None:
    """A codex file that is not TOML, or already names the entry in any TOML spelling, and a
    read-only file are left as they are; a symlinked file's target gets the entry."""
    config = write_memory_config(tmp_path)
    home = tmp_path / "home"
    codex = home / ".codex" / "config.toml"
    codex.parent.mkdir(parents=True)

    runs: list[str] = []

    def write(client: str, *extra: str) -> subprocess.CompletedProcess:
        runs.append(client)
        return run(
            "client-config", client, "--config", str(config), "--write", *extra,
            cwd=tmp_path, env={"HOME": str(home)}, here=len(runs) > 1,
        )  # fmt: skip

    for text, expected in [
        ('model = "o3"\n[broken\n', "is not valid TOML"),
        ('mcp_servers = { dpt = { command = "old" } }\n', "a different mcp_servers.dpt (old)"),
        ('[mcp_servers."dpt"]\ncommand = "old"\n', "a different mcp_servers.dpt (old)"),
    ]:
        codex.write_text(text)
        refused = write("codex")
        assert refused.returncode in (1, 2) and expected in refused.stderr, refused.stderr
        assert codex.read_text() == text
    codex.write_text('mcp_servers = { dpt = { command = "old" } }\n')
    inline = write("codex", "--force")  # (an inline table: not rewritten by hand-made TOML)
    assert inline.returncode == 1 and "remove it by hand" in inline.stderr

    real = home / "dotfiles" / "cursor-mcp.json"
    real.parent.mkdir()
    real.write_text(json.dumps({"mcpServers": {"other": {"command": "x"}}}))
    link = home / ".cursor" / "mcp.json"
    link.parent.mkdir()
    link.symlink_to(real)
    assert write("cursor").returncode == 0
    assert link.is_symlink() and "dpt" in json.loads(real.read_text())["mcpServers"]

    real.chmod(0o444)
    before = real.read_text()
    refused = write("cursor", "--name", "second")
    assert refused.returncode == 1 and "read-only" in refused.stderr
    assert real.read_text() == before

    for name in ("my server", "a.b"):
        bad = write("cursor", "--name", name)
        assert bad.returncode == 2 and "--name" in bad.stderr


@pytest.mark.slow
def test_the_claude_code_line_survives_a_path_with_spaces(tmp_path: Path) -> None:
    import shlex

    folder = tmp_path / "my configs"
    folder.mkdir()
    config = write_memory_config(folder)
    shown = run("client-config", "claude-code", "--config", str(config), cwd=tmp_path)
    words = shlex.split(shown.stdout)
    assert words[:5] == ["claude", "mcp", "add", "dpt", "--"]
    assert words[-4:] == ["--config", str(config), "--profile", "claude-code"]


@pytest.mark.slow
def test_tools_into_a_closed_pipe_is_quiet(tmp_path: Path) -> None:
    config = write_memory_config(tmp_path)
    command = " ".join(shlex_quote(part) for part in launcher_command())
    piped = subprocess.run(
        f"{command} tools --config {shlex_quote(str(config))} --json | true",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in piped.stderr and "Error" not in piped.stderr, piped.stderr


def shlex_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def test_init_says_where_memory_goes_and_a_missing_config_points_to_init(tmp_path: Path) -> None:
    """The starter's memory_dir comment says what the default is (not 'next to this file'), and
    a config that is not there names ``dpt-launch init`` (pip users have no configs/ folder)."""
    made = run("init", "tools.yaml", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    text = (tmp_path / "tools.yaml").read_text()
    memory_line = next(line for line in text.splitlines() if "memory_dir" in line)
    assert "(next to this file)" not in memory_line
    assert "project the client" in memory_line and "per-user folder" in text
    missing = run("tools", "--config", "absent.yaml", cwd=tmp_path, here=True)
    assert missing.returncode == 2
    assert "dpt-launch init" in missing.stderr and "configs/tools.yaml" not in missing.stderr
    served = run("--config", "absent.yaml", "--check", cwd=tmp_path)
    assert served.returncode == 2 and "dpt-launch init" in served.stderr


def test_init_names_this_install_s_pip_and_lines_up_its_comments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # (install_extra names pip relative to a clone it runs in)
    made = run("init", "tools.yaml", cwd=tmp_path, here=True)
    assert made.returncode == 0, made.stderr
    lines = (tmp_path / "tools.yaml").read_text().splitlines()
    popoto = next(line for line in lines if line.startswith("  # popoto-memory:"))
    assert popoto.endswith(f"# needs: {install_extra('popoto')}")  # (where dpt-launch runs)
    at = next(i for i, line in enumerate(lines) if "# memory_dir:" in line)
    assert lines[at].index("#") == lines[at + 1].index("#")  # a comment and its continuation


def test_client_config_with_a_token_variable_gives_gui_clients_an_env_block(
    tmp_path: Path,
) -> None:
    """GUI clients do not inherit the shell's environment: the entry carries the variable with
    a placeholder, stderr says to fill it in, and connect refuses the placeholder by name."""
    import tomllib

    from doc_processing_std_tools.launcher.cli.client_config import TOKEN_PLACEHOLDER

    flags = ["--url", "http://127.0.0.1:8765/mcp", "--token-env", "DPT_TOKEN"]
    for client, key in [
        ("claude-desktop", "mcpServers"),
        ("cursor", "mcpServers"),
        ("vscode", "servers"),
    ]:
        shown = run("client-config", client, *flags, cwd=tmp_path, here=client != "cursor")
        assert shown.returncode == 0, shown.stderr
        entry = json.loads(shown.stdout)[key]["dpt"]
        assert entry["env"] == {"DPT_TOKEN": TOKEN_PLACEHOLDER}
        assert "replace " + TOKEN_PLACEHOLDER in shown.stderr and "DPT_TOKEN" in shown.stderr
    codex = run("client-config", "codex", *flags, cwd=tmp_path, here=True)
    entry = tomllib.loads(codex.stdout)["mcp_servers"]["dpt"]
    assert entry["env"] == {"DPT_TOKEN": TOKEN_PLACEHOLDER}
    code = run("client-config", "claude-code", *flags, cwd=tmp_path, here=True)
    assert TOKEN_PLACEHOLDER not in code.stdout + code.stderr  # a terminal program: it inherits
    unfilled = run(
        "connect", "http://127.0.0.1:9/mcp", "--token-env", "DPT_TOKEN",
        cwd=tmp_path, env={"DPT_TOKEN": TOKEN_PLACEHOLDER},
    )  # fmt: skip
    assert unfilled.returncode == 2 and "placeholder" in unfilled.stderr


def test_client_config_refuses_config_with_url(tmp_path: Path) -> None:
    """``--url``'s entry runs ``connect URL``: a ``--config`` beside it would be ignored."""
    write_memory_config(tmp_path)
    url = "http://127.0.0.1:8765/mcp"
    both = run(
        "client-config", "cursor", "--url", url, "--config", "tools.yaml", cwd=tmp_path, here=True
    )
    assert (both.returncode, both.stdout) == (2, "")
    assert both.stderr.strip().splitlines() == [
        "dpt-launch: error: --config and --url do not go together: --url's entry connects to "
        "the daemon, which serves its own config; drop one"
    ]
    alone = run("client-config", "cursor", "--url", url, cwd=tmp_path, here=True)
    assert alone.returncode == 0 and "connect" in alone.stdout


MARKING_SERVER = """\
import pathlib, runpy, sys

pathlib.Path(sys.argv[1]).touch()  # proof that this server was started
sys.argv = [{server!r}, sys.argv[2]]
runpy.run_path({server!r}, run_name="__main__")
"""


@pytest.mark.slow
def test_call_starts_only_the_server_that_owns_the_tool(tmp_path: Path) -> None:
    """An in-process tool starts no external server; an external tool starts only the server
    whose namespace can produce its name."""
    script = tmp_path / "marking_server.py"
    server = SERVERS / "external_server.py"
    script.write_text(MARKING_SERVER.format(server=str(server)))
    config = write_memory_config(tmp_path)
    for name in ("ext", "other"):
        marker, counter = tmp_path / f"{name}.started", tmp_path / f"{name}.count"
        config.write_text(
            config.read_text()
            + f"  {name}:\n    command: {json.dumps(sys.executable)}\n"
            + f"    args: [{json.dumps(str(script))}, {json.dumps(str(marker))}, "
            + f"{json.dumps(str(counter))}]\n    namespace: {name}\n"
        )
    wrote = run(
        "call", "--config", str(config), "write_memory", '{"key": "k", "value": "v"}',
        cwd=tmp_path,
    )  # fmt: skip
    assert wrote.returncode == 0, wrote.stderr
    assert not (tmp_path / "ext.started").exists() and not (tmp_path / "other.started").exists()
    assert (tmp_path / "m" / "k.json").exists()  # the call did run
    external = run("call", "--config", str(config), "ext_whoami", cwd=tmp_path, here=True)
    assert external.returncode == 0, external.stderr
    assert external.stdout.strip().isdigit()  # its text (a pid), not {"result": pid}
    assert (tmp_path / "ext.started").exists() and not (tmp_path / "other.started").exists()
    typo = run("call", "--config", str(config), "ext_whoamii", cwd=tmp_path, here=True)
    assert typo.returncode == 2 and "did you mean 'ext_whoami'?" in typo.stderr


def test_tools_and_call_say_why_a_server_serves_nothing(tmp_path: Path) -> None:
    config = tmp_path / "tools.yaml"
    config.write_text(
        "servers:\n  memory-tools:\n"
        '    settings: {backend: redis, url: "redis://127.0.0.1:1/0"}\n'  # (nothing listens)
    )
    listed = run("tools", "--config", str(config), cwd=tmp_path, here=True)
    assert listed.returncode == 1, listed.stderr
    assert "servers.memory-tools serves nothing:" in listed.stderr
    assert "Cannot reach Redis at redis://127.0.0.1:1/0" in listed.stderr
    called = run("call", "--config", str(config), "read_memory", '{"key": "a"}', cwd=tmp_path)
    assert called.returncode == 1
    assert called.stderr.strip().splitlines() == [
        line for line in called.stderr.strip().splitlines() if "no tool 'read_memory'" in line
    ]
    assert "no tool 'read_memory' is served now: servers.memory-tools serves nothing" in (
        called.stderr
    )


FILE_CLIENTS = {
    "claude-desktop": ("home", ".config/Claude/claude_desktop_config.json", "mcpServers"),
    "cursor": ("home", ".cursor/mcp.json", "mcpServers"),
    "vscode": ("cwd", ".vscode/mcp.json", "servers"),
    "windsurf": ("home", ".codeium/windsurf/mcp_config.json", "mcpServers"),
    "codex": ("home", ".codex/config.toml", "mcp_servers"),
}


@pytest.mark.parametrize("client", sorted(FILE_CLIENTS))
def test_client_config_write_replaces_a_different_entry_only_with_force(
    tmp_path: Path, client: str
) -> None:
    """Every client's file: a different ``dpt`` entry is refused (exit 2, naming what it runs)
    unless ``--force``, which replaces it, says what it replaced and keeps a backup; the same
    entry again changes nothing."""
    import tomllib

    config = write_memory_config(tmp_path)
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    where, relative, key = FILE_CLIENTS[client]
    target = (home if where == "home" else work) / relative
    target.parent.mkdir(parents=True)
    if client == "codex":
        old = 'model = "o3"\n\n[mcp_servers.dpt]\ncommand = "/old/dpt-launch"\nargs = ["--old"]\n'
        old += '\n[mcp_servers.dpt.env]\nX = "1"\n\n[mcp_servers.other]\ncommand = "x"\n'
    else:
        entries = {
            "dpt": {"command": "/old/dpt-launch", "args": ["--old"]},
            "other": {"command": "x"},
        }
        old = json.dumps({key: entries})
    target.write_text(old)

    def write(*extra: str) -> subprocess.CompletedProcess:
        return run(
            "client-config", client, "--config", str(config), "--write", *extra,
            cwd=work, env={"HOME": str(home)}, here=True,
        )  # fmt: skip

    def entries_now() -> dict:
        text = target.read_text()
        return tomllib.loads(text)[key] if client == "codex" else json.loads(text)[key]

    refused = write()
    assert refused.returncode == 2, refused.stderr
    assert "/old/dpt-launch --old" in refused.stderr and "--force" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert target.read_text() == old and not list(target.parent.glob("*.bak-*"))

    forced = write("--force")
    assert forced.returncode == 0, forced.stderr
    assert "replaced the 'dpt' entry" in forced.stderr and "/old/dpt-launch --old" in forced.stderr
    (backup,) = target.parent.glob("*.bak-*")
    assert backup.read_text() == old and str(backup) in forced.stderr
    now = entries_now()
    assert now["other"] == {"command": "x"}
    assert now["dpt"]["args"] == ["--config", str(config), "--profile", client]
    assert "env" not in now["dpt"]

    again = write()
    assert again.returncode == 0 and "already has this 'dpt' entry" in again.stderr
    assert len(list(target.parent.glob("*.bak-*"))) == 1
