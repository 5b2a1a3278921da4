"""Read-side queries of the API, by resource:

- ``cluster``: the cluster information (``GET cluster``) and the workers (``GET workers``);
- ``operations``: operations with their steps, vnodes and events, and the audit log;
- ``keys``: a fragment by name, and one key of it.

Each function answers one endpoint in a fixed, small number of queries (no query per row), so
``GET cluster`` costs the same with 2 PUs or 64 and 16 vnodes or 4096.

Callers import from the submodule.
"""
