"""The cluster page's matrix as of the past (``?as_of=``, ``?fragment=&version=``): the banner,
the matrix of the version then in effect, no live re-reads, the steps to the kept versions on
either side, the refusals; and the operation page's links to its before and after."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.test import Client

from tests.unit.api.fixtures import (
    FRAGMENT,
    PIPELINE,
    PlacementHistory,
    make_user,
    placement_history,
)

pytestmark = pytest.mark.django_db

MINUTE = dt.timedelta(minutes=1)


@pytest.fixture
def history(monkeypatch: pytest.MonkeyPatch) -> PlacementHistory:
    monkeypatch.setattr("rescaler.operations.enqueue.operation_drive_enqueue", lambda pk: None)
    return placement_history()


@pytest.fixture
def signed_in(client: Client) -> Client:
    client.force_login(make_user("viewer"))
    return client


def text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def cells(html: str) -> dict[int, int]:
    """PU -> vnodes of word_count's cells in the rendered matrix."""
    return {
        int(pu): int(value)
        for pu, value in re.findall(
            r'data-fragment="word_count" data-column="pu-\d+" data-pu="(\d+)"[^>]*>(\d+)</a>', html
        )
    }


def test_a_past_version_is_its_matrix_with_a_banner_and_steps(
    signed_in: Client, history: PlacementHistory
) -> None:
    response = signed_in.get("/", {"pipeline": PIPELINE, "fragment": FRAGMENT, "version": 2})
    assert response.status_code == 200
    html = response.content.decode()
    assert cells(html) == {0: 4, 1: 8, 2: 4}, "v2: PU 2 has vnodes 0–3, PU 3 none yet"
    banner = text(html[html.index('id="past-placement"') : html.index('id="as-of-form"')])
    assert "A past placement" in banner and "word_count at mapping v2" in banner
    assert history.recorded[2].strftime("%Y-%m-%d %H:%M:%S") in banner
    assert f"operation {history.operation_id}" in banner
    assert f'href="/operations/{history.operation_id}/"' in html
    assert 'id="back-to-live" href="/"' in html
    kept = signed_in.get("/", {"metric": "keys", "fragment": FRAGMENT, "version": 2}).content
    assert 'id="back-to-live" href="/?metric=keys"' in kept.decode(), "what else was asked stays"
    assert "version=1" in re.search(r'class="previous"[^>]*href="([^"]+)"', html).group(1)  # type: ignore[union-attr]
    assert "version=3" in re.search(r'class="next"[^>]*href="([^"]+)"', html).group(1)  # type: ignore[union-attr]
    # nothing re-reads it: no socket, no periodic re-read of the live part
    assert "ws-connect" not in html
    assert 'id="cluster-live" data-past="true"' in html and "from:#cluster-page" not in html
    assert "a past placement: not live" in html
    # only vnodes: no other metric is offered for the past
    assert "metric=keys" not in html


def test_stepping_past_the_gap_and_to_the_newest(
    signed_in: Client, history: PlacementHistory
) -> None:
    html = signed_in.get("/", {"fragment": FRAGMENT, "version": 5}).content.decode()
    assert cells(html) == {0: 6, 1: 2, 2: 4, 3: 4}
    assert "version=3" in re.search(r'class="previous"[^>]*href="([^"]+)"', html).group(1)  # type: ignore[union-attr]
    assert 'class="next"' not in html and "newest" in html
    assert "in effect now" in text(html) and "no operation" in text(html)


def test_an_instant_between_versions_shows_the_older_one(
    signed_in: Client, history: PlacementHistory
) -> None:
    at = (history.recorded[3] + 5 * MINUTE).isoformat()
    response = signed_in.get("/", {"as_of": at})
    assert response.status_code == 200
    html = response.content.decode()
    assert cells(html) == {0: 4, 1: 4, 2: 4, 3: 4}
    assert 'value="' + at + '"' in html.replace("&#x2B;", "+"), "the form keeps what was asked"
    assert "mapping v3" in text(html)


def test_before_the_first_version_the_banner_says_since_when(
    signed_in: Client, history: PlacementHistory
) -> None:
    html = signed_in.get("/", {"as_of": (history.recorded[1] - MINUTE).isoformat()}).content
    page = text(html.decode())
    assert "No mapping version had taken effect by then" in page
    assert history.recorded[1].strftime("%Y-%m-%d %H:%M:%S") in page
    assert cells(html.decode()) == {}
    assert "version=1" in re.search(r'class="next"[^>]*href="([^"]+)"', html.decode()).group(1)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ({"as_of": "yesterday"}, "is not a time"),
        ({"as_of": "2026-13-40T10:00"}, "is not a time"),
        ({"fragment": FRAGMENT, "version": "4"}, "no kept mapping version 4; kept: 1–3, 5"),
        ({"fragment": FRAGMENT, "version": "x"}, "a whole number"),
        ({"fragment": "nope", "version": "1"}, "no stateful fragment 'nope'"),
    ],
)
def test_a_past_that_cannot_be_shown_is_said_over_the_live_matrix(
    signed_in: Client, history: PlacementHistory, query: dict[str, str], said: str
) -> None:
    response = signed_in.get("/", query)
    assert response.status_code == 400
    html = response.content.decode()
    assert said in text(html).replace("&#x27;", "'")
    assert cells(html) == {0: 6, 1: 2, 2: 4, 3: 4}, "the live placement (v5)"
    assert "ws-connect" in html


def test_the_live_part_re_read_alone_stays_in_the_past(
    signed_in: Client, history: PlacementHistory
) -> None:
    html = signed_in.get("/partials/cluster", {"fragment": FRAGMENT, "version": 1}).content.decode()
    assert cells(html) == {0: 8, 1: 8} and "hx-trigger" not in html, "never re-read again"


def test_the_live_page_offers_the_form_and_no_banner(
    signed_in: Client, history: PlacementHistory
) -> None:
    html = signed_in.get("/").content.decode()
    assert 'id="as-of-form"' in html and 'id="past-placement"' not in html
    assert "from:#cluster-page" in html and "ws-connect" in html


def test_the_operation_page_links_its_before_and_after(
    signed_in: Client, history: PlacementHistory
) -> None:
    html = signed_in.get(f"/operations/{history.operation_id}/").content.decode()
    before = re.search(r'class="placement-before" href="([^"]+)"', html)
    after = re.search(r'class="placement-after" href="([^"]+)"', html)
    assert before and after
    assert before.group(1).replace("&amp;", "&") == (
        f"/?pipeline={PIPELINE}&fragment={FRAGMENT}&version=1"
    )
    assert after.group(1).replace("&amp;", "&").endswith("&version=3")
    assert cells(signed_in.get(after.group(1).replace("&amp;", "&")).content.decode()) == {
        0: 4, 1: 4, 2: 4, 3: 4,
    }  # fmt: skip
