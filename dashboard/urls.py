from django.urls import path

from dashboard import audit_page, snapshots
from dashboard.views import cluster, history, operation, pipeline_actions, rescale, worker_actions

app_name = "dashboard"

urlpatterns = [
    path("", cluster.home, name="home"),
    path("partials/matrix", cluster.matrix_partial, name="matrix-partial"),
    path("partials/cluster", cluster.cluster_partial, name="cluster-partial"),
    path("partials/health", cluster.health_partial, name="health-partial"),
    path("workers/add", worker_actions.worker_add_view, name="worker-add"),
    path(
        "workers/<str:name>/<str:action>", worker_actions.worker_action_view, name="worker-action"
    ),
    path(
        "pipelines/<str:name>/archive",
        pipeline_actions.pipeline_archive_view,
        name="pipeline-archive",
    ),
    path(
        "pipelines/<str:name>/autoscaling",
        pipeline_actions.autoscaling_policy_view,
        name="autoscaling-policy",
    ),
    path(
        "pipelines/<str:name>/autoscaling/apply",
        pipeline_actions.autoscaling_apply_view,
        name="autoscaling-apply",
    ),
    path("rescale/", rescale.rescale_page, name="rescale"),
    path("operations/", history.history_page, name="history"),
    path("operations/<str:operation_id>/", operation.operation_page, name="operation"),
    path(
        "operations/<str:operation_id>/cancel",
        operation.operation_cancel_view,
        name="operation-cancel",
    ),
    path("audit/", audit_page.audit_page, name="audit"),
    path("snapshots/", snapshots.snapshots_page, name="snapshots"),
    path("snapshots/<str:pipeline>/", snapshots.snapshots_page, name="pipeline-snapshots"),
]
