"""Pipeline definitions: fragments, keyed regions, vnodes and their placement on parallel units."""

from workers.pipeline.model import Fragment, Pipeline
from workers.pipeline.placement import FragmentPlacement

__all__ = ["Fragment", "FragmentPlacement", "Pipeline"]
