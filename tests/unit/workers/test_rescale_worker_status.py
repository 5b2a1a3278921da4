"""Validation and planning with elastic workers' statuses (docs/elastic-workers.md): no new
vnodes for a PU that is lost, removed, on a worker that is not active or not bootstrapped;
removing a lost PU stays allowed; the planner gives closed PUs nothing of its own choosing."""

from __future__ import annotations

from typing import Any

import pytest

from workers.rescale import errors
from workers.rescale.planner import closed_quota, plan_fragment, plan_request
from workers.rescale.protocol import FragmentChange, OperationRequest
from workers.rescale.request import ClusterView, FragmentView, validate


def _view(pus: list[int], vnodes: int = 12) -> FragmentView:
    mapping = tuple(pus[v * len(pus) // vnodes] for v in range(vnodes))
    return FragmentView(name="f", stateful=True, parallel_units=tuple(pus), mapping=mapping)


def _cluster(pus: list[int], **status: Any) -> ClusterView:
    """Workers a (PUs 0, 1), b (2, 3), c (4, 5); the fragment runs on ``pus``."""
    return ClusterView(
        pu_worker={0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c"},
        worker_alive={"a": True, "b": True, "c": True, **status.pop("worker_alive", {})},
        fragments={"f": _view(pus)},
        **status,
    )


def _request(**change: list[int]) -> OperationRequest:
    return OperationRequest.parse({"changes": {"f": change}})


@pytest.mark.parametrize(
    ("status", "error", "code"),
    [
        ({"worker_status": {"b": "cordoned"}}, errors.WorkerNotActive, "worker_not_active"),
        ({"worker_status": {"b": "draining"}}, errors.WorkerNotActive, "worker_not_active"),
        ({"worker_status": {"b": "decommissioning"}}, errors.WorkerNotActive, "worker_not_active"),
        ({"worker_status": {"b": "lost"}}, errors.WorkerNotActive, "worker_not_active"),
        (
            {"worker_bootstrapped_epoch": {"b": -1}},
            errors.WorkerNotBootstrapped,
            "worker_not_bootstrapped",
        ),
        ({"pu_status": {2: "lost"}}, errors.ParallelUnitLost, "parallel_unit_lost"),
        ({"pu_status": {2: "removed"}}, errors.ParallelUnitRemoved, "parallel_unit_removed"),
        ({"worker_alive": {"b": False}}, errors.DeadWorker, "parallel_unit_on_dead_worker"),
    ],
)
def test_adding_a_pu_that_may_not_take_vnodes_is_refused(
    status: dict[str, Any], error: type[errors.RescaleError], code: str
) -> None:
    with pytest.raises(error, match="parallel unit 2") as refused:
        validate(_request(added_parallel_units=[2]), _cluster([0, 1], **status))
    assert refused.value.code == code
    # one rule: the planner's closed set, the drains' and the pages' check say the same
    cluster = _cluster([0, 1, 2], **status)
    assert not cluster.open_to_vnodes(2) and 2 in cluster.closed_parallel_units()
    assert type(cluster.vnode_refusal(2)) is error
    plan = plan_request(_request(removed_parallel_units=[0]), cluster)
    assert 2 not in {m.target_pu for m in plan.fragments["f"].moves}


def test_a_cordoned_worker_is_told_how_to_take_vnodes_again() -> None:
    with pytest.raises(errors.WorkerNotActive, match="uncordon it first"):
        validate(
            _request(added_parallel_units=[2]),
            _cluster([0, 1], worker_status={"b": "cordoned"}),
        )


def test_a_bootstrapped_active_worker_or_one_of_the_topology_takes_vnodes() -> None:
    validate(
        _request(added_parallel_units=[2, 4]),
        _cluster([0, 1], worker_bootstrapped_epoch={"b": 7, "c": None}),
    )


def test_removing_a_lost_pu_is_allowed_and_its_vnodes_go_to_live_pus() -> None:
    cluster = _cluster([0, 1, 2], worker_status={"a": "lost"}, pu_status={0: "lost", 1: "lost"})
    request = _request(removed_parallel_units=[0], added_parallel_units=[4])
    validate(request, cluster)
    plan = plan_request(request, cluster)
    moves = plan.fragments["f"].moves
    assert {m.source_pu for m in moves} == {0}
    assert {m.target_pu for m in moves} == {4}, "the other lost PU, 1, takes nothing"


def test_closed_pus_keep_what_they_hold_and_take_nothing() -> None:
    # 12 vnodes on 0, 1, 2 (4 each); remove 2: 0 and 1 would take 2 each, but 1 is cordoned
    assert closed_quota({0: 4, 1: 4, 2: 4}, [0, 1], 12, frozenset({1})) == {0: 8, 1: 4}
    # a closed PU holding more than its share still sheds the excess
    assert closed_quota({0: 2, 1: 10}, [0, 1, 4], 12, frozenset({1})) == {0: 4, 1: 4, 4: 4}
    # with no open PU left, the plain quota: the request leaves the planner no other way
    assert closed_quota({0: 6, 1: 6}, [1], 12, frozenset({1})) == {1: 12}


@pytest.mark.parametrize("weighted", [False, True])
def test_the_planner_moves_nothing_to_a_cordoned_workers_pu(weighted: bool) -> None:
    view = _view([0, 2, 4])
    plan = plan_fragment(
        view, FragmentChange(removed_parallel_units=(4,)), weighted=weighted, closed=frozenset({2})
    )
    assert {m.target_pu for m in plan.moves} == {0}
    assert plan.mapping_after.count(2) == 4 and plan.mapping_after.count(0) == 8


def test_plan_request_takes_the_closed_pus_from_the_cluster() -> None:
    cluster = _cluster([0, 2, 4], worker_status={"b": "cordoned"})
    plan = plan_request(_request(removed_parallel_units=[4]), cluster)
    assert {m.target_pu for m in plan.fragments["f"].moves} == {0}
    assert cluster.closed_parallel_units() == frozenset({2, 3})
