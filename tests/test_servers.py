"""The server contract: registration by entry point, specs from modules and factories,
and ConfigPath resolving against the config file's folder."""

from __future__ import annotations

import textwrap
from importlib.metadata import distribution
from pathlib import Path

import pytest
from pydantic import Field, ValidationError

from doc_processing_std_tools.launcher.compose import compose
from doc_processing_std_tools.launcher.config import load_config
from doc_processing_std_tools.servers import (
    ENTRY_POINT_GROUP,
    ServerLoadError,
    ServerSpec,
    registered_names,
    resolve_module,
    resolve_registered,
)
from doc_processing_std_tools.settings import ConfigPath, ServerSettings
from helpers.paths import REPO


def test_the_built_in_servers_register_through_the_entry_point_group() -> None:
    ours = {
        ep.name: ep.value
        for ep in distribution("doc-processing-std-tools").entry_points.select(
            group=ENTRY_POINT_GROUP
        )
    }
    assert set(ours) == {"memory-tools", "filesystem", "popoto-memory"}
    assert set(ours) <= set(registered_names())
    spec = resolve_registered("memory-tools")
    assert spec.name == "memory-tools" and spec.locks_itself and spec.settings is not None
    popoto = resolve_registered("popoto-memory")
    assert popoto.extra == "popoto" and popoto.one_per_process


def test_an_unknown_name_suggests_the_closest() -> None:
    with pytest.raises(ServerLoadError, match="did you mean 'filesystem'") as caught:
        resolve_registered("filesytem")
    assert caught.value.config_error


def test_a_missing_optional_dependency_is_recognised_from_the_declared_extra() -> None:
    def create(_settings: object) -> object:
        raise ModuleNotFoundError("No module named 'leftpad'", name="leftpad.core")

    spec = ServerSpec(name="pad", create=create, extra="pad")  # type: ignore[arg-type]
    with pytest.raises(ServerLoadError, match=r"doc-processing-std-tools\[pad\]") as caught:
        spec.build(None)
    assert caught.value.extra == "pad" and "'leftpad'" in str(caught.value)


class PathSettings(ServerSettings):
    notes_dir: ConfigPath = Path("notes")
    extra_dirs: list[ConfigPath] = Field(default_factory=list)
    cache: ConfigPath | None = None


def test_config_path_resolves_given_values_and_defaults_against_the_config_folder(
    tmp_path: Path,
) -> None:
    settings = PathSettings.model_validate(
        {"extra_dirs": ["a", "/abs", "~/h"], "cache": "../c"}, context={"base_dir": tmp_path}
    )
    assert settings.notes_dir == tmp_path / "notes"  # the default, too
    assert settings.extra_dirs == [tmp_path / "a", Path("/abs"), Path.home() / "h"]
    assert settings.cache == tmp_path.parent / "c"


def test_a_factory_gets_typed_validated_settings(tmp_path: Path) -> None:
    (tmp_path / "pathy.py").write_text(
        textwrap.dedent(
            """\
            from pathlib import Path

            from fastmcp import FastMCP

            from doc_processing_std_tools.settings import ConfigPath


            def make(folder: ConfigPath, limit: int = 3) -> FastMCP:
                server = FastMCP("pathy")

                @server.tool(annotations={"readOnlyHint": True})
                def where() -> str:
                    return f"{folder}|{limit}"

                return server
            """
        )
    )
    spec = resolve_module("pathy:make", search_dir=tmp_path)
    settings = spec.validate_settings({"folder": "data", "limit": "5"}, tmp_path)
    assert settings.folder == tmp_path / "data" and settings.limit == 5
    with pytest.raises(ValidationError) as caught:
        spec.validate_settings({"folder": "x", "limit": "many"}, tmp_path)
    assert caught.value.errors()[0]["loc"] == ("limit",)
    with pytest.raises(ValidationError) as caught:
        spec.validate_settings({}, tmp_path)
    assert caught.value.errors()[0]["loc"] == ("folder",)


def test_a_ready_made_server_refuses_settings_by_key(tmp_path: Path) -> None:
    spec = resolve_module("helpers.servers.sample_servers:echo_server")
    assert spec.validate_settings({}, tmp_path) is not None
    with pytest.raises(ValidationError):
        spec.validate_settings({"greeting": "hi"}, tmp_path)


async def test_the_launcher_doc_example_with_a_path_setting_works_next_to_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/launcher.md's "write your own server" example, saved next to a config, as written."""
    import re

    doc = (REPO / "docs" / "launcher.md").read_text(encoding="utf-8")
    section = doc.split("### `module: pkg.mod`: a server module", 1)[1]
    python, yaml = re.findall(r"```(?:python|yaml)\n(.*?)```", section, re.S)[:2]
    package = tmp_path / "my_package"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "notes_server.py").write_text(python)
    (tmp_path / "tools.yaml").write_text(yaml)
    monkeypatch.chdir("/")
    composition = await compose(load_config(tmp_path / "tools.yaml", environ={}))
    try:
        from fastmcp import Client

        async with Client(composition.root) as client:
            result = await client.call_tool("greet", {"name": "Ada"})
        assert result.content[0].text.startswith("hi, Ada")  # type: ignore[union-attr]
        assert str(tmp_path / "notes") in result.content[0].text  # type: ignore[union-attr]
    finally:
        await composition.aclose()


@pytest.mark.parametrize(
    ("script", "tool"),
    [("dpt-memory", "write_memory"), ("dpt-filesystem", "list_allowed_directories")],
)
async def test_each_server_has_a_console_script_that_serves_it_alone(
    script: str, tool: str, tmp_path: Path
) -> None:
    import os
    import shutil
    import sys

    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    command = shutil.which(script, path=str(Path(sys.executable).parent))
    assert command, f"{script} is not installed next to {sys.executable}"
    env = {**os.environ, "DPTTOOLS_MEMORY_DIR": str(tmp_path / "m")}
    args = [str(tmp_path)] if script == "dpt-filesystem" else []
    params = StdioServerParameters(command=command, args=args, env=env, cwd="/")
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        assert tool in {t.name for t in (await session.list_tools()).tools}
        result = await session.call_tool(
            tool, {"key": "k", "value": "v"} if tool == "write_memory" else {}
        )
        assert not result.is_error, result
        if script == "dpt-filesystem":  # the ROOT argument is the served root
            assert str(tmp_path) in result.content[0].text  # type: ignore[union-attr]
