"""A fix line names the pip of the environment ``dpt-launch`` runs in."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from doc_processing_std_tools.shared.install_hint import install_extra, pip_command


@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="runs in a virtual environment")
def test_in_a_venv_it_is_the_venvs_pip_relative_to_the_working_directory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pip = Path(sys.executable).parent / "pip"
    monkeypatch.chdir(Path(sys.prefix).parent)
    assert pip_command() == str(pip.relative_to(Path(sys.prefix).parent))  # e.g. .venv/bin/pip
    assert install_extra("popoto") == f"{pip_command()} install 'doc-processing-std-tools[popoto]'"
    monkeypatch.chdir("/")
    assert pip_command() == str(pip)


def test_outside_a_venv_it_is_plain_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "prefix", sys.base_prefix)
    assert install_extra("redis") == "pip install 'doc-processing-std-tools[redis]'"
