"""One exception root (doc_processing_std_tools/exceptions.py): every exception class the package
defines derives from ``DptError``, so a caller catches what the package raises on purpose without
catching a library's or Python's own failures."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import doc_processing_std_tools
from doc_processing_std_tools.exceptions import DptError


def _package_exceptions() -> dict[str, type[BaseException]]:
    """Every exception class defined in a module of the package, by its dotted name."""
    found: dict[str, type[BaseException]] = {}
    package = doc_processing_std_tools
    for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
            ):
                found[f"{module.__name__}.{name}"] = value
    return found


def test_every_exception_class_of_the_package_derives_from_dpt_error() -> None:
    found = _package_exceptions()
    assert "doc_processing_std_tools.memory.formats.MemoryStoreError" in found  # (the walk works)
    outside = sorted(name for name, cls in found.items() if not issubclass(cls, DptError))
    assert outside == [], f"not under DptError: {outside}"


def test_a_builtin_second_base_is_kept_where_callers_catch_it() -> None:
    found = _package_exceptions()
    for name, builtin in (
        ("doc_processing_std_tools.containment.errors.ContainmentError", PermissionError),
        ("doc_processing_std_tools.containment.errors.FileTooLarge", OSError),
        ("doc_processing_std_tools.shared.globs.GlobError", ValueError),
        ("doc_processing_std_tools.embedded_redis.folder.EmbeddedRedisError", RuntimeError),
    ):
        assert issubclass(found[name], DptError) and issubclass(found[name], builtin), name
