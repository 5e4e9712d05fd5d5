"""Ingest bench parts; :mod:`bench.bench_ingest` runs them and makes the rows.

* :mod:`bench.ingest.catalog`: the bench-only long catalog (demo scenes copied in time and space).
* :mod:`bench.ingest.passes`: plans (prefixes of the sample period), the Dagster pass and the
  passes without Dagster.
"""
