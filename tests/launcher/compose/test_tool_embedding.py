"""compose/tool_embedding.py: the shipped model loads without a hub, and ranks by meaning."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from doc_processing_std_tools.launcher.compose import tool_embedding, tool_search
from doc_processing_std_tools.launcher.compose.tool_search import CatalogIndex

CATALOG = [
    {"name": "pay_create_invoice", "description": "Create an invoice for a customer."},
    {"name": "calendar_list_events", "description": "List the events of a calendar."},
    {"name": "k8s_list_pods", "description": "List pods in a namespace."},
    {"name": "mail_forward_message", "description": "Forward a message to other recipients."},
]


@pytest.fixture
def loaded() -> Iterator[tool_embedding.Embedder]:
    pytest.importorskip("wordllama")
    found = tool_embedding.embedder()
    assert found is not None
    yield found


def test_the_model_loads_from_the_wheel_without_asking_a_hub(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    requests = pytest.importorskip("requests")
    pytest.importorskip("wordllama")

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a download was attempted: {args}")

    monkeypatch.setattr(requests, "get", refused)
    tool_embedding.embedder.cache_clear()
    try:
        assert tool_embedding.embedder() is not None
    finally:
        tool_embedding.embedder.cache_clear()


def test_a_need_worded_unlike_its_tool_finds_it(loaded: tool_embedding.Embedder) -> None:
    index = CatalogIndex(CATALOG)
    assert index.search("what is on my schedule on Thursday", 1) == ["calendar_list_events"]
    assert index.search("pass the email along to accounting", 1) == ["mail_forward_message"]
    assert index.search("zzz") == []


def test_without_the_extra_bm25_ranks_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tool_search, "embedder", lambda: None)
    index = CatalogIndex(CATALOG)
    assert index.search("list the pods", 1) == ["k8s_list_pods"]
    assert index.search("what is on my schedule on Thursday") == []
