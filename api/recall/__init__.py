"""Memory recall: hybrid, bi-temporal, place-aware search over a project's memory items.

``lanes`` is the contract every lane implements; the engine runs the lanes, keeps
what the query may see, fuses the scores and shapes the answer.
"""
