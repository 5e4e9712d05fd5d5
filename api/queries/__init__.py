"""Query modules of the service layer (registered as primitives by :mod:`api.service`)."""

__all__: list[str] = []
