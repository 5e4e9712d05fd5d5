"""The MCP adapter: every primitive as a read-only tool, plus the intent router.

Built on the low-level ``mcp.server.Server`` of the mcp 2.x SDK, because the
tools come from the registry at run time: each tool's input schema is its
pydantic input model's JSON schema, its output schema the output model's
serialisation schema, and the structured content of a result is exactly the
signed answer (``model_dump(mode="json")``). Tools:

* ``earthmem_<name>`` for every registered primitive (so ``earthmem_find_similar``
  carries the full find_similar parameter set);
* ``earthmem_intent``: the intent router (:func:`api.dispatch.run_intent`).

``tools/list`` is lean: it shows the intent router and the core set
(:data:`api.dispatch.CORE_PRIMITIVES`); every other primitive is called by name
through ``tools/call`` all the same, and the ``earthmem_tools`` primitive lists
them all with their schemas (``build_server(list_all=True)`` lists every tool).

Cube tools are annotated read-only, idempotent and closed-world; memory writes are
not read-only (idempotent by ``operation_id``). A failing call is a tool result with
``isError`` whose one text content is the JSON ``{"error": {code, message, details?}}``,
the same body and code REST sends, and which carries no structured content: clients
validate structured content against the tool's output schema (the answer's), which an
error cannot match. Arguments nested deeper than :data:`api.jsonbody.MAX_JSON_DEPTH`
are the ``json_too_deep`` error, as over REST.
An answer carrying ``chart_png_base64`` also gets the chart as image content.

Transports: stdio (:func:`run_stdio`, ``earthmem mcp``) and streamable HTTP
(:class:`api.mcp_http.StreamableHttpEndpoint`, mounted at ``/mcp`` by :mod:`api.rest`).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext

from api.dispatch import (
    PRIMITIVES,
    ContextProvider,
    call_primitive,
    core_primitives,
    describe_error,
    provider_for,
    run_intent,
    service_version,
)
from api.intent import INTENT_TYPES, IntentAnswer, IntentRequest, intent_table
from api.jsonbody import check_depth

__all__ = [
    "INTENT_TOOL",
    "SERVER_NAME",
    "TOOL_PREFIX",
    "build_server",
    "error_result",
    "run_stdio",
    "tool_result",
]

log = logging.getLogger(__name__)

SERVER_NAME = "earthmem"
"""The MCP server name."""
TOOL_PREFIX = "earthmem_"
"""Prefix of every tool name: ``earthmem_<primitive>``."""
INTENT_TOOL = "earthmem_intent"
"""The intent router's tool name."""
CHART_FIELD = "chart_png_base64"
"""Answer field holding a base64 PNG chart, returned also as image content."""

READ_ONLY = types.ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
WRITES = types.ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
"""Memory writes: not read-only; idempotent when called with the same operation_id."""

INSTRUCTIONS = (
    "earthmem answers questions about the Earth's surface from materialised satellite data "
    "(Sentinel-2 indices, Sentinel-1 backscatter, Tessera embeddings) on the cell64 lattice. "
    "State a goal with earthmem_intent ({type, ...}), or call a primitive directly. "
    "Every answer carries a signed receipt; a tool error carries {error: {code, message}}."
)


def _intent_description() -> str:
    rows = []
    for name, row in intent_table(PRIMITIVES).items():
        needs = list(row["needs"])
        if row.get("one_of"):
            needs.append(" OR ".join(row["one_of"]))
        rows.append(
            f"- {name}: needs {', '.join(needs) or '-'}"
            + (f"; optional {', '.join(row['optional'])}" if row["optional"] else "")
            + f" -> {row['answers']}"
        )
    return (
        "State what you want in one object; the plan runs in the same call and the answer "
        "comes back with the plan it ran. `type` selects the intent and the fields read; "
        "fields of other intents are ignored and listed in `ignored_fields`. A missing or "
        "unknown type returns a needs_intent_type envelope (not an error).\n"
        + "\n".join(rows)
        + '\nExample: {"type": "did_change", "cell": "<cell64>", "band": "indices.ndvi", '
        '"window": [19700, 19900]} (window in day tslots: list them with earthmem_trajectory).'
    )


def _tools(list_all: bool = True) -> list[types.Tool]:
    """The tools listed: the intent router and the core set, or (``list_all``) every primitive."""
    core = set(core_primitives())
    tools = [
        types.Tool(
            name=TOOL_PREFIX + prim.name,
            title=prim.summary,
            description=(prim.summary + "\n\n" + prim.description).strip(),
            input_schema=prim.input_model.model_json_schema(),
            output_schema=prim.output_model.model_json_schema(mode="serialization"),
            annotations=READ_ONLY if prim.read_only else WRITES,
        )
        for prim in PRIMITIVES.values()
        if list_all or prim.name in core
    ]
    tools.append(
        types.Tool(
            name=INTENT_TOOL,
            title="Intent-routed planner: " + ", ".join(INTENT_TYPES),
            description=_intent_description(),
            input_schema=IntentRequest.model_json_schema(),
            output_schema=IntentAnswer.model_json_schema(mode="serialization"),
            annotations=READ_ONLY,
        )
    )
    return tools


def error_result(body: Mapping[str, Any]) -> types.CallToolResult:
    """A failed tool call: ``isError`` and the error body as JSON text, no structured content."""
    return types.CallToolResult(content=[types.TextContent(text=json.dumps(body))], is_error=True)


def tool_result(answer: Mapping[str, Any]) -> types.CallToolResult:
    """A successful tool result: the answer as structured content and as JSON text.

    An answer with a ``chart_png_base64`` string also carries it as PNG image content.
    """
    content: list[types.ContentBlock] = [types.TextContent(text=json.dumps(answer))]
    chart = answer.get(CHART_FIELD)
    if isinstance(chart, str) and chart:
        content.append(types.ImageContent(data=chart, mime_type="image/png"))
    return types.CallToolResult(content=content, structured_content=dict(answer))


def _run_tool(
    provider: ContextProvider, name: str, arguments: Mapping[str, Any], token: str | None
) -> dict[str, Any]:
    check_depth(arguments)
    ctx = provider.get()
    if name == INTENT_TOOL:
        return run_intent(ctx, arguments, token=token)
    return call_primitive(ctx, name.removeprefix(TOOL_PREFIX), arguments, token=token)


def _token(ctx: ServerRequestContext[Any], stdio_token: str | None) -> str | None:
    """The caller's bearer token: the HTTP request's header, else the stdio server's token."""
    request = getattr(ctx, "request", None)
    headers = getattr(request, "headers", None)
    if headers is not None:
        from api.asgi import bearer_token  # FastAPI's responses: HTTP only, not over stdio

        return bearer_token(headers)
    return stdio_token


def build_server(source: Any, *, token: str | None = None, list_all: bool = False) -> Server[Any]:
    """The earthmem MCP server over the primitive registry.

    Args:
        source: The service context, a data directory, a zero-argument
            factory, or a :class:`api.dispatch.ContextProvider`.
        token: The bearer token of a stdio server's user (``EARTHMEM_TOKEN``); over HTTP
            each request's ``Authorization`` header is used instead.
        list_all: ``tools/list`` shows every primitive, not only the core set.

    Returns:
        A low-level ``mcp.server.Server``; its tool list follows the registry
        at call time.
    """
    provider = provider_for(source)

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=_tools(list_all))

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        name = params.name
        known = name == INTENT_TOOL or (
            name.startswith(TOOL_PREFIX) and name.removeprefix(TOOL_PREFIX) in PRIMITIVES
        )
        if not known:
            return error_result(
                {
                    "error": {
                        "code": "unknown_tool",
                        "message": f"no tool named {name!r}",
                        "details": {"tools": [t.name for t in _tools(True)]},
                    }
                }
            )
        arguments = dict(params.arguments or {})
        try:
            answer = await anyio.to_thread.run_sync(
                functools.partial(_run_tool, provider, name, arguments, _token(ctx, token))
            )
        except Exception as exc:
            described = describe_error(exc)
            if described is None:
                log.exception("tool %s failed", name)
                return error_result({"error": {"code": "internal", "message": "internal error"}})
            return error_result(described[1])
        return tool_result(answer)

    def input_schema(name: str) -> dict[str, Any] | None:
        if name == INTENT_TOOL:
            return IntentRequest.model_json_schema()
        prim = PRIMITIVES.get(name.removeprefix(TOOL_PREFIX))
        return prim.input_model.model_json_schema() if prim else None

    return Server(
        SERVER_NAME,
        version=service_version(),
        title="earthmem",
        instructions=INSTRUCTIONS,
        get_tool_input_schema=input_schema,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def run_stdio(server: Server[Any]) -> None:
    """Serve ``server`` over this process's stdin/stdout until stdin closes.

    Every line gets an answer: one that is not a JSON-RPC message gets a JSON-RPC
    error (:mod:`api.mcp_stdio`) instead of silence.
    """
    from api.mcp_stdio import checked_stdio_server

    async with checked_stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())
