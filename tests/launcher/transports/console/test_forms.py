"""A tool's form from its inputSchema, and the arguments read back from it."""

from __future__ import annotations

import pytest

from doc_processing_std_tools.launcher.transports.console.forms import (
    BadInput,
    arguments_of,
    fields_of,
)

SCHEMA = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "description": "what to say"},
        "count": {"type": "integer", "default": 3},
        "ratio": {"type": "number"},
        "loud": {"type": "boolean", "default": False},
        "mode": {"type": "string", "enum": ["fast", "slow"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "extra": {"anyOf": [{"type": "object"}, {"type": "null"}], "default": None},
        "maybe": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
    },
    "required": ["text", "mode"],
}


def test_each_type_gets_its_input_with_required_marks_and_defaults() -> None:
    fields = {f.name: f for f in fields_of(SCHEMA)}
    assert [f.name for f in fields_of(SCHEMA)] == list(SCHEMA["properties"])  # (schema order)
    assert (fields["text"].kind, fields["text"].required) == ("text", True)
    assert fields["text"].description == "what to say"
    assert (fields["count"].kind, fields["count"].value) == ("integer", "3")
    assert fields["ratio"].kind == "number"
    assert (fields["loud"].kind, fields["loud"].value) == ("boolean", "false")
    assert (fields["mode"].kind, fields["mode"].choices) == ("choice", ("fast", "slow"))
    assert fields["tags"].kind == fields["extra"].kind == "json"
    assert fields["maybe"].kind == "integer"  # (an optional integer stays a number field)


def test_arguments_are_read_as_their_types_and_empty_optional_ones_left_out() -> None:
    form = {
        "text": "hi",
        "count": "7",
        "ratio": "0.5",
        "loud": "true",
        "mode": "slow",
        "tags": '["a", "b"]',
        "extra": "",
        "maybe": "",
    }
    assert arguments_of(fields_of(SCHEMA), form) == {
        "text": "hi",
        "count": 7,
        "ratio": 0.5,
        "loud": True,
        "mode": "slow",
        "tags": ["a", "b"],
    }


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("count", "seven", "count: not an integer"),
        ("tags", "[oops", "tags: not JSON"),
        ("mode", "medium", "mode: choose one of fast, slow"),
        ("mode", "", "mode: required"),
    ],
)
def test_a_value_that_does_not_read_gives_one_line_naming_the_field(
    name: str, value: str, says: str
) -> None:
    form = {"text": "hi", "mode": "fast", name: value}
    with pytest.raises(BadInput) as raised:
        arguments_of(fields_of(SCHEMA), form)
    assert str(raised.value).startswith(says)
    assert "\n" not in str(raised.value)


def test_no_schema_or_no_properties_gives_no_fields() -> None:
    assert fields_of(None) == [] == fields_of({"type": "object"})
