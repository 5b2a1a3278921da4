"""The REST API, mounted at /api/v1/ (docs/api.md)."""

from django.urls import path

from dashboard.api import autoscaling, decisions, snapshots
from dashboard.api.views import cluster, keys, operations, root, workers

app_name = "api"

urlpatterns = [
    path("", root.api_root, name="root"),
    path("cluster", cluster.ClusterView.as_view(), name="cluster"),
    path("operations", operations.OperationListView.as_view(), name="operations"),
    path(
        "operations/<str:operation_id>",
        operations.OperationDetailView.as_view(),
        name="operation-detail",
    ),
    path(
        "operations/<str:operation_id>/cancel",
        operations.OperationCancelView.as_view(),
        name="operation-cancel",
    ),
    path(
        "fragments/<str:fragment>/keys/<path:key>",
        keys.FragmentKeyView.as_view(),
        name="fragment-key",
    ),
    path("audit", operations.AuditListView.as_view(), name="audit"),
    path("workers", workers.WorkerListView.as_view(), name="workers"),
    path("workers/<str:name>/cordon", workers.WorkerCordonView.as_view(), name="worker-cordon"),
    path(
        "workers/<str:name>/uncordon", workers.WorkerUncordonView.as_view(), name="worker-uncordon"
    ),
    path("workers/<str:name>/notice", workers.WorkerNoticeView.as_view(), name="worker-notice"),
    path("workers/<str:name>/drain", workers.WorkerDrainView.as_view(), name="worker-drain"),
    path(
        "pipelines/<str:name>/snapshots",
        snapshots.PipelineSnapshotsView.as_view(),
        name="pipeline-snapshots",
    ),
    path(
        "pipelines/<str:name>/autoscaling",
        autoscaling.AutoscalingPolicyView.as_view(),
        name="pipeline-autoscaling",
    ),
    path(
        "pipelines/<str:name>/autoscaling/decisions",
        decisions.DecisionListView.as_view(),
        name="pipeline-autoscaling-decisions",
    ),
    path(
        "pipelines/<str:name>/recommendation",
        autoscaling.RecommendationView.as_view(),
        name="pipeline-recommendation",
    ),
    path(
        "pipelines/<str:name>/recommendation/workers",
        decisions.RecommendationWorkersView.as_view(),
        name="pipeline-recommendation-workers",
    ),
]
