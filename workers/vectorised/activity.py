"""The vectorised UserActivity: sessions, bytes and first page visits of a slice's users on
arrays, the states read from and written in UserActivity's columnar layout."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from workers.columnar import (
    binary_from_parts,
    binary_parts,
    gather_segments,
    segment_starts,
    segmented_cummax,
    store_keys,
    string_from_parts,
)
from workers.operators.base import KeyedOperator, OperatorError, sort_by_seq
from workers.operators.ordered import UserActivity
from workers.state.base import ColumnUpdates
from workers.vectorised.batch import BatchResult, Kernel, Reader

# Below these magnitudes the int64 arithmetic of UserActivity cannot overflow where Python's
# integers would not: |ts| < 2**62 keeps every difference in range, and fewer than 2**31
# records of |bytes| < 2**31 added to |total| < 2**62 stay below 2**63.
_TS_LIMIT = 1 << 62
_SIZE_LIMIT = 1 << 31


@dataclass
class _Activity:
    """UserActivity states of a batch of keys as columns; pages as (group, page) pairs."""

    present: np.ndarray
    events: np.ndarray
    nbytes: np.ndarray
    sessions: np.ndarray
    last_ts: np.ndarray
    page_group: np.ndarray
    pages: pa.Array


def _decode_activity(op: UserActivity, old: pa.Array) -> _Activity:
    n = len(old)
    present = np.asarray(old.is_valid(), bool)
    offsets, data = binary_parts(old)
    starts = offsets[:-1]
    lengths = np.diff(offsets)
    version = np.zeros(n, np.uint8)
    readable = present & (lengths > 0)
    version[readable] = data[starts[readable]]
    head_size = op.header.size
    state = _Activity(
        present=present,
        events=np.zeros(n, np.int64),
        nbytes=np.zeros(n, np.int64),
        sessions=np.zeros(n, np.int64),
        last_ts=np.zeros(n, np.int64),
        page_group=np.empty(0, np.int64),
        pages=pa.array([], pa.large_string()),
    )
    rows = np.flatnonzero(present & (version == op.state_version))
    groups: list[np.ndarray] = []
    pages: list[pa.Array] = []
    if len(rows):
        if int(lengths[rows].min()) < head_size:
            raise OperatorError(f"{op.name}: a stored state is shorter than its header")
        head = gather_segments(data, starts[rows], np.full(len(rows), head_size))
        fields = head.view(op.header_dtype)
        state.events[rows] = fields["events"]
        state.nbytes[rows] = fields["nbytes"]
        state.sessions[rows] = fields["sessions"]
        state.last_ts[rows] = fields["last_ts"]
        counts = fields["pages"].astype(np.int64)
        first_page = np.cumsum(counts) - counts
        local = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(first_page, counts)
        end_at = np.repeat(starts[rows] + head_size, counts) + 4 * local
        ends = gather_segments(data, end_at, np.full(len(end_at), 4)).view("<u4").astype(np.int64)
        previous = np.zeros(len(ends), np.int64)
        previous[1:] = ends[:-1]
        previous[first_page[counts > 0]] = 0
        body_len = np.zeros(len(rows), np.int64)
        body_len[counts > 0] = ends[(first_page + counts - 1)[counts > 0]]
        if np.any(lengths[rows] != head_size + 4 * counts + body_len) or np.any(ends < previous):
            raise OperatorError(f"{op.name}: a stored state's page offsets do not match its size")
        body = gather_segments(data, starts[rows] + head_size + 4 * counts, body_len)
        groups.append(np.repeat(rows, counts))
        pages.append(string_from_parts(ends - previous, body))
    legacy = np.flatnonzero(present & (version != op.state_version))
    if len(legacy):
        # msgpack states of version 1 (or a version decode() refuses, with its error): read one
        # by one; the commit rewrites them in the current layout.
        states = [op.decode(v) for v in old.take(pa.array(legacy)).to_pylist()]
        state.events[legacy] = [s[0] for s in states]
        state.nbytes[legacy] = [s[1] for s in states]
        state.sessions[legacy] = [s[2] for s in states]
        state.last_ts[legacy] = [s[3] for s in states]
        groups.append(np.repeat(legacy, [len(s[4]) for s in states]))
        pages.append(pa.array([p for s in states for p in s[4]], pa.large_string()))
    if groups:
        state.page_group = np.concatenate(groups)
        state.pages = pa.concat_arrays(pages)
    return state


def _encode_activity(
    op: UserActivity,
    events: np.ndarray,
    nbytes: np.ndarray,
    sessions: np.ndarray,
    last_ts: np.ndarray,
    page_group: np.ndarray,
    pages: pa.Array,
) -> pa.LargeBinaryArray:
    """The states' bytes, as ``UserActivity.encode`` writes them; pages sorted by (group, page)."""
    n = len(events)
    head = np.empty(n, op.header_dtype)
    head["version"] = op.state_version
    head["events"], head["nbytes"], head["sessions"], head["last_ts"] = (
        events,
        nbytes,
        sessions,
        last_ts,
    )
    counts = np.bincount(page_group, minlength=n).astype(np.int64)
    head["pages"] = counts
    offsets, data = binary_parts(pages)
    page_len = np.diff(offsets)
    cum = np.zeros(len(page_len) + 1, np.int64)
    np.cumsum(page_len, out=cum[1:])
    first_page = np.cumsum(counts) - counts
    begin = cum[first_page]
    body_len = cum[first_page + counts] - begin
    ends = (cum[1:] - np.repeat(begin, counts)).astype("<u4").view(np.uint8)
    head_bytes = head.view(np.uint8)
    src = np.concatenate([head_bytes, ends, data[offsets[0] : offsets[-1]]])
    size = op.header.size
    seg_starts = np.column_stack(
        [
            np.arange(n, dtype=np.int64) * size,
            len(head_bytes) + 4 * first_page,
            len(head_bytes) + len(ends) + begin,
        ]
    )
    seg_lens = np.column_stack([np.full(n, size, np.int64), 4 * counts, body_len])
    values = gather_segments(src, seg_starts.ravel(), seg_lens.ravel())
    return binary_from_parts(size + 4 * counts + body_len, values)


def _user_activity(op: KeyedOperator, records: pa.Table, read: Reader) -> BatchResult | None:
    assert isinstance(op, UserActivity)
    ts_col, size_col, page_col = records["ts"], records["bytes"], records["page"]
    if (
        not pa.types.is_integer(ts_col.type)
        or not pa.types.is_integer(size_col.type)
        or not (pa.types.is_string(page_col.type) or pa.types.is_large_string(page_col.type))
        or ts_col.null_count
        or size_col.null_count
        or page_col.null_count
    ):
        return None
    # The per-key path's order: records by seq, keys in the order of their first record.
    ordered = sort_by_seq(records)
    encoded = ordered["key"].combine_chunks().dictionary_encode()
    codes = encoded.indices.to_numpy().astype(np.int64)
    keys = encoded.dictionary
    perm = np.argsort(codes, kind="stable")
    group = codes[perm]
    starts = segment_starts(group)
    ends = np.append(starts[1:], len(group))
    ts = ordered["ts"].to_numpy().astype(np.int64)[perm]
    size = ordered["bytes"].to_numpy().astype(np.int64)[perm]
    last_seq = ordered["seq"].to_numpy()[perm][ends - 1]
    vnodes = ordered["vnode"].to_numpy()[perm][starts]
    if np.abs(ts).max() >= _TS_LIMIT or np.abs(size).max() >= _SIZE_LIMIT:
        return None
    skeys = store_keys(vnodes, keys)
    old = read(skeys)
    prior = _decode_activity(op, old)
    if np.any(np.abs(prior.last_ts) >= _TS_LIMIT) or np.any(np.abs(prior.nbytes) >= _TS_LIMIT):
        return None

    events = prior.events + (ends - starts)
    nbytes = prior.nbytes + np.add.reduceat(size, starts)
    # A record opens a session when the key has no earlier event, or when it comes more than
    # the gap after the latest earlier one (the stored last_ts or an earlier record's ts).
    running = segmented_cummax(ts, group)
    first_of_key = np.zeros(len(group), bool)
    first_of_key[starts] = True
    earlier = np.empty_like(ts)
    earlier[0] = 0
    earlier[1:] = running[:-1]
    had = prior.present[group]
    stored = prior.last_ts[group]
    latest = np.where(first_of_key, stored, np.where(had, np.maximum(earlier, stored), earlier))
    opens = (first_of_key & ~had) | (ts - latest > op.session_gap_s)
    sessions = prior.sessions + np.add.reduceat(opens.astype(np.int64), starts)
    newest = running[ends - 1]
    last_ts = np.where(prior.present, np.maximum(prior.last_ts, newest), newest)

    # First visits: the first record of each (key, page) this epoch, unless the page was seen.
    pages = pc.cast(ordered["page"].combine_chunks().take(pa.array(perm)), pa.large_string())
    visits = pa.table({"g": group, "page": pages, "pos": np.arange(len(group), dtype=np.int64)})
    firsts = visits.group_by(["g", "page"], use_threads=False).aggregate([("pos", "min")])
    seen = pa.table({"g": prior.page_group.astype(np.int64), "page": prior.pages})
    if seen.num_rows:
        firsts = firsts.join(seen, keys=["g", "page"], join_type="left anti")
    first = np.zeros(len(group), bool)
    first[firsts["pos_min"].to_numpy()] = True
    union = pa.concat_tables([seen, firsts.select(["g", "page"])])
    union = union.take(pc.sort_indices(union, [("g", "ascending"), ("page", "ascending")]))
    new = _encode_activity(
        op,
        events,
        nbytes,
        sessions,
        last_ts,
        union["g"].to_numpy(),
        union["page"].combine_chunks(),
    )
    outputs = pa.Table.from_arrays(
        [
            pc.cast(pages, pa.string()),
            pa.array(last_seq[group], pa.int64()),
            pa.array(first.astype(np.int64), pa.int64()),
        ],
        names=["key", "seq", "first_visit"],
    )
    return BatchResult(ColumnUpdates(skeys, old, new), outputs)


#: the kernel of each operator class this module vectorises
KERNELS: dict[type[KeyedOperator], Kernel] = {UserActivity: _user_activity}
