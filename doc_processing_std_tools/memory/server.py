"""The MCP wiring of memory-tools: tool schemas, annotations and descriptions over the plain-Python store."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field

from ..shared.server_module import tool_annotations, tool_errors
from .redis_urls import redact

if TYPE_CHECKING:
    from fastmcp import FastMCP
from .formats import MemoryStoreError
from .settings import MEMORY_FOLDER_NAME, SERVER_NAME, Settings
from .stores import SessionStores


def instructions(settings: Settings) -> str:
    """The server instructions, ending with where the memory lives."""
    if settings.on_redis:
        store = redact(settings.url) if settings.url else "the embedded redis-server"
        where = f"The memory is kept in Redis ({store}), namespace {settings.namespace}."
    elif settings.follows_client_roots:
        where = (
            f"The memory folder is {MEMORY_FOLDER_NAME} in the first folder your client shares "
            f"as an MCP root, else {settings.memory_dir}."
        )
    else:
        where = f"The memory folder is {settings.memory_dir}."
    return f"{INSTRUCTIONS}\n{where}"


INSTRUCTIONS = """\
Persistent memory kept in one folder, with two interfaces on the same files.
Key-value tools (write_memory, read_memory, search_memory, list_memory_keys,
delete_memory) store each key as <key>.json at the top of the folder ("/" and
"\\" in keys become "_"). File tools (memory_view, memory_create,
memory_str_replace, memory_insert, memory_delete, memory_rename) work like
Anthropic's memory tool on paths relative to the folder ("/" is the folder
itself); a top-level .json file made with them also appears as a key.
Start with memory_view("/") or list_memory_keys to see what is remembered."""


Key = Annotated[
    str,
    Field(
        description='The memory key, e.g. "user_preferences". "/" and "\\" become "_"; '
        'it cannot be empty or start with ".".'
    ),
]


Offset = Annotated[
    int,
    Field(
        ge=0,
        description="Entries to skip: the next_offset of a cut reply. Default 0.",
    ),
]


MemPath = Annotated[
    str,
    Field(
        description='Path relative to the memory directory, e.g. "notes/todo.md"; '
        '"/" is the directory itself (a leading "/" is ignored), and so is "/memories" '
        '("/memories/notes/todo.md" is "notes/todo.md").'
    ),
]
# Every path tool's description ends with how its paths are rooted.
ROOTED = (
    'Paths are rooted at the memory directory: "notes/todo.md", "/notes/todo.md" and '
    '"/memories/notes/todo.md" name the same file; "/" and "/memories" are the directory itself.'
)
MEMORIES_ROOT = "/memories"  # the root Anthropic's memory tool gives its paths


def from_memories_root(path: Any) -> Any:
    """Anthropic's memory tool roots every path at ``/memories``: ``/memories/x`` is ``x``
    here and ``/memories`` the memory directory. (``memories/x``, without the leading
    ``/``, stays a folder named ``memories``.)"""
    if isinstance(path, str) and (path == MEMORIES_ROOT or path.startswith(MEMORIES_ROOT + "/")):
        return "/" + path[len(MEMORIES_ROOT) :].lstrip("/")
    return path


def create_server(settings: Settings | None = None) -> FastMCP:
    """Build a fresh ``memory-tools`` server on ``settings.memory_dir`` (or its Redis backend).

    Nothing is created or connected yet: the folder appears on first write, Redis is
    reached on the first call.

    Args:
        settings: The server's settings; ``None``: from the environment.

    Returns:
        A new FastMCP server with the key-value and file tools.
    """
    # (here, not at the top: importing the package must not load fastmcp, 0.25 s)
    from fastmcp import FastMCP

    from ..shared.checked_tools import check_arguments
    from .index_preload import IndexPreload

    settings = settings if settings is not None else Settings()
    store: Any = SessionStores(settings)
    # Its lifespan reads the saved index: served, not merely built (dpt-launch tools, --check).
    server = FastMCP(
        SERVER_NAME,
        instructions=instructions(settings),
        providers=[IndexPreload(store.default)],
    )

    READ = tool_annotations(read_only=True)

    def tool(after: str = "", **options: Any) -> Callable[[Callable[..., str]], Any]:
        """``server.tool`` with the docstring (and *after*) passed as the description: given a
        docstring, fastmcp parses it with griffe, whose import alone costs ~40 ms of every
        start-up (ours are plain descriptions, with no Args sections to find)."""

        def register(fn: Callable[..., str]) -> Any:
            description = " ".join(filter(None, [inspect.getdoc(fn), after]))
            fn.__doc__ = None
            return server.tool(description=description, **options)(fn)

        return register

    @tool_errors(MemoryStoreError)
    def run(method: Callable[..., str], *args: Any) -> str:
        return method(*args)

    @tool(
        output_schema=None,
        annotations=tool_annotations(read_only=False, destructive=True, idempotent=True),
    )
    def write_memory(
        key: Key,
        value: Annotated[str, Field(description="The text to remember (any length).")],
    ) -> str:
        """Store a text value under a key, replacing any value the key already had. The value is saved as <key>.json in the memory directory (created if missing) and survives restarts; returns a confirmation."""
        return run(store.write, key, value)

    @tool(output_schema=None, annotations=READ)
    def read_memory(key: Key) -> str:
        """Return the full text stored under a key, or an error if no memory has that key. For a .json file that was not written by write_memory, its raw text is returned."""
        return run(store.read, key)

    @tool(
        output_schema=None,
        annotations=READ,
        after='Many results come in pages: a JSON object with "note", "total", "next_offset" '
        'and "results" (a value too large for a page is listed as an entry over 1 MiB is).',
    )
    def search_memory(
        query: Annotated[
            str,
            Field(
                description="Text to look for in keys and values (case-insensitive; "
                "an empty query matches every memory)."
            ),
        ],
        offset: Offset = 0,
    ) -> str:
        """Find memories whose key or value contains the query, ignoring case. Returns a JSON list of {"key": ..., "value": ...} objects sorted by key, with full values (an empty list when nothing matches); an entry over 1 MiB is matched by its key only and listed with "value": null and its "size" in bytes (read it with read_memory)."""
        return run(store.search, query, offset)

    @tool(
        output_schema=None,
        annotations=READ,
        after='Many keys come in pages: a JSON object with "note", "total", "next_offset" and '
        '"keys".',
    )
    def list_memory_keys(offset: Offset = 0) -> str:
        """List every stored key as a sorted JSON list of strings. Every top-level .json file in the memory directory counts, including ones made with memory_create (listed under their file name without .json)."""
        return run(store.list_keys, offset)

    @tool(
        output_schema=None,
        annotations=tool_annotations(read_only=False, destructive=True, idempotent=True),
    )
    def delete_memory(key: Key) -> str:
        """Delete the memory stored under a key (its <key>.json file). Returns a confirmation, or an error if no memory has that key."""
        return run(store.delete, key)

    @tool(
        output_schema=None,
        annotations=READ,
        after="A long directory listing ends saying how many more entries it left out. " + ROOTED,
    )
    def memory_view(
        path: MemPath,
        view_range: Annotated[
            list[int] | None,
            Field(
                description="Optional [start, end] line range for a file, 1-based and "
                "inclusive; end -1 means to the end of the file."
            ),
        ] = None,
    ) -> str:
        """Show a directory or a file of the memory directory. A directory lists its files and folders up to 2 levels deep with their sizes (hidden items excluded); a file is shown with line numbers, optionally only the lines in view_range."""
        return run(store.view, from_memories_root(path), view_range)

    @tool(
        after=ROOTED,
        output_schema=None,
        annotations=tool_annotations(read_only=False, destructive=False, idempotent=True),
    )
    def memory_create(
        path: MemPath,
        file_text: Annotated[str, Field(description="The full content of the new file.")],
    ) -> str:
        """Create a new file in the memory directory with the given content, creating missing parent folders. It never overwrites: it fails if the file already exists (edit it with memory_str_replace or memory_insert, or delete it first)."""
        return run(store.create, from_memories_root(path), file_text)

    @tool(
        after=ROOTED,
        output_schema=None,
        annotations=tool_annotations(read_only=False, destructive=True, idempotent=False),
    )
    def memory_str_replace(
        path: MemPath,
        old_str: Annotated[
            str,
            Field(description="The exact text to replace; it must occur exactly once in the file."),
        ],
        new_str: Annotated[
            str, Field(description="The replacement text (may be empty to delete old_str).")
        ],
    ) -> str:
        """Replace one exact occurrence of old_str with new_str in a memory file. Nothing changes if old_str is missing or occurs more than once (the error names the lines); on success the edited lines are shown with line numbers."""
        return run(store.str_replace, from_memories_root(path), old_str, new_str)

    @tool(
        after=ROOTED,
        output_schema=None,
        annotations=tool_annotations(read_only=False, destructive=False, idempotent=False),
    )
    def memory_insert(
        path: MemPath,
        insert_line: Annotated[
            int,
            Field(
                description="0-based line to insert before: 0 inserts at the top, the file's "
                "line count appends at the end."
            ),
        ],
        insert_text: Annotated[str, Field(description="The text to insert (one or more lines).")],
    ) -> str:
        """Insert text into a memory file before the given 0-based line, keeping every existing line. Returns the edited lines with line numbers, or an error giving the valid range of insert_line."""
        return run(store.insert, from_memories_root(path), insert_line, insert_text)

    @tool(
        after=ROOTED,
        output_schema=None,
        annotations=tool_annotations(read_only=False, destructive=True, idempotent=True),
    )
    def memory_delete(
        path: Annotated[
            str,
            Field(
                description="Path of the file or folder to delete, relative to the memory "
                "directory; the directory itself cannot be deleted."
            ),
        ],
    ) -> str:
        """Delete a file, or a folder with everything in it, from the memory directory. A symlink is removed itself, never what it points to; the memory directory itself cannot be deleted, nor a path or symlink resolving to it."""
        return run(store.delete_path, from_memories_root(path))

    @tool(
        after=ROOTED,
        output_schema=None,
        annotations=tool_annotations(read_only=False, destructive=True, idempotent=True),
    )
    def memory_rename(
        old_path: Annotated[
            str,
            Field(
                description="Current path of the file or folder, relative to the memory directory."
            ),
        ],
        new_path: Annotated[
            str,
            Field(
                description="New path, relative to the memory directory; it must not exist "
                "yet (missing parent folders are created)."
            ),
        ],
    ) -> str:
        """Rename or move a file or folder inside the memory directory. It fails if the destination already exists or the source does not; missing parent folders of the destination are created."""
        return run(store.rename, from_memories_root(old_path), from_memories_root(new_path))

    check_arguments(server)
    return server
