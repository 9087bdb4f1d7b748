"""Rank a tool catalog against a natural-language query (a profile's search tool uses it).

The ranking is fastmcp's own BM25 Okapi index (``fastmcp.server.transforms.search.bm25``,
reached through ``seams.bm25_index``), fed the same text fastmcp's search transforms index
(name, description, parameter names and their descriptions). Its transform cannot be used
as it is: it ranks the tools of a FastMCP server it wraps, while a profile ranks the
composition's exposed catalog (after filters, collisions and name shortening) and a
benchmark ranks plain definitions. Adapted here, before the text reaches the index:

- names are split into words (``read_memory``, ``readMemory``, ``fs-read``) and counted
  twice, so a query word that names a tool outweighs one in a long description; a word split
  at a case change is kept whole too (``GitHub`` is ``github``, not only ``git hub``);
- English stop words are dropped (in a small catalog, "the" would otherwise rank a tool);
- every word is stemmed with Snowball's English stemmer (``files``/``file``,
  ``directories``/``directory``), so a query need not use the tool's own inflection;
- words and phrases also yield the concepts they name (``tool_vocabulary``: "forget" and
  "delete", "folder" and "directory"), so a query meets a tool that words the need differently;
  identifiers say what they name (``main.py`` a file, ``PAY-12`` an issue, ``#general`` a
  channel);
- a query's quoted text, and what follows a colon, count half as much as the rest: they are
  mostly the payload ("remember this: we chose Postgres"), not the need.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .tool_vocabulary import concept_tokens, entity_tokens
from .tool_vocabulary import stem as stem  # re-exported: the stemmer terms() applies

_RUN = re.compile(r"[^\W_]+")
# What a request quotes, or gives after a colon, is mostly its payload (a message, a value),
# not its need: "remember this: we chose Postgres" should not rank the Postgres tools first.
_PAYLOAD = re.compile(r"""(?<!\w)(?:'[^']*'|"[^"]*"|“[^”]*”|‘[^’]*’)(?!\w)|:\s.*$""")
_NEED_WEIGHT = 2  # a query's other words count this many times a payload word
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "for",
        "from",
        "have",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "should",
        "so",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "this",
        "to",
        "us",
        "was",
        "we",
        "what",
        "when",
        "where",
        "which",
        "who",
        "will",
        "with",
        "you",
        "your",
        "all",
        "any",
        "some",
        "please",
    ]
)


def terms(text: str) -> list[str]:
    """The stemmed, lower-case words of *text* but stop words; identifiers are split at ``_``,
    ``-`` and case changes."""
    words = (w.lower() for w in _WORD.findall(text))
    return [stem(w) for w in words if w not in _STOP]


def _tokens(text: str) -> list[str]:
    """What the index holds of *text*: its terms, a case-split word also whole (``GitHub``
    is ``github`` as well as ``git hub``), and the concepts its words and phrases name."""
    stems: list[str] = []
    kept: list[str] = []
    for run in _RUN.findall(text):
        parts = [w.lower() for w in _WORD.findall(run)]
        if len(parts) > 1 and run.isalpha():
            kept.append(stem(run.lower()))
        for word in parts:
            stems.append(stem(word))
            if word not in _STOP:
                kept.append(stems[-1])
    return [*kept, *concept_tokens(stems), *entity_tokens(text)]


def _field(tool: Any, *names: str) -> Any:
    for name in names:
        if isinstance(tool, Mapping):
            if name in tool:
                return tool[name]
        elif getattr(tool, name, None) is not None:
            return getattr(tool, name)
    return None


def tool_name(tool: Any) -> str:
    return str(_field(tool, "name") or "")


def tool_schema(tool: Any) -> dict[str, Any]:
    """The input schema of an ``mcp.types.Tool``, a fastmcp ``Tool`` or a ``dict`` definition."""
    schema = _field(tool, "input_schema", "parameters", "inputSchema")
    return schema if isinstance(schema, dict) else {}


def searchable_text(tool: Any) -> str:
    """Name, description, parameter names and descriptions, as fastmcp's transforms index them."""
    parts = [tool_name(tool), str(_field(tool, "description") or "")]
    properties = tool_schema(tool).get("properties")
    if isinstance(properties, dict):
        for param, info in properties.items():
            parts.append(str(param))
            if isinstance(info, dict) and isinstance(info.get("description"), str):
                parts.append(info["description"])
    return " ".join(parts)


def _document(tool: Any) -> str:
    name_words = _tokens(tool_name(tool))
    return " ".join([*name_words, *name_words, *_tokens(searchable_text(tool))])


class CatalogIndex:
    """A BM25 index over one catalog; build it once, query it as often as needed."""

    def __init__(self, tools: Iterable[Any]) -> None:
        from ...seams.bm25 import bm25_index

        listed = list(tools)
        self.names = [tool_name(t) for t in listed]
        self._index = bm25_index([_document(t) for t in listed])

    def search(self, query: str, limit: int = 5) -> list[str]:
        """Exposed names of the best matches, best first; none when no word of *query* matches."""
        if limit <= 0 or not self.names:
            return []
        need = _PAYLOAD.sub(" ", query)
        payload = " ".join(m.group(0) for m in _PAYLOAD.finditer(query))
        hits = self._index.query(" ".join(_tokens(need) * _NEED_WEIGHT + _tokens(payload)), limit)
        return [self.names[i] for i in hits]


def search_catalog(tools: Sequence[Any], query: str, limit: int = 5) -> list[str]:
    """Exposed names of the best-matching tools, best first (names, descriptions, parameter
    names). *tools* are ``mcp.types.Tool`` objects, fastmcp ``Tool`` objects or dicts with
    ``name``, ``description`` and ``inputSchema``."""
    return CatalogIndex(tools).search(query, limit)
