"""The JetStream source's batch (workers/sources/jetstream_batch.py): Arrow's JSON reader for
clean payloads, the checked row-by-row path for the rest, with the same records either way."""

from __future__ import annotations

import json

from workers.sources.jetstream_batch import checked_batch, fast_batch, to_batch
from workers.sources.jetstream_frames import Pulled
from workers.sources.jetstream_options import JetStreamOptions

SCHEMA = "user string, ts bigint, bytes int, score double, ok boolean"


def options() -> JetStreamOptions:
    return JetStreamOptions.from_options({"stream": "S", "schema": SCHEMA})


def messages(payloads: list[bytes]) -> Pulled:
    return Pulled.of([(i + 1, "s.x", p) for i, p in enumerate(payloads)])


def record(i: int) -> bytes:
    body = {"user": f"u{i}", "ts": 10**12 + i, "bytes": i, "score": i / 2, "ok": i % 2 == 0}
    return json.dumps(body).encode()


def test_clean_payloads_take_the_fast_path_and_equal_the_checked_one() -> None:
    batch = messages(
        [record(i) for i in range(50)]
        + [b'{"user":"x","ts":1,"bytes":2,"score":3,"ok":true,"extra":[1]}']
    )
    fast = fast_batch(options(), batch)
    assert fast is not None
    assert fast.to_pylist() == checked_batch(options(), batch).to_pylist()
    assert fast.column("_malformed").null_count == len(batch)


def test_anything_doubtful_goes_the_checked_way_and_is_named() -> None:
    for bad, reason in [
        (b'{"user":"x","ts":1,"bytes":2,"score":3}', "missing field 'ok'"),
        (b'{"user":"x","ts":"1","bytes":2,"score":3,"ok":true}', "field 'ts' must be a number"),
        (b"not json", "invalid JSON"),
        (b'{"user":null,"ts":1,"bytes":2,"score":3,"ok":true}', None),
        (b"\xff\xfe", "payload is not UTF-8"),
        (b'{"user":"x",\n"ts":1,"bytes":2,"score":3,"ok":true}', None),
    ]:
        batch = messages([record(1), bad])
        assert fast_batch(options(), batch) is None, bad
        rows = to_batch(options(), batch).to_pylist()
        assert rows[0]["_malformed"] is None
        if reason is None:
            assert rows[1]["_malformed"] is None, "a JSON null is a null value, not malformed"
        else:
            assert reason in rows[1]["_malformed"], rows[1]
