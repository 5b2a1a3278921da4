"""Python's cycle collector paused over a burst of short-lived objects.

CPython frees most objects by reference counting; its cycle collector exists for reference
cycles, and it runs whenever allocations outnumber deallocations by a threshold. A burst of
objects that live a few hundred milliseconds and then go together (a plan of 16,384 moves, a
barrier's 768 changed steps read as rows, their audit events and the page's delta) outlives
several young collections, is promoted as if it would last, and sets off full collections,
each of which walks every object of the process. In a control-plane process (Django, its
caches, an operation's plan, the runner's ledger) a full collection takes 100-250 ms, which
comes out of whatever ran into it.

What a block run under ``cycle_collection_paused`` frees before it ends never reaches a
collection. Such a block should make few reference cycles: those it makes wait for the
collector's next pass, after it. Not for a block that may wait long (other threads allocate
meanwhile): the barrier's wait for full hold queues runs with the collector on.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def cycle_collection_paused() -> Iterator[None]:
    """The cycle collector off for the block, and on again after it, unless it was off already
    (an outer block, or the application's own choice: left as found). Thread-safe in effect:
    only the block that turned it off turns it on, so it is never left off."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
