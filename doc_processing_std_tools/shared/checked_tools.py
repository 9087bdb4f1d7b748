"""Readable argument errors on a server's function tools (:func:`check_arguments`): each one's
validation error becomes one sentence (:mod:`.argument_errors`). Imported when a server is
built: importing a server package must not load fastmcp."""

from __future__ import annotations

from typing import Any

from fastmcp import FastMCP
from fastmcp.exceptions import ValidationError
from fastmcp.tools.function_tool import FunctionTool
from pydantic import ValidationError as PydanticValidationError

from ..seams.fastmcp_tools import local_tools, retype_tool
from .argument_errors import describe_invalid_arguments, refused
from .client_text import quote


class ArgumentCheckedTool(FunctionTool):
    """A function tool whose argument errors are one readable sentence."""

    async def run(self, arguments: dict[str, Any]) -> Any:
        try:
            return await super().run(arguments)
        except ValidationError as exc:
            cause = exc.__cause__
            if not isinstance(cause, PydanticValidationError):
                raise refused(quote(str(exc))) from None
            message = describe_invalid_arguments(self.name, cause, self.parameters)
            raise refused(message) from None


def check_arguments(server: FastMCP) -> None:
    """Give every function tool registered on *server* readable argument errors.

    Call it after the tools are registered. The tools keep their schemas and
    behaviour; only the text of an argument-validation error changes.
    """
    for tool in local_tools(server):
        if type(tool) is FunctionTool:
            retype_tool(tool, ArgumentCheckedTool)
