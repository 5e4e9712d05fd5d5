"""earthmem's pipelines: STAC sources, the sample area, and the Dagster assets that fill the store."""

__all__: list[str] = []
