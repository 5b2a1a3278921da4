"""The generator's records as JetStream messages (workers/sources/jetstream_generated.py),
without a server: their ids name their config and index, and the endless records a following
feeder publishes are the generator's own."""

from __future__ import annotations

import itertools

from workers.sources.generator import CHUNK, GeneratorConfig
from workers.sources.jetstream_generated import (
    generated,
    generated_from,
    generated_ids,
    generated_index,
)

CONFIG = GeneratorConfig(kind="events", key_space=50, pages=20, seed=11)


def test_a_generated_id_names_its_config_and_index() -> None:
    ids = list(generated_ids(CONFIG, 5, 8))
    assert [generated_index(i, CONFIG) for i in ids] == [5, 6, 7]
    other = GeneratorConfig(kind="events", key_space=50, pages=20, seed=12)
    assert [generated_index(i, other) for i in ids] == [None] * 3
    for foreign in (None, "", "order-17", "gen-:1", f"{ids[0]}x", ids[0].replace(":", ":-")):
        assert generated_index(foreign, CONFIG) is None


def test_endless_records_are_the_generator_records_across_chunks() -> None:
    first = CHUNK - 3
    got = list(itertools.islice(generated_from(CONFIG, first), 10))
    assert [msg_id for msg_id, _ in got] == list(generated_ids(CONFIG, first, first + 10))
    assert [record for _, record in got] == list(generated(CONFIG, first, first + 10))
