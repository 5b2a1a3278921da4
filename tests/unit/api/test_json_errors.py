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
