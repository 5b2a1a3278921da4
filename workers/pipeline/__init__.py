"""Pipeline definitions: fragments, keyed regions, vnodes and their placement on parallel units."""

from workers.pipeline.model import Fragment, Pipeline
from workers.pipeline.placement import VnodeMapping

__all__ = ["Fragment", "Pipeline", "VnodeMapping"]
