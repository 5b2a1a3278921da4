"""The autoscaling policy's checks (issue 47): each setting out of its range is named."""

from __future__ import annotations

import pytest

from rescaler.autoscaling.model import Policy, policy_problems
from tests.unit.rescaler.autoscaling.test_sizing import POLICY  # the policy the sizing runs


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"target_utilisation": 0.0}, "target_utilisation"),
        ({"target_utilisation": 1.2}, "target_utilisation"),
        ({"min_parallel_units": 5, "max_parallel_units": 2}, "min_parallel_units"),
        ({"min_parallel_units": 0}, "min_parallel_units"),
        ({"max_step": 0}, "max_step"),
        ({"stabilisation_s": 0}, "stabilisation_s"),
        ({"cooldown_s": -1}, "cooldown_s"),
        ({"catch_up_s": 0}, "catch_up_s"),
        ({"scale_in_blackout_hours": (24,)}, "scale_in_blackout_hours"),
        ({"scale_in_blackout_hours": (3, 3)}, "scale_in_blackout_hours"),
    ],
)
def test_policy_problems_name_the_setting(changes: dict[str, object], field: str) -> None:
    policy = Policy(**{**vars(POLICY), **changes})  # type: ignore[arg-type]
    assert field in policy_problems(policy)


def test_a_sound_policy_has_no_problems() -> None:
    assert policy_problems(POLICY) == {}
    assert policy_problems(Policy(target_utilisation=1.0)) == {}
