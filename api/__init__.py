"""earthmem's read-only query API: the service layer and the REST and MCP adapters."""

__all__: list[str] = []
