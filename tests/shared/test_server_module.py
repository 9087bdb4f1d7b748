"""wiring.ServerModule: a server package's SPEC, standalone server, lazy export and main()."""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Iterator

import pytest
from fastmcp import FastMCP
from pydantic import BaseModel, field_validator

from doc_processing_std_tools.servers import ServerSpec
from doc_processing_std_tools.shared import server_module as wiring


class Settings(BaseModel):
    greeting: str = "hello"


def create_server(settings: Settings) -> FastMCP:
    return FastMCP(f"demo-{settings.greeting}")


@pytest.fixture
def package() -> Iterator[types.ModuleType]:
    """A throwaway server package holding the names a server module declares."""
    module = types.ModuleType("demo_server_package")
    module.Settings = Settings  # type: ignore[attr-defined]
    module.create_server = create_server  # type: ignore[attr-defined]
    module.LOCKS_ITSELF = True  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


def standard(module: types.ModuleType) -> wiring.ServerModule:
    return wiring.ServerModule(
        module.__name__,
        "demo",
        export="demo_server",
        follow_client_roots=False,
        settings_from_args=lambda args: Settings(greeting=args[0]),
    )


def test_the_spec_is_read_from_the_package_like_a_third_party_module(
    package: types.ModuleType,
) -> None:
    spec = standard(package).spec
    assert spec == ServerSpec(
        name="demo", create=create_server, settings=Settings, locks_itself=True
    )


def test_standalone_settings_come_from_the_arguments_else_the_defaults(
    package: types.ModuleType,
) -> None:
    made = standard(package)
    assert made.standalone_server().name == "demo-hello"
    assert made.standalone_server(["hi"]).name == "demo-hi"


def test_the_lazy_export_is_built_once_and_other_names_fail(
    package: types.ModuleType,
) -> None:
    package.__getattr__ = standard(package).module_getattr  # type: ignore[attr-defined]
    server = package.demo_server  # type: ignore[attr-defined]
    assert isinstance(server, FastMCP)
    assert package.demo_server is server  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match="no_such_name"):
        package.no_such_name  # type: ignore[attr-defined]  # noqa: B018


def test_main_help_exits_0_and_a_bad_setting_is_one_line_exit_2(
    package: types.ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    made = wiring.ServerModule(
        package.__name__,
        "demo",
        export="demo_server",
        follow_client_roots=False,
        settings_from_args=lambda args: Settings(greeting=[args]),  # type: ignore[arg-type]
    )
    with pytest.raises(SystemExit) as exited:
        made.main(["--help"])
    assert exited.value.code == 0
    assert "usage: serves the demo MCP server" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exited:
        made.main(["bad"])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith("demo: greeting: ") and error.count("\n") == 1


def test_main_refuses_what_it_would_otherwise_serve_past(
    package: types.ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    """An option (a typo of the user's) was taken for a root, or ignored by a server that
    takes no arguments, which then served anyway."""
    takes_args = standard(package)
    takes_none = wiring.ServerModule(
        package.__name__, "demo", export="demo_server", follow_client_roots=False
    )
    for made, argv, said in (
        (takes_args, ["--bogus", "hi"], "demo: unknown option '--bogus' ("),
        (takes_args, ["--", "/x"], "demo: unknown option '--' ("),
        (takes_none, ["hi"], "demo: it takes no arguments (given: hi); "),
        (takes_none, ["--root", "/x"], "demo: it takes no arguments (given: --root); "),
    ):
        with pytest.raises(SystemExit) as exited:
            made.main(argv)
        assert exited.value.code == 2
        error = capsys.readouterr().err
        assert error.startswith(said) and error.count("\n") == 1, error
        assert "docs/servers/demo.md" in error
        if made is takes_args:
            assert "give it as ./-name)" in error


class RootsSettings(BaseModel):
    root: str

    @field_validator("root")
    @classmethod
    def _exists(cls, value: str) -> str:
        raise ValueError(f"root {value!r} does not exist")


def test_main_says_a_settings_error_without_pydantic_s_wording(
    package: types.ModuleType, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str | None] = []
    monkeypatch.delenv("FASTMCP_LOG_LEVEL", raising=False)

    def build() -> FastMCP:
        seen.append(os.environ.get("FASTMCP_LOG_LEVEL"))  # (fastmcp reads it when imported)
        RootsSettings(root="/nonexistent")
        raise AssertionError("unreachable")

    with pytest.raises(SystemExit) as exited:
        wiring.main("demo", build, [])
    assert exited.value.code == 2
    assert capsys.readouterr().err == "demo: root: root '/nonexistent' does not exist\n"
    assert seen == ["WARNING"]  # not fastmcp's INFO line for every start
