"""The runner's ORM control plane reports a lost database as an outage, not as a crash."""

from __future__ import annotations

import pytest
from django.db import InterfaceError, OperationalError

from rescaler.runner import control as orm
from workers.control import ControlUnavailable, EpochReport


def _report() -> EpochReport:
    return EpochReport(
        pipeline="p", epoch=1, rows=0, malformed=0, duration_s=0.1, committed_at=0.0,
        source_offset={}, per_pu=[], per_vnode={}, mapping_versions={},
    )  # fmt: skip


@pytest.mark.parametrize("error", [OperationalError, InterfaceError])
def test_database_errors_become_control_unavailable(
    monkeypatch: pytest.MonkeyPatch, error: type[Exception]
) -> None:
    closed: list[bool] = []

    def down(**kwargs: object) -> None:
        raise error("server closed the connection unexpectedly\nmore detail")

    monkeypatch.setattr(orm.services, "epoch_record", down)
    monkeypatch.setattr(orm, "close_old_connections", lambda: None)
    monkeypatch.setattr(orm.connection, "close", lambda: closed.append(True))
    with pytest.raises(ControlUnavailable, match=r"^server closed the connection unexpectedly$"):
        orm.OrmControl().report_epoch(_report())
    assert closed == [True], "the broken connection is dropped, the next call opens a new one"


def test_other_errors_go_up_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(**kwargs: object) -> None:
        raise KeyError("no such pipeline")

    monkeypatch.setattr(orm.services, "epoch_record", broken)
    monkeypatch.setattr(orm, "close_old_connections", lambda: None)
    with pytest.raises(KeyError):
        orm.OrmControl().report_epoch(_report())
