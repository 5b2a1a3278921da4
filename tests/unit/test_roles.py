"""The roles shipped as groups (``rescaler/operations/roles.py``): the migration makes them,
and every URL of the console and the API answers each role as docs/console.md says. The URLs
are walked from the urlconf, so a new page or endpoint fails here until it is given its rule.

viewer: every read, no change (403, nothing recorded); operator: rescale, cancel, snapshots,
workers (each reaches its service, whose answer is the status expected); admin: an operator
who also manages users in the admin site.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from rescaler.audit.models import AuditEvent
from rescaler.cluster.models import Pipeline
from rescaler.operations.models import RescaleOperation
from rescaler.operations.requests import operation_request
from rescaler.operations.roles import ADMIN, OPERATOR, ROLES, VIEWER, role_grant, roles_ensure
from tests.unit.api.fixtures import PIPELINE, make_user, register_cluster, request_body

pytestmark = pytest.mark.django_db


def _grants(role: str) -> set[str]:
    return {
        f"{app}.{codename}"
        for app, codename in Group.objects.get(name=role).permissions.values_list(
            "content_type__app_label", "codename"
        )
    }


def test_the_migration_makes_the_three_groups_and_running_it_again_changes_nothing() -> None:
    executor = MigrationExecutor(connection)
    executor.migrate([("operations", "0012_step_key_range")])  # back: the groups go
    assert not Group.objects.filter(name__in=ROLES).exists()
    executor = MigrationExecutor(connection)
    executor.migrate([("operations", "0013_roles")])
    viewer, operator, admin = (_grants(role) for role in ROLES)
    assert "audit.view_auditevent" in viewer and "operations.view_rescaleoperation" in viewer
    assert "cluster.view_worker" in viewer
    assert all(p.split(".")[1].startswith("view_") for p in viewer)
    assert operator == viewer | {"operations.rescale"}
    assert {"auth.add_user", "auth.change_user", "auth.delete_user", "auth.change_group"} < admin
    assert "authtoken.add_tokenproxy" in admin and operator < admin
    assert not any(p.startswith("auth.") for p in operator)
    # by hand, an extra permission; ensured again, each group has the same and keeps it
    extra = Permission.objects.get(codename="view_session")
    Group.objects.get(name=VIEWER).permissions.add(extra)
    roles_ensure()
    assert _grants(VIEWER) == viewer | {"sessions.view_session"}
    assert (_grants(OPERATOR), _grants(ADMIN)) == (operator, admin)
    assert Group.objects.filter(name__in=ROLES).count() == 3


def test_role_grant_gives_the_group_and_an_admin_the_staff_status() -> None:
    user = make_user("someone")
    role_grant(user=user, role=OPERATOR)
    user.refresh_from_db()
    assert [g.name for g in user.groups.all()] == [OPERATOR] and not user.is_staff
    assert user.has_perm("operations.rescale") and not user.has_perm("auth.add_user")
    role_grant(user=user, role=ADMIN)
    user = get_user_model().objects.get(pk=user.pk)
    assert user.is_staff and user.has_perm("auth.add_user")
    with pytest.raises(ValueError, match="no role 'root'"):
        role_grant(user=user, role="root")


def test_manage_py_role_grant() -> None:
    make_user("carol")
    out = io.StringIO()
    call_command("role_grant", "carol", "admin", stdout=out)
    carol = get_user_model().objects.get(username="carol")
    assert carol.is_staff and carol.groups.get().name == ADMIN
    assert "carol is now in the group 'admin'" in out.getvalue()
    with pytest.raises(CommandError, match="no user named 'nobody'"):
        call_command("role_grant", "nobody", "viewer")


# -- every URL × every role ----------------------------------------------------------------------
@dataclass(frozen=True)
class Call:
    """One request to a URL name: a read answers every role ``read``; a change refuses a
    viewer (403) and answers an operator and an admin ``done`` (their service's answer)."""

    method: str = "get"
    kwargs: dict[str, str] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    read: int | tuple[int, ...] = 200
    done: int | None = None  # None: a read, the same for every role
    admin_only: bool = False  # a change an operator is refused too (an autoscaling policy)

    def expected(self, role: str) -> tuple[int, ...]:
        if self.done is None:
            return self.read if isinstance(self.read, tuple) else (self.read,)
        refused = (VIEWER, OPERATOR) if self.admin_only else (VIEWER,)
        return (403,) if role in refused else (self.done,)


OP = "<operation>"  # the pending operation's id, filled in by the test
WORKER = {"name": "local-0"}
PIPE = {"pipeline": PIPELINE}
DRY_RUN = {"changes": {"word_count": {"added_parallel_units": [3]}}, "dry_run": True}

# every named URL but the admin site's (tested below); a URL name may have several calls
ROUTES: dict[str, tuple[Call, ...]] = {
    # outside the console: public or about signing in, the same for every role
    "healthz": (Call(read=(200, 503)),),
    "metrics": (Call(),),
    "favicon": (Call(read=302),),
    "login": (Call(),),
    "logout": (Call(method="post", read=302),),
    "schema": (Call(),),
    "swagger-ui": (Call(),),
    "redoc": (Call(),),
    "api-not-found": (Call(kwargs={"unmatched": "nothing"}, read=404),),
    # the console's pages: read by every role
    "dashboard:home": (Call(),),
    "dashboard:matrix-partial": (Call(),),
    "dashboard:cluster-partial": (Call(),),
    "dashboard:health-partial": (Call(),),
    "dashboard:history": (Call(),),
    "dashboard:audit": (Call(),),
    "dashboard:operation": (Call(kwargs={"operation_id": OP}),),
    "dashboard:snapshots": (Call(), Call(method="post", data={"reason": "r"}, done=302)),
    "dashboard:pipeline-snapshots": (
        Call(kwargs=PIPE),
        Call(method="post", kwargs=PIPE, data={"reason": "r"}, done=302),
    ),
    # the console's changes: operators and admins only
    "dashboard:rescale": (Call(), Call(method="post", done=400)),  # the form's refusal
    "dashboard:operation-cancel": (
        Call(method="post", kwargs={"operation_id": OP}, data={"confirm": "on"}, done=302),
    ),
    "dashboard:worker-add": (Call(method="post", data={"cores": 1}, done=400),),  # no provider
    "dashboard:worker-action": (
        Call(method="post", kwargs={**WORKER, "action": "cordon"}, done=302),
        Call(method="post", kwargs={**WORKER, "action": "uncordon"}, done=302),
        Call(
            method="post",
            kwargs={**WORKER, "action": "drain"},
            data={"reason": "r", "confirm": "on"},
            done=400,  # the service's refusal: word_count runs only on local-0
        ),
    ),
    # refused: the pipeline is running; the refusal is a message on the cluster page
    "dashboard:pipeline-archive": (Call(method="post", kwargs={"name": PIPELINE}, done=302),),
    # a policy is an admin's (in auto mode it starts rescales); applying its plan, an operator's
    "dashboard:autoscaling-policy": (
        Call(
            method="post",
            kwargs={"name": PIPELINE},
            data={"mode": "off"},
            done=400,
            admin_only=True,
        ),
    ),
    "dashboard:autoscaling-apply": (  # no plan is bound: the refusal is a message on the page
        Call(method="post", kwargs={"name": PIPELINE}, data={"plan_id": "nothing"}, done=302),
    ),
    # the API's reads
    "api:root": (Call(),),
    "api:cluster": (Call(),),
    "api:operation-detail": (Call(kwargs={"operation_id": OP}),),
    "api:fragment-key": (Call(kwargs={"fragment": "word_count", "key": "a"}),),
    "api:audit": (Call(),),
    # the API's changes
    "api:operations": (
        Call(),
        Call(method="post", data=request_body(added_parallel_units=[3]), done=409),
        Call(method="post", data=DRY_RUN, done=409),  # word_count is busy
    ),
    "api:operation-cancel": (Call(method="post", kwargs={"operation_id": OP}, done=202),),
    "api:workers": (Call(), Call(method="post", data={"cores": 1}, done=409)),
    "api:worker-cordon": (Call(method="post", kwargs=WORKER, done=200),),
    "api:worker-uncordon": (Call(method="post", kwargs=WORKER, done=200),),
    "api:worker-notice": (Call(method="post", kwargs=WORKER, done=202),),
    "api:worker-drain": (Call(method="post", kwargs=WORKER, done=409),),
    "api:pipeline-recommendation": (Call(kwargs={"name": PIPELINE}),),
    # an operator's apply of a recommendation short of PUs; here nothing is short
    "api:pipeline-recommendation-workers": (
        Call(method="post", kwargs={"name": PIPELINE}, done=409),
    ),
    "api:pipeline-autoscaling-decisions": (Call(kwargs={"name": PIPELINE}),),
    "api:pipeline-autoscaling": (
        Call(kwargs={"name": PIPELINE}),
        Call(
            method="put", kwargs={"name": PIPELINE}, data={"mode": "off"}, done=200, admin_only=True
        ),
    ),
    "api:pipeline-snapshots": (
        Call(kwargs={"name": PIPELINE}),
        Call(method="post", kwargs={"name": PIPELINE}, data={"reason": "r"}, done=202),
    ),
}


def url_names(patterns: list[Any] | None = None, namespace: str = "") -> Iterator[str]:
    """Every URL name of the urlconf, with its namespace; an unnamed pattern by its route (so
    it cannot be missed either). The admin site's are left out."""
    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(pattern, URLResolver):
            if pattern.namespace == "admin":
                continue
            inner = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
            yield from url_names(pattern.url_patterns, inner)
        else:
            assert isinstance(pattern, URLPattern)
            yield namespace + (pattern.name or str(pattern.pattern))


def test_every_url_of_the_console_and_the_api_has_its_rule() -> None:
    names = list(url_names())
    assert len(names) == len(set(names))
    assert set(names) == set(ROUTES), "a URL without its rule here (or a rule without its URL)"


CASES = [
    pytest.param(name, i, id=f"{call.method}-{name}-{i}")
    for name, calls in ROUTES.items()
    for i, call in enumerate(calls)
]


@pytest.fixture
def pending(monkeypatch: pytest.MonkeyPatch) -> RescaleOperation:
    monkeypatch.setattr("rescaler.operations.enqueue.operation_drive_enqueue", lambda pk: None)
    monkeypatch.setenv("RESCALER_WORKER_PROVIDER", "none")
    register_cluster()
    op = operation_request(
        user=make_user("requester", rescale=True), body=request_body(added_parallel_units=[2])
    )
    assert isinstance(op, RescaleOperation)
    return op


def client_of(role: str) -> Client:
    user = make_user(f"a-{role}")
    role_grant(user=user, role=role)
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize(("name", "index"), CASES)
def test_each_role_is_answered_as_documented(
    pending: RescaleOperation, name: str, index: int, settings: Any, tmp_path: Any
) -> None:
    """Each role in turn, each undone after (a savepoint): the same cluster for all three."""
    settings.STATE_DIR = tmp_path / "state"
    call = ROUTES[name][index]
    kwargs = {k: pending.operation_id if v == OP else v for k, v in call.kwargs.items()}
    url = reverse(name, kwargs=kwargs)
    for role in ROLES:
        with transaction.atomic():
            client = client_of(role)
            events = AuditEvent.objects.count()
            send: Callable[..., Any] = getattr(client, call.method)
            if name.startswith("api:") and call.method in ("post", "put"):
                response = send(url, call.data, content_type="application/json")
            else:
                response = send(url, call.data)
            assert response.status_code in call.expected(role), (
                f"{role} {call.method.upper()} {url}: {response.status_code} "
                f"{response.content[:500]!r}"
            )
            if call.done is not None and 403 in call.expected(role):
                assert AuditEvent.objects.count() == events, "a refused change recorded something"
                assert Pipeline.objects.get(name=PIPELINE).archived_at is None
            transaction.set_rollback(True)


# -- the admin site: users are an admin's --------------------------------------------------------
@pytest.mark.parametrize(
    ("role", "users", "audit"), [(VIEWER, 403, 200), (OPERATOR, 403, 200), (ADMIN, 200, 200)]
)
def test_only_an_admin_manages_users_in_the_admin_site(role: str, users: int, audit: int) -> None:
    client = client_of(role)
    user = get_user_model().objects.get(username=f"a-{role}")
    user.is_staff = True  # the admin site needs it: only an admin's role gives it
    user.save()
    assert client.get("/admin/auth/user/").status_code == users
    assert client.get("/admin/audit/auditevent/").status_code == audit
    added = client.post(
        "/admin/auth/user/add/",
        {"username": "newcomer", "password1": "a-long-pass-9", "password2": "a-long-pass-9",
         "usable_password": "true"},
    )  # fmt: skip
    assert added.status_code == (302 if role == ADMIN else 403)
    assert get_user_model().objects.filter(username="newcomer").exists() == (role == ADMIN)


# -- what each role is offered ------------------------------------------------------------------
class _Forms(HTMLParser):
    """The page's POST forms (their ``action``) and whether each has a submit it may press."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: dict[str, bool] = {}
        self._action: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = dict(attrs)
        if tag == "form" and (attr.get("method") or "").lower() == "post":
            self._action = attr.get("action") or ""
            self.forms.setdefault(self._action, False)
        elif tag == "button" and self._action is not None and "disabled" not in attr:
            self.forms[self._action] |= attr.get("type", "submit") == "submit"

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._action = None


def offered(client: Client, url: str) -> set[str]:
    """Where the page's POST forms that can be submitted go, but signing out."""
    response = client.get(url)
    assert response.status_code == 200, url
    forms = _Forms()
    forms.feed(response.content.decode())
    return {action for action, live in forms.forms.items() if live} - {reverse("logout")}


def test_a_viewer_is_offered_no_change_and_an_operator_every_one(
    pending: RescaleOperation,
) -> None:
    pages = {
        "cluster": reverse("dashboard:home"),
        "rescale": reverse("dashboard:rescale"),
        "operation": reverse("dashboard:operation", kwargs={"operation_id": pending.operation_id}),
        "snapshots": reverse("dashboard:pipeline-snapshots", kwargs=PIPE),
        "history": reverse("dashboard:history"),
        "audit": reverse("dashboard:audit"),
    }
    viewer = client_of(VIEWER)
    assert {name: offered(viewer, url) for name, url in pages.items()} == {
        name: set() for name in pages
    }
    operator = client_of(OPERATOR)
    cancel = reverse("dashboard:operation-cancel", kwargs={"operation_id": pending.operation_id})
    assert reverse("dashboard:worker-add") in offered(operator, pages["cluster"])
    assert offered(operator, pages["rescale"]) == {pages["rescale"]}
    assert offered(operator, pages["operation"]) == {cancel}
    assert offered(operator, pages["snapshots"]) <= {"", pages["snapshots"]}
    assert offered(operator, pages["snapshots"])
