"""A tool's call form, generated from its ``inputSchema``, and the arguments read back from it.

Strings are text fields, enums a choice, numbers and integers number fields, booleans a choice
of true/false (unset when optional); anything else (arrays, objects, unions) is JSON in a text
area. Required fields are marked; defaults are filled in. A value that does not read as its type
gives one line for the form, never a call.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import LauncherError

SIMPLE = {"string", "number", "integer", "boolean"}


@dataclass(frozen=True)
class Field:
    """One input of a tool's form."""

    name: str
    kind: str  # text | number | integer | boolean | choice | json
    required: bool
    description: str
    value: str  # as shown in the form
    choices: tuple[str, ...] = ()


def _plain_type(schema: Mapping[str, Any]) -> str | None:
    """The one simple type of *schema* (``X``, ``[X, "null"]`` or ``anyOf: [X, null]``), or None."""
    kind = schema.get("type")
    if isinstance(kind, list):
        rest = [k for k in kind if k != "null"]
        kind = rest[0] if len(rest) == 1 else None
    if kind is None:
        options = schema.get("anyOf") or schema.get("oneOf")
        if isinstance(options, list):
            rest = [o for o in options if isinstance(o, Mapping) and o.get("type") != "null"]
            if len(rest) == 1:
                return _plain_type(rest[0])
    return kind if isinstance(kind, str) else None


def _enum(schema: Mapping[str, Any]) -> list[Any] | None:
    found = schema.get("enum")
    if isinstance(found, list):
        return found
    for option in schema.get("anyOf") or schema.get("oneOf") or []:
        if isinstance(option, Mapping) and isinstance(option.get("enum"), list):
            return list(option["enum"])
    return None


def _shown(value: Any, kind: str) -> str:
    if value is None:
        return ""
    if kind == "json":
        return json.dumps(value, indent=2, ensure_ascii=False)
    if kind == "boolean":
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


def fields_of(schema: Mapping[str, Any] | None) -> list[Field]:
    """The form's fields for *schema* (a tool's ``inputSchema``), in its order."""
    if not isinstance(schema, Mapping):
        return []
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return []
    required = set(schema.get("required") or [])
    found = []
    for name, prop in properties.items():
        prop = prop if isinstance(prop, Mapping) else {}
        plain, enum = _plain_type(prop), _enum(prop)
        if enum is not None and all(isinstance(v, str) for v in enum):
            kind = "choice"
        elif plain in SIMPLE:
            kind = "text" if plain == "string" else plain
        else:
            kind = "json"
        choices = tuple(enum) if kind == "choice" and enum is not None else ()
        found.append(
            Field(
                name=str(name),
                kind=kind,
                required=name in required,
                description=str(prop.get("description") or prop.get("title") or ""),
                value=_shown(prop.get("default"), kind),
                choices=choices,
            )
        )
    return found


class BadInput(LauncherError):
    """A form value that does not read as its field's type: one line for the form."""


def arguments_of(fields: list[Field], form: Mapping[str, str]) -> dict[str, Any]:
    """The call's arguments from the submitted *form*: empty optional fields are left out.
    Raises :class:`BadInput` naming the first field that cannot be read."""
    arguments: dict[str, Any] = {}
    for field in fields:
        raw = form.get(field.name, "")
        if raw == "" and field.kind != "text":
            if field.required:
                raise BadInput(f"{field.name}: required")
            continue
        if raw == "" and not field.required:
            continue
        arguments[field.name] = _read(field, raw)
    return arguments


def _read(field: Field, raw: str) -> Any:
    try:
        if field.kind == "integer":
            return int(raw)
        if field.kind == "number":
            number = float(raw)
            return int(number) if number.is_integer() and "." not in raw else number
        if field.kind == "boolean":
            if raw not in ("true", "false"):
                raise BadInput(f"{field.name}: choose true or false")
            return raw == "true"
        if field.kind == "choice" and raw not in field.choices:
            raise BadInput(f"{field.name}: choose one of {', '.join(field.choices)}")
        if field.kind == "json":
            return json.loads(raw)
    except (ValueError, TypeError) as exc:
        what = (
            "JSON"
            if field.kind == "json"
            else f"a{'n' if field.kind == 'integer' else ''} {field.kind}"
        )
        raise BadInput(f"{field.name}: not {what} ({exc})") from None
    return raw
