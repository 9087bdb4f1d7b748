"""``owner_of``: which external server an unlisted URI is asked of, under which URI."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from doc_processing_std_tools.launcher.compose.unlisted_reads import owner_of


def _mount(namespace: str | None, *, external: bool = True, connected: bool = True) -> Any:
    front = SimpleNamespace(client=object() if connected else None)
    supervisor = SimpleNamespace(front=front) if external else None
    return SimpleNamespace(entry=SimpleNamespace(namespace=namespace), supervisor=supervisor)


def test_the_namespace_in_the_uri_names_the_server() -> None:
    ev, fs = _mount("ev"), _mount("fs")
    assert owner_of([fs, ev], "demo://ev/resource/x") == (ev, "demo://resource/x")


def test_no_connected_external_server_of_that_namespace_is_none() -> None:
    uri = "demo://ev/resource/x"
    assert owner_of([_mount("ev", external=False)], uri) is None
    assert owner_of([_mount("ev", connected=False)], uri) is None
    assert owner_of([_mount(None)], uri) is None
    assert owner_of([_mount("fs")], uri) is None
