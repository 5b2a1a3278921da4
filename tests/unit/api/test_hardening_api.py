"""Hardening of the API: no input gets a 5xx, every number is bounded, every answer under /api/
is JSON (or the CSV asked for), and the operations list exports as CSV.

Each test here first reproduced a 500, an HTML page, an accepted absurd number or a silently
ignored parameter; the fixes are the strict JSON parser (``dashboard.api.parsers``), the bounds of
``workers.rescale.protocol`` and the pagination's refusals.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from dashboard.api.csv import csv_lines
from rescaler.cluster.models import Pipeline
from rescaler.operations.models import RescaleOperation
from tests.unit.api.fixtures import FRAGMENT
from workers.rescale.protocol import (
    FRAGMENT_NAME_MAX_CHARS,
    GRANULARITY_MAXIMUMS,
    GRANULARITY_MINIMUMS,
    PARALLEL_UNIT_MAX,
)

pytestmark = pytest.mark.django_db

URL = "/api/v1/operations"


def post_raw(client: APIClient, body: str | bytes) -> Any:
    """POST a body exactly as given (the test client would re-encode a dict)."""
    return client.generic("POST", URL, body, content_type="application/json")


def assert_refused(response: Any, status: int = 400, code: str = "malformed_request") -> str:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body["code"] == code, body
    assert isinstance(body["detail"], str) and body["detail"]
    return str(body["detail"])


def change(added: Any = (2,), **extra: Any) -> dict[str, Any]:
    return {"changes": {FRAGMENT: {"added_parallel_units": list(added)}}, "dry_run": True, **extra}


# --- 1. no 5xx from any JSON ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["word\\u0000count", "\\ud800", "word\\udfffcount", "\\udc00\\ud800"],
    ids=["nul", "lone-high-surrogate", "lone-low-surrogate", "reversed-pair"],
)
def test_fragment_names_postgres_cannot_store_are_refused(
    operator_client: APIClient, cluster: Pipeline, name: str
) -> None:
    body = '{"changes": {"' + name + '": {"added_parallel_units": [2]}}}'
    assert_refused(post_raw(operator_client, body))


@pytest.mark.parametrize("field", ["reason", "strategy"])
def test_nul_and_lone_surrogates_anywhere_are_refused(
    operator_client: APIClient, cluster: Pipeline, field: str
) -> None:
    for text in ("a\\u0000b", "a\\ud800b"):
        body = (
            f'{{"changes": {{"word_count": {{"added_parallel_units": [2]}}}}, "{field}": "{text}"}}'
        )
        assert_refused(post_raw(operator_client, body))


def test_a_surrogate_pair_is_a_character_not_a_refusal(
    operator_client: APIClient, cluster: Pipeline
) -> None:
    body = json.dumps({**change(), "reason": "\U0001f680 launch"})  # escaped as a pair
    response = post_raw(operator_client, body)
    assert response.status_code == 200, response.content


@pytest.mark.parametrize("depth", [100_000, 1_000, 65])
def test_deep_nesting_is_refused(operator_client: APIClient, cluster: Pipeline, depth: int) -> None:
    detail = assert_refused(post_raw(operator_client, "[" * depth + "]" * depth))
    assert "nest" in detail


def test_nesting_a_request_needs_is_accepted(operator_client: APIClient, cluster: Pipeline) -> None:
    response = post_raw(operator_client, json.dumps(change()))
    assert response.status_code == 200, response.content


def test_duplicate_keys_are_refused(operator_client: APIClient, cluster: Pipeline) -> None:
    body = (
        '{"changes": {"word_count": {"added_parallel_units": [2]}}, "dry_run": true, '
        '"dry_run": false}'
    )
    assert "dry_run" in assert_refused(post_raw(operator_client, body))
    nested = (
        '{"changes": {"word_count": {"added_parallel_units": [2], "added_parallel_units": [3]}}}'
    )
    assert_refused(post_raw(operator_client, nested))


@pytest.mark.parametrize(
    "body", [b'{"changes": NaN}', b'{"changes": Infinity}', b'{"reason": "\xff"}', b"", b"{"]
)
def test_what_is_not_strict_json_is_refused(
    operator_client: APIClient, cluster: Pipeline, body: bytes
) -> None:
    assert_refused(post_raw(operator_client, body))


@pytest.mark.parametrize(
    "name",
    ["x" * (FRAGMENT_NAME_MAX_CHARS + 1), "word count", "word/count", "wörd", "", "a\nb", "a\tb"],
)
def test_fragment_names_outside_the_safe_set_are_refused(
    operator_client: APIClient, cluster: Pipeline, name: str
) -> None:
    body = {"changes": {name: {"added_parallel_units": [2]}}}
    assert "fragment name" in assert_refused(operator_client.post(URL, body, format="json"))


def test_a_longest_safe_fragment_name_is_merely_unknown(
    operator_client: APIClient, cluster: Pipeline
) -> None:
    body = {
        "changes": {"a-b.c_" + "x" * (FRAGMENT_NAME_MAX_CHARS - 6): {"added_parallel_units": [2]}}
    }
    assert_refused(operator_client.post(URL, body, format="json"), code="unknown_fragment")


# --- 2. every number bounded ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "granularity",
    [
        '{"bytes_per_second": 1%s}' % ("0" * 400),
        '{"bytes_per_second": 1e300}',
        '{"vnodes_per_step": 1%s}' % ("0" * 40),
        '{"steps_in_flight": 1%s}' % ("0" * 40),
        '{"max_keys_per_step": 1%s}' % ("0" * 40),
        '{"max_bytes_per_step": 1%s}' % ("0" * 40),
    ],
)
def test_huge_granularities_are_refused_not_accepted(
    operator_client: APIClient, cluster: Pipeline, granularity: str
) -> None:
    body = (
        '{"changes": {"word_count": {"added_parallel_units": [2]}}, "granularity": ' + granularity
    )
    body += "}"
    assert "at most" in assert_refused(post_raw(operator_client, body))
    assert not RescaleOperation.objects.exists()


@pytest.mark.parametrize("name", sorted(GRANULARITY_MAXIMUMS))
def test_each_granularity_bound_is_inclusive(
    operator_client: APIClient, cluster: Pipeline, name: str
) -> None:
    for value in (GRANULARITY_MINIMUMS[name], GRANULARITY_MAXIMUMS[name]):
        response = operator_client.post(URL, change(granularity={name: value}), format="json")
        assert response.status_code == 200, (name, value, response.content)
    too_many = change(granularity={name: GRANULARITY_MAXIMUMS[name] + 1})
    assert_refused(operator_client.post(URL, too_many, format="json"))


@pytest.mark.parametrize("pu", [-1, PARALLEL_UNIT_MAX + 1, 10**40])
@pytest.mark.parametrize("side", ["added_parallel_units", "removed_parallel_units"])
def test_parallel_unit_numbers_out_of_range_are_malformed(
    operator_client: APIClient, cluster: Pipeline, pu: int, side: str
) -> None:
    body = {"changes": {FRAGMENT: {side: [pu]}}}
    assert "parallel unit" in assert_refused(operator_client.post(URL, body, format="json"))


def test_a_real_request_with_huge_pacing_never_reaches_the_orchestrator(
    operator_client: APIClient, cluster: Pipeline, _no_celery: list[int]
) -> None:
    body = (
        '{"changes": {"word_count": {"added_parallel_units": [2]}}, '
        '"granularity": {"steps_in_flight": 1%s}}' % ("0" * 40)
    )
    assert_refused(post_raw(operator_client, body))
    assert _no_celery == []


def test_the_schema_publishes_the_bounds_of_the_table(viewer_client: APIClient) -> None:
    schema = viewer_client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    components = schema.json()["components"]["schemas"]
    granularity = next(
        choice
        for choice in components["OperationRequestRequest"]["properties"]["granularity"]["oneOf"]
        if choice.get("type") == "object"
    )["properties"]
    for name, most in GRANULARITY_MAXIMUMS.items():
        assert granularity[name]["maximum"] == most
        assert granularity[name]["minimum"] == GRANULARITY_MINIMUMS[name]
    pus = components["FragmentChangeRequest"]["properties"]["added_parallel_units"]["items"]
    assert (pus["minimum"], pus["maximum"]) == (0, PARALLEL_UNIT_MAX)
    changes = components["OperationRequestRequest"]["properties"]["changes"]
    assert f"1 to {FRAGMENT_NAME_MAX_CHARS} ASCII letters" in changes["description"]


# --- 3. JSON everywhere under /api/ -------------------------------------------------------------


def test_a_body_over_the_upload_limit_is_a_json_413(
    operator_client: APIClient, cluster: Pipeline, settings: Any
) -> None:
    big = json.dumps({**change(), "reason": "x" * (3 << 20)})
    assert len(big) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    assert_refused(post_raw(operator_client, big), status=413, code="request_too_large")


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/cluster",
        "/api/v1/operations/nope",
        "/api/v1/fragments/word_count/keys/apple",
        "/api/v1/",
    ],
)
def test_a_format_not_offered_is_a_json_404(viewer_client: APIClient, path: str) -> None:
    response = viewer_client.get(path, {"format": "csv"})
    assert response.status_code in (404, 406), response.content
    assert response["Content-Type"] == "application/json"
    assert response.json()["code"] in ("not_found", "not_acceptable")


def test_a_request_is_never_answered_as_csv(operator_client: APIClient, cluster: Pipeline) -> None:
    response = operator_client.post(URL + "?format=csv", change(), format="json")
    assert_refused(response, status=404, code="not_found")


def test_an_accept_header_not_offered_is_a_json_406(viewer_client: APIClient) -> None:
    response = viewer_client.get("/api/v1/cluster", HTTP_ACCEPT="text/csv")
    assert_refused(response, status=406, code="not_acceptable")


@pytest.mark.parametrize("url", [URL, "/api/v1/audit"])
@pytest.mark.parametrize("page_size", ["abc", "0", "-1", "501", "1.5", ""])
def test_bad_page_sizes_are_refused(viewer_client: APIClient, url: str, page_size: str) -> None:
    response = viewer_client.get(url, {"page_size": page_size})
    assert_refused(response, code="invalid_parameters")
    assert "page_size" in response.json()["errors"]


@pytest.mark.parametrize("page_size", ["1", "500"])
def test_page_sizes_in_range_are_taken(viewer_client: APIClient, page_size: str) -> None:
    response = viewer_client.get("/api/v1/audit", {"page_size": page_size})
    assert response.status_code == 200, response.content


# --- 4. the operations list as CSV ----------------------------------------------------------------

OPERATION_COLUMNS = [
    "operation_id", "pipeline", "fragments", "strategy", "status", "requested_by", "reason",
    "created_at", "started_at", "finished_at", "duration_s", "vnodes_moved", "keys_moved",
    "bytes_moved", "outcome", "error_code",
]  # fmt: skip


def _csv(response: Any) -> list[dict[str, str]]:
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/csv")
    assert 'filename="operations.csv"' in response["Content-Disposition"]
    text = b"".join(response.streaming_content).decode()
    reader = csv.DictReader(io.StringIO(text))
    assert reader.fieldnames == OPERATION_COLUMNS
    return list(reader)


@pytest.fixture
def operations(operator_client: APIClient, cluster: Pipeline) -> list[RescaleOperation]:
    """Three operations: two finished (one of them stop-start), one pending."""
    made = []
    for added, strategy in (([2], "live"), ([3], "stop_start"), ([2, 3], "live")):
        body = {
            "changes": {FRAGMENT: {"added_parallel_units": added}},
            "strategy": strategy,
            "reason": "=HYPERLINK(1)" if strategy == "stop_start" else "more room",
        }
        response = operator_client.post(URL, body, format="json")
        assert response.status_code == 202, response.content
        op = RescaleOperation.objects.get(operation_id=response.json()["operation_id"])
        if len(made) < 2:  # finish it, so the next one may take the fragment
            RescaleOperation.objects.filter(pk=op.pk).update(status="completed")
            op.fragment_locks.update(active=False)
        made.append(op)
    return made


def test_operations_csv_has_every_matching_operation_unpaginated(
    viewer_client: APIClient, operations: list[RescaleOperation]
) -> None:
    rows = _csv(viewer_client.get(URL, {"format": "csv", "page_size": "1"}))
    assert [r["operation_id"] for r in rows] == [op.operation_id for op in reversed(operations)]
    first = rows[-1]
    assert first["pipeline"] == "wordcount" and first["fragments"] == '["word_count"]'
    assert first["strategy"] == "live" and first["requested_by"] == "operator"
    assert first["reason"] == "more room" and first["created_at"].startswith("20")
    assert first["started_at"] == "" and first["duration_s"] == ""
    assert first["vnodes_moved"] == "0" and first["error_code"] == ""
    stop_start = _csv(viewer_client.get(URL, {"format": "csv", "strategy": "stop_start"}))
    assert [r["operation_id"] for r in stop_start] == [operations[1].operation_id]
    assert stop_start[0]["reason"] == "'=HYPERLINK(1)"  # not a formula to a spreadsheet
    pending = _csv(viewer_client.get(URL, HTTP_ACCEPT="text/csv", data={"status": "pending"}))
    assert [r["operation_id"] for r in pending] == [operations[2].operation_id]


def test_operations_csv_refusals_are_json(viewer_client: APIClient, anon: APIClient) -> None:
    assert_refused(anon.get(URL, {"format": "csv"}), status=401, code="not_authenticated")
    response = viewer_client.get(URL, {"format": "csv", "created_after": "never"})
    assert_refused(response, code="invalid_parameters")


def test_operations_csv_with_none_is_a_header(viewer_client: APIClient) -> None:
    assert _csv(viewer_client.get(URL, {"format": "csv"})) == []


def test_the_schema_offers_operations_as_csv(viewer_client: APIClient) -> None:
    schema = viewer_client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    content = schema.json()["paths"]["/api/v1/operations"]["get"]["responses"]["200"]["content"]
    assert set(content) == {"application/json", "text/csv"}


@pytest.mark.parametrize(
    ("value", "cell"),
    [
        ("=HYPERLINK(1)", "'=HYPERLINK(1)"),
        ("+1", "'+1"),
        ("-2+3", "'-2+3"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("  =1+1", "'  =1+1"),  # leading blanks that a spreadsheet may strip
        ("\t=1", "'\t=1"),
        ("\r\n=1", "'\r\n=1"),
        ("\uff1d1+1", "'\uff1d1+1"),  # a full-width equals sign
        ("more room", "more room"),
        ("a=b", "a=b"),
        (-3, "-3"),  # numbers stay raw
        (12345, "12345"),
        (-0.5, "-0.5"),
        (None, ""),
        (["-x"], '["-x"]'),
    ],
)
def test_csv_text_cells_never_start_a_formula_and_numbers_stay_raw(value: Any, cell: str) -> None:
    rows = list(csv.reader(io.StringIO("".join(csv_lines(["c"], [[value]])))))
    assert rows == [["c"], [cell]]
