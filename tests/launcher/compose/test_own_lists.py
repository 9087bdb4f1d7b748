"""``as_served``: what fastmcp adds to an external server's listed item is taken out again."""

from __future__ import annotations

from doc_processing_std_tools.launcher.compose.own_lists import as_served


def test_fastmcp_empty_tags_and_empty_arguments_are_taken_out() -> None:
    item = {"name": "ns_p", "arguments": [], "_meta": {"fastmcp": {"tags": []}}}
    assert as_served(item) == {"name": "ns_p"}


def test_what_the_server_sent_stays() -> None:
    item = {
        "name": "ns_t",
        "arguments": [{"name": "a"}],
        "_meta": {"fastmcp": {"tags": ["x"]}, "ui": {"resourceUri": "ui://t"}},
    }
    assert as_served(item) == item
    mixed = {"name": "ns_t", "_meta": {"fastmcp": {"tags": [], "version": "2"}, "k": 1}}
    assert as_served(mixed) == {"name": "ns_t", "_meta": {"fastmcp": {"version": "2"}, "k": 1}}
