"""The test run's home folder is its own (tests/conftest.py, helpers/home.py): every per-user
folder the package and its dependencies write resolves into it, in this process and in the
processes it starts; and the guard that checks the real home at the end sees a write there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from helpers.home import HomeGuard

WHERE = """
import json, platformdirs
from pathlib import Path
from doc_processing_std_tools.launcher.external.tokens import TokenStore, default_folder
from doc_processing_std_tools.locking.folder_locks import registry
from doc_processing_std_tools.memory.index import _index_dir
from doc_processing_std_tools.shared.workspace import user_data_dir
places = {
    "home": str(Path.home()),
    "data": str(user_data_dir()),
    "cache": platformdirs.user_cache_dir(),
    "config": platformdirs.user_config_dir(),
    "state": platformdirs.user_state_dir(),
    "index": str(_index_dir()),
    "lock registry": str(registry()),
    "tokens": str(default_folder()),
    "token store": TokenStore().where,
}
try:
    from popoto.integrations.config import MemoryConfig
    places["popoto log"] = str(MemoryConfig.from_env().log_path)
except ImportError:
    pass
print(json.dumps(places))
"""


def places_seen_by_a_new_process() -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, "-c", WHERE], capture_output=True, text=True, timeout=60, check=True
    )
    return dict(json.loads(done.stdout))


def test_every_per_user_folder_is_in_the_runs_own_home() -> None:
    places = places_seen_by_a_new_process()
    home = Path(places.pop("home"))
    assert home == Path.home() == Path(os.environ["HOME"])
    assert home.name.startswith("dpt-tests-home-")
    assert home.parent == Path(tempfile.gettempdir())
    assert places.pop("token store").startswith("files of mode 0600 in ")  # no OS keyring
    for what, path in places.items():
        assert Path(path).is_relative_to(home), (what, path)


def test_the_guard_sees_what_a_run_would_write_into_a_home(tmp_path: Path) -> None:
    """A guard on a home of its own (its XDG folders the defaults below it): another program's
    change is not flagged; popoto's log and memory-tools' index cache are."""
    real = tmp_path / "home"
    (real / ".cache").mkdir(parents=True)
    (real / ".bash_history").write_text("ls\n")
    with pytest.MonkeyPatch.context() as patch:
        for name in [n for n in os.environ if n.startswith("XDG_")]:
            patch.delenv(name)
        guard = HomeGuard(real)
    (real / ".bash_history").write_text("ls\npwd\n")
    assert guard.changes() == []
    (real / ".popoto").mkdir()
    (real / ".popoto" / "memory.log").write_text("an error popoto swallowed\n")
    (real / ".cache" / "doc-processing-std-tools" / "memory-index").mkdir(parents=True)
    changes = guard.changes()
    for path in (".popoto", ".popoto/memory.log", ".cache/doc-processing-std-tools"):
        assert f"created {real / path}" in changes, changes
