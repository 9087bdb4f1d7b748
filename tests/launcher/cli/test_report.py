"""``--check``'s tables fit the terminal and fold long paths instead of cutting them."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.launch import run_main


def test_check_fits_80_columns_and_keeps_whole_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = tmp_path / "a-folder-with-a-rather-long-name" / "and-another-long-one" / "memory"
    config = tmp_path / "tools.yaml"
    config.write_text(f"servers:\n  memory-tools:\n    settings: {{memory_dir: '{memory}'}}\n")
    monkeypatch.setenv("COLUMNS", "80")
    status, out, err = run_main(["--config", str(config), "--check"], capsys)
    assert status == 0, err
    assert max(len(line) for line in out.splitlines()) <= 80, out
    assert "…" not in out  # nothing cut short
    settings = "".join(
        line.split("│")[-2].strip() for line in out.splitlines() if line.count("│") == 6
    )
    assert str(memory) in settings, out
    assert "memory_view" in out and "OK:" in out


def test_check_into_a_pipe_keeps_its_wide_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "tools.yaml"
    config.write_text(f"servers:\n  memory-tools:\n    settings: {{memory_dir: '{tmp_path}'}}\n")
    monkeypatch.delenv("COLUMNS", raising=False)
    status, out, err = run_main(["--config", str(config), "--check"], capsys)
    assert status == 0, err
    assert max(len(line) for line in out.splitlines()) == 120


def test_check_blames_the_profile_not_a_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "tools.yaml"
    config.write_text(f"servers:\n  memory-tools:\n    settings: {{memory_dir: '{tmp_path}'}}\n")
    status, out, err = run_main(["--config", str(config), "--check", "--profile", "cursr"], capsys)
    assert status == 1, err
    assert "no profile 'cursr'" in out
    assert out.splitlines()[-1].endswith("a profile above cannot work as configured."), out


def test_check_does_not_file_the_fleet_lock_under_servers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "tools.yaml"
    config.write_text(
        'lock: {url: "redis://127.0.0.1:1/0", name: t}\n'  # (nothing listens on port 1)
        f"servers:\n  memory-tools:\n    settings: {{memory_dir: '{tmp_path}'}}\n"
    )
    status, out, err = run_main(["--config", str(config), "--check"], capsys)
    assert status == 1, err
    flat = " ".join(out.split())
    assert "FAIL the fleet lock's Redis at redis://127.0.0.1:1/0 (lock.url)" in flat, out
    assert "servers.lock" not in flat
    assert flat.endswith("the fleet lock above cannot work as configured."), out
