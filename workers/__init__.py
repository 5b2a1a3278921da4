"""Rescaler's data plane: the code Spark runs.

Pipelines, sources, routing, per-PU state stores, the rescale protocol's data-side actions, the
runner and the oracle. Nothing here imports Django: Spark's Python workers must never need
Django settings. The control plane talks to it through :mod:`workers.control`.
"""
