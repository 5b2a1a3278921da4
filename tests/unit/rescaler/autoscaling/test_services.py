"""``autoscaling_policy_update`` without HTTP: all or nothing, audited once per change."""

from __future__ import annotations

import pytest

from rescaler.audit.models import AuditEvent
from rescaler.autoscaling.errors import PolicyInvalid, UnknownPipeline
from rescaler.autoscaling.model import Mode, Policy
from rescaler.autoscaling.selectors import autoscaling_policy_get
from rescaler.autoscaling.services import autoscaling_policy_update
from tests.unit.api.fixtures import PIPELINE, make_user, register_cluster

pytestmark = pytest.mark.django_db


def test_an_update_sets_what_it_names_and_records_before_and_after() -> None:
    pipeline = register_cluster()
    user = make_user("alice", rescale=True)
    assert autoscaling_policy_get(pipeline=pipeline) == Policy()
    policy = autoscaling_policy_update(
        user=user, pipeline=PIPELINE, changes={"mode": "recommend", "cooldown_s": 30.0}
    )
    assert policy == Policy(mode=Mode.RECOMMEND, cooldown_s=30.0)
    assert autoscaling_policy_get(pipeline=pipeline) == policy
    event = AuditEvent.objects.get(action="autoscaling.policy_updated")
    assert event.actor == user
    assert (event.before["cooldown_s"], event.after["cooldown_s"]) == (300.0, 30.0)
    autoscaling_policy_update(user=user, pipeline=PIPELINE, changes={"cooldown_s": 30.0})
    assert AuditEvent.objects.filter(action="autoscaling.policy_updated").count() == 1


def test_a_refused_update_changes_nothing() -> None:
    pipeline = register_cluster()
    user = make_user("alice", rescale=True)
    autoscaling_policy_update(user=user, pipeline=PIPELINE, changes={"mode": "recommend"})
    with pytest.raises(PolicyInvalid) as refused:
        autoscaling_policy_update(
            user=user,
            pipeline=PIPELINE,
            changes={"max_parallel_units": 4, "min_parallel_units": 6, "target_utilisation": 2},
        )
    assert set(refused.value.problems) == {"min_parallel_units", "target_utilisation"}
    assert refused.value.details()["field"] == "target_utilisation"
    assert autoscaling_policy_get(pipeline=pipeline) == Policy(mode=Mode.RECOMMEND)
    assert AuditEvent.objects.filter(action="autoscaling.policy_updated").count() == 1
    with pytest.raises(PolicyInvalid, match="not a setting"):
        autoscaling_policy_update(user=user, pipeline=PIPELINE, changes={"speed": 1})
    with pytest.raises(UnknownPipeline):
        autoscaling_policy_update(user=user, pipeline="nope", changes={"mode": "off"})
