"""``search_catalog``: the ranking a profile's search tool (and the retrieval benchmark) uses."""

from __future__ import annotations

from typing import Any

import mcp.types
import pytest

from doc_processing_std_tools.launcher.compose import tool_search
from doc_processing_std_tools.launcher.compose.tool_search import search_catalog, stem, terms

CATALOG = [
    {
        "name": "memory_write",
        "description": "Write a memory file",
        "inputSchema": {"properties": {"path": {"description": "where to write"}}},
    },
    {
        "name": "fs_list_directory",
        "description": "List the entries of a directory",
        "inputSchema": {"properties": {"path": {}}},
    },
    {
        "name": "github_create_issue",
        "description": "Create a new issue in a GitHub repository",
        "inputSchema": {"properties": {"owner": {}, "repo": {}, "title": {}}},
    },
    {
        "name": "browser_take_screenshot",
        "description": "Capture the visible page as an image",
        "inputSchema": {"properties": {"fullPage": {"description": "the whole scrollable page"}}},
    },
]


def test_inflections_and_identifiers_meet() -> None:
    assert stem("files") == stem("file")
    assert stem("writing") == stem("write") == stem("writes")
    assert stem("directories") == stem("directory")
    assert stem("replies") == stem("reply") and stem("merged") == stem("merging")
    assert stem("deletion") == stem("delete") and stem("configuration") == stem("configure")
    assert terms("fullPage fs-read_file") == terms("full page fs read file")


def test_a_synonym_or_a_phrase_finds_the_tool_that_words_it_differently() -> None:
    catalog = [
        *CATALOG,
        {"name": "memory_delete", "description": "Delete a memory file"},
        {"name": "github_get_me", "description": "Return the authenticated user's profile"},
    ]
    assert search_catalog(catalog, "erase that memory", limit=1) == ["memory_delete"]
    assert search_catalog(catalog, "forget it", limit=1) == ["memory_delete"]
    assert search_catalog(catalog, "what is in this folder", limit=1) == ["fs_list_directory"]
    assert search_catalog(catalog, "who am I", limit=1) == ["github_get_me"]
    assert search_catalog(catalog, "file a ticket", limit=1) == ["github_create_issue"]


def test_a_brand_split_at_its_case_change_is_also_one_word() -> None:
    catalog = [
        {"name": "git_log", "description": "Show the commit history of the git repository"},
        {"name": "repo_log", "description": "Show the commit history of a GitHub repository"},
    ]
    assert search_catalog(catalog, "github commit history", limit=1) == ["repo_log"]


def test_an_identifier_in_the_query_says_what_kind_of_thing_it_names() -> None:
    catalog = [
        {"name": "browser_read", "description": "Return the text of a page"},
        {"name": "fs_read", "description": "Return the text of a file on the disk"},
        {"name": "chat_assign", "description": "Assign a role"},
        {"name": "tracker_assign", "description": "Assign an issue to someone on the team"},
    ]
    assert search_catalog(catalog, "return the text of setup.cfg", limit=1) == ["fs_read"]
    assert search_catalog(catalog, "assign PAY-12 to Sam", limit=1) == ["tracker_assign"]


def test_what_a_query_quotes_weighs_less_than_what_it_asks() -> None:
    catalog = [
        {"name": "memory_save", "description": "Save a fact to memory"},
        {"name": "pg_query", "description": "Run a SQL query on Postgres and return the rows"},
    ]
    asked = "save this to memory: run SQL queries on Postgres"
    assert search_catalog(catalog, asked, limit=1) == ["memory_save"]


def test_the_best_match_comes_first_and_no_match_gives_nothing() -> None:
    assert search_catalog(CATALOG, "open a bug report on the repo")[0] == "github_create_issue"
    assert search_catalog(CATALOG, "which files are in this folder directory")[0] == (
        "fs_list_directory"
    )
    assert search_catalog(CATALOG, "screenshots of the full page", limit=1) == [
        "browser_take_screenshot"
    ]
    assert search_catalog(CATALOG, "zzz") == []
    assert search_catalog(CATALOG, "the of a") == []


def test_mcp_tools_and_dicts_rank_alike() -> None:
    tools = [mcp.types.Tool.model_validate(t) for t in CATALOG]
    for query in ("write memory", "list directory", "capture image"):
        assert search_catalog(tools, query) == search_catalog(CATALOG, query)


def test_limit_bounds_the_answer() -> None:
    assert len(search_catalog(CATALOG, "write list create capture", limit=2)) == 2
    assert search_catalog(CATALOG, "write", limit=0) == []


def test_a_query_in_other_words_still_finds_the_tool() -> None:
    catalog = [
        *CATALOG,
        {"name": "fs_create_directory", "description": "Create a new directory", "inputSchema": {}},
    ]
    assert search_catalog(catalog, "make a folder")[0] == "fs_create_directory"
    assert search_catalog(catalog, "report a bug")[0] == "github_create_issue"
    assert set(search_catalog(catalog, "zzz folder")[:2]) == {
        "fs_create_directory",
        "fs_list_directory",
    }


def test_the_words_of_an_identifier_weigh_less_than_the_need() -> None:
    catalog = [
        {"name": "pay_create_invoice", "description": "Create an invoice for a payment"},
        {"name": "tracker_assign", "description": "Assign an issue to someone on the team"},
    ]
    assert search_catalog(catalog, "hand PAY-301 over to Sam", limit=1) == ["tracker_assign"]


def test_enum_values_and_a_near_form_of_a_word_find_the_tool() -> None:
    catalog = [
        {
            "name": "pr_list",
            "description": "List pull requests",
            "inputSchema": {"properties": {"state": {"enum": ["open", "merged"]}}},
        },
        {"name": "billing_cancel_subscription", "description": "Cancel a subscription"},
        {"name": "billing_list_invoices", "description": "List invoices"},
    ]
    assert search_catalog(catalog, "which were merged", limit=1) == ["pr_list"]
    assert search_catalog(catalog, "subscriber", limit=1) == ["billing_cancel_subscription"]


def test_a_changed_catalog_is_indexed_again() -> None:
    catalog = [
        {"name": "a_tool", "description": "Rotate the logs"},
        {"name": "b_tool", "description": "Send a message"},
    ]
    assert search_catalog(catalog, "rotate logs", limit=1) == ["a_tool"]
    assert search_catalog(catalog, "rotate logs", limit=1) == ["a_tool"]
    changed = [catalog[0], {"name": "b_tool", "description": "Rotate the logs of every server"}]
    assert search_catalog(changed, "rotate logs every server", limit=1) == ["b_tool"]


class CountingEmbedder:
    """An embedder that counts the catalogs it embeds (each index embeds its catalog once)."""

    def __init__(self) -> None:
        self.embedded: list[list[str]] = []

    def vectors(self, texts: list[str]) -> list[list[float]]:
        self.embedded.append(texts)
        return [[1.0] for _ in texts]

    def similarities(self, vectors: Any, text: str) -> list[float]:
        return [0.0 for _ in vectors]


def test_two_catalogs_searched_by_turns_are_each_embedded_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counting = CountingEmbedder()
    monkeypatch.setattr(tool_search, "embedder", lambda: counting)
    monkeypatch.setattr(tool_search, "_INDEXES", type(tool_search._INDEXES)())
    one, other = CATALOG[:2], CATALOG[1:]
    for _ in range(3):
        search_catalog(one, "write a memory")
        search_catalog(other, "list a directory")
    assert len(counting.embedded) == 2
    for n in range(tool_search.KEPT_INDEXES):  # (the oldest of more catalogs is left out)
        search_catalog([*CATALOG, {"name": f"extra_{n}", "description": "x"}], "write")
    search_catalog(one, "write")
    assert len(counting.embedded) == 2 + tool_search.KEPT_INDEXES + 1
