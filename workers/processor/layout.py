"""Where a processor's state lives in its PU's store, besides each key's one entry: the
timer index (``vnode | 0xff | expiry | key``, sorted by expiry inside the vnode's range) and
the section of each operator of a keyed region (0xfe, then its index)."""

from __future__ import annotations

import struct
from collections.abc import Iterable

from workers.hashing import SECTION_MARK, TIMER_MARK, KeyRange, key_range_index, stable_hash64

_EXPIRY = struct.Struct(">Q")
_BIAS = 1 << 63


def section_of(index: int) -> bytes:
    """The key prefix of operator ``index`` of a keyed region: 0xfe, then its index. Like 0xff,
    0xfe never starts a UTF-8 key, so each operator's keys are a range of their own."""
    return SECTION_MARK + bytes([index])


def timer_key(vnode: int, expiry_ms: int, key: bytes, section: bytes = b"") -> bytes:
    """The timer-index entry of a key's timer: sorted by expiry inside the vnode's range (and
    inside the operator's section, in a keyed region)."""
    from workers.state.base import encode_key

    return encode_key(vnode, TIMER_MARK + section + _EXPIRY.pack(expiry_ms + _BIAS) + key)


def timer_range(vnode: int, up_to_ms: int, section: bytes = b"") -> tuple[bytes, bytes]:
    """[start, end) of a vnode's timers expiring at or before ``up_to_ms``."""
    from workers.state.base import encode_key

    return (
        encode_key(vnode, TIMER_MARK + section),
        encode_key(vnode, TIMER_MARK + section + _EXPIRY.pack(up_to_ms + 1 + _BIAS)),
    )


#: the kind of the rows of a processor's initial state (the pipeline's first epoch), routed by
#: key as records are; operator ``i`` of the fragment finds its own in ``initial_column(i)``
INITIAL_KIND = "init"


def initial_column(operator: int) -> str:
    return f"_init{operator}"


#: beyond every timer's expiry (the index's expiry is biased into 64 bits)
NO_TIMER_AFTER = (1 << 62) - 1


def in_ranges(key: str, ranges: Iterable[KeyRange]) -> bool:
    """Whether ``key`` is in one of a vnode's key ranges."""
    return any(key_range_index(stable_hash64(key), r.count) == r.index for r in ranges)


def parse_timer_key(user_key: bytes) -> tuple[int, str] | None:
    """(expiry, key) of a timer-index entry's user key, or None for an ordinary key."""
    if not user_key.startswith(TIMER_MARK):
        return None
    at = 3 if user_key[1:2] == SECTION_MARK else 1
    expiry = _EXPIRY.unpack_from(user_key, at)[0] - _BIAS
    return expiry, user_key[at + _EXPIRY.size :].decode("utf-8")
