"""popoto-memory's scope (agent id) follows the client's MCP roots: two projects, two scopes;
no roots from ``/``, the per-user one; ``--check`` names where it comes from."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("popoto")


from helpers.launch import launcher_command


class _Roots:
    """A client's MCP roots (the official client's ``list_roots_callback``)."""

    def __init__(self, *folders: Path) -> None:
        self.folders = folders

    async def __call__(self, context: object) -> object:
        import mcp_types as types

        return types.ListRootsResult(
            roots=[types.Root(uri=folder.as_uri(), name=folder.name) for folder in self.folders]
        )


def _scope_world(tmp_path: Path, redis_url: str) -> tuple[Path, dict[str, str], dict[str, Path]]:
    """A config with popoto-memory and no agent_id; a home folder and two projects."""
    places = {name: tmp_path / name for name in ("alice", "proj-a", "proj-b", "conf")}
    for folder in places.values():
        folder.mkdir()
    config = places["conf"] / "tools.yaml"
    config.write_text(
        f"servers:\n  popoto-memory:\n    settings: {{url: {json.dumps(redis_url)}}}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("POPOTO_")}
    env.pop("REDIS_URL", None)
    env["HOME"] = str(places["alice"])
    return config, env, places


async def _call_text(session: object, name: str, args: dict | None = None) -> tuple[bool, str]:
    from helpers.launch import text_of

    result = await session.call_tool(name, args or {})  # type: ignore[attr-defined]
    return bool(result.is_error), text_of(result)


@pytest.mark.filterwarnings("ignore:The roots capability is deprecated")
async def test_two_clients_with_different_roots_get_different_scopes(tmp_path, redis_url):
    """Issue 25: started like Claude Code (cwd $HOME, roots = one project) every project shared
    the scope 'alice'. Over stdio, where popoto's calls would take the fast path."""
    from helpers.launch import launched

    config, env, places = _scope_world(tmp_path, redis_url)
    home = places["alice"]
    async with (
        launched(config, env=env, cwd=home, list_roots_callback=_Roots(places["proj-a"])) as a,
        launched(config, env=env, cwd=home, list_roots_callback=_Roots(places["proj-b"])) as b,
    ):
        err, text = await _call_text(a, "memory_save", {"content": "Alpha deploys on Fridays."})
        assert not err, text
        err, text = await _call_text(a, "memory_search", {"query": "alpha deploys fridays"})
        assert not err and "Alpha deploys on Fridays." in text, text
        err, text = await _call_text(b, "memory_search", {"query": "alpha deploys fridays"})
        assert not err and "Alpha deploys" not in text, text
        assert "'proj-b'" in text  # popoto names the scope; the first empty search says whence
        assert f"from the client's first root, {places['proj-b']}" in text
        err, again = await _call_text(b, "memory_search", {"query": "alpha"})
        assert "first root" not in again  # said once, not on every empty search
        err, text = await _call_text(b, "memory_status")
        assert "agent: proj-b" in text
        assert f"agent_id from: the client's first root, {places['proj-b']}" in text


@pytest.mark.slow
async def test_a_client_from_the_filesystem_root_without_roots_gets_the_per_user_scope(
    tmp_path, redis_url
):
    from helpers.launch import launched

    config, env, _places = _scope_world(tmp_path, redis_url)
    async with launched(config, env=env, cwd=Path("/")) as session:
        err, text = await _call_text(session, "memory_status")
        assert not err, text
        assert "agent: alice" in text
        assert "agent_id from: the per-user default" in text


@pytest.mark.slow
def test_check_names_where_the_scope_comes_from(tmp_path, redis_url):
    config, env, places = _scope_world(tmp_path, redis_url)

    def check(cwd: Path) -> str:
        result = subprocess.run(
            [*launcher_command(), "--config", str(config), "--check"],
            capture_output=True,
            text=True,
            env={**env, "COLUMNS": "400"},
            cwd=cwd,
            timeout=120,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return " ".join(result.stdout.split())

    assert "client's first root, per session; without roots alice (from the per-user default" in (
        check(Path("/"))
    )
    assert f"without roots proj-a (from the project working directory, {places['proj-a']})" in (
        check(places["proj-a"])
    )
    config.write_text(config.read_text().replace("{url:", "{agent_id: fixed, url:"))
    assert "fixed (from settings)" in check(Path("/"))
