from django.urls import path

from dashboard import audit_page, snapshots, views

app_name = "dashboard"

urlpatterns = [
    path("", views.home, name="home"),
    path("partials/matrix", views.matrix_partial, name="matrix-partial"),
    path("partials/cluster", views.cluster_partial, name="cluster-partial"),
    path("partials/health", views.health_partial, name="health-partial"),
    path("workers/add", views.worker_add_view, name="worker-add"),
    path("workers/<str:name>/<str:action>", views.worker_action_view, name="worker-action"),
    path("pipelines/<str:name>/archive", views.pipeline_archive_view, name="pipeline-archive"),
    path(
        "pipelines/<str:name>/autoscaling",
        views.autoscaling_policy_view,
        name="autoscaling-policy",
    ),
    path(
        "pipelines/<str:name>/autoscaling/apply",
        views.autoscaling_apply_view,
        name="autoscaling-apply",
    ),
    path("rescale/", views.rescale_page, name="rescale"),
    path("operations/", views.history_page, name="history"),
    path("operations/<str:operation_id>/", views.operation_page, name="operation"),
    path(
        "operations/<str:operation_id>/cancel",
        views.operation_cancel_view,
        name="operation-cancel",
    ),
    path("audit/", audit_page.audit_page, name="audit"),
    path("snapshots/", snapshots.snapshots_page, name="snapshots"),
    path("snapshots/<str:pipeline>/", snapshots.snapshots_page, name="pipeline-snapshots"),
]
