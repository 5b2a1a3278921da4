"""The console in a real browser: Debian's chromium driven by Playwright against a real daphne
(HTTP and websockets) on the test database and the tests' Redis.

``playwright install`` cannot download browsers here, so the browser is the system's chromium
(``scripts/test`` installs the Debian package when it is missing); set ``CHROMIUM`` to use
another build.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection

REPO = Path(__file__).resolve().parents[2]
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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _test_database_url() -> str:
    server = urlsplit(str(settings.DATABASE_URL))
    name = connection.settings_dict["NAME"]
    return urlunsplit((server.scheme, server.netloc, f"/{name}", server.query, ""))


@pytest.fixture
def live_url(transactional_db: None, redis_service: str, tmp_path: Path) -> Iterator[str]:
    """A daphne serving the project on a free port, on this test's database."""
    port = _free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "rescaler.settings.test",
        "DATABASE_URL": _test_database_url(),
        "TEST_REDIS_URL": str(settings.REDIS_URL),
        "STATE_DIR": str(tmp_path / "state"),
    }
    log = open(tmp_path / "daphne.log", "wb")  # noqa: SIM115 - the child owns it
    proc = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
         "rescaler.asgi:application"],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{url}/accounts/login/", timeout=2)
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"daphne did not start:\n{(tmp_path / 'daphne.log').read_text()}")
            time.sleep(0.3)
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


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


def sign_in(browser: Any, live_url: str, username: str, *, perms: tuple[str, ...] = ()) -> Any:
    """A page signed in as a new user (with the given permission codenames)."""
    from django.contrib.auth.models import Permission

    user = get_user_model().objects.create_user(username, password=f"pw-{username}")
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(codename=codename))
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
