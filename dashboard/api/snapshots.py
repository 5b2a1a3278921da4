"""``/api/v1/pipelines/<name>/snapshots``: a pipeline's snapshots, last restore and last
rebuild, and "Snapshot now" (docs/api.md, "Snapshots"). The view validates, calls one service of
``rescaler.cluster.snapshots`` and serializes what it returns."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dashboard.api.errors import error_responses, pipeline_name
from dashboard.api.parsers import StrictJSONParser
from dashboard.api.permissions import RESCALE_PERMISSION, CanRescale
from rescaler.cluster import snapshots as snapshot_services
from workers.rescale import errors
from workers.rescale.protocol import REASON_MAX_CHARS


class CanSnapshot(CanRescale):
    """Asking for a snapshot needs what a rescale needs: ``operations.rescale``."""

    message = f"taking a snapshot needs the {RESCALE_PERMISSION} permission"


# -- what the API reads --------------------------------------------------------------------------
class SnapshotSerializer(serializers.Serializer):
    snapshot_id = serializers.CharField(
        help_text="s<UTC time>-e<epoch>: ids sort in the order the snapshots were taken."
    )
    epoch = serializers.IntegerField(help_text="The state is as of this epoch's commit.")
    taken_at = serializers.DateTimeField(help_text="When the barrier copied the stores.")
    age_s = serializers.FloatField(help_text="Seconds since taken_at.")
    duration_s = serializers.FloatField(help_text="From the barrier to the manifest.")
    trigger = serializers.CharField(help_text="periodic, rescale, manual or stop-start.")
    requested_by = serializers.CharField(
        help_text="Who asked (manual), rescaler (periodic), or the operation's requester."
    )
    partitions = serializers.IntegerField(help_text="Recovery partitions P.")
    keys = serializers.IntegerField()
    bytes = serializers.IntegerField()
    fragments = serializers.ListField(child=serializers.CharField())
    executors = serializers.ListField(
        child=serializers.CharField(), help_text="Spark executors the snapshot's tasks ran on."
    )


class RestoreTaskSerializer(serializers.Serializer):
    parallel_unit = serializers.IntegerField(help_text="The target PU the task filled.")
    executor = serializers.CharField()
    host = serializers.CharField()
    keys = serializers.IntegerField()
    bytes = serializers.IntegerField()
    seconds = serializers.FloatField()


class RestoreSerializer(serializers.Serializer):
    snapshot_id = serializers.CharField()
    epoch = serializers.IntegerField()
    restored_at = serializers.DateTimeField()
    restored_by = serializers.CharField(
        help_text="RESCALER_ACTOR of the restoring runner, else its OS user."
    )
    parallel_units = serializers.ListField(
        child=serializers.IntegerField(), help_text="The PUs the state was restored onto."
    )
    keys = serializers.IntegerField()
    bytes = serializers.IntegerField()
    seconds = serializers.FloatField(help_text="The slowest restore task's time.")
    tasks = RestoreTaskSerializer(many=True)


class LostStoreSerializer(serializers.Serializer):
    fragment = serializers.CharField()
    parallel_unit = serializers.IntegerField()
    status = serializers.CharField(help_text="missing, corrupt or behind.")
    detail = serializers.CharField(help_text="What the store check found.")


class RebuildSerializer(serializers.Serializer):
    snapshot_id = serializers.CharField(
        help_text="The snapshot the lost stores were refilled from."
    )
    snapshot_epoch = serializers.IntegerField()
    epoch = serializers.IntegerField(help_text="The epoch the stores were brought back to.")
    rebuilt_at = serializers.DateTimeField()
    rerun_epochs = serializers.ListField(
        child=serializers.IntegerField(), help_text="Epochs re-run from their logged offsets."
    )
    lost = LostStoreSerializer(many=True)
    keys = serializers.IntegerField(help_text="Keys refilled from the snapshot.")
    seconds = serializers.FloatField(help_text="The whole rebuild, re-runs included.")
    tasks = RestoreTaskSerializer(
        many=True, help_text="One refill task per PU with a lost store, and where it ran."
    )


class RestoreTaskProgressSerializer(serializers.Serializer):
    parallel_unit = serializers.IntegerField()
    executor = serializers.CharField()
    host = serializers.CharField()
    keys = serializers.IntegerField()
    keys_total = serializers.IntegerField()
    done = serializers.BooleanField()


class RestoreProgressSerializer(serializers.Serializer):
    snapshot_id = serializers.CharField()
    keys = serializers.IntegerField(help_text="Keys restored so far.")
    keys_total = serializers.IntegerField(help_text="The snapshot's keys.")
    percent = serializers.IntegerField()
    tasks = RestoreTaskProgressSerializer(many=True)


class SnapshotRequestSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    requested_by = serializers.CharField()
    reason = serializers.CharField()
    command = serializers.IntegerField(allow_null=True, help_text="The runner command's id.")
    status = serializers.CharField(
        help_text="The command's: pending (not taken yet), done, failed; empty if it is gone."
    )
    detail = serializers.CharField(help_text="The runner's answer.")


class SnapshotsSerializer(serializers.Serializer):
    pipeline = serializers.CharField()
    location = serializers.CharField(
        help_text="The recovery location (a URI without its user info and query)."
    )
    runner_alive = serializers.BooleanField(help_text="Whether a snapshot can be asked for now.")
    snapshots = SnapshotSerializer(many=True, help_text="Complete snapshots, newest first.")
    last_restore = RestoreSerializer(allow_null=True)
    restoring = RestoreProgressSerializer(
        allow_null=True, help_text="A --restore-from under way (null when none is)."
    )
    last_rebuild = RebuildSerializer(
        allow_null=True, help_text="The last rebuild of lost PU stores (null: none)."
    )
    requests = SnapshotRequestSerializer(
        many=True, help_text='The recent "Snapshot now" requests, newest first.'
    )
    problems = serializers.ListField(
        child=serializers.CharField(),
        help_text="The location could not be listed, or a manifest could not be read.",
    )


# -- what the API takes --------------------------------------------------------------------------
class SnapshotNowSerializer(serializers.Serializer):
    """Unknown fields or a body that is not an object: 400 malformed_request; a missing, blank
    or invalid reason: 400 invalid_parameters with ``errors.reason``."""

    reason = serializers.CharField(
        max_length=REASON_MAX_CHARS,
        help_text="Why the operator asks (required): kept in the audit trail.",
    )

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, dict):
            raise errors.MalformedRequest("the request body must be a JSON object")
        unknown = set(data) - {"reason"}
        if unknown:
            raise errors.MalformedRequest(
                f"unknown field(s) {sorted(unknown)}; allowed: ['reason']"
            )
        try:
            return {"reason": snapshot_services.reason_clean(data.get("reason", ""))}
        except errors.RescaleError as exc:
            raise serializers.ValidationError({"reason": [str(exc)]}) from None


class SnapshotQueuedSerializer(serializers.Serializer):
    command = serializers.IntegerField(help_text="The runner command's id.")
    pipeline = serializers.CharField()
    status = serializers.CharField(help_text="pending: the runner takes it at a barrier.")
    requested_by = serializers.CharField()
    reason = serializers.CharField()


class PipelineSnapshotsView(APIView):
    """A pipeline's snapshots and last restore; "Snapshot now"."""

    permission_classes = [IsAuthenticated, CanSnapshot]
    parser_classes = [StrictJSONParser]

    @extend_schema(
        operation_id="pipelines_snapshots_list",
        summary="List a pipeline's snapshots",
        description="The complete snapshots in the recovery location (newest first), the last "
        "restore of the pipeline's state directory, the last rebuild of its lost PU stores, "
        "and the recent snapshot requests. A restore or a rebuild not yet in the audit trail "
        "is recorded on the way (snapshot.restored, store.rebuilt).",
        responses={200: SnapshotsSerializer, **error_responses(401, 404)},
    )
    def get(self, request: Request, name: str) -> Response:
        overview = snapshot_services.snapshot_overview(pipeline=pipeline_name(name))
        return Response(SnapshotsSerializer(overview).data)

    @extend_schema(
        operation_id="pipelines_snapshots_create",
        summary="Snapshot now",
        description="Queue a snapshot for the pipeline's runner: taken at its next barrier "
        "where no snapshot is being written and no vnode is in transit, with trigger manual "
        "and requested_by the user. Audited as snapshot.requested with the reason. Needs the "
        "operations.rescale permission; 409 runner_down when the runner is not running.",
        request=SnapshotNowSerializer,
        examples=[
            OpenApiExample(
                "before a risky deploy",
                value={"reason": "before the 14:00 deploy"},
                request_only=True,
            )
        ],
        responses={
            202: OpenApiResponse(SnapshotQueuedSerializer, description="Queued for the runner."),
            **error_responses(400, 401, 403, 404, 409, 413, 415),
        },
    )
    def post(self, request: Request, name: str) -> Response:
        body = SnapshotNowSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        reason = body.validated_data["reason"]
        command = snapshot_services.snapshot_request(
            user=request.user, pipeline=pipeline_name(name), reason=reason
        )
        data = {
            "command": command.id,
            "pipeline": command.pipeline.name,
            "status": command.status,
            "requested_by": request.user.get_username(),
            "reason": reason,
        }
        return Response(SnapshotQueuedSerializer(data).data, status=status.HTTP_202_ACCEPTED)
