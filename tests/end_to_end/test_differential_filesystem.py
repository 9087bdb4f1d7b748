"""server-filesystem (npm, pinned in tests/helpers/reference_servers) connected directly and mounted in
``dpt-launch``: the client's roots replace the folders it was started with, and
``notifications/roots/list_changed`` replaces them again.

The server speaks stdio only, so the HTTP cases compare a launcher serving HTTP against direct
stdio connections (one per client, as two clients of a direct server would have). It updates
its folders on its own time after asking for the roots, so the cases call
``list_allowed_directories`` until the expected folder shows (:meth:`Client.call_until`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers.differential import (
    ClientSpec,
    Endpoint,
    Run,
    assert_same,
    filesystem_argv,
    launcher_argv,
    mount_config,
    needs_reference_servers,
    stdio_endpoint,
)
from helpers.launch import http_launcher

pytestmark = needs_reference_servers

NS, MOUNT = "fs", "files"
POLL = 3.0  # how long a side may take to show the folder (the mounted HTTP one never does today)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The folder the server is started with, and folders clients offer as roots."""
    base = tmp_path_factory.mktemp("filesystem")
    made = {name: base / name for name in ("started", "a", "b", "c")}
    for path in made.values():
        path.mkdir()
    return made


@pytest.fixture(scope="module")
def config(folders: dict[str, Path]) -> Path:
    return mount_config(
        folders["started"].parent / "tools.yaml",
        filesystem_argv(folders["started"]),
        mount=MOUNT,
        namespace=NS,
    )


@pytest.fixture(scope="module")
def direct_stdio(folders: dict[str, Path]) -> Endpoint:
    return stdio_endpoint("direct stdio", filesystem_argv(folders["started"]))


@pytest.fixture(scope="module")
def mounted_stdio(config: Path) -> Endpoint:
    return stdio_endpoint(
        "mounted stdio",
        launcher_argv(config),
        namespace=NS,
        mount=MOUNT,
        cwd=config.parent,
        errlog=config.parent / "launcher-stdio.log",
    )


@pytest.fixture
def mounted_http(config: Path, tmp_path: Path) -> Iterator[Endpoint]:
    """A launcher of its own per case: the roots its one upstream session got are state."""
    with http_launcher(config, errlog=tmp_path / "launcher.log") as launched:
        yield Endpoint("mounted http", url=launched.url, namespace=NS, mount=MOUNT)


def shows(folder: Path) -> Any:
    def holds(reply: dict[str, Any]) -> bool:
        text = "".join(
            block.get("text", "") for block in (reply.get("result") or {}).get("content", [])
        )
        return text.splitlines()[1:] == [str(folder)]

    return holds


def follows_roots(folders: dict[str, Path]) -> Any:
    async def scenario(run: Run) -> None:
        async with run.client("client", ClientSpec(roots=(folders["a"].as_uri(),))) as client:
            await client.call_until(
                "list_allowed_directories", None, shows(folders["a"]), "root a shows", timeout=POLL
            )
            await client.set_roots([folders["b"].as_uri()])
            await client.call_until(
                "list_allowed_directories", None, shows(folders["b"]), "root b shows", timeout=POLL
            )

    return scenario


@pytest.mark.slow
async def test_roots_and_their_changes_reach_it_over_stdio(
    folders: dict[str, Path], direct_stdio: Endpoint, mounted_stdio: Endpoint
) -> None:
    await assert_same(follows_roots(folders), direct_stdio, mounted_stdio)
    # its roots/list at start waited for the client instead of failing with -32600
    assert mounted_stdio.errlog is not None
    log = mounted_stdio.errlog.read_text()
    assert "Failed to request initial roots" not in log, log


@pytest.mark.slow
async def test_roots_and_their_changes_reach_it_over_http(
    folders: dict[str, Path], direct_stdio: Endpoint, mounted_http: Endpoint
) -> None:
    await assert_same(follows_roots(folders), direct_stdio, mounted_http)


@pytest.mark.slow
async def test_two_http_clients_each_work_in_their_own_roots(
    folders: dict[str, Path], direct_stdio: Endpoint, mounted_http: Endpoint
) -> None:
    async def scenario(run: Run) -> None:
        async with run.client("A", ClientSpec(roots=(folders["a"].as_uri(),))) as a:
            await a.call_until(
                "list_allowed_directories", None, shows(folders["a"]), "root a shows", timeout=POLL
            )
            async with run.client("B", ClientSpec(roots=(folders["c"].as_uri(),))) as b:
                await b.call_until(
                    "list_allowed_directories",
                    None,
                    shows(folders["c"]),
                    "root c shows",
                    timeout=POLL,
                )
                await a.call_until(
                    "list_allowed_directories",
                    None,
                    shows(folders["a"]),
                    "root a shows",
                    timeout=POLL,
                )

    await assert_same(scenario, direct_stdio, mounted_http)
