"""Builders shared by the API tests (unit and integration): a registered cluster, users, clients.

No runner and no Spark: the cluster is registered and reported the way the runner does it
(``topology_register``, ``epoch_record``, ``runner_heartbeat``).
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from rescaler.cluster import services as cluster_services
from rescaler.cluster.models import Fragment, Pipeline
from workers.control import EpochReport, PuLoad, Topology
from workers.pipeline.placement import VnodeMapping

PIPELINE = "wordcount"
FRAGMENT = "word_count"


def register_cluster(
    *,
    vnodes: int = 16,
    workers: dict[str, list[int]] | None = None,
    initial_pus: tuple[int, ...] = (0, 1),
    epochs: int = 1,
    operator: str = "count",
) -> Pipeline:
    """The wordcount pipeline (source → word_count → sink), alive, with ``epochs`` reported;
    ``operator``: how the runner describes word_count's operator."""
    workers = workers or {"local-0": [0, 1, 2, 3]}
    placement = VnodeMapping.initial(FRAGMENT, vnodes, list(initial_pus))
    topology = Topology(
        pipeline=PIPELINE,
        workers=workers,
        fragments={
            "source": {
                "kind": "source",
                "parallel_units": list(initial_pus),
                "operator": "JetStream stream WORDS at nats://127.0.0.1:4222",
            },
            FRAGMENT: {
                "kind": "stateful",
                "region": 1,
                "vnodes": vnodes,
                "key": "word",
                "operator": operator,
                "parallel_units": list(initial_pus),
                "mapping": list(placement.mapping),
                "version": 1,
            },
            "sink": {
                "kind": "sink",
                "parallel_units": list(initial_pus),
                "operator": "postgres postgres://db/x table counts (key key)",
            },
        },
        spark={"alive": True, "master": "local[2]"},
    )
    pipeline = cluster_services.topology_register(topology=topology)
    now = time.time()
    for epoch in range(epochs):
        cluster_services.epoch_record(
            report=EpochReport(
                pipeline=PIPELINE,
                epoch=epoch,
                rows=1000 + epoch,
                malformed=0,
                duration_s=0.2 + 0.01 * epoch,
                committed_at=now - (epochs - epoch),
                source_offset={"offset": 1000 * (epoch + 1)},
                per_pu=[
                    PuLoad(FRAGMENT, pu, rows=500, keys=100 * (pu + 1), bytes=1000 * (pu + 1))
                    for pu in initial_pus
                ],
                per_vnode={FRAGMENT: {v: (10, 100 + v) for v in range(vnodes)}},
                mapping_versions={FRAGMENT: 1},
            )
        )
    cluster_services.runner_heartbeat(
        pipeline=PIPELINE, epoch=max(epochs - 1, 0), status="running", spark={"alive": True}
    )
    return Pipeline.objects.get(pk=pipeline.pk)


def move_the_mapping(version: int = 2) -> None:
    """The runner records a new mapping of word_count (as after another operation): half of
    the vnodes change PU, each of PUs 0 and 1 keeps 8 of 16."""
    fragment = Fragment.objects.get(pipeline__name=PIPELINE, name=FRAGMENT)
    mapping = [1] * (fragment.vnodes // 2) + [0] * (fragment.vnodes - fragment.vnodes // 2)
    cluster_services.mapping_record(fragment=fragment, version=version, mapping=mapping)


def make_user(username: str, *, rescale: bool = False, policy: bool = False) -> Any:
    """A user who may read; ``rescale``: also rescale (an operator's permission); ``policy``:
    also change autoscaling policies (an admin's)."""
    user = get_user_model().objects.create_user(username, password="pw-" + username)
    if rescale:
        user.user_permissions.add(
            Permission.objects.get(codename="rescale", content_type__app_label="operations")
        )
    if policy:
        user.user_permissions.add(
            Permission.objects.get(
                codename="change_autoscalingpolicy", content_type__app_label="autoscaling"
            )
        )
    return user


def token_client(user: Any | None) -> APIClient:
    """A client authenticated the way automation is: ``Authorization: Token <key>``."""
    client = APIClient()
    if user is not None:
        token, _ = Token.objects.get_or_create(user=user)
        client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


def register_earlier_run(name: str, fragment: str) -> Pipeline:
    """A pipeline an earlier run registered (one fragment on PU 0 of local-0), whose runner
    stopped reporting two hours ago: not running (``runner_alive``)."""
    placement = VnodeMapping.initial(fragment, 8, [0])
    pipeline = cluster_services.topology_register(
        topology=Topology(
            pipeline=name,
            workers={"local-0": [0, 1, 2, 3]},
            fragments={
                fragment: {
                    "kind": "stateful",
                    "region": 1,
                    "vnodes": 8,
                    "key": "word",
                    "operator": "count",
                    "parallel_units": [0],
                    "mapping": list(placement.mapping),
                    "version": 1,
                }
            },
            spark={},
        )
    )
    Pipeline.objects.filter(pk=pipeline.pk).update(
        status=Pipeline.Status.RUNNING, heartbeat_at=timezone.now() - dt.timedelta(hours=2)
    )
    pipeline.refresh_from_db()
    return pipeline


def request_body(**change: Any) -> dict[str, Any]:
    return {"changes": {FRAGMENT: change}, "granularity": {"vnodes_per_step": 2}}


def skew_the_load(vnodes: int = 16, records: dict[int, float] | None = None) -> None:
    """A new epoch whose per-vnode load differs from what a plan made before it saw (the mapping
    does not move): vnode v holds 1000 * (v + 1) keys of 50,000 * (v + 1) bytes, and receives
    ``records`` per epoch (the stream's measure)."""
    cluster_services.epoch_record(
        report=EpochReport(
            pipeline=PIPELINE,
            epoch=5,
            rows=10,
            malformed=0,
            duration_s=0.2,
            committed_at=time.time(),
            source_offset={"offset": 99},
            per_pu=[PuLoad(FRAGMENT, pu, rows=5, keys=1, bytes=1) for pu in (0, 1)],
            per_vnode={FRAGMENT: {v: (1000 * (v + 1), 50_000 * (v + 1)) for v in range(vnodes)}},
            mapping_versions={FRAGMENT: 1},
            records_per_vnode={FRAGMENT: records or {}},
        )
    )


@dataclass(frozen=True)
class PlacementHistory:
    """word_count's kept mapping versions, each recorded at ``recorded[version]``: 1 at the
    start (PUs 0, 1), 2 and 3 made by ``operation_id`` (a scale out onto PUs 2 and 3, requested
    at ``requested``, ended at ``finished``), and 5 a registration of no operation (4 never
    reached the control plane: the kept numbers skip it)."""

    operation_id: str
    requested: dt.datetime
    finished: dt.datetime
    recorded: dict[int, dt.datetime]
    mappings: dict[int, list[int]]


HISTORY_MAPPINGS = {
    1: [0] * 8 + [1] * 8,
    2: [2] * 4 + [0] * 4 + [1] * 8,
    3: [2] * 4 + [0] * 4 + [3] * 4 + [1] * 4,
    5: [2] * 4 + [0] * 4 + [3] * 4 + [1] * 2 + [0] * 2,
}


def placement_history(user: Any = None) -> PlacementHistory:
    """The cluster of ``register_cluster`` (16 vnodes on PUs 0 and 1) with a past: the versions
    of ``PlacementHistory``, three hours old and older. The operation is requested as the
    console and the API do (``operation_request``: its plan and steps), then ended as the
    runner's reports would leave it; who calls it keeps Celery out (nothing drives it)."""
    from rescaler.cluster.models import ParallelUnit, VnodeMapping
    from rescaler.operations.models import RescaleOperation
    from rescaler.operations.requests import operation_request

    register_cluster(vnodes=16, initial_pus=(0, 1))
    fragment = Fragment.objects.get(pipeline__name=PIPELINE, name=FRAGMENT)
    start = timezone.now() - dt.timedelta(hours=3)
    made = operation_request(
        user=user or make_user("history-operator", rescale=True),
        body={**request_body(added_parallel_units=[2, 3]), "reason": "room for the peak"},
    )
    assert isinstance(made, RescaleOperation)
    recorded = {
        1: start,
        2: start + dt.timedelta(minutes=15),
        3: start + dt.timedelta(minutes=20),
        5: start + dt.timedelta(minutes=90),
    }
    for version, mapping in HISTORY_MAPPINGS.items():
        if version > 1:
            cluster_services.mapping_record(fragment=fragment, version=version, mapping=mapping)
        VnodeMapping.objects.filter(fragment=fragment, version=version).update(
            created_at=recorded[version]
        )
    requested, finished = start + dt.timedelta(minutes=10), start + dt.timedelta(minutes=30)
    RescaleOperation.objects.filter(pk=made.pk).update(
        created_at=requested, started_at=requested, finished_at=finished, status="completed"
    )
    made.fragment_locks.update(active=False)
    fragment.parallel_units.set(ParallelUnit.objects.filter(number__in=[0, 1, 2, 3]))
    return PlacementHistory(made.operation_id, requested, finished, recorded, HISTORY_MAPPINGS)
