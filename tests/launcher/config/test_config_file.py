"""The config file as ``dpt-launch`` reads it: every error is one line (exit 2) naming the file,
the line and the key; environment expansion follows the shell; paths resolve against the
config's folder."""

from __future__ import annotations

import asyncio
import re
import subprocess
from pathlib import Path

import pytest

from doc_processing_std_tools.launcher.config import ConfigError, load_config
from helpers.launch import launcher_command, run_main

# -- errors: exit 2, one line naming the file, the line and the key ---------------------


def config_error(write_config, text: str, capsys) -> tuple[Path, str]:
    path = write_config(text)
    status, out, err = run_main(["--config", str(path), "--check"], capsys)
    assert status == 2, err
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err  # one line, no traceback
    assert lines[0].startswith("dpt-launch: error: ")
    return path, lines[0]


def test_missing_file(tmp_path: Path, capsys) -> None:
    status, _, err = run_main(["--config", str(tmp_path / "nope.yaml")], capsys)
    assert status == 2
    assert "nope.yaml: config file not found" in err
    assert "--config" in err


def test_invalid_yaml_names_the_line(write_config, capsys) -> None:
    path, message = config_error(
        write_config,
        """\
        servers:
          memory:
            server: memory-tools
           settings: [unclosed
        """,
        capsys,
    )
    assert f"{path}:4" in message or f"{path}:5" in message
    assert "invalid YAML" in message


def test_unknown_top_level_key_suggests_the_right_one(write_config, capsys) -> None:
    path, message = config_error(
        write_config,
        """\
        name: x
        servres:
          memory: {}
        """,
        capsys,
    )
    assert f"{path}:2: servres: unknown key; did you mean 'servers'?" in message


def test_unknown_entry_key(write_config, capsys) -> None:
    path, message = config_error(
        write_config,
        """\
        servers:
          memory:
            server: memory-tools
            namespce: mem
        """,
        capsys,
    )
    assert f"{path}:4: servers.memory.namespce: unknown key; did you mean 'namespace'?" in message


def test_unknown_server(write_config, capsys) -> None:
    path, message = config_error(
        write_config,
        """\
        servers:
          memory:
            server: memory-toolz
        """,
        capsys,
    )
    assert f"{path}:3: servers.memory.server: unknown server 'memory-toolz'" in message
    assert "memory-tools" in message  # lists what is registered


def test_unknown_server_from_the_mount_name(write_config, capsys) -> None:
    path, message = config_error(write_config, "servers:\n  nosuch: {}\n", capsys)
    assert f"{path}:2: servers.nosuch: unknown server 'nosuch'" in message


def test_wrong_type(write_config, capsys) -> None:
    path, message = config_error(
        write_config,
        """\
        servers:
          memory:
            server: memory-tools
            enabled: perhaps
        """,
        capsys,
    )
    assert f"{path}:4: servers.memory.enabled:" in message
    assert "'perhaps'" in message


def test_unknown_setting_key_names_the_line(write_config, capsys) -> None:
    path, message = config_error(
        write_config,
        """\
        servers:
          memory:
            server: memory-tools
            settings:
              memory_dirr: ./m
        """,
        capsys,
    )
    assert f"{path}:5: servers.memory.settings.memory_dirr: unknown key" in message
    assert "did you mean 'memory_dir'?" in message


def test_missing_servers_key(write_config, capsys) -> None:
    path, message = config_error(write_config, "name: only-a-name\n", capsys)
    assert str(path) in message
    assert "servers: required key is missing" in message


def test_server_and_module_together(write_config, capsys) -> None:
    _, message = config_error(
        write_config,
        """\
        servers:
          x:
            server: memory-tools
            module: helpers.servers.sample_servers:echo_server
        """,
        capsys,
    )
    assert "servers.x" in message
    assert "one of 'server', 'module', 'command' or 'url'" in message


def test_bad_module(write_config, capsys) -> None:
    path, message = config_error(
        write_config,
        """\
        servers:
          x:
            module: helpers.servers.sample_servers:not_a_server
        """,
        capsys,
    )
    assert f"{path}:3: servers.x.module:" in message  # the line of the key at fault
    assert "FastMCP" in message


def test_unset_environment_variable(write_config, capsys, monkeypatch) -> None:
    monkeypatch.delenv("DPT_TEST_UNSET", raising=False)
    path, message = config_error(
        write_config,
        """\
        servers:
          memory:
            server: memory-tools
            settings:
              memory_dir: ${DPT_TEST_UNSET}
        """,
        capsys,
    )
    assert f"{path}:5: servers.memory.settings.memory_dir:" in message
    assert "DPT_TEST_UNSET is not set" in message
    assert "${DPT_TEST_UNSET:-value}" in message


def test_invalid_namespace(write_config, capsys) -> None:
    _, message = config_error(
        write_config,
        """\
        servers:
          memory-tools:
            namespace: "mem/x"
        """,
        capsys,
    )
    assert "servers.memory-tools.namespace" in message


def test_second_popoto_memory_mount_is_refused(write_config, capsys) -> None:
    path, message = config_error(
        write_config,
        """\
        servers:
          popoto-memory: {}
          popoto-two:
            server: popoto-memory
        """,
        capsys,
    )
    assert f"{path}:3: servers.popoto-two:" in message
    assert "only one" in message


def test_config_error_from_a_subprocess_has_no_traceback(write_config) -> None:
    path = write_config("servers:\n  memory:\n    bogus: 1\n")
    proc = subprocess.run(
        [*launcher_command(), "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    assert f"{path}:3: servers.memory.bogus: unknown key" in proc.stderr


# -- environment expansion and settings paths ------------------------------------


def test_env_expansion_and_relative_paths(write_config, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("DPT_TEST_DIR", "from-env")
    monkeypatch.delenv("DPT_TEST_OTHER", raising=False)
    path = write_config(
        """\
        name: ${DPT_TEST_OTHER:-fallback-name}
        servers:
          memory-tools:
            settings:
              memory_dir: ./${DPT_TEST_DIR}/mem
        """
    )
    loaded = load_config(path)
    assert loaded.config.name == "fallback-name"
    from doc_processing_std_tools.launcher.compose import compose

    composition = asyncio.run(compose(loaded))
    assert composition.mounts[0].settings.memory_dir == tmp_path / "from-env" / "mem"


def test_expansion_follows_the_shell(write_config) -> None:
    path = write_config(
        """\
        name: "${EMPTY}|${EMPTY:-dflt}|${SET:-dflt}|$${SET}|cost $$5"
        servers:
          memory-tools: {}
        """
    )
    loaded = load_config(path, environ={"EMPTY": "", "SET": "yes"})
    assert loaded.config.name == "|dflt|yes|${SET}|cost $5"


def test_transport_shorthand_and_defaults(write_config) -> None:
    loaded = load_config(write_config("transport: http\nservers:\n  memory: {}\n"))
    transport = loaded.config.transport
    assert (transport.type, transport.host, transport.path) == ("http", "127.0.0.1", "/mcp")
    with pytest.raises(ConfigError, match=r"transport\.path"):
        load_config(write_config("transport: {type: http, path: mcp}\nservers:\n  m: {}\n"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "servers:\n  first: {server: memory-tools}\n  first: {server: filesystem}\n",
            ":3: servers.first: duplicate key (first on line 2)",
        ),
        (
            "servers:\n  m:\n    namespace: a\n    namespace: b\n",
            ":4: servers.m.namespace: duplicate key (first on line 3)",
        ),
    ],
)
def test_a_duplicate_key_is_an_error_not_a_silent_override(
    write_config, text: str, expected: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(expected)):
        load_config(write_config(text))


def test_config_path_through_a_file(tmp_path: Path, capsys) -> None:
    (tmp_path / "file").write_text("")
    status, _, err = run_main(["--config", str(tmp_path / "file" / "tools.yaml")], capsys)
    assert status == 2
    assert "cannot read the config file: Not a directory" in err


def test_unusable_setting_path_is_a_config_error(write_config, capsys) -> None:
    _, message = config_error(
        write_config,
        f"""\
        servers:
          memory:
            server: memory-tools
            settings:
              memory_dir: /tmp/{"a" * 300}/x
        """,
        capsys,
    )
    assert "servers.memory.settings" in message
    assert "File name too long" in message


def test_a_factory_s_settings_are_validated_like_a_server_module_s(write_config, capsys) -> None:
    """A factory's keyword parameters are its settings: errors name the key and its line."""
    path, message = config_error(
        write_config,
        """\
        servers:
          greeter:
            module: helpers.servers.sample_servers:make_echo
            settings: {greting: hi}
        """,
        capsys,
    )
    assert (
        f"{path}:4: servers.greeter.settings.greting: unknown key; did you mean 'greeting'?"
        in message
    )


def test_an_unknown_server_name_suggests_the_closest(write_config, capsys) -> None:
    path = write_config("servers:\n  memory: {}\n")
    status, _, err = run_main(["--config", str(path), "--check"], capsys)
    assert status == 2
    assert "unknown server 'memory'; did you mean 'memory-tools'?" in err


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ("command: node\n    sessions: each", "servers.x.sessions:"),
        ("command: node\n    max_sessions: 0", "servers.x.max_sessions:"),
        ("command: node\n    session_idle_timeout: 0", "servers.x.session_idle_timeout:"),
        (
            "server: memory-tools\n    sessions: per_client",
            "'sessions' applies only to an external",
        ),
        (
            "url: https://mcp.example.com/mcp\n    auth: oauth\n    sessions: shared",
            "an 'auth: oauth' server has one session per signed-in user",
        ),
    ],
)
def test_session_keys_are_checked(write_config, capsys, entry: str, said: str) -> None:
    _, message = config_error(write_config, f"servers:\n  x:\n    {entry}\n", capsys)
    assert said in message, message


def test_session_defaults_follow_the_server_kind(write_config) -> None:
    """Each client its own session by default; an OAuth server's are per signed-in user."""
    path = write_config(
        "servers:\n  cmd:\n    command: node\n  web:\n    url: https://mcp.example.com/mcp\n"
        "  corp:\n    url: https://corp.example.com/mcp\n    auth: oauth\n"
        "  one:\n    command: node\n    sessions: shared\n"
    )
    servers = load_config(path).config.servers
    modes = {name: entry.session_mode for name, entry in servers.items()}
    assert modes == {"cmd": "per_client", "web": "per_client", "corp": "per_user", "one": "shared"}
    assert (servers["cmd"].max_sessions, servers["cmd"].session_idle_timeout) == (16, 600.0)
