"""Query modules of the service layer (served as primitives by :mod:`api.dispatch`)."""

__all__: list[str] = []
