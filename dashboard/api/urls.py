"""The REST API, mounted at /api/v1/ (docs/api.md)."""

from django.urls import path

from dashboard.api import views

app_name = "api"

urlpatterns = [
    path("", views.api_root, name="root"),
    path("cluster", views.ClusterView.as_view(), name="cluster"),
    path("reschedules", views.RescheduleListView.as_view(), name="reschedules"),
    path("reschedules/<str:uid>", views.RescheduleDetailView.as_view(), name="reschedule-detail"),
    path(
        "reschedules/<str:uid>/cancel",
        views.RescheduleCancelView.as_view(),
        name="reschedule-cancel",
    ),
    path(
        "fragments/<str:fragment>/keys/<path:key>",
        views.FragmentKeyView.as_view(),
        name="fragment-key",
    ),
    path("audit", views.AuditListView.as_view(), name="audit"),
]
