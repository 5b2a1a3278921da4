"""Errors raised before any view (no URL matches) are JSON under /api/, pages elsewhere."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "path",
    ["/api/v1/nowhere", "/api/v1/fragments/word_count/keys/a%0Ab", "/api/v2/cluster"],
)
def test_paths_that_match_nothing_under_api_answer_json(viewer_client: Any, path: str) -> None:
    response = viewer_client.get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["code"] == "not_found"


def test_pages_outside_api_keep_html_404s(viewer_client: Any) -> None:
    response = viewer_client.get("/nowhere/")
    assert response.status_code == 404 and response["Content-Type"].startswith("text/html")


@pytest.mark.parametrize(
    "path", ["/api/v1/nowhere", "/api/v1/fragments/word_count/keys/a%0Ab", "/api/nothing"]
)
def test_paths_under_api_answer_json_with_debug_on_too(
    viewer_client: Any, settings: Any, path: str
) -> None:
    """With DEBUG on (settings.local), Django answers an unmatched path with its HTML debug page
    and never calls handler404: the API's last pattern answers it instead."""
    settings.DEBUG = True
    response = viewer_client.get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {
        "code": "not_found",
        "detail": f"no API endpoint at {response.wsgi_request.path!r}; see /api/v1/",
    }


def test_an_api_path_lacking_only_its_slash_is_redirected_to_it(viewer_client: Any) -> None:
    response = viewer_client.get("/api/v1", {"format": "json"})
    assert response.status_code == 301
    assert response["Location"] == "/api/v1/?format=json"
    assert viewer_client.get("/api/v1/cluster/").status_code == 404  # no slash added twice
