"""The console in a real browser: Debian's chromium driven by Playwright against a real daphne
(HTTP and websockets) on the test database and the tests' Redis.

``playwright install`` cannot download browsers here, so the browser is the system's chromium
(``scripts/test`` installs the Debian package when it is missing); set ``CHROMIUM`` to use
another build.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from tests.integration.stack import REPO, Processes

SCREENSHOTS = REPO / "var" / "e2e"


def chromium_path() -> str:
    path = (
        os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    )
    if not path:
        pytest.fail(
            "chromium is not installed: apt-get install -y chromium (scripts/test does it), "
            "or set CHROMIUM to a Chromium binary",
            pytrace=False,
        )
    return path


@pytest.fixture
def live_url(processes: Processes) -> str:
    """daphne serving the project on a free port, on this test's database (the real stack's
    other processes, the runner and Celery, are started by the tests that need them)."""
    return processes.web()


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; the test's own ORM calls are
    # plain synchronous code all the same (Django's guard cannot tell the two apart)
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(
            executable_path=chromium_path(),
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        try:
            yield instance
        finally:
            instance.close()


def sign_in(
    browser: Any,
    live_url: str,
    username: str,
    *,
    perms: tuple[str, ...] = (),
    role: str | None = None,
) -> Any:
    """A page signed in as a new user (with the given permission codenames, or in the group of
    a role: ``rescaler/operations/roles.py``)."""
    from django.contrib.auth.models import Permission

    from rescaler.operations.roles import role_grant

    user = get_user_model().objects.create_user(username, password=f"pw-{username}")
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    if role is not None:
        # the test database is emptied after each browser test, the migration's groups too:
        # role_grant makes them again, as the migration does
        role_grant(user=user, role=role)
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(f"{live_url}/accounts/login/?next=/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(f"pw-{username}")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{live_url}/")
    return page


def screenshot(page: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
