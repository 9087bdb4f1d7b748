"""The config file as text: YAML parsed with the line of every key, ``${VAR}`` expansion, and
one-line error messages that name the file, the line and the key.

Nothing here knows the schema (``schema.py``): a message about a pydantic error is given the
model it came from.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from ..errors import LauncherError


class ConfigError(LauncherError):
    """A config problem, already phrased for the user as one line."""


# ${VAR}, ${VAR:-default}, and $$ for a literal "$" (as in docker compose).
_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def parse_yaml(text: str, file: Path) -> tuple[Any, dict[tuple[str, ...], int]]:
    """The data of *text* and the line of every key in it (keyed by its path of keys)."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{file}:{mark.line + 1}" if mark else str(file)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(
            f"{where}: invalid YAML: {problem}; check indentation and quoting"
        ) from None
    lines: dict[tuple[str, ...], int] = {}
    if node is not None:
        _collect_lines(node, (), lines, file)
    return data, lines


def _collect_lines(
    node: yaml.Node, prefix: tuple[str, ...], out: dict[tuple[str, ...], int], file: Path
) -> None:
    out.setdefault(prefix, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            name, line = str(key_node.value), key_node.start_mark.line + 1
            if name in seen and name != "<<":  # YAML would silently keep the last one
                dotted = ".".join((*prefix, name))
                raise ConfigError(
                    f"{file}:{line}: {dotted}: duplicate key (first on line {seen[name]}); "
                    "keep one of them"
                )
            seen[name] = line
            key = (*prefix, name)
            out[key] = line
            _collect_lines(value_node, key, out, file)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _collect_lines(item, (*prefix, str(index)), out, file)


def expand_env(
    value: Any,
    loc: tuple[str, ...],
    env: Mapping[str, str],
    file: Path,
    lines: dict[tuple[str, ...], int],
) -> Any:
    """Expand ``${VAR}``, ``${VAR:-default}`` and ``$$`` in every string value (never in keys).

    As in the shell: ``${VAR}`` needs VAR set (empty is fine); ``${VAR:-default}``
    takes the default when VAR is unset or empty.
    """
    if isinstance(value, dict):
        return {k: expand_env(v, (*loc, str(k)), env, file, lines) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v, (*loc, str(i)), env, file, lines) for i, v in enumerate(value)]
    if not isinstance(value, str) or "$" not in value:
        return value

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name is None:
            return "$"
        found = env.get(name)
        if default is not None:
            return found or default
        if found is not None:
            return found
        raise ConfigError(
            format_error(
                file,
                lines,
                loc,
                f"environment variable {name} is not set; set it, or give a default: ${{{name}:-value}}",
            )
        )

    return _VAR.sub(substitute, value)


# -- error messages ------------------------------------------------------------


def format_error(
    file: Path, lines: dict[tuple[str, ...], int], loc: tuple[str | int, ...], message: str
) -> str:
    """``file:line: dotted.key: message``, the line of *loc* or of its nearest parent key."""
    key = tuple(str(part) for part in loc)
    line = None
    for depth in range(len(key), -1, -1):
        line = lines.get(key[:depth])
        if line is not None:
            break
    where = f"{file}:{line}" if line else str(file)
    dotted = ".".join(key)
    return f"{where}: {dotted}: {message}" if dotted else f"{where}: {message}"


def describe_validation_error(
    exc: ValidationError,
    file: Path,
    lines: dict[tuple[str, ...], int],
    prefix: tuple[str, ...] = (),
    model: type[BaseModel] | None = None,
) -> str:
    """The first error of *exc* as one line naming the key, with a hint for the fix (the allowed
    keys of *model*, the model that raised it, where one is given)."""
    errors = exc.errors(include_url=False)
    # A misspelt key also makes the right one "missing": report the misspelling.
    error = min(errors, key=lambda e: e["type"] != "extra_forbidden")
    loc = tuple(
        str(part) for part in error["loc"] if part != "function-after[_one_source(), ServerEntry]"
    )
    kind = error["type"]
    if kind == "extra_forbidden":
        allowed = _allowed_keys(model, loc[:-1]) if model is not None else []
        message = "unknown key"
        close = difflib.get_close_matches(loc[-1], allowed, n=1)
        if close:
            message += f"; did you mean '{close[0]}'?"
        if allowed:
            message += f" (allowed keys: {', '.join(allowed)})"
    elif kind == "missing":
        message = "required key is missing"
    else:
        message = error["msg"].removeprefix("Value error, ")  # (pydantic's prefix for a ValueError)
        if "input" in error and not isinstance(error["input"], dict | list):
            message += f" (got {error['input']!r})"
    return format_error(file, lines, (*prefix, *loc), message)


def _allowed_keys(model: type[BaseModel], loc: tuple[str, ...]) -> list[str]:
    """The field names of the model found at *loc* (mapping keys of dict fields are skipped)."""
    current: Any = model
    skip_next = False
    for part in loc:
        if skip_next:
            skip_next = False
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        info = current.model_fields.get(part)
        if info is None:
            return []
        annotation = _without_none(info.annotation)
        origin = getattr(annotation, "__origin__", None)
        if origin is dict:
            current = annotation.__args__[1]
            skip_next = True
        else:
            current = annotation
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []


def _without_none(annotation: Any) -> Any:
    """``X`` for an optional ``X | None`` annotation; any other annotation unchanged."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        kept = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(kept) == 1:
            return kept[0]
    return annotation
