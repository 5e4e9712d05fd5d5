"""earthmem's command line: the ``earthmem`` command and the ``make run`` demo.

It sits on top of the other packages: it imports :mod:`api` (the query API) and
:mod:`pipelines` (sample area, ingest), which never import each other, and
:mod:`store` underneath both. Modules: :mod:`cli.main` (parser, entry point, exit
codes, the address commands), :mod:`cli.commands` (sample, serve, mcp, intent,
verify), :mod:`cli.ingest` (``earthmem ingest``), :mod:`cli.demo` and
:mod:`cli.examples` (the demo behind ``make run``).
"""

__all__: list[str] = []
