"""The memory database's revisions, oldest first (``r0001_base``, ``r0002_search_space``, ``r0003_valid_time``, ``r0004_gin_fastupdate``, ...)."""
