"""The operation page is complete on the server: its head, placement, vnodes by phase, steps
and timeline are in the HTML itself (no script needed); its cancel is a form whose refusals
come from the service the API calls; and each progress report is also rendered, by the page's
socket, as the rows it changed that the page shows, which htmx swaps in by id."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from dashboard import live
from dashboard.format import vnode_ranges
from dashboard.live import (
    PAGE_CHANGES,
    operation_delta_html,
    operation_page_delta,
    parse_step_ranges,
    step_ranges,
)
from dashboard.operation_fragments import fragment_views
from dashboard.operation_page import operation_summary
from dashboard.step_phases import PHASE_INDEX
from rescaler import events
from rescaler.audit.models import AuditEvent
from rescaler.operations.models import RescaleOperation, RescaleStep
from rescaler.operations.progress import operation_progress_record
from rescaler.operations.requests import operation_request
from tests.unit.api.fixtures import PIPELINE, make_user, register_cluster, request_body
from workers.rescale.protocol import (
    OperationProgress,
    OperationStatus,
    StepPhase,
    StepProgress,
    StopStartPhase,
    Strategy,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def op(monkeypatch: pytest.MonkeyPatch) -> RescaleOperation:

    monkeypatch.setattr("rescaler.operations.enqueue.operation_drive_enqueue", lambda pk: None)
    register_cluster(vnodes=16, initial_pus=(0, 1))
    made = operation_request(
        user=make_user("operator", rescale=True),
        body={**request_body(added_parallel_units=[2, 3]), "reason": "room for the peak"},
    )
    assert isinstance(made, RescaleOperation)
    return made


def report(op: RescaleOperation, phases: dict[int, StepPhase], keys: dict[int, int]) -> None:
    """The runner's report at a barrier: these steps in these phases, with keys moved."""
    specs = {s.step: s.spec() for s in op.steps.all()}
    steps = tuple(
        StepProgress(
            step=n,
            fragment=specs[n].fragment,
            source_pu=specs[n].source_pu,
            target_pu=specs[n].target_pu,
            vnodes=specs[n].vnodes,
            phase=phase,
            keys_moved=keys.get(n, 0),
        )
        for n, phase in phases.items()
    )
    progress = OperationProgress(
        operation_id=op.operation_id,
        strategy=Strategy(op.strategy),
        fragments=tuple(op.fragments),
        status=OperationStatus.RUNNING,
        phase=StopStartPhase.BEGUN,
        begun_epoch=3,
        keys_moved=sum(keys.values()),
        steps=steps,
    ).to_json()
    operation_progress_record(pipeline=PIPELINE, progress=progress)


def text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_vnodes_print_as_runs() -> None:
    assert vnode_ranges([5, 0, 1, 2, 7, 8]) == "0–2 5 7–8"
    assert vnode_ranges(range(16_384)) == "0–16383"
    assert vnode_ranges([]) == "none"


def test_the_page_is_complete_without_a_script(client: Client, op: RescaleOperation) -> None:
    client.force_login(make_user("viewer"))
    html = client.get(f"/operations/{op.operation_id}/").content.decode()
    words = text(html)
    # the head: status, why it waits, planned against moved
    assert 'id="op-status"' in html and "pending" in words
    assert "orchestrator" in text(re.search(r'<p id="op-waiting".*?</p>', html, re.S)[0])
    assert "0 of 8 (0 %)" in words  # vnodes moved of planned
    # placement per PU: before, planned, now
    row = re.search(r'<tr id="placement-word_count-2".*?</tr>', html, re.S)
    assert row is not None and text(row[0]).split() == ["PU", "2", "0", "4", "0"]
    # every vnode by phase, counted, and the grid's data (one digit per vnode)
    assert "8 planned" in words and "8 owned" in words
    phases = re.search(r'data-phases="(\d+)"', html)
    assert phases is not None and len(phases[1]) == 16
    assert phases[1].count(str(PHASE_INDEX["planned"])) == 8
    # every step with its vnodes; the timeline; no cancel for a viewer
    assert len(re.findall(r'<tr [^>]*id="step-\d+"', html)) == op.steps.count()
    assert "operation.requested" in words
    assert "Cancel operation" not in words


def test_steps_sort_by_column_from_the_query_string(client: Client, op: RescaleOperation) -> None:
    client.force_login(make_user("viewer"))
    report(op, {1: StepPhase.COLLECTING, 2: StepPhase.DONE}, {2: 5_000})
    html = client.get(f"/operations/{op.operation_id}/", {"sort": "-keys"}).content.decode()
    order = re.findall(r'id="step-(\d+)"', html)
    assert order[0] == "2", order
    assert "5,000 of 20" in text(html)


def test_cancel_is_a_form_the_service_answers(client: Client, op: RescaleOperation) -> None:
    client.force_login(make_user("canceller", rescale=True))
    url = f"/operations/{op.operation_id}/cancel"
    unconfirmed = client.post(url, {})
    assert unconfirmed.status_code == 400
    assert "Tick the box to confirm the cancel." in unconfirmed.content.decode()
    assert RescaleOperation.objects.get(pk=op.pk).status == OperationStatus.PENDING

    done = client.post(url, {"confirm": "on"})
    assert done.status_code == 302 and done["Location"] == f"/operations/{op.operation_id}/"
    assert RescaleOperation.objects.get(pk=op.pk).status == OperationStatus.CANCELLING
    assert AuditEvent.objects.filter(action="operation.cancel_requested").count() == 1

    RescaleOperation.objects.filter(pk=op.pk).update(status=OperationStatus.CANCELLED)
    refused = client.post(url, {"confirm": "on"})
    assert refused.status_code == 400 and "already ended" in refused.content.decode()


def test_cancel_needs_the_permission(client: Client, op: RescaleOperation) -> None:
    client.force_login(make_user("viewer"))
    assert (
        client.post(f"/operations/{op.operation_id}/cancel", {"confirm": "on"}).status_code == 403
    )


def test_the_live_part_alone_for_htmx(client: Client, op: RescaleOperation) -> None:
    client.force_login(make_user("viewer"))
    response = client.get(
        f"/operations/{op.operation_id}/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="operation-live"
    )
    live = response.content.decode()
    assert live.lstrip().startswith('<div id="operation-live"')
    assert "HX-Target" in response["Vary"], "a cache never answers the page with the part"
    assert "<html" not in live


def test_a_report_is_rendered_as_the_rows_it_changed(op: RescaleOperation) -> None:
    report(op, {1: StepPhase.COLLECTING}, {})
    full = RescaleOperation.objects.prefetch_related("steps").get(pk=op.pk)
    step = RescaleStep.objects.get(operation=op, step=1)
    events = list(AuditEvent.objects.filter(action="operation.requested"))
    (html,) = operation_delta_html(operation=full, steps=[step], events=events, waiting=None)
    # one message, its table rows first (a message's first tag decides how htmx's <template>
    # parses it): one step, the placement of its two PUs, its source's progress; then the rest
    rows, rest = html[: html.rindex("</tr>") + 5], html[html.rindex("</tr>") + 5 :]
    assert rows.startswith("<tr ") and rest.startswith("<div ")
    assert re.findall(r'<tr [^>]*id="([a-z0-9_-]+)"', rows) == [
        "step-1",
        f"placement-word_count-{step.source_pu}",
        f"placement-word_count-{step.target_pu}",
        f"source-word_count-{step.source_pu}",
    ]
    assert rows.count('hx-swap-oob="true"') == 4
    assert not live.TABLE_MARKUP.search(rest)
    assert 'id="op-summary" hx-swap-oob="true"' in rest
    assert 'hx-swap-oob="beforeend:#timeline"' in rest
    patch = re.search(r'data-patch="([^"]+)"', rest)
    assert patch is not None
    assert str(PHASE_INDEX["collecting"]) in patch[1]


def test_a_rest_with_table_markup_goes_apart_from_the_rows(
    op: RescaleOperation, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the rows, a <table> (or a form) would be parsed as part of the rows' table: such a
    rest is sent as a message of its own."""
    report(op, {1: StepPhase.COLLECTING}, {})
    step = RescaleStep.objects.get(operation=op, step=1)
    rendered = live.render_to_string

    def with_a_table(name: str, context: Any) -> str:
        html = rendered(name, context)
        return html + "<table><tr><td>1</td></tr></table>" if name.endswith("delta.html") else html

    monkeypatch.setattr(live, "render_to_string", with_a_table)
    rows, rest = operation_delta_html(operation=op, steps=[step], events=[], waiting=None)
    assert rows.startswith('<tr id="step-1"') and "<div" not in rows
    assert rest.startswith('<div id="op-summary"') and rest.endswith("</table>")
    assert operation_delta_html(operation=op, steps=[], events=[], waiting=None)[0].startswith(
        '<div id="op-summary"'
    ), "no rows: the rest alone, one message"


def test_a_page_s_socket_names_the_rows_it_shows_as_ranges(
    client: Client, op: RescaleOperation
) -> None:
    assert step_ranges([4, 1, 2, 3, 9, 11, 10]) == "1-4,9-11"
    assert parse_step_ranges("1-4,9-11") == ((1, 4), (9, 11))
    assert parse_step_ranges("7") == ((7, 7),)
    for garbled in ("", "1-", "a", "1,,2", ",".join(["1"] * 129)):
        assert parse_step_ranges(garbled) is None, garbled  # every row, as before
    client.force_login(make_user("viewer"))
    page = client.get(f"/operations/{op.operation_id}/?sort=-step").content.decode()
    steps = op.steps.count()
    socket = f"/ws/operations/{op.operation_id}/page/?version=0&amp;steps=1-{steps}"
    assert f'ws-connect="{socket}"' in page


def test_the_page_s_socket_renders_the_changed_rows_it_shows_once_per_version(
    op: RescaleOperation, django_assert_num_queries: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recording a report renders nothing (the event names what changed); a page's socket
    renders the rows it shows of those, once per version and rows in the process."""
    live._RENDERED.clear()
    published: list[dict[str, Any]] = []
    monkeypatch.setattr(events, "publish", lambda group, kind, payload: published.append(payload))
    report(op, {1: StepPhase.COLLECTING, 3: StepPhase.COLLECTING}, {})
    delta = next(p for p in published if PAGE_CHANGES in p)
    assert delta[PAGE_CHANGES]["steps"] == [1, 3] and "page_html" not in delta
    (html,) = operation_page_delta(
        operation_id=op.operation_id, payload=delta, shown=((2, 10),)
    ) or [""]
    assert re.findall(r'id="(step-\d+)"', html) == ["step-3"]
    assert 'id="op-summary"' in html
    with django_assert_num_queries(0):  # a second page on the same rows: rendered already
        again = operation_page_delta(operation_id=op.operation_id, payload=delta, shown=((2, 10),))
    assert again == [html]
    everything = operation_page_delta(operation_id=op.operation_id, payload=delta, shown=None)
    assert everything is not None
    assert re.findall(r'id="(step-\d+)"', everything[0]) == ["step-1", "step-3"]
    assert operation_page_delta(operation_id=op.operation_id, payload={}, shown=None) is None


def test_the_page_s_socket_takes_the_step_counts_the_record_made(
    op: RescaleOperation, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record counts every step once for its delta event (one grouped scan of the steps,
    16,384 rows at scale, the PUs its steps touch counted apart); the event hands those groups
    to the page's socket, which renders the summary, the placement and the sources from them
    instead of counting again, and says the same."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from dashboard.delta_counts import delta_groups, step_pus
    from rescaler.operations.counts import StepCounts, step_counts

    live._RENDERED.clear()
    published: list[dict[str, Any]] = []
    monkeypatch.setattr(events, "publish", lambda group, kind, payload: published.append(payload))
    report(op, {1: StepPhase.DONE, 3: StepPhase.COLLECTING}, {1: 5})
    delta = next(p for p in published if PAGE_CHANGES in p)
    changed = list(op.steps.filter(step__in=delta[PAGE_CHANGES]["steps"]))
    groups = delta_groups(op, pus=step_pus(changed))
    assert delta[PAGE_CHANGES]["groups"] == [g.to_json() for g in groups]
    assert StepCounts.of_groups(groups) == step_counts(op)
    with CaptureQueriesContext(connection) as given:
        with_groups = operation_page_delta(operation_id=op.operation_id, payload=delta, shown=None)
    live._RENDERED.clear()
    bare = {**delta, PAGE_CHANGES: {k: v for k, v in delta[PAGE_CHANGES].items() if k != "groups"}}
    with CaptureQueriesContext(connection) as counted:
        without = operation_page_delta(operation_id=op.operation_id, payload=bare, shown=None)
    assert with_groups == without or _without_render_time(with_groups) == _without_render_time(
        without
    )

    assert _step_scans(given) == 0 and _step_scans(counted) == 1
    # groups that do not parse are counted again, not trusted
    for garbage in ([{"steps": "x"}], [{**delta[PAGE_CHANGES]["groups"][0], "steps": True}], {}):
        live._RENDERED.clear()
        garbled = {**delta, PAGE_CHANGES: {**delta[PAGE_CHANGES], "groups": garbage}}
        with CaptureQueriesContext(connection) as again:
            html = operation_page_delta(operation_id=op.operation_id, payload=garbled, shown=None)
        assert _step_scans(again) == 1
        assert _without_render_time(html) == _without_render_time(without)


def test_a_barrier_touching_many_pus_leaves_their_counts_to_the_page_s_socket(
    op: RescaleOperation, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Split by each of hundreds of PUs, a large barrier's groups would be hundreds, counted
    and carried at every barrier whether a page watches or not: past ``PAGE_GROUPS_MAX_PUS``
    the event carries none, and the page's socket counts them itself, to the same page."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from dashboard.delta_counts import delta_groups, step_pus

    live._RENDERED.clear()
    published: list[dict[str, Any]] = []
    monkeypatch.setattr(events, "publish", lambda group, kind, payload: published.append(payload))
    monkeypatch.setattr(live, "PAGE_GROUPS_MAX_PUS", 1)
    report(op, {1: StepPhase.DONE, 3: StepPhase.COLLECTING}, {1: 5})
    delta = next(p for p in published if PAGE_CHANGES in p)
    assert delta[PAGE_CHANGES]["groups"] is None
    with CaptureQueriesContext(connection) as queries:
        html = operation_page_delta(operation_id=op.operation_id, payload=delta, shown=None)
    assert _step_scans(queries) == 1
    # the same page as from the groups the record would have carried
    changed = list(op.steps.filter(step__in=delta[PAGE_CHANGES]["steps"]))
    groups = delta_groups(op, pus=step_pus(changed))
    carried = {
        **delta,
        PAGE_CHANGES: {**delta[PAGE_CHANGES], "groups": [g.to_json() for g in groups]},
    }
    live._RENDERED.clear()
    again = operation_page_delta(operation_id=op.operation_id, payload=carried, shown=None)
    assert _without_render_time(again) == _without_render_time(html)


def _step_scans(queries: Any) -> int:
    """How many of the captured queries were ``step_groups``' scan of every step."""
    return sum('AS "exporting_since"' in q["sql"] for q in queries.captured_queries)


def _without_render_time(html: list[str] | None) -> list[str]:
    return [re.sub(r'data-rendered-at="[^"]*"', "", part) for part in html or []]


def test_the_summary_says_rate_and_eta_once_keys_move(op: RescaleOperation) -> None:
    report(op, {1: StepPhase.DONE}, {1: 1_000})
    full = RescaleOperation.objects.prefetch_related("steps").get(pk=op.pk)
    started = full.started_at or full.created_at
    full.started_at = started
    summary = operation_summary(full, now=started.timestamp() + 10)
    assert summary.rate == "100 keys/s"
    assert summary.eta.startswith("ETA ")
    views: Any = fragment_views(full)
    assert views[0].vnodes == 16


def test_the_live_delta_counts_in_the_database_what_the_page_counts_from_every_step(
    op: RescaleOperation, django_assert_num_queries: Any
) -> None:
    """The delta's phase counts, placement rows and sources are counted in SQL (not from every
    step's row, 16,384 of them at scale); they say what the page says from the rows."""
    from dashboard.delta_counts import (
        DeltaCounts,
        delta_groups,
        fragment_deltas,
        source_deltas,
        step_pus,
    )
    from dashboard.operation_fragments import per_source
    from rescaler.operations.counts import StepCounts, step_counts

    report(
        op,
        {1: StepPhase.DONE, 2: StepPhase.ACQUIRING, 3: StepPhase.COLLECTING, 4: StepPhase.PENDING},
        {1: 40, 2: 7},
    )
    every = RescaleOperation.objects.prefetch_related("steps").get(pk=op.pk)
    bare = RescaleOperation.objects.get(pk=op.pk)
    changed = list(bare.steps.filter(step__in=[1, 2, 3]))
    touched = step_pus(changed)
    rows = fragment_views(every, pus=touched)
    with django_assert_num_queries(1):  # one scan of the steps, whatever their number
        figures = DeltaCounts.of_groups(delta_groups(bare, pus=touched), pus=touched)
    counted = fragment_deltas(bare, pus=touched, counted=figures)
    assert [(v.fragment, v.vnodes, v.phase_counts, v.placement) for v in counted] == [
        (v.fragment, v.vnodes, v.phase_counts, v.placement) for v in rows
    ]
    assert any(p.now != p.before for v in counted for p in v.placement)
    sources = {(s.fragment, s.source_pu) for s in changed}
    assert source_deltas(figures, only=sources) == [
        s for s in per_source(every) if (s.fragment, s.pu) in sources
    ]
    assert sum(s.done for s in source_deltas(figures, only=sources)) == 1  # step 1's
    assert step_counts(bare) == StepCounts.of_rows(every.steps.all())
    assert step_counts(bare).done == 1 and step_counts(bare).exporting == 1


def test_the_step_groups_sum_to_what_the_rows_say_whatever_pus_are_counted_apart(
    op: RescaleOperation,
) -> None:
    """``step_groups`` is the one query behind every count of an operation's steps: summed, the
    groups say what the loaded rows say (the earliest export's start among them), whichever
    PUs they count apart; a group goes through an event and back unchanged, and anything
    else in its place is refused."""
    from rescaler.operations.counts import StepCounts, StepGroup, step_groups

    report(
        op,
        {1: StepPhase.DONE, 2: StepPhase.COLLECTING, 3: StepPhase.COLLECTING},
        {1: 40, 2: 7},
    )
    RescaleStep.objects.filter(operation=op, step=2).update(
        timings={StepPhase.COLLECTING: 1_700_000_020.5}, bytes_moved=10**6
    )
    RescaleStep.objects.filter(operation=op, step=3).update(
        timings={StepPhase.COLLECTING: 1_700_000_010.25}
    )
    rows = StepCounts.of_rows(RescaleStep.objects.filter(operation=op))
    assert rows.exporting == 2 and rows.exporting_since == 1_700_000_010.25
    assert rows.bytes_surplus > 0 and rows.keys_surplus > 0
    for pus in ((), (0,), (0, 1, 2, 3), (99,)):
        groups = step_groups(op, pus=pus)
        assert StepCounts.of_groups(groups) == rows, pus
        assert {g.source_pu for g in groups} <= {None, *pus}
        assert [StepGroup.from_json(g.to_json()) for g in groups] == groups
    group = step_groups(op)[0].to_json()
    for bad in ({**group, "steps": "3"}, {**group, "vnodes": None}, {**group, "extra": 1}, []):
        with pytest.raises(ValueError):
            StepGroup.from_json(bad)


def test_a_page_s_socket_reads_the_plan_once_per_process_not_per_delta(
    op: RescaleOperation, monkeypatch: pytest.MonkeyPatch, django_assert_num_queries: Any
) -> None:
    """The plan (megabytes of mappings at 32,768 vnodes) never changes once the operation
    exists: a page's socket reads its placements when it starts watching, and no delta reads
    the plan again; what the deltas say is the same as when each read it."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from dashboard import delta_counts

    delta_counts._PLACEMENTS.clear()
    published: list[dict[str, Any]] = []
    monkeypatch.setattr(events, "publish", lambda group, kind, payload: published.append(payload))
    report(op, {1: StepPhase.COLLECTING}, {})
    report(op, {1: StepPhase.DONE, 2: StepPhase.COLLECTING}, {1: 5})
    first, second = (p for p in published if PAGE_CHANGES in p)

    def plan_reads(queries: CaptureQueriesContext) -> int:
        return sum('"plan"' in q["sql"] or "o.plan" in q["sql"] for q in queries.captured_queries)

    live._RENDERED.clear()
    fresh = [
        operation_page_delta(operation_id=op.operation_id, payload=p, shown=None)
        for p in (first, second)
    ]
    live._RENDERED.clear()
    delta_counts._PLACEMENTS.clear()
    with CaptureQueriesContext(connection) as watched:
        delta_counts.keep_planned_placements(op.operation_id)
        delta_counts.keep_planned_placements(op.operation_id)  # a second page: kept
    # the operation's key, then its plan's mappings; nothing for the second page
    assert plan_reads(watched) == 1 and len(watched.captured_queries) == 2
    with CaptureQueriesContext(connection) as deltas:
        kept = [
            operation_page_delta(operation_id=op.operation_id, payload=p, shown=None)
            for p in (first, second)
        ]
    assert plan_reads(deltas) == 0
    strip = re.compile(r'data-rendered-at="[^"]*"')
    assert [[strip.sub("", h) for h in k or []] for k in kept] == [
        [strip.sub("", h) for h in f or []] for f in fresh
    ]


def test_the_timeline_shows_the_last_events_and_says_where_the_others_are(
    client: Client, op: RescaleOperation, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 16,384-step operation records about 82,000 events: the page shows its milestones and
    its last ``TIMELINE_SHOWN`` other events (oldest first) and names where every one is; a
    live delta sends at most as many, the newest."""
    from dashboard import operation_timeline
    from rescaler.audit.services import audit_record_many

    monkeypatch.setattr(operation_timeline, "TIMELINE_SHOWN", 5)
    client.force_login(make_user("viewer"))
    page = client.get(f"/operations/{op.operation_id}/").content.decode()
    assert "operation.requested" in text(page) and 'id="timeline-earlier"' not in page

    made = audit_record_many(
        [
            {
                "actor_name": "runner",
                "action": f"step.n{n}",
                "obj": ("step", f"{op.operation_id}/{n}"),
            }
            for n in range(1, 9)
        ]
    )
    page = client.get(f"/operations/{op.operation_id}/").content.decode()
    timeline = re.search(r'<ol id="timeline".*?</ol>', page, re.S)
    assert timeline is not None
    assert re.findall(r"step\.n(\d)", timeline[0]) == ["4", "5", "6", "7", "8"]
    # the operation's own events (its milestones) stay, first as they came first
    assert text(timeline[0]).split()[1] == "operation.requested"
    assert 'class="milestone"' in timeline[0]
    earlier = re.search(r'<p [^>]*id="timeline-earlier".*?</p>', page, re.S)
    assert earlier is not None and "its last 5 other events" in text(earlier[0])
    assert f'href="/api/v1/operations/{op.operation_id}"' in earlier[0]

    html = operation_delta_html(operation=op, steps=[], events=made, waiting=None, shown=None)
    assert re.findall(r"step\.n(\d)", html[-1]) == ["4", "5", "6", "7", "8"]


def test_the_page_keeps_as_many_events_in_view_as_the_server_sends() -> None:
    """Live deltas append to the timeline; app.css hides all but its milestones and its last
    ``TIMELINE_SHOWN``."""
    from pathlib import Path

    from dashboard.operation_timeline import TIMELINE_SHOWN

    css = (Path(__file__).resolve().parents[2] / "static/dashboard/app.css").read_text()
    rule = (
        f".timeline li:nth-last-child(n+{TIMELINE_SHOWN + 1}):not(.milestone) {{ display: none; }}"
    )
    assert rule in css


def test_a_delta_keeps_its_milestones_and_its_newest_other_events(
    op: RescaleOperation, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dashboard import operation_timeline

    monkeypatch.setattr(operation_timeline, "TIMELINE_SHOWN", 2)
    made = [
        AuditEvent(action=action, object_type="step", object_id=str(n))
        for n, action in enumerate(["step.a", "operation.started", "step.b", "step.c", "step.d"])
    ]
    kept = operation_timeline.timeline_tail(made)
    assert [e.action for e in kept] == ["operation.started", "step.c", "step.d"]


def test_the_page_reads_the_plan_s_mappings_not_its_moves(op: RescaleOperation) -> None:
    """The page (and a socket's first delta) reads each fragment's mappings and PUs from the
    plan, not the plan (mostly its moves: megabytes at 16,384 of them); what it reads equals
    the plan's."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from dashboard.operation_fragments import planned_fragments
    from dashboard.operation_page import operation_for_page

    page = operation_for_page(operation_id=op.operation_id)
    assert page is not None and "plan" in page.get_deferred_fields()
    with CaptureQueriesContext(connection) as queries:
        read = planned_fragments(page)
    (query,) = queries.captured_queries
    assert "'mapping_before'" in query["sql"] and "'moves'" not in query["sql"]
    assert "plan" in page.get_deferred_fields(), "the plan itself was not loaded"
    whole = RescaleOperation.objects.get(pk=op.pk)
    assert read == planned_fragments(whole)
    (frag,) = whole.plan["fragments"].values()
    (mine,) = read.values()
    assert mine.mapping_before == frag["mapping_before"] and len(mine.mapping_after) == 16
    assert mine.pus_after == frag["parallel_units_after"]
