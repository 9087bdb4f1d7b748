"""The fixtures every test folder shares, and the run's own rules: three xdist workers per two
cores, a longer timeout for the slow lane, and a home folder of the run's own.

Helpers (a launched ``dpt-launch``, raw JSON-RPC, a redis-server, folder snapshots...) live in
the ``helpers`` package beside this file; the servers tests spawn in ``helpers/servers/``.
"""

from __future__ import annotations

import compileall
import os
import shutil
import tempfile
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from helpers.home import HomeGuard, private_home_environment
from helpers.paths import REPO, TESTS
from helpers.redis_server import RedisUnavailable, start_redis
from helpers.trees import remove_subfolders

SLOW_TIMEOUT = 600  # seconds for a test marked slow (the default is pyproject's `timeout`)

_home_guard: HomeGuard | None = None


def pytest_configure(config: pytest.Config) -> None:
    """Before any worker or launcher starts: give the run a home folder of its own, and compile
    the package and the helpers once.

    Every per-user folder (HOME, the XDG folders, popoto's log, the keyring) points into one
    temp folder, set in this process's environment so that xdist workers, in-process tests and
    every process they spawn inherit it; the real home is checked for changes at the end.

    Where ``PYTHONDONTWRITEBYTECODE`` is set (this project's machines set it), no process
    caches the bytecode of the editable package, so each of the ~300 launchers a run spawns
    would compile it from source again: ~0.08 s of CPU each (compileall writes the caches
    regardless; an edited file is compiled again the next time).
    """
    if hasattr(config, "workerinput"):  # an xdist worker: the controller did it
        return
    global _home_guard
    home = Path(tempfile.mkdtemp(prefix="dpt-tests-home-"))
    _home_guard = HomeGuard(Path(os.environ.get("HOME") or Path.home()))
    os.environ.update(private_home_environment(home))
    for folder in (REPO / "doc_processing_std_tools", TESTS):
        compileall.compile_dir(folder, quiet=2)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if anything under the real home folder changed while it ran."""
    if _home_guard is None or hasattr(session.config, "workerinput"):
        return
    changed = _home_guard.changes()
    if changed:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        lines = [f"the tests changed the real home folder {_home_guard.home}:", *changed[:20]]
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_sep("=", "real home folder changed", red=True)
            reporter.write_line("\n".join(lines))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    if _home_guard is not None and not hasattr(config, "workerinput"):
        shutil.rmtree(os.environ["HOME"], ignore_errors=True)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: three workers per two cores. Most tests wait on the launchers and servers
    they spawn, so two workers on two cores left a core idle a third of the time (measured
    on 2 cores: -n 2 3:31, -n 3 3:00, -n 4 3:08)."""
    return max(2, (os.cpu_count() or 1) * 3 // 2)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked slow (storms, soaks, waits for real timeouts) get :data:`SLOW_TIMEOUT`
    unless they set their own."""
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT))


@pytest.fixture(autouse=True)
def _environment_restored() -> Iterator[None]:
    """Each test starts from the environment the run started with: ``main()`` run in-process
    sets FASTMCP_LOG_LEVEL and the like, which later launchers spawned by this worker (with
    xdist, any test's) would inherit."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture
def dispatch_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool, bool]]:
    """popoto's ``dispatch()`` calls, as they happen: (tool, process lock held, on the main
    thread, i.e. the event loop rather than a worker thread)."""
    popoto_mcp = pytest.importorskip("popoto.integrations.mcp_server")
    from doc_processing_std_tools import locking

    seen: list[tuple[str, bool, bool]] = []
    real_dispatch = popoto_mcp.dispatch

    def spy(name, arguments=None, service=None):
        on_loop = threading.current_thread() is threading.main_thread()
        seen.append((name, locking.PROCESS_LOCK.locked(), on_loop))
        return real_dispatch(name, arguments, service)

    monkeypatch.setattr(popoto_mcp, "dispatch", spy)
    return seen


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[..., Path]:
    """Write YAML text (dedented) to a config file in tmp_path and return its path."""

    def write(text: str, name: str = "tools.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write


@pytest.fixture
def clean_deep(tmp_path: Path) -> Iterator[None]:
    """Remove the test's folders with our own rmtree: pytest's shutil.rmtree cannot remove a
    chain thousands of folders deep (RecursionError), and would fail on it in every later run."""
    yield
    remove_subfolders(tmp_path)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One redis-server for this test session (or xdist worker): ``redis://127.0.0.1:PORT/0``.
    Tests keep apart by namespace (see ``memory_backend``)."""
    try:
        proc, port = start_redis(tmp_path_factory.mktemp("redis"))
    except RedisUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


_NAMESPACES = iter(range(1, 1 << 30))


@pytest.fixture(params=["folder", "redis"])
def memory_backend(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, object]:
    """memory-tools settings for each backend: a folder in tmp_path, or a fresh namespace of the
    session's redis-server. Tests marked ``folder_only`` (symlinks, permissions, the disk's own
    failures: things a Redis store has no counterpart for) run on the folder only."""
    if request.param == "folder":
        return {"memory_dir": tmp_path / "mem"}
    marker = request.node.get_closest_marker("folder_only")
    if marker is not None:
        pytest.skip(f"folder only: {marker.args[0] if marker.args else 'a folder feature'}")
    url = request.getfixturevalue("redis_url")
    return {"backend": "redis", "url": url, "namespace": f"t{os.getpid()}-{next(_NAMESPACES)}"}
