"""The control-plane benchmark (``bench/control_plane.py``) runs end to end at a small size, so
that it cannot rot: every measure is taken and the simulated runner drives its operation to the
end. The figures themselves are not judged here (tests assert behaviour, never time); what is
checked is what they must be at any size: every vnode moved, writes per barrier that do not
grow with the steps, and a progress event far smaller than the document."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench import control_plane
from rescaler.operations.models import RescaleOperation
from rescaler.runner import control

pytestmark = pytest.mark.django_db

SMALL = replace(
    control_plane.QUICK,
    pus=16,
    vnodes=256,
    runs=1,
    requests=3,
    steps_in_flight=8,
    probe_known=40,
)


@pytest.fixture(autouse=True)
def _keep_the_test_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    # OrmControl refreshes old connections first: in a test that would close the test's own
    monkeypatch.setattr(control, "close_old_connections", lambda: None)


def test_the_quick_run_takes_every_measure() -> None:
    result = control_plane.run(SMALL)

    assert result["cluster"]["parallel_units"] == 16
    planner = result["planner"]
    for name in ("plain", "weighted"):
        assert planner[f"plan_{name}"]["vnodes_moved"] == 128  # half of them: a 2x scale-out
        assert planner[f"plan_{name}"]["steps"] == 128
        assert result["dry_run"][name]["queries"] > 0
        assert result["dry_run"][name]["response_bytes"] > 0
    cluster = result["get_cluster"]
    assert cluster["queries"] > 0 and cluster["p99_ms"] >= cluster["p50_ms"] > 0

    handoffs = result["handoffs"]
    assert handoffs["steps"] == 128
    assert handoffs["vnodes_moved"] == 128
    assert handoffs["handoffs_per_s"] > 0
    op = RescaleOperation.objects.get(operation_id=handoffs["operation_id"])
    assert op.status == "completed" and op.vnodes_moved == 128
    assert set(op.steps.values_list("phase", flat=True)) == {"done"}
    # 8 steps start, 8 are acquired and 8 end at a barrier: a fixed number of writes
    assert handoffs["writes_per_barrier"]["max"] <= 8
    probe = handoffs["websocket_probe"]
    assert probe["known_steps"] >= 40 and probe["changed_steps"] == 1
    assert probe["document_bytes"] > 10 * probe["event_bytes"]

    text = control_plane.table(result)
    assert "GET /api/v1/cluster p50 / p99" in text and "vnodes/s" in text


def test_the_sizes_come_from_the_command_line() -> None:
    assert control_plane.sizes_of(control_plane.parser().parse_args(["--quick"])) == (
        control_plane.QUICK
    )
    full = control_plane.sizes_of(
        control_plane.parser().parse_args(["--vnodes", "65536", "--steps-in-flight", "64"])
    )
    assert (full.pus, full.vnodes, full.steps_in_flight) == (1024, 65536, 64)


def test_only_the_simulated_runner_is_measured_when_asked() -> None:
    result = control_plane.run(SMALL, only=("handoffs",))

    assert set(result) == {"cluster", "handoffs"}
    handoffs = result["handoffs"]
    assert handoffs["vnodes_moved"] == 128
    # a barrier reports the steps that changed since the acknowledged report: at most the
    # steps started, acquired, ended and newly issued at it, never all 128
    assert handoffs["reported_steps_per_barrier"]["max"] <= 4 * 8 + 8
    text = control_plane.table(result)
    assert "vnodes/s" in text and "GET /api/v1/cluster" not in text
