"""The service files shipped in docs/daemon/: valid syntax, and a command line dpt-launch accepts."""

from __future__ import annotations

import configparser
import plistlib
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from doc_processing_std_tools.launcher.cli.main import VERBS, parse_args
from helpers.paths import REPO

DAEMON_DOCS = REPO / "docs" / "daemon"
UNIT = DAEMON_DOCS / "dpt-launch.service"
PLIST = DAEMON_DOCS / "com.doc-processing-std-tools.dpt-launch.plist"
INSTALLED = "%h/.local/bin/dpt-launch"


def assert_serves_http_on_loopback(argv: list[str]) -> None:
    """What the service runs is the plain serving form with the daemon's flags."""
    assert Path(argv[0]).name == "dpt-launch"
    assert argv[1] not in VERBS
    args = parse_args(argv[1:])
    assert (args.transport, args.host, args.port) == ("http", "127.0.0.1", 8765)
    assert args.config.endswith("tools.yaml")


def test_the_unit_runs_the_daemon() -> None:
    unit = configparser.ConfigParser(interpolation=None, strict=True)
    unit.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    unit.read_string(UNIT.read_text(encoding="utf-8"))
    assert unit["Install"]["WantedBy"] == "default.target"  # a user service
    assert unit["Service"]["Restart"] == "on-failure"
    argv = shlex.split(unit["Service"]["ExecStart"])
    assert argv[0] == INSTALLED
    assert_serves_http_on_loopback(argv)


def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (not a systemd system)")
    # verify checks that ExecStart's program exists: point it at this environment's dpt-launch.
    launcher = Path(sys.executable).with_name("dpt-launch")
    if not launcher.exists():
        pytest.skip(f"no dpt-launch next to {sys.executable} to verify ExecStart against")
    text = UNIT.read_text(encoding="utf-8")
    assert INSTALLED in text
    copy = tmp_path / UNIT.name
    copy.write_text(text.replace(INSTALLED, str(launcher)), encoding="utf-8")
    done = subprocess.run(
        [tool, "verify", str(copy)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    if "Failed to initialize manager" in done.stderr or "Failed to lookup" in done.stderr:
        pytest.skip(f"systemd-analyze cannot run here: {done.stderr.strip()[:200]}")
    # Any message is a finding (unknown keys and bad values are only warnings with rc 0).
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr


def test_systemd_analyze_would_catch_a_bad_unit(tmp_path: Path) -> None:
    """The check above can fail: a bad value in a copy of the unit is reported."""
    tool = shutil.which("systemd-analyze")
    launcher = Path(sys.executable).with_name("dpt-launch")
    if tool is None or not launcher.exists():
        pytest.skip("needs systemd-analyze and an installed dpt-launch")
    text = UNIT.read_text(encoding="utf-8").replace(INSTALLED, str(launcher))
    copy = tmp_path / UNIT.name
    copy.write_text(text.replace("Restart=on-failure", "Restart=sometimes"), encoding="utf-8")
    done = subprocess.run(
        [tool, "verify", str(copy)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    if "Failed to initialize manager" in done.stderr:
        pytest.skip("systemd-analyze cannot run here")
    assert "sometimes" in done.stderr


def agent_program() -> list[str]:
    with PLIST.open("rb") as fh:
        argv = plistlib.load(fh)["ProgramArguments"]
    assert all(isinstance(arg, str) for arg in argv)
    return list(argv)


def test_the_launchd_plist_parses_and_runs_the_daemon() -> None:
    with PLIST.open("rb") as fh:
        agent = plistlib.load(fh)
    assert agent["Label"] == PLIST.stem
    assert agent["RunAtLoad"] is True
    assert agent["KeepAlive"] == {"SuccessfulExit": False}
    argv = agent_program()
    assert "~" not in "".join(argv)  # launchd does not expand it
    assert argv[:2] == ["/bin/sh", "-c"]  # (to read the env file first)
    assert_serves_http_on_loopback(shlex.split(argv[2].rpartition("exec ")[2]))
    if shutil.which("plutil"):  # macOS
        subprocess.run(["plutil", "-lint", str(PLIST)], check=True, timeout=60)


@pytest.mark.parametrize("with_env_file", [True, False])
def test_the_launchd_agent_gets_the_token_the_daemon_page_keeps(
    tmp_path: Path, with_env_file: bool
) -> None:
    """The page's config wants ``${DPT_TOKEN}`` (without it the daemon exits 2 and launchd
    restarts it for ever); the agent takes it from the env file the page writes, as the unit does.
    """
    page = (REPO / "docs" / "daemon.md").read_text(encoding="utf-8")
    assert "${DPT_TOKEN}" in page and "> ~/.config/dpt-launch/env" in page
    unit = UNIT.read_text(encoding="utf-8")
    assert "EnvironmentFile=-%h/.config/dpt-launch/env" in unit
    home = tmp_path / "home"
    (home / ".config" / "dpt-launch").mkdir(parents=True)
    if with_env_file:
        (home / ".config" / "dpt-launch" / "env").write_text("DPT_TOKEN=s3cret\n", encoding="utf-8")
    stub = home / ".local" / "bin" / "dpt-launch"  # says what it was given
    stub.parent.mkdir(parents=True)
    stub.write_text('#!/bin/sh\necho "token=${DPT_TOKEN:-none} $*"\n', encoding="utf-8")
    stub.chmod(0o755)
    argv = [arg.replace("/Users/YOUR_USER", str(home)) for arg in agent_program()]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"}
    )
    assert done.returncode == 0, done.stderr
    token = "s3cret" if with_env_file else "none"
    config = home / ".config" / "dpt-launch" / "tools.yaml"
    assert done.stdout.split() == [
        f"token={token}",
        "--config",
        str(config),
        *["--transport", "http", "--host", "127.0.0.1", "--port", "8765"],
    ]


def test_the_daemon_pages_are_in_the_nav() -> None:
    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    assert "daemon.md" in nav and "scaling.md" in nav
    page = (REPO / "docs" / "daemon.md").read_text(encoding="utf-8")
    assert UNIT.name in page and PLIST.name in page
