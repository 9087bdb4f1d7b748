"""popoto's tool definitions and instructions, as ``popoto 1.10.1`` gives them.

``popoto_memory.create_server`` uses this copy when the installed popoto is this
version, so that listing the tools does not wait for popoto's import (about a
third of fastmcp's own import time); popoto itself is then imported in the
background. Any other version is imported and asked, as before.
``tests/popoto_memory/test_tools.py`` checks that this copy equals what popoto returns.
After upgrading popoto, paste its ``tool_definitions()`` and ``SERVER_INSTRUCTIONS`` here.
"""

from __future__ import annotations

from typing import Any

POPOTO_VERSION = "1.10.1"

SERVER_INSTRUCTIONS = "Persistent memory backed by the user's own Redis, Valkey or PostgreSQL. Recall and capture already run automatically on every turn through hooks; use these tools only for deliberate acts: searching for something specific mid-task, saving a fact worth keeping, correcting a memory that proved wrong, or checking that memory is healthy."

TOOL_DEFINITIONS: list[dict[str, Any]] = [
    {
        "name": "memory_search",
        "description": "Search stored memories for this project and return the most relevant, ranked. "
        "Use when you need something specific that was not already injected into the "
        "turn.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to search for."},
                "limit": {
                    "type": "integer",
                    "description": "Maximum records to return. Defaults to "
                    "the configured injection budget.",
                    "minimum": 1,
                },
            },
            "required": ["query"],
        },
    },
    {
        "name": "memory_save",
        "description": "Save a fact to memory verbatim. Turns are already captured automatically, so use "
        "this only for something deliberate that the turn text would not preserve.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "content": {
                    "type": "string",
                    "description": "The text to remember, stored as written.",
                },
                "importance": {
                    "type": "number",
                    "description": "Base importance from 0 to 1, "
                    "feeding time decay. Defaults to "
                    "0.5.",
                    "minimum": 0,
                    "maximum": 1,
                },
            },
            "required": ["content"],
        },
    },
    {
        "name": "memory_feedback",
        "description": "Report how a memory turned out. Marking a memory 'contradicted' lowers its "
        "confidence so it ranks lower in future turns; 'acted' raises it. The memory is "
        "not deleted.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "key": {
                    "type": "string",
                    "description": "The record key returned by memory_search.",
                },
                "outcome": {
                    "type": "string",
                    "description": "How the memory was used.",
                    "enum": ["acted", "used", "dismissed", "deferred", "contradicted"],
                },
            },
            "required": ["key"],
        },
    },
    {
        "name": "memory_status",
        "description": "Report memory health: connection, scope, retrieval mode, record count, and any "
        "recorded failures.",
        "inputSchema": {"type": "object", "properties": {}},
    },
]
