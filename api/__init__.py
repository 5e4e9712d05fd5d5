"""earthmem's read-only query API: the service layer, REST and MCP adapters, and the CLI."""

__all__: list[str] = []
