"""Models of the tools primitive: every primitive served, the core set, one tool's schemas."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from api.models.common import INPUT_CONFIG, OUTPUT_CONFIG, Signed

__all__ = ["ToolOut", "ToolsAnswer", "ToolsBody", "ToolsIn"]


class ToolsIn(BaseModel):
    """Arguments of tools."""

    model_config = INPUT_CONFIG

    name: str | None = Field(
        None, description="One primitive (or earthmem_<name>): also return its schemas."
    )


class ToolOut(BaseModel):
    """One primitive served."""

    model_config = OUTPUT_CONFIG

    name: str = Field(description="Primitive name.")
    mcp_tool: str = Field(
        description="MCP tool name (callable by tools/call whether listed or not)."
    )
    route: str = Field(description="REST route.")
    summary: str = Field(description="One line.")
    cost: str = Field(description="Cost class: light or heavy (heavy waits at a bounded gate).")
    access: str = Field(description="public (the cube), read or write (a memory token).")
    read_only: bool = Field(description="Whether calling it changes nothing.")
    core: bool = Field(description="Listed by MCP tools/list (the core set).")


class ToolsBody(BaseModel):
    """tools answer without its receipt."""

    model_config = OUTPUT_CONFIG

    tools: list[ToolOut] = Field(description="Every primitive served, in registry order.")
    core: list[str] = Field(description="The core set MCP tools/list shows (plus earthmem_intent).")
    input_schema: dict[str, Any] | None = Field(description="With name: its input JSON schema.")
    output_schema: dict[str, Any] | None = Field(description="With name: its output JSON schema.")
    description: str | None = Field(description="With name: its full description.")
    snapshot_id: str = Field(description="'registry:<version>' (no store read).")


class ToolsAnswer(Signed, ToolsBody):
    """tools answer."""
