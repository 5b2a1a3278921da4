"""GET /api/v1/fragments/{fragment}/keys/{key}: where a key lives, its migration, its state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from rescaler.cluster.models import Pipeline
from rescaler.operations import drive
from rescaler.operations.models import RescaleOperation, RescaleStep
from rescaler.operations.requests import operation_request
from tests.unit.api.fixtures import FRAGMENT, PIPELINE, request_body
from workers.hashing import vnode_of
from workers.layout import local_root, pu_store
from workers.pipeline.builtins import get_pipeline
from workers.pipeline.placement import PlacementStore, VnodeMapping
from workers.state import Update, encode_key, open_store
from workers.store_homes import StoreHomes

pytestmark = pytest.mark.django_db

VNODES = 16


def url(key: str, fragment: str = FRAGMENT) -> str:
    return f"/api/v1/fragments/{fragment}/keys/{key}"


@pytest.fixture
def state(_state_dir: Path, cluster: Pipeline) -> dict[str, int]:
    """Stores as the runner leaves them: the placement, and counts for a few words."""
    pipeline_dir = _state_dir / PIPELINE
    placement = VnodeMapping.initial(FRAGMENT, VNODES, [0, 1])
    PlacementStore(pipeline_dir).save({FRAGMENT: placement})
    operator = get_pipeline(PIPELINE).fragment(FRAGMENT).operator
    counts = {"apple": 5, "pear": 2, "a/b c": 9}
    by_pu: dict[int, list[Update]] = {0: [], 1: []}
    for word, count in counts.items():
        vnode = vnode_of(word, VNODES)
        by_pu[placement.mapping[vnode]].append(
            Update(encode_key(vnode, word.encode()), None, operator.encode(count))
        )
    for pu, updates in by_pu.items():
        with open_store("lmdb", pu_store(pipeline_dir, FRAGMENT, pu)) as store:
            store.commit_epoch(0, updates)
    ran_here(pipeline_dir, FRAGMENT, [0, 1])
    return counts


def ran_here(pipeline_dir: Path, fragment: str, pus: list[int]) -> None:
    """What the runner records from its PU tasks' reports: their stores are on this host."""
    StoreHomes(pipeline_dir).update(
        {"fragment": fragment, "pu": pu, "executor": "driver", "host": "localhost",
         "store_root": str(local_root(pipeline_dir))}
        for pu in pus
    )  # fmt: skip


def test_a_key_with_state(viewer_client: APIClient, state: dict[str, int]) -> None:
    response = viewer_client.get(url("apple"))
    assert response.status_code == 200, response.content
    data = response.json()
    vnode = vnode_of("apple", VNODES)
    assert data == {
        "pipeline": PIPELINE, "fragment": FRAGMENT, "key": "apple", "vnode": vnode,
        "parallel_unit": 0 if vnode < 8 else 1, "mapping_version": 1, "exists": True,
        "value": 5, "as_of_epoch": 0, "state_error": None, "migration": None,
    }  # fmt: skip


def test_the_answer_says_which_epoch_it_is_as_of(
    viewer_client: APIClient, state: dict[str, int], _state_dir: Path
) -> None:
    """Freshness: the owner's last committed epoch when read, moving with its commits."""
    vnode = vnode_of("apple", VNODES)
    owner = 0 if vnode < 8 else 1
    operator = get_pipeline(PIPELINE).fragment(FRAGMENT).operator
    path = pu_store(_state_dir / PIPELINE, FRAGMENT, owner)
    with open_store("lmdb", path) as store:
        key = encode_key(vnode, b"apple")
        store.commit_epoch(1, [])
        store.commit_epoch(2, [Update(key, operator.encode(5), operator.encode(7))])
    data = viewer_client.get(url("apple")).json()
    assert (data["value"], data["as_of_epoch"]) == (7, 2)
    assert viewer_client.get(url("kiwi")).json()["as_of_epoch"] is not None  # read, no state


def test_a_key_with_a_slash_and_a_space(viewer_client: APIClient, state: dict[str, int]) -> None:
    data = viewer_client.get(url("a/b%20c")).json()
    assert data["key"] == "a/b c" and data["value"] == 9


def test_a_key_without_state_exists_false(viewer_client: APIClient, state: dict[str, int]) -> None:
    response = viewer_client.get(url("kiwi"))
    assert response.status_code == 200
    data = response.json()
    assert data["exists"] is False and data["value"] is None and data["state_error"] is None
    assert data["vnode"] == vnode_of("kiwi", VNODES)


def test_without_a_state_directory_the_answer_says_why(
    viewer_client: APIClient, cluster: Pipeline
) -> None:
    data = viewer_client.get(url("apple")).json()
    assert data["exists"] is False and data["as_of_epoch"] is None
    assert "no pipeline state" in data["state_error"]
    # where it lives still comes from the mapping in Postgres
    vnode = vnode_of("apple", VNODES)
    assert data["vnode"] == vnode and data["parallel_unit"] == (0 if vnode < 8 else 1)


def test_a_vnode_being_moved_shows_its_step_and_phase(
    viewer_client: APIClient, operator: Any, state: dict[str, int]
) -> None:
    op = operation_request(
        user=operator,
        body={**request_body(added_parallel_units=[2, 3]), "granularity": "all_at_once"},
    )
    assert isinstance(op, RescaleOperation)
    moving = {v for s in RescaleStep.objects.filter(operation=op) for v in s.vnodes}
    word = next(w for w in ("apple", "pear", "a/b c") if vnode_of(w, VNODES) in moving)
    step = RescaleStep.objects.get(operation=op, vnodes__contains=[vnode_of(word, VNODES)])
    RescaleStep.objects.filter(pk=step.pk).update(phase="collecting")
    migration = viewer_client.get(url(word.replace(" ", "%20"))).json()["migration"]
    assert migration == {
        "operation_id": op.operation_id, "step": step.step, "source_pu": step.source_pu,
        "target_pu": step.target_pu, "phase": "collecting", "routing": "hold_queue",
    }  # fmt: skip
    still = next((w for w in state if vnode_of(w, VNODES) not in moving), None)
    if still is not None:
        assert viewer_client.get(url(still)).json()["migration"] is None
    drive._finalize(op, "completed", "test")
    assert viewer_client.get(url(word.replace(" ", "%20"))).json()["migration"] is None


@pytest.mark.parametrize(
    ("fragment", "status", "code"),
    [
        ("nope", 404, "unknown_fragment"),
        ("source", 404, "fragment_not_stateful"),
        ("sink", 404, "fragment_not_stateful"),
        ("nul%00", 404, "unknown_fragment"),
    ],
)
def test_refusals(
    viewer_client: APIClient, cluster: Pipeline, fragment: str, status: int, code: str
) -> None:
    response = viewer_client.get(url("apple", fragment))
    assert response.status_code == status
    assert response.json()["code"] == code and response.json()["detail"]


def test_a_key_too_long_for_any_store(viewer_client: APIClient, cluster: Pipeline) -> None:
    response = viewer_client.get(url("k" * 600))
    assert response.status_code == 400 and response.json()["code"] == "key_too_long"


def test_the_key_limit_is_the_configured_backends(
    viewer_client: APIClient, cluster: Pipeline, settings: Any
) -> None:
    settings.RESCALER_STATE_BACKEND = "rocksdb"  # no limit on key size: the key is looked up
    response = viewer_client.get(url("k" * 600))
    assert response.status_code == 200 and response.json()["exists"] is False


def test_two_pipelines_with_the_same_fragment_need_a_pipeline(
    viewer_client: APIClient, cluster: Pipeline
) -> None:
    from rescaler.cluster.models import Fragment

    other = Pipeline.objects.create(name="other")
    Fragment.objects.create(pipeline=other, name=FRAGMENT, kind="stateful", vnodes=VNODES)
    response = viewer_client.get(url("apple"))
    assert response.status_code == 400 and response.json()["code"] == "ambiguous_fragment"
    data = viewer_client.get(url("apple"), {"pipeline": PIPELINE}).json()
    assert data["pipeline"] == PIPELINE
    data = viewer_client.get(url("apple"), {"pipeline": "other"}).json()
    assert data["pipeline"] == "other" and data["parallel_unit"] is None
    assert "no pipeline 'other'" in data["state_error"]  # its definition is not registered


def test_a_processor_key_shows_each_state_variable_and_its_timers(
    viewer_client: APIClient, _state_dir: Path, cluster: Pipeline
) -> None:
    """A keyed region of two StatefulProcessors from the user's own module: the key finder
    reads the definition the runner registered, and gives the key's state by operator."""
    import sys

    from rescaler.cluster.models import Fragment
    from workers.pipeline.loading import load_pipeline, record
    from workers.processor import ProcessorRun, Segment
    from workers.region import Region

    fixtures = str(Path(__file__).resolve().parents[2] / "fixtures")
    sys.path.insert(0, fixtures)
    try:
        pipeline = load_pipeline("userpipe.region:build")
        pipeline_dir = _state_dir / pipeline.name
        record(pipeline_dir, "userpipe.region:build", pipeline)
        frag = pipeline.fragments[0]
        placement = VnodeMapping.initial(frag.name, frag.vnodes, [0])
        PlacementStore(pipeline_dir).save({frag.name: placement})
        region = frag.operator
        assert isinstance(region, Region)
        import pyarrow as pa

        from workers.pipeline.placement import EpochClock
        from workers.processor import section_of

        vnode = vnode_of("ann", frag.vnodes)
        records = pa.table(
            {"key": ["ann", "ann"], "seq": [0, 1], "vnode": [vnode, vnode],
             "page": ["p1", "p2"], "bytes": [10, 20]}
        )  # fmt: skip
        ran_here(pipeline_dir, frag.name, [0])
        with open_store("lmdb", pu_store(pipeline_dir, frag.name, 0)) as store:
            runs = [
                ProcessorRun(op, store, None, section=section_of(i), same_key=i == 0)
                for i, op in enumerate(region.operators)
            ]
            segment = Segment(EpochClock(), records, (vnode,))
            for run in runs:
                run.fold(segment)
                segment = Segment(segment.clock, run.take_outputs(), (vnode,))
            store.commit_epoch(0, [u for run in runs for u in run.updates()])
        other = Pipeline.objects.create(name=pipeline.name)
        Fragment.objects.create(
            pipeline=other, name=frag.name, kind="stateful", vnodes=frag.vnodes,
            operator=region.describe(),
        )  # fmt: skip
        data = viewer_client.get(url("ann", frag.name)).json()
    finally:
        sys.path.remove(fixtures)
    assert data["exists"] is True, data
    assert data["value"]["Visits"] == {
        "state": {"count": {"kind": "value", "value": [2], "expires_ms": None}},
        "timers": [],
    }
    streaks = data["value"]["Streaks"]["state"]
    assert streaks["total"]["value"] == [30]
    assert streaks["recent"] == {"kind": "list", "values": [["p1"], ["p2"]]}
    assert sorted(streaks["pages"]["entries"]) == [[["p1"], [1]], [["p2"], [1]]]
