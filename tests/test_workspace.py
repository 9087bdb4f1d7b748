"""The working-directory rule, the per-user data folder and client root URIs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from doc_processing_std_tools.shared import workspace
from doc_processing_std_tools.shared.workspace import (
    is_project_like,
    paths_from_uris,
    unsuitable_reason,
    writable_reason,
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("HOME", str(folder))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    return folder


def test_a_project_folder_is_project_like(home: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    assert unsuitable_reason(project) is None
    assert is_project_like(home / "code")  # below the home folder, not the home itself


def test_the_filesystem_root_is_not(home: Path, tmp_path: Path) -> None:
    assert unsuitable_reason("/") == "it is the filesystem root"
    link = tmp_path / "to-root"
    link.symlink_to("/")
    assert unsuitable_reason(link) == "it is the filesystem root"


def test_the_home_folder_itself_is_not(home: Path) -> None:
    assert unsuitable_reason(home) == "it is your home folder"
    assert unsuitable_reason(str(home) + "/") == "it is your home folder"
    assert not is_project_like("~")


def test_the_temporary_folders_themselves_are_not(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert unsuitable_reason("/tmp") == "it is the system's temporary folder"
    assert unsuitable_reason("/var/tmp/") == "it is the system's temporary folder"
    own = tmp_path / "own-tmp"
    own.mkdir()
    monkeypatch.setenv("TMPDIR", str(own))
    assert unsuitable_reason(own) == "it is the system's temporary folder"
    project = own / "project"  # a project may live below one
    project.mkdir()
    assert unsuitable_reason(project) is None


@pytest.mark.parametrize(
    "folder",
    [
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/etc/nginx",
        "/lib",
        "/lib64",
        "/libx32/x",
        "/proc/1",
        "/sbin",
        "/sys",
        "/usr",
        "/usr/local/src",
        "/var",
        "/var/tmp/x",
    ],
)
def test_system_folders_are_not(home: Path, folder: str) -> None:
    reason = unsuitable_reason(folder)
    assert reason is not None and reason.startswith("it is a system folder"), reason


def test_roots_home_is_not(home: Path) -> None:
    # a system folder for everyone else, and the home folder when you are root
    assert unsuitable_reason("/root") in ("it is a system folder (/root)", "it is your home folder")


@pytest.mark.parametrize("folder", ["/System", "/Library/x", "/Applications", "/private/tmp"])
def test_macos_system_folders_are_not_on_macos(home: Path, folder: str) -> None:
    assert (unsuitable_reason(folder, platform="darwin") or "").startswith("it is a system folder")
    assert unsuitable_reason(folder, platform="linux") is None


def test_a_home_below_a_system_folder_still_has_projects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOME", "/var/lib/builder")
    assert unsuitable_reason("/var/lib/builder/project") is None
    assert unsuitable_reason("/var/lib/builder") == "it is your home folder"
    assert (unsuitable_reason("/var/lib/other") or "").startswith("it is a system folder")


def test_the_python_installation_is_not(home: Path) -> None:
    for prefix in {sys.prefix, sys.base_prefix}:
        reason = unsuitable_reason(Path(prefix) / "lib")
        assert reason is not None, prefix
        if not reason.startswith("it is a system folder"):
            assert reason.startswith("it is inside the Python installation"), reason


def test_cache_folders_are_not(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert (unsuitable_reason(home / ".cache" / "uv" / "x") or "").startswith("it is a cache")
    xdg = tmp_path / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    assert (unsuitable_reason(xdg / "uvx-env") or "").startswith("it is a cache")
    assert unsuitable_reason(tmp_path / "not-a-cache") is None


def test_writable_reason_creates_nothing(tmp_path: Path) -> None:
    assert writable_reason(tmp_path) is None
    assert writable_reason(tmp_path / "a" / "b") is None
    assert not (tmp_path / "a").exists()
    (tmp_path / "file").write_text("x")
    assert "is not a folder" in (writable_reason(tmp_path / "file") or "")
    assert "is not a folder" in (writable_reason(tmp_path / "file" / "mem") or "")


def _without_capabilities() -> None:  # pragma: no cover - runs in the child before exec
    """preexec_fn: empty the capability bounding set, so root after exec has no
    CAP_DAC_OVERRIDE and file modes apply to it as to anyone (PR_CAPBSET_DROP)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(64):
        libc.prctl(24, cap, 0, 0, 0)  # EINVAL past the last capability: ignored


WRITABLE_REASONS = """\
import sys
from pathlib import Path

from doc_processing_std_tools.shared.workspace import writable_reason

caps = next(line for line in open("/proc/self/status") if line.startswith("CapEff:"))
print(int(caps.split()[1], 16))
for arg in sys.argv[1:]:
    print(writable_reason(Path(arg)))
"""


def writable_reasons_unprivileged(*folders: Path) -> list[str]:
    """writable_reason of each folder, asked by a process without root's file-access bypass
    (CI runs as root: a capability-less child, else this user's own)."""
    import subprocess

    root = os.geteuid() == 0
    done = subprocess.run(
        [sys.executable, "-c", WRITABLE_REASONS, *map(str, folders)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        preexec_fn=_without_capabilities if root else None,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    caps, *reasons = done.stdout.splitlines()
    if int(caps):
        pytest.skip("could not drop root's capabilities here (no CAP_SETPCAP)")
    return reasons


def test_writable_reason_reports_read_only_folders(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        assert writable_reasons_unprivileged(locked, locked / "mem", tmp_path) == [
            f"{locked} is not writable",
            f"{locked / 'mem'} cannot be created: {locked} is not writable",
            "None",
        ]
    finally:
        locked.chmod(0o700)


def test_user_data_dir_honours_xdg_data_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if sys.platform != "linux":
        pytest.skip("XDG_DATA_HOME is the Linux convention")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert workspace.user_data_dir() == tmp_path / "data" / "doc-processing-std-tools"


def test_paths_from_uris_keeps_local_folders_only(tmp_path: Path, caplog) -> None:
    spaced = tmp_path / "with space"
    spaced.mkdir()
    (tmp_path / "file.txt").write_text("x")
    uris = [
        tmp_path.as_uri(),
        spaced.as_uri(),  # percent-encoded
        f"file://localhost{tmp_path}",  # same folder again: once
        "https://example.com/repo",
        f"file://otherhost{tmp_path}",
        (tmp_path / "missing").as_uri(),
        (tmp_path / "file.txt").as_uri(),
        "file:relative/path",
    ]
    assert paths_from_uris(uris) == [tmp_path, spaced]
    assert "only local file:// folders" in caplog.text
