"""Query bench measurements, one module per family; :mod:`bench.bench_queries` runs them.

* :mod:`bench.queries.did_change`: ``did_change`` in process vs a direct cube read.
* :mod:`bench.queries.http_server`: ``did_change`` over HTTP on the real ``earthmem serve``.
* :mod:`bench.queries.area`: ``area_over_time`` vs rioxarray reads, checked against exactextract.
* :mod:`bench.queries.memory`: peak RSS of the server answering ``find_similar``.
"""
