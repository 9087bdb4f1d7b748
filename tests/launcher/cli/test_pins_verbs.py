"""``dpt-launch pin`` and ``dpt-launch pins diff|approve`` (launcher/cli/pins_verbs.py), run
in-process on memory-tools (no child process)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from doc_processing_std_tools.launcher.calls.pins import LockFile
from helpers.config_entries import memory
from helpers.launch import run_main


@pytest.fixture
def config(write_config, tmp_path: Path) -> Path:
    return write_config("servers:\n" + memory(tmp_path / "m"))


def test_pin_diff_and_approve(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lock = config.parent / "tools.lock"
    status, _out, err = run_main(["pins", "diff", "--config", str(config)], capsys)
    assert status == 2 and "no lock file; write one with dpt-launch pin" in err

    status, out, _err = run_main(["pin", "--config", str(config)], capsys)
    assert status == 0 and "11 tool(s)" in out
    data = json.loads(lock.read_text())
    entry = data["servers"]["memory-tools"]["tools"]["read_memory"]
    assert len(entry["sha256"]) == 64 and entry["definition"]["name"] == "read_memory"
    assert run_main(["pins", "diff", "--config", str(config)], capsys)[0] == 0

    pins = LockFile.read(lock)
    pins.servers["memory-tools"]["tools"]["read_memory"]["description"] = "Approved text."
    del pins.servers["memory-tools"]["tools"]["write_memory"]
    pins.write(lock)
    status, out, _err = run_main(["pins", "diff", "--config", str(config)], capsys)
    assert status == 1
    assert "tool memory-tools.read_memory changed" in out
    assert '-  "description": "Approved text.",' in out
    assert "tool memory-tools.write_memory not pinned" in out
    assert "2 definition(s) drifted" in out

    status, _out, err = run_main(
        ["pins", "approve", "--config", str(config), "memory-tools.nope"], capsys
    )
    assert status == 2 and "names no mounted server nor a definition" in err
    status, out, _err = run_main(
        ["pins", "approve", "--config", str(config), "memory-tools.write_memory"], capsys
    )
    assert status == 0 and out.splitlines()[0] == "approved memory-tools.write_memory"
    status, out, _err = run_main(["pins", "diff", "--config", str(config)], capsys)
    assert status == 1 and "1 definition(s) drifted" in out
    assert run_main(["pins", "approve", "--config", str(config)], capsys)[0] == 0
    assert run_main(["pins", "diff", "--config", str(config)], capsys)[0] == 0


def test_pin_writes_over_an_unreadable_lock_file(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = config.parent / "tools.lock"
    lock.write_text("{not json", encoding="utf-8")
    status, _out, err = run_main(["--config", str(config), "--check"], capsys)
    assert status == 2 and "cannot be read as a lock file" in err
    assert run_main(["pins", "approve", "--config", str(config)], capsys)[0] == 2
    assert run_main(["pin", "--config", str(config)], capsys)[0] == 0
    assert LockFile.read(lock).servers["memory-tools"]["tools"]


def test_check_says_what_drifted(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main(["pin", "--config", str(config)], capsys)[0] == 0
    lock = config.parent / "tools.lock"
    pins = LockFile.read(lock)
    pins.servers["memory-tools"]["tools"]["read_memory"]["description"] = "Approved text."
    pins.write(lock)
    status, out, _err = run_main(["--config", str(config), "--check"], capsys)
    assert status == 0
    assert "WARN tool memory-tools.read_memory changed: not served" in out
    assert "1 definition(s) drifted from tools.lock" in out
    assert "10 tools from 1 server" in out


def test_the_pins_config_is_checked(write_config, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config("pins: {policy: maybe}\nservers: {memory-tools: {}}\n")
    status, _out, err = run_main(["--config", str(config), "--check"], capsys)
    assert status == 2 and "pins.policy" in err and "block" in err


def test_two_configs_sharing_a_lock_file(
    write_config, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog
) -> None:
    """``pin`` of one config keeps the other's servers; the other's servers, missing from the
    lock file, are one WARNING line each (naming the fix), not one per tool."""
    first = write_config(f"servers:\n  notes-a:\n    server: memory-tools\n    settings: "
                         f"{{memory_dir: {tmp_path / 'a'}}}\n", name="a.yaml")  # fmt: skip
    second = write_config(f"servers:\n  notes-b:\n    server: memory-tools\n    settings: "
                          f"{{memory_dir: {tmp_path / 'b'}}}\n", name="b.yaml")  # fmt: skip
    assert run_main(["pin", "--config", str(first)], capsys)[0] == 0
    caplog.set_level(logging.WARNING, "dpt-launch")
    _status, out, _err = run_main(["--config", str(second), "--check"], capsys)
    warned = [line for line in out.splitlines() if "WARN" in line and "notes-b" in line]
    assert len(warned) == 1 and "servers.notes-b has no entry in tools.lock" in warned[0], out
    assert "then pins approve notes-b" in " ".join(out.split())  # (the table may wrap it)
    said = [r.getMessage() for r in caplog.records if "notes-b" in r.getMessage()]
    assert len(said) == 1, said
    assert said[0].startswith("servers.notes-b has no entry in tools.lock")
    assert f"`dpt-launch pins approve --config {second} notes-b`" in said[0]
    assert "pins.lock_file" in said[0]

    status, _out, err = run_main(["pin", "--config", str(second)], capsys)
    assert status == 0
    assert "kept the pins of 1 server(s) this config does not mount (notes-a)" in err
    assert set(LockFile.read(tmp_path / "tools.lock").servers) == {"notes-a", "notes-b"}
    assert run_main(["pins", "diff", "--config", str(first)], capsys)[0] == 0
    assert run_main(["pins", "diff", "--config", str(second)], capsys)[0] == 0


def test_pin_replaces_a_mounted_server_that_lists_nothing_now(
    write_config, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server the config mounts is not kept as "not mounted" when it lists nothing at pin
    time: its old entries go, so its tools need approval again when they come back."""
    entry = f"servers:\n  notes:\n    server: memory-tools\n    settings: {{memory_dir: {tmp_path / 'm'}}}\n"
    config = write_config(entry)
    assert run_main(["pin", "--config", str(config)], capsys)[0] == 0
    lock = config.parent / "tools.lock"
    assert LockFile.read(lock).servers["notes"]["tools"]
    config.write_text(entry + "    tools: {exclude: ['*']}\n", encoding="utf-8")
    status, _out, err = run_main(["pin", "--config", str(config)], capsys)
    assert status == 0 and "kept the pins" not in err
    assert not LockFile.read(lock).servers.get("notes", {}).get("tools")
