"""The REST API, mounted at /api/v1/ (docs/api.md)."""

from django.urls import path

from dashboard.api import views

app_name = "api"

urlpatterns = [
    path("", views.api_root, name="root"),
    path("cluster", views.ClusterView.as_view(), name="cluster"),
    path("operations", views.OperationListView.as_view(), name="operations"),
    path(
        "operations/<str:operation_id>",
        views.OperationDetailView.as_view(),
        name="operation-detail",
    ),
    path(
        "operations/<str:operation_id>/cancel",
        views.OperationCancelView.as_view(),
        name="operation-cancel",
    ),
    path(
        "fragments/<str:fragment>/keys/<path:key>",
        views.FragmentKeyView.as_view(),
        name="fragment-key",
    ),
    path("audit", views.AuditListView.as_view(), name="audit"),
]
