"""A tool's input schema read for people: ``dpt-launch tools NAME`` and the docs' tool pages.

One reading of JSON Schema for both, so the terminal and the site cannot disagree about a
parameter's type, default or requiredness. ``docs/_hooks/tool_reference.py`` imports it.
"""

from __future__ import annotations

import json
from typing import Any


def resolve(prop: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Follow a local ``$ref`` (``#/$defs/Name``) to its definition."""
    ref = prop.get("$ref", "")
    if ref.startswith("#/$defs/"):
        return {
            **defs.get(ref.removeprefix("#/$defs/"), {}),
            **{k: v for k, v in prop.items() if k != "$ref"},
        }
    return prop


def type_of(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    """A short, readable type: ``integer ≥ 0, or null``, ``array of string (at least 1)``."""
    prop = resolve(prop, defs)
    if "anyOf" in prop or "oneOf" in prop:
        options = [resolve(p, defs) for p in prop.get("anyOf", prop.get("oneOf", []))]
        nullable = any(p.get("type") == "null" for p in options)
        kinds = [type_of(p, defs) for p in options if p.get("type") != "null"]
        return " or ".join(kinds) + (", or null" if nullable else "")
    if "enum" in prop:
        return "one of " + ", ".join(f"`{json.dumps(v)}`" for v in prop["enum"])
    if "const" in prop:
        return f"`{json.dumps(prop['const'])}`"
    declared = prop.get("type", "any")
    kind = " or ".join(declared) if isinstance(declared, list) else str(declared)
    if kind == "array":
        items = prop.get("items")
        item = type_of(items, defs) if isinstance(items, dict) else ""
        kind = f"array of {item}s" if item == "object" else f"array of {item}" if item else kind
        if "minItems" in prop or "maxItems" in prop:
            low, high = prop.get("minItems"), prop.get("maxItems")
            if low is not None and low == high:
                kind += f" (exactly {low})"
            elif high is None:
                kind += f" (at least {low})"
            else:
                kind += f" ({low or 0} to {high})"
    low, high = prop.get("minimum"), prop.get("maximum")
    if low is not None and high is not None:
        kind += f" {low}–{high}"
    elif low is not None:
        kind += f" ≥ {low}"
    elif high is not None:
        kind += f" ≤ {high}"
    return kind


def parameter_rows(schema: dict[str, Any]) -> list[tuple[str, str, bool, str, str]]:
    """(name, type, required, default, description) per parameter; the fields of an array
    of objects follow their parameter as ``param[].field``."""
    defs = schema.get("$defs", {})
    rows: list[tuple[str, str, bool, str, str]] = []

    def walk(properties: dict[str, Any], required: set[str], prefix: str) -> None:
        for name, raw in properties.items():
            prop = resolve(raw, defs)
            default = json.dumps(prop["default"]) if "default" in prop else ""
            rows.append(
                (
                    prefix + name,
                    type_of(prop, defs),
                    name in required,
                    default,
                    prop.get("description", ""),
                )
            )
            items = resolve(prop.get("items") or {}, defs)
            if prop.get("type") == "array" and items.get("properties"):
                walk(items["properties"], set(items.get("required", [])), f"{prefix}{name}[].")
            elif prop.get("type") == "object" and prop.get("properties"):
                walk(prop["properties"], set(prop.get("required", [])), f"{prefix}{name}.")

    walk(schema.get("properties") or {}, set(schema.get("required") or []), "")
    return rows


def placeholder(name: str, prop: dict[str, Any], defs: dict[str, Any]) -> Any:
    """A value of *prop*'s type to show in an example: ``"<name>"`` for text, the smallest
    allowed number, the first choice of an enum, the required fields of an object."""
    prop = resolve(prop, defs)
    if "const" in prop:
        return prop["const"]
    if "enum" in prop:
        return prop["enum"][0]
    options = prop.get("anyOf") or prop.get("oneOf")
    if options:
        concrete = [p for p in options if resolve(p, defs).get("type") != "null"]
        return placeholder(name, (concrete or options)[0], defs)
    kind = prop.get("type", "string")
    kind = next((k for k in kind if k != "null"), "string") if isinstance(kind, list) else kind
    if kind in ("integer", "number"):
        if "minimum" in prop:
            low = prop["minimum"]
        elif "exclusiveMinimum" in prop:
            low = prop["exclusiveMinimum"] + 1
        else:
            low = 0
        return int(low) if kind == "integer" else low
    if kind == "boolean":
        return False
    if kind == "array":
        items: dict[str, Any] = prop["items"] if isinstance(prop.get("items"), dict) else {}
        return [placeholder(name, items, defs) for _ in range(max(1, prop.get("minItems", 1)))]
    if kind == "object":
        return example_arguments(prop, defs)
    if kind == "null":
        return None
    return f"<{name}>"


def example_arguments(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> dict[str, Any]:
    """Arguments naming every required parameter, each with a :func:`placeholder` value."""
    defs = schema.get("$defs", {}) if defs is None else defs
    required = schema.get("required") or []
    properties = schema.get("properties") or {}
    return {
        name: placeholder(name, properties[name], defs) for name in required if name in properties
    }
