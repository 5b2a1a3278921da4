"""The state stores' failures."""

from __future__ import annotations


class StateStoreError(Exception):
    """Base class of every state store failure."""


class VnodeSealed(StateStoreError):
    """A write touched a vnode whose state is sealed for transfer."""


class IngestMismatch(StateStoreError):
    """An ingested export's key count or checksum differs from what its source declared."""
