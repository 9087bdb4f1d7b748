"""A machine without redis-server: popoto-memory is skipped with the reason and the fix, and
the other servers serve; ``--check``, ``--strict`` and ``required`` say so with exit 1."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("popoto")


from helpers.launch import launcher_command
from helpers.redis_server import no_redis_env

NO_REDIS_CONFIG = """\
servers:
  memory-tools:
    settings: {{memory_dir: {memory_dir}}}
  filesystem: {{}}
  popoto-memory: {popoto}
"""


def _no_redis_launch(tmp_path: Path, popoto: str) -> tuple[Path, dict[str, str]]:
    """A config mounting the three servers, and the environment of a machine without redis."""
    config = tmp_path / "tools.yaml"
    config.write_text(
        NO_REDIS_CONFIG.format(memory_dir=json.dumps(str(tmp_path / "m")), popoto=popoto)
    )
    env = {**no_redis_env(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data")}
    return config, env


def _run_launcher(config: Path, env: dict[str, str], *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*launcher_command(), "--config", str(config), *flags],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=config.parent,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


@pytest.mark.parametrize("popoto", ["{settings: {backend: embedded}}", "{}"])
async def test_no_redis_server_skips_popoto_and_serves_the_others(tmp_path, popoto):
    """Issue 25: no redis-server anywhere used to end the launch with status 2 and no tools."""
    from helpers.launch import launched

    config, env = _no_redis_launch(tmp_path, popoto)
    errlog = tmp_path / "stderr.log"
    with errlog.open("w") as err:
        async with launched(config, env=env, errlog=err) as session:
            names = {tool.name for tool in (await session.list_tools()).tools}
            assert {"write_memory", "memory_view", "read_text_file", "list_directory"} <= names
            assert not names & {"memory_search", "memory_save", "memory_feedback", "memory_status"}
    lines = [line for line in errlog.read_text().splitlines() if "popoto-memory" in line]
    assert len(lines) == 1, errlog.read_text()
    assert "WARNING" in lines[0] and "not mounted" in lines[0]
    assert "needs a redis-server" in lines[0]  # the reason
    assert "apt-get install redis-server" in lines[0] and "backend: redis" in lines[0]  # the fix


@pytest.mark.slow  # (three launches in an environment without redis-server)
def test_no_redis_server_check_fails_and_required_or_strict_exit_1(tmp_path):
    config, env = _no_redis_launch(tmp_path, "{}")
    check = _run_launcher(config, env, "--check")
    assert check.returncode == 1, check.stdout + check.stderr
    assert re.search(
        r"FAIL servers\.popoto-memory: the embedded backend needs a redis-server", check.stdout
    )
    strict = _run_launcher(config, env, "--strict")
    assert strict.returncode == 1, strict.stderr
    assert "servers.popoto-memory" in strict.stderr and "needs a redis-server" in strict.stderr
    required, _ = _no_redis_launch(tmp_path, "{required: true}")
    status = _run_launcher(required, env)
    assert status.returncode == 1, status.stderr
    assert "needs a redis-server" in status.stderr


def test_a_wrong_popoto_setting_still_stops_the_launch_with_2(tmp_path):
    """The other side of the line: a config that is wrong (database 0) is not skipped."""
    config, env = _no_redis_launch(tmp_path, "{settings: {url: 'redis://127.0.0.1:1/0'}}")
    env = {k: v for k, v in env.items() if k != "PATH"}
    status = _run_launcher(config, env)
    assert status.returncode == 2, status.stderr
    assert "database 0" in status.stderr
