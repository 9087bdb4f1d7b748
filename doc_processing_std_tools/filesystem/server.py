"""The MCP wiring of the filesystem server: the reference server's tool names, parameters and annotations over FileSystem."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar, cast

from pydantic import Field, WithJsonSchema

from ..shared.server_module import tool_annotations, tool_errors

if TYPE_CHECKING:
    from fastmcp import FastMCP
from .base import MAX_TREE_DEPTH, EditOperation, FileSystemError
from .sessions import SessionFileSystems
from .settings import SERVER_NAME, Settings
from .tools import FileSystem

T = TypeVar("T")

# edit_file's items as their own schema in place, not a "$defs" entry: a schema with "$defs"
# makes fastmcp inline it with jsonref on every tools/list, whose import (with requests) costs
# ~22 ms of the launcher's first answer. What clients receive is the same.
INLINE_EDIT_SCHEMA = WithJsonSchema(EditOperation.model_json_schema())

PathArg = Annotated[
    str,
    Field(
        description=(
            "Path of the file or folder: absolute inside an allowed directory, "
            "or relative to the first allowed directory"
        )
    ),
]


HeadArg = Annotated[
    int | None,
    Field(ge=0, description="If provided, returns only the first N lines of the file"),
]


TailArg = Annotated[
    int | None,
    Field(ge=0, description="If provided, returns only the last N lines of the file"),
]


TreeExcludeArg = Annotated[
    list[str],
    Field(
        description=(
            "Glob patterns (relative to path) of entries to leave out, with everything "
            "below them; a pattern without '*' also matches that name at any depth"
        )
    ),
]


OffsetArg = Annotated[
    int,
    Field(
        ge=0,
        description="Entries to skip: the offset a cut reply names. Default 0.",
    ),
]


def create_server(settings: Settings) -> FastMCP:
    """Build the ``filesystem`` server on *settings*.

    Args:
        settings: The server's settings; with ``read_only`` only the reading tools are
            registered.

    Returns:
        A new FastMCP server with the reference filesystem tools.

    Raises:
        ValueError: A root in the settings does not exist or is not a folder.
    """
    # (here, not at the top: importing the package must not load fastmcp, 0.25 s)
    from fastmcp import FastMCP
    from mcp.types import AudioContent, BlobResourceContents, EmbeddedResource, ImageContent

    from ..shared.checked_tools import check_arguments

    systems = SessionFileSystems(settings)
    # Each FileSystem method, looked up on the calling session's FileSystem (its __getattr__).
    fs = cast(FileSystem, systems)
    mcp = FastMCP(SERVER_NAME, instructions=_instructions(systems))

    @tool_errors(FileSystemError)
    def call(fn: Callable[..., T], *args: Any) -> T:
        return fn(*args)

    def read_tool(title: str, description: str) -> Callable[[Callable[..., Any]], Any]:
        return mcp.tool(
            title=title,
            description=description,
            annotations=tool_annotations(read_only=True),
            output_schema=None,
        )

    text_description = (
        "Read the complete contents of a file from the file system as text (UTF-8). "
        "Use the 'head' parameter to read only the first N lines of a file, or the "
        "'tail' parameter to read only the last N lines (not both); files over "
        f"{settings.max_read_bytes} bytes can only be read with head or tail. "
        "Operates on the file as text regardless of extension. "
        "Only works within allowed directories."
    )

    @read_tool("Read Text File", text_description)
    def read_text_file(path: PathArg, head: HeadArg = None, tail: TailArg = None) -> str:
        return call(fs.read_text_file, path, head, tail)

    @read_tool(
        "Read File (Deprecated)",
        "Read the complete contents of a file as text. DEPRECATED: Use read_text_file instead.",
    )
    def read_file(path: PathArg, head: HeadArg = None, tail: TailArg = None) -> str:
        return call(fs.read_text_file, path, head, tail)

    @read_tool(
        "Read Media File",
        "Read an image or audio file. Returns the base64 encoded data and MIME type "
        "(other files come back as an embedded binary resource). "
        "Only works within allowed directories.",
    )
    def read_media_file(path: PathArg) -> list[Any]:
        kind, mime, data, real = call(fs.read_media_file, path)
        if kind == "image":
            return [ImageContent(type="image", data=data, mimeType=mime)]
        if kind == "audio":
            return [AudioContent(type="audio", data=data, mimeType=mime)]
        blob = BlobResourceContents(uri=real.as_uri(), mimeType=mime, blob=data)
        return [EmbeddedResource(type="resource", resource=blob)]

    @read_tool(
        "Read Multiple Files",
        "Read the contents of multiple files simultaneously. This is more efficient "
        "than reading files one by one when you need to analyze or compare multiple "
        "files. Each file's content is returned with its path as a reference. Failed "
        "reads for individual files won't stop the entire operation. "
        f"Past {settings.max_read_bytes} characters in all, the other files are named, not "
        "read. Only works within allowed directories.",
    )
    def read_multiple_files(
        paths: Annotated[
            list[str],
            Field(
                min_length=1,
                description=(
                    "Array of file paths to read. Each path must be a string pointing "
                    "to a valid file within allowed directories."
                ),
            ),
        ],
    ) -> str:
        return call(fs.read_multiple_files, paths)

    @read_tool(
        "List Directory",
        "Get a detailed listing of all files and directories in a specified path. "
        "Results clearly distinguish between files and directories with [FILE] and "
        "[DIR] prefixes (a symlink is listed as [FILE]). "
        "Long listings come in pages (offset). Only works within allowed directories.",
    )
    def list_directory(path: PathArg, offset: OffsetArg = 0) -> str:
        return call(fs.list_directory, path, offset)

    @read_tool(
        "List Directory with Sizes",
        "Get a detailed listing of all files and directories in a specified path, "
        "including sizes, with [FILE] and [DIR] prefixes and totals at the end. "
        "Long listings come in pages (offset). Only works within allowed directories.",
    )
    def list_directory_with_sizes(
        path: PathArg,
        sortBy: Annotated[
            Literal["name", "size"],
            Field(description="Sort entries by name or size (largest first)"),
        ] = "name",
        offset: OffsetArg = 0,
    ) -> str:
        return call(fs.list_directory_with_sizes, path, sortBy, offset)

    @read_tool(
        "Directory Tree",
        "Get a recursive tree view of files and directories as a JSON structure. "
        "Each entry includes 'name', 'type' (file/directory), and 'children' for "
        "directories. Files have no children array, while directories always have a "
        "children array (which may be empty). Symlinks are listed as files and never "
        f"followed. Stops after {settings.max_entries} entries, at {MAX_TREE_DEPTH} levels "
        f"deep, or at {settings.max_reply_chars} characters, and says so. "
        "Only works within allowed directories.",
    )
    def directory_tree(path: PathArg, excludePatterns: TreeExcludeArg = []) -> str:  # noqa: B006
        return call(fs.directory_tree, path, excludePatterns)

    @read_tool(
        "Search Files",
        "Recursively search for files and directories matching a glob pattern. "
        "Patterns match paths relative to 'path': '*.ext' matches files directly in "
        "it, '**/*.ext' matches files in all subdirectories. Returns full paths to "
        "all matching items. Symlinked folders are not entered. "
        f"Stops after {settings.max_entries} entries and says so; many matches come in "
        "pages (offset). Only searches within allowed directories.",
    )
    def search_files(
        path: PathArg,
        pattern: Annotated[
            str, Field(description="Glob pattern matched against paths relative to 'path'")
        ],
        excludePatterns: Annotated[
            list[str],
            Field(description="Glob patterns (relative to path) of entries to skip"),
        ] = [],  # noqa: B006
        offset: OffsetArg = 0,
    ) -> str:
        return call(fs.search_files, path, pattern, excludePatterns, offset)

    @read_tool(
        "Get File Info",
        "Retrieve detailed metadata about a file or directory: size, creation time, "
        "last modified time, last access time, permissions, and type. "
        "Only works within allowed directories.",
    )
    def get_file_info(path: PathArg) -> str:
        return call(fs.get_file_info, path)

    @read_tool(
        "List Allowed Directories",
        "Returns the list of directories that this server is allowed to access. "
        "Subdirectories within these allowed directories are also accessible.",
    )
    def list_allowed_directories() -> str:
        return call(fs.list_allowed_directories)

    if settings.read_only:
        check_arguments(mcp)
        return mcp

    @mcp.tool(
        title="Write File",
        description=(
            "Create a new file or completely overwrite an existing file with new content "
            "(written atomically; the parent folder must exist). Use with caution as it "
            "will overwrite existing files without warning. "
            "Only works within allowed directories."
        ),
        annotations=tool_annotations(read_only=False, destructive=True, idempotent=True),
        output_schema=None,
    )
    def write_file(
        path: PathArg,
        content: Annotated[str, Field(description="The complete new content of the file")],
    ) -> str:
        return call(fs.write_file, path, content)

    @mcp.tool(
        title="Edit File",
        description=(
            "Make line-based edits to a text file. Each edit replaces the first exact "
            "match of oldText with newText, in order; if there is no exact match, a run "
            "of lines equal apart from surrounding whitespace is replaced, keeping its "
            "indentation. Line endings (LF or CRLF) are kept. Returns a git-style diff "
            "showing the changes made. Only works within allowed directories."
        ),
        annotations=tool_annotations(read_only=False, destructive=True, idempotent=False),
        output_schema=None,
    )
    def edit_file(
        path: PathArg,
        edits: Annotated[
            list[Annotated[EditOperation, INLINE_EDIT_SCHEMA]],
            Field(description="Replacements, applied in order; each must match"),
        ],
        dryRun: Annotated[
            bool, Field(description="Preview changes using git-style diff format")
        ] = False,
    ) -> str:
        pairs = [(edit.oldText, edit.newText) for edit in edits]
        return call(fs.edit_file, path, pairs, dryRun)

    @mcp.tool(
        title="Create Directory",
        description=(
            "Create a new directory or ensure a directory exists. Can create multiple "
            "nested directories in one operation. If the directory already exists, this "
            "operation will succeed silently. Only works within allowed directories."
        ),
        annotations=tool_annotations(read_only=False, destructive=False, idempotent=True),
        output_schema=None,
    )
    def create_directory(path: PathArg) -> str:
        return call(fs.create_directory, path)

    @mcp.tool(
        title="Move File",
        description=(
            "Move or rename files and directories. Can move files between directories "
            "and rename them in a single operation. If the destination exists, the "
            "operation will fail. Both source and destination must be within allowed "
            "directories."
        ),
        annotations=tool_annotations(read_only=False, destructive=False, idempotent=False),
        output_schema=None,
    )
    def move_file(
        source: Annotated[str, Field(description="The file or folder to move")],
        destination: Annotated[
            str, Field(description="Its new path; must not exist yet (its folder must)")
        ],
    ) -> str:
        return call(fs.move_file, source, destination)

    check_arguments(mcp)
    return mcp


def _instructions(systems: SessionFileSystems) -> str:
    verbs = "Read" if systems.settings.read_only else "Read, write"
    fixed = systems.fixed or systems.fallback
    if systems.fixed is not None:
        where = "these allowed directories only: " + ", ".join(map(str, fixed.jail.roots))  # type: ignore[union-attr]
    elif fixed is not None:
        where = (
            "the allowed directories only: the folders your client shares as MCP roots, "
            f"else {fixed.jail.roots[0]}"
        )
    else:
        where = (
            "the allowed directories only: the folders your client shares as MCP roots "
            "(none are allowed until it does)"
        )
    return (
        f"{verbs} and search files inside {where}. Call list_allowed_directories to see "
        "them. Relative paths are taken from the first one."
    )
